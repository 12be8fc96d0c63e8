"""Great Expectations suites for logged-bandit tables, built in code (DESIGN §2, STYLE §7).

:func:`build_log_suite` is pure: it returns an unsaved ``gx.ExpectationSuite`` whose
thresholds are expectation parameters (``{"$PARAMETER": "min_propensity"}``), filled at run
time from :func:`default_parameters` (or ``cfg.checks``). Every expectation carries
``meta = {"level": "dataset" | "row", "reason": "..."}``: dataset-level failures (missing
column, wrong type, empty table) always stop a run; row-level failures can be quarantined.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from poem.io._row_checks import LIST_COLUMNS
from poem.io.parquet import LogMetadata

__all__ = [
    "FLOAT_TYPES",
    "INT_TYPES",
    "KNOWN_COLUMNS",
    "build_log_suite",
    "default_parameters",
    "suite_columns",
]

INT_TYPES = [f"{kind}{bits}" for kind in ("int", "uint", "Int") for bits in (8, 16, 32, 64)]
FLOAT_TYPES = ["float16", "float32", "float64", "Float32", "Float64"]
TIMESTAMP_TYPES = ["datetime64[ns]", "datetime64[us]", "datetime64[ms]", "datetime64[s]"]
# columns of the canonical format that are never "unknown extra columns"
KNOWN_COLUMNS = frozenset(
    "event_id timestamp action loss reward propensity logging_model_version n_candidates".split()
) | frozenset(LIST_COLUMNS)


def _p(name: str) -> dict[str, str]:
    return {"$PARAMETER": name}


def _meta(level: str, reason: str) -> dict[str, str]:
    return {"level": level, "reason": reason}


# how to go on without a propensity column: estimate the logging policy (data.propensity)
ESTIMATE_HINT = (
    "set data.propensity: estimate (check --estimate, retrain --set data.propensity=estimate) "
    "to estimate the logging policy"
)


def _missing(column: str) -> str:
    """The reason of a missing column, with the flag naming the log's own column."""
    named = f"column is missing; name yours with --{column}-column COLUMN (data.{column}_column)"
    if column == "propensity":
        return f"{named}, or {ESTIMATE_HINT}"
    if column == "action":
        return named
    return "column is missing"


def build_log_suite(
    family: str,
    *,
    n_labels: int | None = None,
    has_timestamp: bool = True,
    has_propensity: bool = True,
    name: str | None = None,
) -> Any:
    """Build the expectation suite of a log family.

    Parameters
    ----------
    family : {"discrete", "multilabel", "candidates"}
        Policy family (DESIGN §3).
    n_labels : int or None, default=None
        Number of labels q (multilabel only; required there): columns ``y_0..y_{q-1}``.
    has_timestamp : bool, default=True
        Whether the ``timestamp`` column is required (and checked against the window).
    has_propensity : bool, default=True
        Whether the ``propensity`` column is required and checked (False: the propensities
        are estimated, ``data.propensity: estimate``).
    name : str or None, default=None
        Suite name; default ``"poem_<family>_log"``.

    Returns
    -------
    great_expectations.ExpectationSuite
        Unsaved suite. Parameters used: ``min_rows``, ``min_propensity``, ``max_propensity``,
        ``loss_min``, ``loss_max``, ``max_action`` (discrete), ``window_start``, ``window_end``.

    Raises
    ------
    ValueError
        For an unknown family or a multilabel suite without ``n_labels``.
    """
    import great_expectations as gx
    import great_expectations.expectations as gxe

    if family not in ("discrete", "multilabel", "candidates"):
        raise ValueError(
            f"family must be one of ('discrete', 'multilabel', 'candidates'), got {family!r}"
        )
    if family == "multilabel" and (n_labels is None or n_labels < 1):
        raise ValueError(
            f"n_labels must be a positive integer for the multilabel family, got {n_labels!r}"
        )
    expectations: list[Any] = []
    add = expectations.append
    add(
        gxe.ExpectTableRowCountToBeBetween(
            min_value=_p("min_rows"), meta=_meta("dataset", "too few rows")
        )
    )
    typed: dict[str, Any] = {"event_id": None}
    if has_propensity:
        typed["propensity"] = FLOAT_TYPES + INT_TYPES
    typed["loss"] = FLOAT_TYPES + INT_TYPES
    if has_timestamp:
        typed["timestamp"] = TIMESTAMP_TYPES
    if family == "multilabel":
        typed.update({f"y_{j}": INT_TYPES + FLOAT_TYPES for j in range(n_labels or 0)})
    else:
        typed["action"] = INT_TYPES
    if family == "candidates":
        typed["n_candidates"] = INT_TYPES
    for column, types in typed.items():
        add(gxe.ExpectColumnToExist(column=column, meta=_meta("dataset", _missing(column))))
        if types is not None:
            add(
                gxe.ExpectColumnValuesToBeInTypeList(
                    column=column, type_list=types, meta=_meta("dataset", "has the wrong type")
                )
            )
    not_null, between = gxe.ExpectColumnValuesToNotBeNull, gxe.ExpectColumnValuesToBeBetween

    def row(expectation: Any, column: str, reason: str, **kwargs: Any) -> None:
        add(expectation(column=column, meta=_meta("row", reason), **kwargs))

    row(not_null, "event_id", "event_id missing")
    row(gxe.ExpectColumnValuesToBeUnique, "event_id", "event_id duplicated")
    if has_propensity:
        row(not_null, "propensity", "propensity missing (NaN)")
        row(
            between,
            "propensity",
            "propensity outside ({min_propensity:g}, {max_propensity:g}]",
            min_value=_p("min_propensity"),
            max_value=_p("max_propensity"),
            strict_min=True,
        )
    row(not_null, "loss", "loss missing (NaN)")
    row(
        between,
        "loss",
        "loss outside the declared bounds [{loss_min:g}, {loss_max:g}] (or infinite)",
        min_value=_p("loss_min"),
        max_value=_p("loss_max"),
    )
    if has_timestamp:
        row(not_null, "timestamp", "timestamp missing or unparseable")
        row(
            between,
            "timestamp",
            "timestamp outside the window [{window_start}, {window_end}]",
            min_value=_p("window_start"),
            max_value=_p("window_end"),
        )
    if family == "discrete":
        row(
            between,
            "action",
            "action outside 0..{max_action}",
            min_value=0,
            max_value=_p("max_action"),
        )
    elif family == "multilabel":
        for j in range(n_labels or 0):
            row(not_null, f"y_{j}", f"y_{j} missing (multilabel vector of the wrong width)")
            row(gxe.ExpectColumnValuesToBeInSet, f"y_{j}", f"y_{j} not 0/1", value_set=[0, 1])
    else:
        row(between, "n_candidates", "zero candidates", min_value=1)
        row(between, "action", "negative candidate index", min_value=0)
        add(
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(
                column_A="n_candidates",
                column_B="action",
                or_equal=False,
                meta=_meta("row", "logged candidate index outside the row's set"),
            )
        )
    # the constructor (unlike add_expectation) needs no active data context: the suite stays pure
    return gx.ExpectationSuite(name=name or f"poem_{family}_log", expectations=expectations)


def suite_columns(suite: Any) -> set[str]:
    """Columns referenced by a suite's expectations."""
    cols: set[str] = set()
    for exp in suite.expectations:
        for key in ("column", "column_A", "column_B"):
            value = getattr(exp, key, None)
            if isinstance(value, str):
                cols.add(value)
    return cols


def default_parameters(
    meta: LogMetadata,
    *,
    window: tuple[Any, Any] | None = None,
    min_propensity: float = 0.0,
    min_rows: int = 1,
) -> dict[str, Any]:
    """Fill the expectation parameters of a log's suite from its declared metadata.

    Parameters
    ----------
    meta : LogMetadata
        Declared family, number of actions and loss bounds.
    window : tuple or None, default=None
        Accepted [start, end] of the timestamps (anything ``datetime``-like; aware ones are
        converted to naive UTC); default, or ``None`` for either end: no limit.
    min_propensity : float, default=0.0
        Propensities must be strictly greater than this.
    min_rows : int, default=1
        Minimum number of rows (0: a partition of a log, whose total is checked).

    Returns
    -------
    dict
        ``{"min_rows", "min_propensity", "max_propensity", "loss_min", "loss_max",
        "max_action", "window_start", "window_end"}``.

    Raises
    ------
    ValueError
        When the metadata declares no loss bounds.
    """
    import pandas as pd

    if meta.loss_bounds is None:
        raise ValueError("the log declares no loss bounds; pass loss_bounds=(min, max)")
    start, end = window if window is not None else (None, None)
    start = datetime(1970, 1, 1) if start is None else start  # None: no limit on that side
    end = datetime(2262, 4, 11) if end is None else end
    lo, hi = meta.loss_bounds
    return {
        "min_rows": max(0, int(min_rows)),
        "min_propensity": float(min_propensity),
        "max_propensity": 1.0,
        "loss_min": float(lo),
        "loss_max": float(hi),
        "max_action": int(meta.n_actions - 1) if meta.n_actions else 2**62,
        "window_start": _naive_utc(pd.Timestamp(start)),
        "window_end": _naive_utc(pd.Timestamp(end)),
    }


def _naive_utc(stamp: Any) -> datetime:
    """Timestamps are stored as naive UTC; convert an aware bound to that."""
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    return stamp.to_pydatetime()
