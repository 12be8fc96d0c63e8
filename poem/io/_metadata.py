"""Declared metadata of a log: :class:`LogMetadata`, resolved and checked once.

:func:`frame_metadata` combines what a file declares (the JSON under the Parquet key ``poem``
or a CSV's ``.meta.json``) with what the caller gives, and :func:`check_metadata` rejects
values that cannot describe a log, naming the key. :func:`losses_from_rewards` and
:func:`parse_timestamps` are the one-time ingestion transforms (DESIGN §3). Re-exported by
:mod:`poem.io.log_format`.
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from poem.data import FAMILIES, check_loss_bounds
from poem.exceptions import InvalidLogError, Violation
from poem.io._lists import list_column
from poem.policies._base import check_policy_size

__all__ = [
    "FORMAT_VERSION",
    "METADATA_KEY",
    "LogMetadata",
    "check_metadata",
    "expand_columns",
    "frame_metadata",
    "invalid_log",
    "losses_from_rewards",
    "own_columns",
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
    min_propensity : float or None
        The logging policy's declared smallest propensity, in (0, 1] (e.g. its exploration
        floor): every importance weight is ≤ 1/min_propensity, known before the rows are seen.
    reward_column, loss_column, action_column, propensity_column : str or None
        The log's own names of the ``reward`` (or ``loss``), ``action`` and ``propensity``
        columns; :func:`own_columns` renames them once, on read.
    action_ids : tuple of str or None
        The action column's own ids: ``action_ids[i]`` is action i (0..K−1). A text action
        column is mapped through it on read; the served model answers with these ids.
    rewards : bool
        True when the log gave rewards (converted once to losses δ = −reward): reports show
        rewards (e.g. the click-through rate) rather than losses.
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
    min_propensity: float | None = None
    reward_column: str | None = None
    loss_column: str | None = None
    action_column: str | None = None
    propensity_column: str | None = None
    action_ids: tuple[str, ...] | None = None
    rewards: bool = False

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
            raise invalid_log(
                "metadata",
                0,
                f"the '{METADATA_KEY}' metadata is a JSON {type(data).__name__}, "
                'expected a JSON object such as {"family": "discrete", ...}',
            )
        if "family" not in data:
            raise invalid_log("metadata", 0, f"the '{METADATA_KEY}' metadata has no family")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key in ("context_columns", "feature_names", "action_ids"):
            if isinstance(known.get(key), list):
                known[key] = tuple(known[key])
        return cls(**known)

    @property
    def label_columns(self) -> tuple[str, ...]:
        """``y_0..y_{q-1}`` for the multilabel family, else empty."""
        if self.family != "multilabel" or self.n_actions is None:
            return ()
        return tuple(f"y_{j}" for j in range(self.n_actions))


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
            raise invalid_log("metadata", len(frame), f"cannot be read ({exc})") from None
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
    if "action_ids" in clean:
        clean["action_ids"] = tuple(str(a) for a in clean["action_ids"])
        clean.setdefault("n_actions", len(clean["action_ids"]))
    declared = set(meta.feature_names or ())
    if stored is not None and set(clean.get("context_columns") or ()) <= declared - set(frame):
        clean.pop("context_columns", None)  # a log the pipeline wrote: its own names declared
    if "context_columns" in clean:
        names = expand_columns(tuple(clean["context_columns"]), frame.columns, len(frame))
        clean.update(context_columns=names, context_format="dense", n_features=len(names))
        if meta.feature_names is None and names != tuple(f"x_{j}" for j in range(len(names))):
            clean["feature_names"] = names  # the served model takes the log's own names
    if "loss_bounds" in clean or "reward_bounds" in clean:  # given bounds replace declared ones
        clean = {"loss_bounds": None, "reward_bounds": None, **clean}
    meta = check_metadata(replace(meta, **clean), len(frame))
    _check_distribution_width(frame, meta)
    return meta


def _check_distribution_width(frame: pd.DataFrame, meta: LogMetadata) -> None:
    """``n_actions`` that no row's ``logging_distribution`` agrees with: one error naming it."""
    if meta.n_actions is None or "logging_distribution" not in frame.columns or frame.empty:
        return
    try:
        widths = np.unique(np.diff(list_column(frame, "logging_distribution")[0]))
    except (pa.ArrowException, AttributeError, TypeError, ValueError):
        return  # not list cells: the row checks report the column
    if widths.size == 1 and widths[0] != meta.n_actions:
        raise invalid_log(
            "n_actions",
            len(frame),
            f"declares {meta.n_actions:,} actions but every row's logging_distribution holds "
            f"{int(widths[0])} probabilities (one per action); declare n_actions: {int(widths[0])}",
        )


def invalid_log(column: str, n_rows: int, message: str, hint: str = "") -> InvalidLogError:
    """One dataset-level :class:`~poem.exceptions.Violation` of ``column``, raised as the error."""
    return InvalidLogError([Violation(column, 0, n_rows, (), message, hint)])


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
        bounds that are not two finite, increasing, non-overflowing numbers, unknown layouts,
        a context column listed twice, a width (``n_features`` × ``n_actions``) beyond the
        training limit :data:`poem.policies._base.MAX_COEFFICIENTS`.
    """
    if meta.family not in FAMILIES:
        raise invalid_log("family", n_rows, f"{meta.family!r} is not one of {list(FAMILIES)}")
    least = 2 if meta.family == "discrete" else 1
    if meta.n_actions is not None and not (_is_int(meta.n_actions) and meta.n_actions >= least):
        raise invalid_log(
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
                raise invalid_log(key, n_rows, str(exc).removeprefix(key).strip()) from None
    if meta.context_format not in ("dense", "sparse", "none"):
        raise invalid_log(
            "context_format",
            n_rows,
            f"{meta.context_format!r} is not one of ['dense', 'sparse', 'none']",
        )
    if meta.candidate_format not in (None, "dense", "sparse"):
        raise invalid_log(
            "candidate_format",
            n_rows,
            f"{meta.candidate_format!r} is not one of ['dense', 'sparse']",
        )
    for key in ("n_features", "candidate_n_features"):
        value = getattr(meta, key)
        if value is not None and not (_is_int(value) and value >= 0):
            raise invalid_log(key, n_rows, f"must be a non-negative integer, got {value!r}")
    if not all(isinstance(c, str) for c in meta.context_columns):
        raise invalid_log("context_columns", n_rows, "must be a list of column names")
    repeated = sorted({c for c in meta.context_columns if meta.context_columns.count(c) > 1})
    if repeated:
        raise invalid_log(
            "context_columns",
            n_rows,
            f"lists {repeated} more than once: each feature must be its own column",
        )
    if meta.action_ids is not None:
        ids = meta.action_ids
        repeated = sorted({a for a in ids if ids.count(a) > 1})
        if repeated or len(ids) < 2:
            raise invalid_log(
                "action_ids", n_rows, f"must list at least 2 distinct ids, got {list(ids)[:5]}"
            )
        if meta.n_actions is not None and meta.n_actions != len(ids):
            raise invalid_log(
                "action_ids",
                n_rows,
                f"lists {len(ids)} ids but n_actions is {meta.n_actions}",
                "Drop n_actions (it is the number of ids) or list every action's id",
            )
    floor = meta.min_propensity  # the gate's weight bound 1/min_propensity (DESIGN §5)
    if floor is not None:
        if isinstance(floor, bool) or not isinstance(floor, (int, float, np.integer, np.floating)):
            raise invalid_log(
                "min_propensity", n_rows, f"must be a number in (0, 1], got {floor!r}"
            )
        if not 0.0 < float(floor) <= 1.0:
            raise invalid_log("min_propensity", n_rows, f"must be in (0, 1], got {floor!r}")
        bounds["min_propensity"] = float(floor)
    _check_size(meta, n_rows)
    return replace(meta, **bounds)


def _check_size(meta: LogMetadata, n_rows: int) -> None:
    """Refuse a declared width no policy can be trained on (the training limit, same function)."""
    if meta.family == "candidates":
        key, d, k = "candidate_n_features", meta.candidate_n_features, None
    else:
        key = "n_features"
        d = meta.n_features if meta.n_features is not None else len(meta.context_columns)
        k = meta.n_actions
    try:
        check_policy_size(d or 0, k)
    except ValueError as exc:
        raise invalid_log(key, n_rows, str(exc)) from None


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
        if "loss" in frame.columns and meta.loss_bounds is None and meta.reward_bounds:
            # losses already converted (a decision log of rewards): the same bounds as losses
            lo, hi = meta.reward_bounds
            meta = replace(meta, loss_bounds=(-hi, -lo), reward_bounds=None, rewards=True)
            out = frame.copy(deep=False)
            out.attrs = {**frame.attrs, METADATA_KEY: json.loads(meta.to_json())}
            return out, meta
        return frame, meta
    n = len(frame)
    if "loss" in frame.columns:
        raise invalid_log(
            "reward",
            n,
            "column is given beside 'loss': ambiguous, which one is the outcome?",
            "Keep one of the two columns (losses δ, or rewards converted as δ = −reward)",
        )
    if meta.reward_bounds is None:
        found = (
            f"the log declares loss bounds {list(meta.loss_bounds)}"
            if meta.loss_bounds
            else "no reward bounds are declared"
        )
        raise invalid_log(
            "loss",
            n,
            f"column is missing; found 'reward' but {found}",
            "Declare reward_bounds to convert rewards (δ = −reward), or write losses",
        )
    lo, hi = meta.reward_bounds
    rewards = frame["reward"]
    out = frame.rename(columns={"reward": "loss"})
    if rewards.dtype.kind in "biuf":  # non-numbers are left for the type checks to report
        out["loss"] = -rewards.to_numpy(dtype=np.float64, na_value=np.nan)  # DESIGN §3: δ = −reward
    meta = replace(meta, loss_bounds=(-hi, -lo), reward_bounds=None, rewards=True)
    out.attrs = {**frame.attrs, METADATA_KEY: json.loads(meta.to_json())}
    return out, meta


_CANONICAL = {"reward": "reward", "loss": "loss", "action": "action", "propensity": "propensity"}
# the columns of a discrete log that are never context features (a glob skips them)
_NOT_FEATURES = frozenset(
    {
        "event_id",
        "timestamp",
        "action",
        "propensity",
        "loss",
        "reward",
        "logging_distribution",
        "logging_model_version",
        "n_candidates",
    }
)


def expand_columns(patterns: tuple[str, ...], columns: Any, n_rows: int = 0) -> tuple[str, ...]:
    """Context column names from names and globs (``f_*``), in the order given, then the frame's.

    Raises
    ------
    InvalidLogError
        Naming ``context_columns`` when a name is not a column or a glob matches none.
    """
    available = [str(c) for c in columns]
    out: list[str] = []
    for pattern in patterns:
        if any(ch in pattern for ch in "*?["):
            found = [
                c for c in available if fnmatch.fnmatchcase(c, pattern) and c not in _NOT_FEATURES
            ]
        else:
            found = [pattern] if pattern in available else []
        if not found:
            what = "matches no column" if any(ch in pattern for ch in "*?[") else "is not a column"
            raise invalid_log(
                "context_columns",
                n_rows,
                f"{pattern!r} {what}; the log's columns: {', '.join(available[:12])}"
                + (" ..." if len(available) > 12 else ""),
                "Name the feature columns with --context-columns a,b or a glob 'f_*' "
                "(data.context_columns)",
            )
        out += [c for c in found if c not in out]
    return tuple(out)


def own_columns(frame: pd.DataFrame, meta: LogMetadata) -> pd.DataFrame:
    """Rename the log's own columns to the canonical ones and map text action ids (once).

    ``meta.reward_column`` becomes ``reward`` (then converted by :func:`losses_from_rewards`),
    ``loss_column`` ``loss``, ``action_column`` ``action``, ``propensity_column``
    ``propensity``; a text ``action`` column is mapped through ``meta.action_ids`` (id i →
    action i; an id not listed becomes −1, which the action range check quarantines).
    Idempotent: a frame already renamed is returned unchanged.

    Raises
    ------
    InvalidLogError
        Naming the column: a named column missing, a named column beside the canonical one,
        text action ids without ``action_ids``.
    """
    n = len(frame)
    renames = {}
    for key, canonical in _CANONICAL.items():
        name = getattr(meta, f"{key}_column")
        if name is None or name == canonical:
            continue
        if name not in frame.columns:
            if canonical in frame.columns or (key == "reward" and "loss" in frame.columns):
                continue  # canonical already (renamed, or a log the pipeline wrote)
            raise invalid_log(
                name,
                n,
                f"column is missing (named by {key}_column); the log's columns: "
                + ", ".join(str(c) for c in frame.columns[:12]),
                f"Pass the right name with --{key}-column COLUMN (data.{key}_column)",
            )
        if canonical in frame.columns:
            raise invalid_log(
                canonical,
                n,
                f"column sits beside {name!r}, which {key}_column names as the {canonical}",
                f"Drop one of the two columns, or the {key}_column setting",
            )
        renames[name] = canonical
    out = frame.rename(columns=renames) if renames else frame
    if "action" in out.columns and out["action"].dtype.kind in "OUS":
        values = out["action"]
        if meta.action_ids is None:
            if pd.to_numeric(values, errors="coerce").notna().sum() == values.notna().sum():
                return out  # numbers as text: the type checks read them
            ids = sorted(str(v) for v in pd.unique(values.dropna()))
            shown = ",".join(ids[:20]) + (",..." if len(ids) > 20 else "")
            raise invalid_log(
                "action",
                n,
                f"holds {len(ids)} text ids ({', '.join(repr(v) for v in ids[:4])}"
                f"{', ...' if len(ids) > 4 else ''}), not action numbers 0..K-1",
                f"List the ids in the order of actions 0..K-1 with --action-ids {shown} "
                "(data.action_ids); they are recorded in the log's metadata and the served "
                "model answers with them",
            )
        index = {a: i for i, a in enumerate(meta.action_ids)}
        out = out.copy() if out is frame else out
        out["action"] = np.array([index.get(str(v), -1) for v in values], dtype=np.int64)
        out.attrs = dict(frame.attrs)
    return out


def _indexed(name: Any, prefix: str) -> bool:
    return isinstance(name, str) and name.startswith(prefix) and name[len(prefix) :].isdigit()
