"""The stages of checking a log, wired once: read → validate → quarantine → build.

``poem-pipeline check`` and the ``retrain`` flow both run them through
:func:`data_checks.check.check_pieces`, which maps them over a log's partitions (with the
propensity summary of :mod:`data_checks.partition`), so a log is read, converted, validated
and quarantined identically on every path (STYLE §13). Stages are pure functions of one table
(a whole log, or one partition of it): they never raise for bad data, they return a
:class:`~data_checks.report.DataCheckReport`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from data_checks.quarantine import split_quarantine
from data_checks.report import DataCheckReport, ExpectationFailure
from data_checks.runner import validate_frame
from data_checks.suites import build_log_suite, default_parameters
from poem.data import LoggedBandit
from poem.diagnostics.propensity import PropensityThresholds
from poem.exceptions import InvalidLogError
from poem.io._metadata import invalid_log
from poem.io._row_checks import RowProblem, row_problems
from poem.io.logs import LogTable, read_log_table
from poem.io.parquet import skipped_log_files

__all__ = [
    "FUTURE_ACTIONS",
    "PROPENSITY_SOURCES",
    "CheckSettings",
    "build_stage",
    "duplicated_rows",
    "failed_report",
    "quarantine_stage",
    "read_stage",
    "validate_stage",
    "with_placeholder_propensities",
]


FUTURE_ACTIONS = ("warn", "quarantine")
PROPENSITY_SOURCES = ("logged", "estimate")
FUTURE = "timestamp_not_after_run_clock"


@dataclass(frozen=True)
class CheckSettings:
    """How to read and check a log (from ``check``'s flags or ``mlflow.yml``'s data/checks).

    ``poem-pipeline check``, ``retrain`` and the scheduled flow build it with the one
    translation :func:`flows.checking.check_settings` of ``mlflow.yml``. Its defaults are
    written here once: the ``checks:`` section of the config reads them from this class.

    Parameters
    ----------
    family : str or None, default=None
        Expected family (required for logs without metadata).
    overrides : dict, default={}
        Metadata for (or replacing) the declared one: ``loss_bounds``, ``reward_bounds``,
        ``n_actions``.
    window : tuple or None, default=None
        Accepted [start, end] of the timestamps.
    min_propensity : float, default=0.0
        The configured floor (``checks.min_propensity``): rows below it (or below the
        metadata's) are a warning and kept, and the gate blocks on them.
    min_rows : int, default=100
        Fewer rows fail hard.
    max_quarantine_fraction : float, default=0.01
        Larger fractions of quarantined rows fail hard.
    thresholds : PropensityThresholds or None, default=None
        Propensity check thresholds.
    future_timestamps : {"warn", "quarantine"}, default="warn"
        Rows dated later than the run's clock: counted as a warning (kept), or quarantined.
    now : datetime-like or None, default=None
        The run's clock (UTC; naive values are UTC); None reads the wall clock at validation.
    propensity : {"logged", "estimate"}, default="logged"
        ``data.propensity``: ``estimate`` checks a log without a propensity column (one with
        it is refused), holds a placeholder of 1 until :mod:`data_checks.estimation` replaces
        it by the cross-fitted estimates, and runs the suite without propensity expectations.
    estimation : dict, default={}
        Keyword arguments of :func:`poem.logging_policy.estimate_propensities`
        (``data.propensity_estimation``).
    """

    family: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    window: tuple[Any, Any] | None = None
    min_propensity: float = 0.0
    min_rows: int = 100
    max_quarantine_fraction: float = 0.01
    thresholds: PropensityThresholds | None = None
    future_timestamps: str = "warn"
    now: Any = None
    propensity: str = "logged"
    estimation: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.propensity not in PROPENSITY_SOURCES:
            raise ValueError(
                f"propensity must be one of {list(PROPENSITY_SOURCES)}, got {self.propensity!r}"
            )
        if self.future_timestamps not in FUTURE_ACTIONS:
            raise ValueError(
                f"future_timestamps must be one of {list(FUTURE_ACTIONS)}, "
                f"got {self.future_timestamps!r}"
            )


def _as_failures(
    violations: Any, expectation: str, level: str, reason: Any
) -> tuple[ExpectationFailure, ...]:
    """One failure per :class:`~poem.exceptions.Violation`, with the reason ``reason(v)``."""
    return tuple(
        ExpectationFailure(
            v.column, expectation, level, reason(v), v.n_invalid, v.n_rows, v.row_examples
        )
        for v in violations
    )


def failed_report(source: str, exc: Exception, stage: str = "read") -> DataCheckReport:
    """A report with one dataset-level failure per problem of ``exc`` (nothing validated)."""
    if isinstance(exc, InvalidLogError):
        failures = _as_failures(
            exc.violations, stage, "dataset", lambda v: str(v).split(": ", 1)[-1]
        )
    else:
        failures = (ExpectationFailure(source, stage, "dataset", str(exc), 0, 0),)
    return DataCheckReport(
        suite="(not run)", n_rows=0, n_expectations=0, failures=failures, source=source
    )


def read_stage(
    path: str | Path, settings: CheckSettings
) -> tuple[LogTable | None, DataCheckReport | None]:
    """Read the log through :func:`poem.io.logs.read_log_table`.

    Returns
    -------
    table : LogTable or None
        The table, or None when it cannot be read.
    failure : DataCheckReport or None
        A failed report naming the file, column or key, when it cannot be read.
    """
    try:
        table = read_log_table(
            path, family=settings.family, window=settings.window, **settings.overrides
        )
        table = with_placeholder_propensities(table, settings)
    except (InvalidLogError, ValueError, FileNotFoundError) as exc:
        skipped = tuple(str(f) for f in skipped_log_files(path)) if Path(path).is_dir() else ()
        return None, replace(failed_report(str(path), exc), skipped_files=skipped)
    return table, None


PLACEHOLDER_PROPENSITY = 1.0


def with_placeholder_propensities(table: LogTable, settings: CheckSettings) -> LogTable:
    """With ``settings.propensity == "estimate"``: the table with a placeholder propensity of 1.

    The placeholder lets the rows be built into a :class:`~poem.data.LoggedBandit`; it is
    never validated (the suite has no propensity expectation then), never written (the
    quarantine drops it) and is replaced by the cross-fitted estimates
    (:func:`data_checks.estimation.estimate_stage`) before anything reads it.

    Raises
    ------
    InvalidLogError
        When the log has a propensity column although estimation was asked for, or its
        metadata declares ``min_propensity`` (the floor of logged propensities: kept, the
        gate's weight bound and the floor checks would take it for a floor of the estimates).
    """
    if settings.propensity != "estimate":
        return table
    if "propensity" in table.frame.columns:
        raise invalid_log(
            "propensity",
            table.n_rows,
            "the log records propensities, but data.propensity is estimate",
            "Use data.propensity: logged (logged propensities are exact), or drop the column "
            "to estimate the logging policy",
        )
    floor = table.meta.min_propensity
    if floor is not None:  # a floor of logged propensities says nothing of the estimates
        raise invalid_log(
            "min_propensity",
            table.n_rows,
            f"the log's metadata declares min_propensity {floor:g}, a floor of logged "
            "propensities, but data.propensity is estimate: the estimates have no declared "
            "floor, and neither the checks nor the gate may assume one",
            "Remove min_propensity from the log's metadata, or log the propensities and use "
            "data.propensity: logged",
        )
    frame = table.frame
    frame["propensity"] = PLACEHOLDER_PROPENSITY  # the freshly read frame: no copy
    return replace(table, frame=frame)


def _below_declared_floor(table: LogTable, configured: float = 0.0) -> list[RowProblem]:
    """Rows whose propensity is below the declared floor (a warning: the rows are kept).

    The floor is the larger of the log's metadata ``min_propensity`` and
    ``checks.min_propensity`` (``configured``), the gate's weight bound 1/floor. Such rows
    are kept, never quarantined: the rest would be a sample conditioned on the well-logged
    actions, and a bound that trusts the floor would be wrong on it. The gate blocks on them
    as a failed precondition (:func:`poem.gate.gate_decision`).
    """
    known = [v for v in (table.meta.min_propensity, configured or None) if v is not None]
    if not known or "propensity" not in table.frame.columns:
        return []
    floor = max(known)
    p = pd.to_numeric(table.frame["propensity"], errors="coerce").to_numpy(dtype=np.float64)
    mask = (p > 0) & (p < floor)  # NaN and p <= 0 are reported by the propensity expectation
    if not mask.any():
        return []
    return [
        RowProblem(
            "propensity",
            f"propensity below the declared min_propensity {floor:g} (kept: the gate's weight "
            "bound 1/min_propensity assumes none is, so the gate blocks on this log)",
            mask,
        )
    ]


def _failures_of(
    table: LogTable, problems: list[RowProblem], expectation: str, level: str = "row"
) -> list[tuple[ExpectationFailure, np.ndarray]]:
    """Row problems as failures (count, first event ids) with the offending positions."""
    n = table.n_rows
    ids = table.frame["event_id"].to_numpy() if "event_id" in table.frame.columns else np.arange(n)
    out = []
    for problem in problems:
        pos = np.flatnonzero(problem.mask)
        examples = tuple(v.item() if hasattr(v, "item") else v for v in ids[pos[:5]])
        failure = ExpectationFailure(
            problem.column, expectation, level, problem.reason, int(pos.size), n, examples
        )
        out.append((failure, pos))
    return out


def _future_rows(table: LogTable, settings: CheckSettings) -> list[RowProblem]:
    """Rows dated later than the run's clock (a warning, or quarantined)."""
    if "timestamp" not in table.frame.columns:
        return []
    stamps = table.frame["timestamp"]
    if not pd.api.types.is_datetime64_dtype(stamps):
        return []  # unparsed timestamps are reported by the type checks
    now = pd.Timestamp.now(tz="UTC") if settings.now is None else pd.Timestamp(settings.now)
    now = now.tz_convert("UTC").tz_localize(None) if now.tzinfo is not None else now
    mask = (stamps > now).to_numpy()
    reason = (
        f"dated later than the run's clock {now.isoformat()} UTC "
        f"(checks.future_timestamps: {settings.future_timestamps})"
    )
    return [RowProblem("timestamp", reason, mask)] if mask.any() else []


def duplicated_rows(table: LogTable, elsewhere: Any = None) -> np.ndarray | None:
    """Positions of the rows whose (non-null) ``event_id`` occurs in another row of the log.

    ``elsewhere``: positions of rows whose id occurs in another partition of the log (from
    :func:`data_checks.check.check_partitioned`'s id buckets). None without ids.
    """
    if "event_id" not in table.frame.columns:
        return None
    ids = table.frame["event_id"]
    mask = np.array(ids.notna() & ids.duplicated(keep=False), dtype=bool)
    if elsewhere is not None and len(elsewhere):
        mask[np.asarray(elsewhere, dtype=np.int64)] = True
    return np.flatnonzero(mask)


def validate_stage(
    table: LogTable,
    settings: CheckSettings,
    *,
    context: Any = None,
    docs_dir: str | Path | None = None,
    elsewhere: Any = None,
    partition: bool = False,
) -> DataCheckReport:
    """Run the family's GX suite plus the front door's row rules on one table.

    Also: rows dated later than the run's clock (``settings.future_timestamps``), rows dated
    outside their ``date=`` folder (a warning) and the files skipped as not data (named).
    ``elsewhere`` (see :func:`duplicated_rows`) and ``partition`` (the row count is checked on
    the log's total, by :func:`data_checks.check.check_pieces`) when ``table`` is one
    partition of a log.
    """
    rules = row_problems(table.frame, table.meta)
    level = "row" if settings.future_timestamps == "quarantine" else "warning"
    future = _failures_of(table, _future_rows(table, settings), FUTURE, level)
    floor = _failures_of(
        table, _below_declared_floor(table, settings.min_propensity), "poem_row_check", "warning"
    )
    quarantined = [(f, pos) for f, pos in future if f.level == "row"]
    warnings = _as_failures(  # what the reader noticed: rows outside their date= folder
        table.warnings, "timestamp_in_partition_folder", "warning", lambda v: v.message
    ) + tuple(f for f, _ in [*future, *floor] if f.level == "warning")
    meta = table.meta
    suite = build_log_suite(
        meta.family,
        n_labels=meta.n_actions if meta.family == "multilabel" else None,
        has_timestamp="timestamp" in table.frame.columns,
        has_propensity=settings.propensity != "estimate",
    )
    params = default_parameters(
        meta,
        window=settings.window,
        min_propensity=0.0,  # below the declared floor: a warning, kept (_below_declared_floor)
        min_rows=0 if partition else max(1, settings.min_rows),
    )
    report = validate_frame(
        table.frame,
        suite,
        params,
        context=context,
        max_quarantine_fraction=settings.max_quarantine_fraction,
        docs_dir=docs_dir,
        source=table.source,
        row_failures=_failures_of(table, rules, "poem_row_check") + quarantined,
        duplicates=duplicated_rows(table, elsewhere),
    )
    return replace(report, failures=report.failures + warnings, skipped_files=tuple(table.skipped))


def quarantine_stage(
    table: LogTable | None, report: DataCheckReport
) -> tuple[LogTable | None, pd.DataFrame | None]:
    """Split off the rows with row-level failures (none when a dataset-level check failed).

    Returns
    -------
    kept : LogTable or None
        The remaining rows (None when ``table`` is None).
    quarantined : DataFrame or None
        The quarantined rows with a ``reason`` column (None when there are none).
    """
    if table is None or any(f.level == "dataset" for f in report.failures):
        return table, None
    kept, quarantined = split_quarantine(table.frame, report)
    return replace(table, frame=kept), (quarantined if len(quarantined) else None)


def build_stage(
    kept: LogTable | None, report: DataCheckReport
) -> tuple[LoggedBandit | None, DataCheckReport]:
    """Build the :class:`~poem.data.LoggedBandit` of the kept rows (no dataset-level failure).

    The fraction of quarantined rows is not looked at: for a partition it is judged on the
    log's total.

    Returns
    -------
    log : LoggedBandit or None
        None when a dataset-level check failed, no row is kept or the log breaks an invariant.
    report : DataCheckReport
        The report, plus one dataset-level failure per broken invariant.
    """
    if kept is None or not kept.n_rows or any(f.level == "dataset" for f in report.failures):
        return None, report
    try:
        return kept.to_log(), report
    except (InvalidLogError, ValueError) as exc:
        extra = failed_report(report.source, exc, "LoggedBandit").failures
        return None, replace(report, failures=report.failures + extra)
