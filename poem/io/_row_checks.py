"""Row-level checks of the canonical table that no column-wise expectation can express.

:func:`row_problems` finds rows whose list columns are inconsistent (sparse index outside
``0..d-1``, ``x_values`` of another length than ``x_indices``, candidate vectors of the wrong
size, a ``logging_distribution`` that is not K probabilities), whose features are not finite
(naming the dense column, e.g. ``x_3``), or whose propensity is so small that 1/p overflows.
It is the one rule for these cases: :func:`poem.io.log_format.frame_to_log` raises on them
before building any sparse matrix, and the data checks quarantine the rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from poem.data import MIN_PROPENSITY
from poem.io._lists import LIST_COLUMNS, is_list, list_column
from poem.io._metadata import LogMetadata

__all__ = ["LIST_COLUMNS", "RowProblem", "list_column", "row_problems"]


@dataclass(frozen=True, eq=False)
class RowProblem:
    """Rows of a table that break one rule.

    Parameters
    ----------
    column : str
        The column at fault.
    reason : str
        What is wrong, in words (the quarantine reason).
    mask : ndarray of bool of shape (n_rows,)
        True for the offending rows.
    """

    column: str
    reason: str
    mask: np.ndarray


def _numbers(frame: pd.DataFrame, column: str) -> np.ndarray | None:
    values = frame[column]
    if values.dtype.kind not in "biuf":
        return None  # reported by the type checks
    return values.to_numpy(dtype=np.float64, na_value=np.nan)


def _rows_of(offsets: np.ndarray, entry_mask: np.ndarray) -> np.ndarray:
    """Rows owning at least one flagged entry of a list column."""
    rows = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    out = np.zeros(offsets.size - 1, dtype=bool)
    out[rows[entry_mask]] = True
    return out


def _finite_values(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values)
    if values.dtype.kind not in "biuf":
        return np.zeros(values.shape, dtype=bool)
    return np.isfinite(values.astype(np.float64))


def row_problems(frame: pd.DataFrame, meta: LogMetadata) -> list[RowProblem]:
    """Every row-level problem of ``frame`` that the column checks cannot see.

    Parameters
    ----------
    frame : DataFrame
        Canonical log table (losses, not rewards).
    meta : LogMetadata
        Its resolved metadata.

    Returns
    -------
    list of RowProblem
        Only problems with at least one row.
    """
    n = len(frame)
    found: list[RowProblem] = []

    def add(column: str, reason: str, mask: np.ndarray) -> None:
        if mask.any():
            found.append(RowProblem(column, reason, mask))

    not_lists = [c for c in LIST_COLUMNS if c in frame.columns and not is_list(frame[c])]
    for column in not_lists:  # every row is unusable; the quarantine limit makes it fatal
        add(column, f"are not lists (dtype {frame[column].dtype})", np.ones(n, dtype=bool))
    if not_lists:
        return found

    for column in meta.context_columns:
        if column in frame.columns and (x := _numbers(frame, column)) is not None:
            add(column, "not finite (NaN or inf)", ~np.isfinite(x))
    if "propensity" in frame.columns and (p := _numbers(frame, "propensity")) is not None:
        add(
            "propensity",
            f"below {MIN_PROPENSITY:.3g} (subnormal: the importance weight 1/p overflows)",
            (p > 0) & (p < MIN_PROPENSITY),
        )
    if meta.context_format == "sparse" and {"x_indices", "x_values"} <= set(frame.columns):
        _sparse_problems(frame, "x_indices", "x_values", meta.n_features, add)
    if "logging_distribution" in frame.columns and meta.n_actions:
        offsets, values = list_column(frame, "logging_distribution")
        add(
            "logging_distribution",
            f"do not hold {meta.n_actions} probabilities (one per action)",
            np.diff(offsets) != meta.n_actions,
        )
        add(
            "logging_distribution",
            "not finite (NaN or inf)",
            _rows_of(offsets, ~_finite_values(values)),
        )
    if meta.family == "candidates" and "n_candidates" in frame.columns:
        sizes = _numbers(frame, "n_candidates")
        if sizes is not None:
            _candidate_problems(frame, meta, np.nan_to_num(sizes, nan=-1.0), add)
    assert all(p.mask.shape == (n,) for p in found)
    return found


def _sparse_problems(
    frame: pd.DataFrame, indices_col: str, values_col: str, d: int | None, add: Any
) -> None:
    """Length mismatch, index outside ``0..d-1`` and non-finite values."""
    ind_off, indices = list_column(frame, indices_col)
    val_off, values = list_column(frame, values_col)
    ragged = np.diff(ind_off) != np.diff(val_off)
    add(values_col, f"do not have as many entries as {indices_col}", ragged)
    bad_index = (indices < 0) | ((indices >= d) if d is not None else False)
    text = f"0..{d - 1}" if d is not None else "0.."
    add(indices_col, f"hold a feature index outside {text}", _rows_of(ind_off, bad_index))
    add(values_col, "not finite (NaN or inf)", _rows_of(val_off, ~_finite_values(values)))


def _candidate_problems(
    frame: pd.DataFrame, meta: LogMetadata, sizes: np.ndarray, add: Any
) -> None:
    d = meta.candidate_n_features
    if meta.candidate_format == "sparse":
        if not {"candidate_nnz", "candidate_indices", "candidate_values"} <= set(frame.columns):
            return
        nnz_off, nnz = list_column(frame, "candidate_nnz")
        add(
            "candidate_nnz",
            "do not hold one non-zero count per candidate (n_candidates)",
            np.diff(nnz_off) != sizes,
        )
        ind_off, _ = list_column(frame, "candidate_indices")
        total = np.concatenate([[0], np.cumsum(nnz, dtype=np.int64)])
        per_row = total[nnz_off[1:]] - total[nnz_off[:-1]]
        add(
            "candidate_indices",
            "do not hold the sum of candidate_nnz entries",
            np.diff(ind_off) != per_row,
        )
        _sparse_problems(frame, "candidate_indices", "candidate_values", d, add)
        return
    if "candidate_features" not in frame.columns or d is None:
        return
    offsets, values = list_column(frame, "candidate_features")
    add(
        "candidate_features",
        f"do not hold n_candidates × {d} values",
        np.diff(offsets) != sizes * d,
    )
    add("candidate_features", "not finite (NaN or inf)", _rows_of(offsets, ~_finite_values(values)))
