"""The estimated propensities of a log as a Parquet file (an MLflow artifact of the run).

One row per kept row of the log, in log order, each with a stable identity:

- ``event_id``: the log's own event id, when the log has them (the key to join on);
- ``row``: its position among the log's *kept* rows (quarantined rows are not counted);
- ``row_digest``: 16 hex digits of a hash of the row's content (action, loss, timestamp,
  contexts or candidate features; :func:`row_digests`), so a row that moved or changed is
  detected even without event ids;

then ``timestamp`` (when the log has them), ``action`` (discrete and candidate sets: the
logged index) and ``propensity`` (the cross-fitted estimate p̂ᵢ of
:func:`poem.logging_policy.estimate_propensities`). :func:`read_estimates` joins the file
back onto a log: by ``event_id`` when both have ids, else by ``row`` with every
``row_digest`` checked, and refuses (one line) a log whose rows do not match.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from poem.io._metadata import invalid_log

__all__ = ["read_estimates", "row_digests", "write_estimates"]


def _hash(values: Any) -> np.ndarray:
    """uint64 hash per element (pandas' SipHash with its fixed key: stable across runs)."""
    return pd.util.hash_array(np.ascontiguousarray(values).ravel(), categorize=False)


def _rows_hash(matrix: Any, n_rows: int) -> np.ndarray:
    """uint64 hash per row of a dense or sparse matrix (entry positions included)."""
    if sp.issparse(matrix):
        m = sp.csr_matrix(matrix)
        m.sum_duplicates()
        entries = _hash(m.indices.astype(np.int64)) * np.uint64(0x9E3779B97F4A7C15) ^ _hash(
            m.data.astype(np.float64)
        )
        out = np.zeros(n_rows, dtype=np.uint64)
        rows = np.repeat(np.arange(n_rows), np.diff(m.indptr))
        np.add.at(out, rows, _hash(entries))  # an order-free sum of mixed entry hashes
        return out
    frame = pd.DataFrame(np.asarray(matrix, dtype=np.float64).reshape(n_rows, -1))
    return pd.util.hash_pandas_object(frame, index=False).to_numpy(dtype=np.uint64)


def row_digests(log: Any) -> np.ndarray:
    """The ``row_digest`` of every row of ``log``: 16 hex digits of a hash of its content.

    Hashes the row's action(s), loss, timestamp (when the log has them), contexts (dense or
    sparse) and, for candidate sets, its candidates' features in their order, with pandas'
    stable SipHash (:func:`pandas.util.hash_pandas_object`). Two rows with the same content
    have the same digest; the propensities are not hashed (they are what is joined).
    """
    n = int(np.asarray(log.losses).shape[0])
    parts = [
        _rows_hash(np.asarray(log.actions, dtype=np.float64), n),
        _hash(np.asarray(log.losses, dtype=np.float64)),
    ]
    if log.timestamps is not None:
        stamps = pd.to_datetime(pd.Series(np.asarray(log.timestamps)))
        parts.append(_hash(stamps.to_numpy(dtype="datetime64[ns]").view(np.int64)))
    if log.contexts is not None:
        parts.append(_rows_hash(log.contexts, n))
    if log.candidates is not None:
        cand = _rows_hash(log.candidates.features, log.candidates.features.shape[0])
        offsets = np.asarray(log.candidates.offsets, dtype=np.int64)
        sizes = np.diff(offsets)
        position = np.arange(cand.size) - np.repeat(offsets[:-1], sizes)
        mixed = _hash(cand ^ _hash(position.astype(np.int64)))  # order within the set counts
        out = np.zeros(n, dtype=np.uint64)
        np.add.at(out, np.repeat(np.arange(n), sizes), mixed)
        parts.append(out)
    combined = pd.util.hash_pandas_object(pd.DataFrame(np.column_stack(parts)), index=False)
    return np.array([f"{v:016x}" for v in combined.to_numpy(dtype=np.uint64)], dtype=object)


def write_estimates(propensities: Any, log: Any, path: str | Path) -> Path:
    """Write ``propensities`` (one per row of ``log``) with each row's identity to ``path``.

    The columns are described in the module docstring: ``event_id`` (when ``log`` has ids),
    ``row``, ``row_digest``, ``timestamp``, ``action``, ``propensity``.
    """
    p = np.asarray(propensities, dtype=np.float64)
    columns: dict[str, Any] = {}
    if log.event_ids is not None:
        columns["event_id"] = pa.array(np.asarray(log.event_ids).tolist())
    columns["row"] = np.arange(p.size, dtype=np.int64)
    columns["row_digest"] = pa.array(row_digests(log).tolist(), type=pa.string())
    if log.timestamps is not None:
        columns["timestamp"] = np.asarray(log.timestamps)
    if log.family != "multilabel":
        columns["action"] = np.asarray(log.actions, dtype=np.int64)
    columns["propensity"] = p
    pq.write_table(pa.table(columns), path)
    return Path(path)


def _examples(values: Any) -> str:
    return ", ".join(str(v) for v in list(values)[:3])


def read_estimates(path: str | Path, log: Any) -> np.ndarray:
    """The propensities of ``path`` (:func:`write_estimates`) aligned with ``log``'s rows.

    Joined by ``event_id`` when the file and ``log`` both have ids (``log`` may be a subset
    of the estimated rows, in any order), else by ``row``: then ``log`` must be the estimated
    rows in their order. Either way every joined row's ``row_digest`` must match.

    Raises
    ------
    InvalidLogError
        One line naming the column and the count: an event id of ``log`` missing from the
        file or repeated in it, a row count that differs (no ids), or rows whose content
        differs from the estimated row's (moved, reordered or changed).
    """
    table = pq.read_table(path).to_pandas()
    digests = row_digests(log)
    n = digests.size
    if "event_id" in table.columns and log.event_ids is not None:
        ids = pd.Index(table["event_id"])
        if ids.has_duplicates:
            repeated = ids[ids.duplicated()].unique()
            raise invalid_log(
                "event_id",
                len(repeated),
                f"{len(repeated)} event ids of the estimates in {Path(path).name} are repeated "
                f"(e.g. {_examples(repeated)})",
                "Join on a log whose event ids are unique",
            )
        wanted = np.asarray(log.event_ids)
        at = ids.get_indexer(pd.Index(wanted))
        if np.any(at < 0):
            missing = wanted[at < 0]
            raise invalid_log(
                "event_id",
                int(missing.size),
                f"{missing.size} of the log's {n} event ids have no estimate in "
                f"{Path(path).name} (e.g. {_examples(missing)})",
                "Estimate the propensities of this log (check --estimate)",
            )
        key = "event_id"
    else:
        if len(table) != n:
            raise invalid_log(
                "row",
                abs(len(table) - n),
                f"{Path(path).name} estimates {len(table)} rows, the log has {n} "
                "(without event ids the rows are joined by position)",
                "Join the log that was estimated, or give the log an event_id column",
            )
        at, key = table["row"].to_numpy(dtype=np.int64).argsort(kind="stable"), "row"
    changed = np.flatnonzero(table["row_digest"].to_numpy()[at] != digests)
    if changed.size:
        moved = "moved" if key == "row" and set(digests) == set(table["row_digest"]) else "changed"
        raise invalid_log(
            "row_digest",
            int(changed.size),
            f"{changed.size} of the log's {n} rows differ from the estimated row of the same "
            f"{key} (rows {moved}; first at log row {int(changed[0])})",
            "Join the log exactly as it was estimated"
            + (", or give the log an event_id column to join on" if key == "row" else ""),
        )
    return table["propensity"].to_numpy(dtype=np.float64)[at]
