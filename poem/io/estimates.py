"""The estimated propensities of a log as a Parquet file (an MLflow artifact of the run).

One row per kept row of the log, in log order: ``row`` (its position), ``timestamp`` (when the
log has them), ``action`` (discrete and candidate sets: the logged index) and ``propensity``
(the cross-fitted estimate p̂ᵢ of :func:`poem.logging_policy.estimate_propensities`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["write_estimates"]


def write_estimates(propensities: Any, log: Any, path: str | Path) -> Path:
    """Write ``propensities`` (one per row of ``log``) with the rows' positions to ``path``."""
    p = np.asarray(propensities, dtype=np.float64)
    columns: dict[str, Any] = {"row": np.arange(p.size, dtype=np.int64)}
    if log.timestamps is not None:
        columns["timestamp"] = np.asarray(log.timestamps)
    if log.family != "multilabel":
        columns["action"] = np.asarray(log.actions, dtype=np.int64)
    columns["propensity"] = p
    pq.write_table(pa.table(columns), path)
    return Path(path)
