"""List columns of the canonical table (sparse features, candidate vectors, distributions).

Shared by the metadata checks (:mod:`poem.io._metadata`) and the row checks
(:mod:`poem.io._row_checks`), which both read a list column as offsets plus flat values.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["LIST_COLUMNS", "is_list", "list_column"]

LIST_COLUMNS = (
    "x_indices",
    "x_values",
    "logging_distribution",
    "candidate_features",
    "candidate_nnz",
    "candidate_indices",
    "candidate_values",
)


def is_list(column: pd.Series) -> bool:
    """Whether ``column`` converts to an Arrow list column."""
    try:
        kind = pa.array(column).type
    except (pa.ArrowException, TypeError, ValueError):
        return False
    return pa.types.is_list(kind) or pa.types.is_large_list(kind)


def list_column(frame: pd.DataFrame, column: str) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (n+1, starting at 0) and flat values of a list column."""
    arr = pa.array(frame[column])
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    offsets = np.asarray(arr.offsets)
    values = np.asarray(arr.flatten())
    return (offsets - offsets[0]).astype(np.int64), values
