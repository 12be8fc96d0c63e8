"""The canonical log table: :class:`LogMetadata`, :func:`log_to_frame`, :func:`frame_to_log`.

One row per logged decision (DESIGN §3); the column conventions are documented in the
README section "Log format" and summarised here:

===========================  ==========================================================
column                       content
===========================  ==========================================================
``event_id``                 unique decision id (string or int64)
``timestamp``                decision time, ``timestamp[ns]`` (UTC, naive)
``x_0`` … ``x_{d-1}``        dense context features (float64); or, for sparse contexts,
                             ``x_indices`` (list<int32>) and ``x_values`` (list<float64>)
``action``                   discrete: action id 0..K−1; candidates: index into the row's set
``y_0`` … ``y_{q-1}``        multilabel: one 0/1 int8 column per label (width constant)
``loss`` (or ``reward``)     observed loss δ (rewards are converted once: δ = −reward)
``propensity``               pᵢ = π₀(yᵢ|xᵢ) ∈ (0, 1]
``logging_model_version``    version of π₀ (string)
``logging_distribution``     optional, discrete only: list<float64> of length K, π₀(·|xᵢ)
``n_candidates``             candidates: kᵢ ≥ 1
``candidate_features``       candidates, dense: list<float64> of kᵢ·d values (row-major)
``candidate_nnz``,           candidates, sparse: per-candidate non-zero counts (kᵢ) and the
``candidate_indices``,       concatenated CSR column indices / values of the kᵢ vectors
``candidate_values``
===========================  ==========================================================

The Parquet key-value metadata key ``poem`` holds a JSON object (:class:`LogMetadata`):
family, number of actions, **declared loss (or reward) bounds**, context layout, feature
names. Files are written and read by :mod:`poem.io.parquet` and :mod:`poem.io.csv`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import scipy.sparse as sp

from poem.data import FAMILIES, CandidateSets, LoggedBandit, check_loss_bounds
from poem.exceptions import InvalidLogError, Violation
from poem.io._row_checks import list_column, row_problems

__all__ = [
    "FORMAT_VERSION",
    "METADATA_KEY",
    "LogMetadata",
    "frame_metadata",
    "frame_to_log",
    "log_to_frame",
    "log_to_table",
    "losses_from_rewards",
    "parse_timestamps",
]

METADATA_KEY = "poem"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class LogMetadata:
    """What a log file declares beyond its columns (stored as JSON under the key ``poem``).

    Parameters
    ----------
    family : {"discrete", "multilabel", "candidates"}
        Policy family of the log.
    n_actions : int or None
        Number of actions K (discrete) or labels q (multilabel).
    loss_bounds : tuple of float or None
        Declared loss bounds [δ_min, δ_max]; required when the log has a ``loss`` column.
    reward_bounds : tuple of float or None
        Declared reward bounds [r_min, r_max] for logs that carry ``reward`` instead.
    context_format : {"dense", "sparse", "none"}
        Layout of the contexts.
    context_columns : tuple of str
        Dense context columns, in feature order.
    n_features : int or None
        Context dimension d (needed for sparse contexts).
    feature_names : tuple of str or None
        Names of the context (or candidate) features.
    candidate_format : {"dense", "sparse"} or None
        Layout of the candidate vectors (candidates family).
    candidate_n_features : int or None
        Candidate vector dimension.
    logging_model_version : str or None
        Version of the logging policy.
    event_ids_generated : bool
        True when the writer invented positional event ids (read back as ``None``).
    event_id_dtype : str or None
        NumPy dtype of the original event ids, restored on read.
    """

    family: str
    n_actions: int | None = None
    loss_bounds: tuple[float, float] | None = None
    reward_bounds: tuple[float, float] | None = None
    context_format: str = "dense"
    context_columns: tuple[str, ...] = ()
    n_features: int | None = None
    feature_names: tuple[str, ...] | None = None
    candidate_format: str | None = None
    candidate_n_features: int | None = None
    logging_model_version: str | None = None
    event_ids_generated: bool = False
    event_id_dtype: str | None = None
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        """JSON text of the metadata."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> LogMetadata:
        """Build from a decoded JSON object (unknown keys are ignored).

        Raises
        ------
        InvalidLogError
            When ``data`` is not a JSON object (e.g. a list) or lacks ``family``.
        """
        if not isinstance(data, dict):
            raise InvalidLogError(
                [
                    Violation(
                        "metadata",
                        0,
                        0,
                        (),
                        f"the '{METADATA_KEY}' metadata is a JSON {type(data).__name__}, "
                        'expected a JSON object such as {"family": "discrete", ...}',
                    )
                ]
            )
        if "family" not in data:
            raise InvalidLogError(
                [Violation("metadata", 0, 0, (), f"the '{METADATA_KEY}' metadata has no family")]
            )
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("context_columns", "feature_names"):
            if isinstance(known.get(key), list):
                known[key] = tuple(known[key])
        return cls(**known)

    @property
    def label_columns(self) -> tuple[str, ...]:
        """``y_0..y_{q-1}`` for the multilabel family, else empty."""
        if self.family != "multilabel" or self.n_actions is None:
            return ()
        return tuple(f"y_{j}" for j in range(self.n_actions))


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


def frame_metadata(
    frame: pd.DataFrame, *, family: str | None = None, **overrides: Any
) -> LogMetadata:
    """Return the :class:`LogMetadata` of a frame: ``frame.attrs["poem"]`` plus overrides.

    Without stored metadata, dense context columns default to the ``x_<j>`` columns and the
    number of labels of a multilabel log to the number of ``y_<j>`` columns.
    """
    stored = frame.attrs.get(METADATA_KEY)
    if stored is not None:
        try:
            meta = LogMetadata.from_dict(stored)
        except TypeError as exc:
            raise _bad("metadata", len(frame), f"cannot be read ({exc})") from None
        if family is not None and family != meta.family:
            raise ValueError(
                f"family: the log declares {meta.family!r}, but {family!r} was requested"
            )
    else:
        if family is None:
            raise ValueError("family must be given for a log without poem metadata")
        xcols = sorted((c for c in frame.columns if _indexed(c, "x_")), key=lambda c: int(c[2:]))
        ycols = [c for c in frame.columns if _indexed(c, "y_")]
        meta = LogMetadata(
            family=family,
            context_columns=tuple(xcols),
            n_features=len(xcols) or None,
            context_format="dense"
            if xcols
            else ("sparse" if "x_indices" in frame.columns else "none"),
            n_actions=len(ycols) if family == "multilabel" else None,
        )
    clean = {k: v for k, v in overrides.items() if v is not None}
    if "context_columns" in clean:
        clean["context_columns"] = tuple(clean["context_columns"])
        clean.update(context_format="dense", n_features=len(clean["context_columns"]))
    if "loss_bounds" in clean or "reward_bounds" in clean:  # given bounds replace declared ones
        clean = {"loss_bounds": None, "reward_bounds": None, **clean}
    return check_metadata(replace(meta, **clean), len(frame))


def _bad(key: str, n: int, message: str) -> InvalidLogError:
    return InvalidLogError([Violation(key, 0, n, (), message)])


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def check_metadata(meta: LogMetadata, n_rows: int = 0) -> LogMetadata:
    """Check declared metadata values; bounds become float tuples.

    Parameters
    ----------
    meta : LogMetadata
        Declared (and overridden) metadata.
    n_rows : int, default=0
        Rows of the table (for the error).

    Returns
    -------
    LogMetadata
        With ``loss_bounds`` / ``reward_bounds`` as ``(float, float)``.

    Raises
    ------
    InvalidLogError
        Naming the key: unknown family, ``n_actions`` that is not a positive integer,
        bounds that are not two finite, increasing, non-overflowing numbers, unknown layouts.
    """
    if meta.family not in FAMILIES:
        raise _bad("family", n_rows, f"{meta.family!r} is not one of {list(FAMILIES)}")
    least = 2 if meta.family == "discrete" else 1
    if meta.n_actions is not None and not (_is_int(meta.n_actions) and meta.n_actions >= least):
        raise _bad(
            "n_actions",
            n_rows,
            f"must be an integer >= {least} for the {meta.family} family, got {meta.n_actions!r}",
        )
    bounds = {}
    for key in ("loss_bounds", "reward_bounds"):
        if getattr(meta, key) is not None:
            try:
                bounds[key] = check_loss_bounds(getattr(meta, key), key)
            except ValueError as exc:
                raise _bad(key, n_rows, str(exc).removeprefix(key).strip()) from None
    if meta.context_format not in ("dense", "sparse", "none"):
        raise _bad(
            "context_format",
            n_rows,
            f"{meta.context_format!r} is not one of ['dense', 'sparse', 'none']",
        )
    if meta.candidate_format not in (None, "dense", "sparse"):
        raise _bad(
            "candidate_format",
            n_rows,
            f"{meta.candidate_format!r} is not one of ['dense', 'sparse']",
        )
    for key in ("n_features", "candidate_n_features"):
        value = getattr(meta, key)
        if value is not None and not (_is_int(value) and value >= 0):
            raise _bad(key, n_rows, f"must be a non-negative integer, got {value!r}")
    if not all(isinstance(c, str) for c in meta.context_columns):
        raise _bad("context_columns", n_rows, "must be a list of column names")
    return replace(meta, **bounds)


def parse_timestamps(frame: pd.DataFrame) -> pd.DataFrame:
    """Parse a text ``timestamp`` column as ISO 8601 into naive UTC ``datetime64[ns]``.

    Unparseable values become ``NaT`` (reported by the checks as missing timestamps); a
    frame without the column, or with it already parsed, is returned unchanged.
    """
    if "timestamp" not in frame.columns or pd.api.types.is_datetime64_dtype(frame["timestamp"]):
        return frame
    column = frame["timestamp"]
    if not isinstance(column.dtype, pd.DatetimeTZDtype):
        column = pd.to_datetime(
            column.astype("string"), errors="coerce", format="ISO8601", utc=True
        )
    parsed = column.dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[ns]")
    out = frame.assign(timestamp=parsed)
    out.attrs = dict(frame.attrs)
    return out


def losses_from_rewards(frame: pd.DataFrame, meta: LogMetadata) -> tuple[pd.DataFrame, LogMetadata]:
    """Convert a ``reward`` column to ``loss`` once (δ = −reward, DESIGN §3).

    Parameters
    ----------
    frame : DataFrame
        Canonical table with ``loss`` or ``reward``.
    meta : LogMetadata
        Its metadata; ``reward_bounds`` [r_min, r_max] become ``loss_bounds`` [−r_max, −r_min].

    Returns
    -------
    frame : DataFrame
        With ``loss`` in place of ``reward`` (unchanged when it has no ``reward``).
    meta : LogMetadata
        With loss bounds and no reward bounds.

    Raises
    ------
    InvalidLogError
        When ``reward`` sits beside ``loss`` (ambiguous), or rewards come without reward bounds.
    """
    if "reward" not in frame.columns:
        return frame, meta
    n = len(frame)
    if "loss" in frame.columns:
        raise InvalidLogError(
            [
                Violation(
                    "reward",
                    0,
                    n,
                    (),
                    "column is given beside 'loss': ambiguous, which one is the outcome?",
                    "Keep one of the two columns (losses δ, or rewards converted as δ = −reward)",
                )
            ]
        )
    if meta.reward_bounds is None:
        found = (
            f"the log declares loss bounds {list(meta.loss_bounds)}"
            if meta.loss_bounds
            else "no reward bounds are declared"
        )
        raise InvalidLogError(
            [
                Violation(
                    "loss",
                    0,
                    n,
                    (),
                    f"column is missing; found 'reward' but {found}",
                    "Declare reward_bounds to convert rewards (δ = −reward), or write losses",
                )
            ]
        )
    lo, hi = meta.reward_bounds
    rewards = frame["reward"]
    out = frame.rename(columns={"reward": "loss"})
    if rewards.dtype.kind in "biuf":  # non-numbers are left for the type checks to report
        out["loss"] = -rewards.to_numpy(dtype=np.float64, na_value=np.nan)  # DESIGN §3: δ = −reward
    meta = replace(meta, loss_bounds=(-hi, -lo), reward_bounds=None)
    out.attrs = {**frame.attrs, METADATA_KEY: json.loads(meta.to_json())}
    return out, meta


def _indexed(name: Any, prefix: str) -> bool:
    return isinstance(name, str) and name.startswith(prefix) and name[len(prefix) :].isdigit()


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
        Canonical columns (module docstring); metadata from ``frame.attrs["poem"]``.
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
    frame, meta = losses_from_rewards(frame, meta)
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
    }
    kwargs["contexts"] = _contexts(frame, meta, numeric)
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
        d = (
            meta.n_features
            if meta.n_features is not None
            else (int(indices.max()) + 1 if indices.size else 0)
        )
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
