"""The canonical log table: :class:`LogMetadata`, :func:`log_to_frame`, :func:`frame_to_log`.

One row per logged decision (DESIGN §3); the columns are listed in the README section
"Log format".

The Parquet key-value metadata key ``poem`` holds a JSON object (:class:`LogMetadata`):
family, number of actions, **declared loss (or reward) bounds**, context layout, feature
names (defined and checked in :mod:`poem.io._metadata`, re-exported here). Files are written
by :mod:`poem.io.parquet` and :mod:`poem.io.csv` and read through :mod:`poem.io.logs`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit
from poem.exceptions import InvalidLogError, Violation
from poem.io._metadata import (
    METADATA_KEY,
    LogMetadata,
    frame_metadata,
    invalid_log,
    losses_from_rewards,
    own_columns,
    parse_timestamps,
)
from poem.io._row_checks import list_column, row_problems
from poem.policies._base import check_policy_size

__all__ = [
    "METADATA_KEY",
    "LogMetadata",
    "frame_metadata",
    "frame_to_log",
    "log_to_frame",
    "log_to_table",
    "losses_from_rewards",
    "own_columns",
    "parse_timestamps",
]


def _list_array(offsets: np.ndarray, values: Any) -> pa.ListArray:
    return pa.ListArray.from_arrays(pa.array(np.asarray(offsets, dtype=np.int32)), pa.array(values))


def log_to_table(log: LoggedBandit) -> pa.Table:
    """Build the canonical Arrow table of a log (its :class:`LogMetadata` under key ``poem``)."""
    n = log.n_rows
    cols: dict[str, Any] = {}
    ids = np.arange(n) if log.event_ids is None else np.asarray(log.event_ids)
    cols["event_id"] = pa.array(ids.tolist() if ids.dtype.kind == "O" else ids)
    if log.timestamps is not None:
        cols["timestamp"] = pa.array(log.timestamps, type=pa.timestamp("ns"))
    meta = LogMetadata(
        family=log.family,
        n_actions=log.n_actions,
        loss_bounds=log.loss_bounds,
        context_format="none"
        if log.contexts is None
        else ("sparse" if sp.issparse(log.contexts) else "dense"),
        feature_names=log.feature_names,
        action_ids=log.action_ids,
        logging_model_version=log.logging_model_version,
        event_ids_generated=log.event_ids is None,
        event_id_dtype=ids.dtype.str,
    )
    if meta.context_format == "dense":
        names = tuple(f"x_{j}" for j in range(log.contexts.shape[1]))
        cols.update({c: log.contexts[:, j] for j, c in enumerate(names)})
        meta = replace(meta, context_columns=names, n_features=len(names))
    elif meta.context_format == "sparse":
        x = log.contexts
        cols["x_indices"] = _list_array(x.indptr, x.indices.astype(np.int32))
        cols["x_values"] = _list_array(x.indptr, x.data)
        meta = replace(meta, n_features=int(x.shape[1]))
    if log.family == "multilabel":
        cols.update(
            {f"y_{j}": log.actions[:, j].astype(np.int8) for j in range(log.actions.shape[1])}
        )
    else:
        cols["action"] = log.actions.astype(np.int64)
    cols["loss"] = log.losses
    cols["propensity"] = log.propensities
    if log.logging_model_version is not None:
        cols["logging_model_version"] = pa.repeat(log.logging_model_version, n)
    if log.logging_distribution is not None:
        dist = log.logging_distribution
        cols["logging_distribution"] = _list_array(np.arange(n + 1) * dist.shape[1], dist.ravel())
    if log.candidates is not None:
        cand = log.candidates
        cols["n_candidates"] = cand.sizes.astype(np.int32)
        f = cand.features
        if sp.issparse(f):
            cols["candidate_nnz"] = _list_array(cand.offsets, np.diff(f.indptr).astype(np.int32))
            cols["candidate_indices"] = _list_array(
                f.indptr[cand.offsets], f.indices.astype(np.int32)
            )
            cols["candidate_values"] = _list_array(f.indptr[cand.offsets], f.data)
            meta = replace(meta, candidate_format="sparse")
        else:
            cols["candidate_features"] = _list_array(cand.offsets * f.shape[1], f.ravel())
            meta = replace(meta, candidate_format="dense")
        meta = replace(meta, candidate_n_features=int(f.shape[1]))
    table = pa.table(cols)
    return table.replace_schema_metadata({METADATA_KEY: meta.to_json()})


def log_to_frame(log: LoggedBandit) -> pd.DataFrame:
    """Convert a log to its canonical DataFrame (metadata in ``frame.attrs["poem"]``)."""
    table = log_to_table(log)
    frame = table.to_pandas(
        types_mapper=lambda t: pd.ArrowDtype(t) if pa.types.is_list(t) else None
    )
    frame.attrs[METADATA_KEY] = json.loads(table.schema.metadata[METADATA_KEY.encode()])
    return frame


def _numeric(
    frame: pd.DataFrame, column: str, row_ids: np.ndarray, violations: list
) -> np.ndarray | None:
    """Return the column as float64 (missing: NaN), or record a violation counting non-numbers."""
    values = frame[column]
    if values.dtype.kind in "biuf":
        return values.to_numpy(dtype=np.float64, na_value=np.nan)
    coerced = pd.to_numeric(values, errors="coerce")
    bad = coerced.isna().to_numpy() & values.notna().to_numpy()
    idx = np.flatnonzero(bad)
    violations.append(
        Violation(
            column,
            int(bad.sum()) or len(values),
            len(values),
            tuple(row_ids[idx[:5]].tolist()),
            f"are not numbers (dtype {values.dtype})",
            f"{column} must be a numeric column",
        )
    )
    return None


def frame_to_log(
    frame: pd.DataFrame, *, family: str | None = None, **overrides: Any
) -> LoggedBandit:
    """Build a :class:`LoggedBandit` from a canonical frame (the inverse of :func:`log_to_frame`).

    Parameters
    ----------
    frame : DataFrame
        Canonical columns (README "Log format"); metadata from ``frame.attrs["poem"]``.
    family : str or None, default=None
        Family, required when the frame carries no metadata.
    **overrides
        Override or supply :class:`LogMetadata` fields (``loss_bounds``, ``reward_bounds``,
        ``n_actions``, ``context_columns``, ``logging_model_version``).

    Returns
    -------
    LoggedBandit

    Raises
    ------
    InvalidLogError
        Naming each missing or non-numeric column; then every invariant of
        :func:`poem.data.check_logged_bandit`.
    """
    meta = frame_metadata(frame, family=family, **overrides)
    frame, meta = losses_from_rewards(own_columns(frame, meta), meta)
    n = len(frame)
    required = ["propensity", *(meta.label_columns or ["action"])]
    required += list(meta.context_columns) + (
        ["x_indices", "x_values"] if meta.context_format == "sparse" else []
    )
    if meta.family == "candidates":
        required += ["n_candidates"] + (
            ["candidate_features"]
            if meta.candidate_format != "sparse"
            else ["candidate_nnz", "candidate_indices", "candidate_values"]
        )
    required.append("loss")
    violations = [
        Violation(c, 0, n, (), "column is missing") for c in required if c not in frame.columns
    ]
    if "loss" in frame.columns and meta.loss_bounds is None:
        violations.append(
            Violation(
                "loss", 0, n, (), "has no declared loss bounds", "Pass loss_bounds=(min, max)"
            )
        )
    if violations:
        raise InvalidLogError(violations)
    ids = frame["event_id"].to_numpy() if "event_id" in frame.columns else None
    row_ids = ids if ids is not None else np.arange(n)
    numeric = {
        c: _numeric(frame, c, row_ids, violations)
        for c in ("propensity", "loss", *meta.context_columns)
    }
    if meta.label_columns:
        actions = np.column_stack(
            [_numeric(frame, c, row_ids, violations) for c in meta.label_columns]
        )
    else:
        actions = _numeric(frame, "action", row_ids, violations)
    violations += [
        Violation(
            p.column,
            int(p.mask.sum()),
            n,
            tuple(v.item() if hasattr(v, "item") else v for v in row_ids[p.mask][:5]),
            p.reason,
        )
        for p in row_problems(frame, meta)
    ]
    if violations:
        raise InvalidLogError(violations)
    kwargs: dict[str, Any] = {
        "family": meta.family,
        "n_actions": meta.n_actions,
        "feature_names": meta.feature_names,
        "action_ids": meta.action_ids,
        "contexts": _contexts(frame, meta, numeric),
    }
    if meta.family == "candidates":
        kwargs["candidates"] = _candidates(frame, meta)
    if "timestamp" in frame.columns:
        kwargs["timestamps"] = parse_timestamps(frame)["timestamp"].to_numpy(dtype="datetime64[ns]")
    if ids is not None and not meta.event_ids_generated:
        kind = np.dtype(meta.event_id_dtype).kind if meta.event_id_dtype else "O"
        kwargs["event_ids"] = (  # strings stay objects: never a fixed-width "<U{max}" copy
            ids.astype(np.int64) if kind in "iu" and ids.dtype.kind in "iu" else ids.astype(object)
        )
    version = meta.logging_model_version
    if version is None and "logging_model_version" in frame.columns:
        versions = sorted(frame["logging_model_version"].dropna().astype(str).unique())
        version = ";".join(versions) if versions else None
    kwargs["logging_model_version"] = version
    if "logging_distribution" in frame.columns:
        offsets, values = list_column(frame, "logging_distribution")
        kwargs["logging_distribution"] = (
            values.reshape(n, -1) if n and values.size % n == 0 else values
        )
    return LoggedBandit(
        actions=actions,
        losses=numeric["loss"],
        propensities=numeric["propensity"],
        loss_bounds=meta.loss_bounds,
        **kwargs,
    )


def _contexts(frame: pd.DataFrame, meta: LogMetadata, numeric: dict) -> Any:
    if meta.context_format == "dense" and meta.context_columns:
        return np.column_stack([numeric[c] for c in meta.context_columns])
    if meta.context_format == "sparse":
        indptr, indices = list_column(frame, "x_indices")
        _, data = list_column(frame, "x_values")
        d = meta.n_features
        if d is None:
            d = int(indices.max()) + 1 if indices.size else 0
        try:
            check_policy_size(d, meta.n_actions)
        except ValueError as exc:  # an undeclared width inferred from a huge index
            raise invalid_log("x_indices", len(frame), str(exc)) from None
        return sp.csr_matrix((data.astype(np.float64), indices, indptr), shape=(len(frame), d))
    return None


def _candidates(frame: pd.DataFrame, meta: LogMetadata) -> CandidateSets:
    sizes = frame["n_candidates"].to_numpy(dtype=np.int64)
    d = meta.candidate_n_features
    if meta.candidate_format == "sparse":
        _, nnz = list_column(frame, "candidate_nnz")
        _, indices = list_column(frame, "candidate_indices")
        _, values = list_column(frame, "candidate_values")
        indptr = np.concatenate([[0], np.cumsum(nnz)])
        features = sp.csr_matrix((values.astype(np.float64), indices, indptr), shape=(nnz.size, d))
    else:
        _, values = list_column(frame, "candidate_features")
        features = values.astype(np.float64).reshape(-1, d)
    return CandidateSets.from_sizes(features, sizes)
