"""``poem-pipeline check`` as a library call: read, GX suite, quarantine, propensity checks, plots.

:func:`check_logs` never raises for bad data: unreadable files, missing columns and the like
become dataset-level failures of the returned :class:`CheckOutcome`, whose ``exit_code`` is 0
when the log is usable (warnings allowed) and 1 on any hard failure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from data_checks.quarantine import split_quarantine, write_quarantine
from data_checks.report import DataCheckReport, ExpectationFailure
from data_checks.runner import validate_frame
from data_checks.suites import build_log_suite, default_parameters
from poem.data import LoggedBandit
from poem.diagnostics.propensity import PropensityReport, PropensityThresholds, propensity_report
from poem.exceptions import InvalidLogError, Violation
from poem.io.parquet import METADATA_KEY, frame_metadata, frame_to_log, read_frame

__all__ = ["CheckOutcome", "check_logs", "read_log_frame"]


@dataclass(frozen=True)
class CheckOutcome:
    """Everything ``check`` produced: reports, the kept log and the files written."""

    report: DataCheckReport
    propensity: PropensityReport | None = None
    log: LoggedBandit | None = field(default=None, repr=False)
    files: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """No hard data failure and no failed propensity check."""
        return (
            self.report.passed and self.propensity is not None and self.propensity.status != "fail"
        )

    @property
    def exit_code(self) -> int:
        """0 when passed (warnings allowed), else 1."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (both reports and the files)."""
        return {
            "passed": self.passed,
            "data_checks": self.report.to_dict(),
            "propensity": None if self.propensity is None else self.propensity.to_dict(),
            "files": self.files,
        }

    def to_text(self) -> str:
        """Format the outcome as a readable plain-text table for the terminal."""
        r = self.report
        n_warn = 0 if self.propensity is None else len(self.propensity.warnings)
        verdict = (
            "PASSED" + (f" with {n_warn} warning(s)" if n_warn else "") if self.passed else "FAILED"
        )
        lines = [
            f"check {r.source}: {r.n_rows:,} rows, suite {r.suite} ({r.n_expectations} "
            f"expectations) -> {verdict}",
            "",
        ]
        if r.failures:
            rows = [("level", "column", "bad rows", "of", "problem", "example event ids")]
            rows += [
                (
                    f.level,
                    f.column,
                    f"{f.unexpected_count:,}",
                    f"{f.element_count:,}",
                    f.reason + (f" (observed {f.observed})" if f.observed else ""),
                    ", ".join(str(e) for e in f.examples),
                )
                for f in r.failures
            ]
            lines += _table(rows) + [""]
        else:
            lines += ["all expectations passed", ""]
        lines.append(
            f"rows: {r.n_kept:,} kept + {r.n_quarantined:,} quarantined = {r.n_rows:,} input"
        )
        lines += [f"  quarantined {n:,}: {reason}" for reason, n in r.quarantined_by_reason.items()]
        if r.extra_columns:
            lines.append(f"extra columns (allowed, not checked): {', '.join(r.extra_columns)}")
        lines += [f"HARD FAILURE {f}" for f in r.hard_failures]
        if self.propensity is not None:
            p = self.propensity
            lines += [
                "",
                f"propensity checks: {p.status.upper()} (suggested clip M = "
                f"{p.suggested_clip:.3g})",
            ]
            lines += _table(
                [("status", "check", "value", "explanation")]
                + [(c.status, c.name, f"{c.value:.4g}", c.explanation) for c in p.checks]
            )
        if self.files:
            lines += [""] + [f"{k}: {v}" for k, v in self.files.items()]
        return "\n".join(lines)


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(str(row[j])) for row in rows) for j in range(len(rows[0]))]
    return [
        "  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def _violation_failures(exc: InvalidLogError, stage: str) -> tuple[ExpectationFailure, ...]:
    """One dataset-level failure per violation of ``exc``, attributed to ``stage``."""
    return tuple(
        ExpectationFailure(
            v.column,
            stage,
            "dataset",
            str(v).split(": ", 1)[-1],
            v.n_invalid,
            v.n_rows,
            v.row_examples,
        )
        for v in exc.violations
    )


def _failed_report(source: str, exc: Exception) -> DataCheckReport:
    if isinstance(exc, InvalidLogError):
        failures = _violation_failures(exc, "read")
    else:
        failures = (ExpectationFailure(source, "read", "dataset", str(exc), 0, 0),)
    return DataCheckReport(
        suite="(not run)", n_rows=0, n_expectations=0, failures=failures, source=source
    )


def read_log_frame(
    path: str | Path, *, family: str | None = None, **overrides: Any
) -> pd.DataFrame:
    """Read a Parquet or CSV log into a canonical frame; rewards become losses (δ = −reward)."""
    path = Path(path)
    if path.suffix.lower() == ".csv":
        from poem.io.csv import read_csv_frame

        frame = read_csv_frame(path, family=family, **overrides)
    else:
        frame = read_frame(path)
    meta = frame_metadata(frame, family=family, **overrides)
    if "loss" not in frame.columns and "reward" in frame.columns and meta.reward_bounds is None:
        declared = (
            f"the log declares loss bounds {list(meta.loss_bounds)}"
            if meta.loss_bounds
            else "no reward bounds"
        )
        raise InvalidLogError(
            [
                Violation(
                    "loss",
                    0,
                    len(frame),
                    (),
                    f"column is missing; found 'reward' but {declared}",
                    "Declare reward bounds (δ = −reward) or write a loss column",
                )
            ]
        )
    if "loss" not in frame.columns and "reward" in frame.columns:
        lo, hi = meta.reward_bounds
        frame = frame.assign(loss=-frame["reward"]).drop(columns="reward")  # DESIGN §3: δ = −reward
        meta = replace(meta, loss_bounds=(-hi, -lo), reward_bounds=None)
    if "timestamp" in frame.columns and not pd.api.types.is_datetime64_any_dtype(
        frame["timestamp"]
    ):
        # unparseable timestamps become NaT, quarantined as "timestamp missing or unparseable"
        parsed = pd.to_datetime(
            frame["timestamp"].astype("string"), errors="coerce", format="ISO8601", utc=True
        )
        frame = frame.assign(timestamp=parsed.dt.tz_localize(None).astype("datetime64[ns]"))
    frame.attrs[METADATA_KEY] = json.loads(meta.to_json())
    return frame


def check_logs(
    path: str | Path,
    *,
    family: str | None = None,
    out_dir: str | Path | None = None,
    window: tuple[Any, Any] | None = None,
    min_propensity: float = 0.0,
    max_quarantine_fraction: float = 0.05,
    thresholds: PropensityThresholds | None = None,
    target_policy: Any = None,
    context: Any = None,
    plots: bool = True,
    **overrides: Any,
) -> CheckOutcome:
    """Validate a log file or ``date=`` directory end to end.

    Parameters
    ----------
    path : str or Path
        Parquet file, partitioned directory or CSV file.
    family : str or None, default=None
        Expected family (required when the log carries no metadata).
    out_dir : str or Path or None, default=None
        When given: ``data_checks.json``, ``propensity.json``, ``quarantine.parquet`` (if any
        row is quarantined), ``data_docs/index.html`` and the PNG plots are written there.
    window : tuple or None, default=None
        Accepted [start, end] of the timestamps.
    min_propensity : float, default=0.0
        Propensities must exceed this.
    max_quarantine_fraction : float, default=0.05
        Larger fractions of quarantined rows fail hard.
    thresholds : PropensityThresholds or None, default=None
        Propensity check thresholds.
    target_policy : StochasticPolicy or None, default=None
        Policy for the ESS check and the weight plot.
    context : GX context or None, default=None
        Reused GX context (tests); a new ephemeral one otherwise.
    plots : bool, default=True
        Whether to write the plots (needs ``out_dir``).
    **overrides
        Metadata for logs without it: ``loss_bounds``, ``reward_bounds``, ``n_actions``.

    Returns
    -------
    CheckOutcome
    """
    source = str(path)
    out = Path(out_dir) if out_dir is not None else None
    files: dict[str, str] = {}
    try:
        frame = read_log_frame(path, family=family, **overrides)
        meta = frame_metadata(frame)
        params = default_parameters(meta, window=window, min_propensity=min_propensity)
    except (InvalidLogError, ValueError, FileNotFoundError) as exc:
        return _finish(CheckOutcome(_failed_report(source, exc)), out)
    suite = build_log_suite(
        meta.family,
        n_labels=meta.n_actions if meta.family == "multilabel" else None,
        has_timestamp="timestamp" in frame.columns or window is not None,
    )
    report = validate_frame(
        frame,
        suite,
        params,
        context=context,
        max_quarantine_fraction=max_quarantine_fraction,
        docs_dir=None if out is None else out / "data_docs",
        source=source,
    )
    if report.docs_path:
        files["data_docs"] = report.docs_path
    kept, quarantined = (
        split_quarantine(frame, report)
        if not any(f.level == "dataset" for f in report.failures)
        else (frame, frame.iloc[:0])
    )
    if out is not None and len(quarantined):
        files["quarantine"] = str(write_quarantine(quarantined, out / "quarantine.parquet"))
    if not report.passed:
        return _finish(CheckOutcome(report, files=files), out)
    try:
        log = frame_to_log(kept)
    except InvalidLogError as exc:
        extra = _violation_failures(exc, "LoggedBandit")
        return _finish(
            CheckOutcome(replace(report, failures=report.failures + extra), files=files), out
        )
    prop = propensity_report(log, target_policy=target_policy, thresholds=thresholds)
    if out is not None and plots:
        from poem.diagnostics.plots import save_diagnostic_plots

        files.update(
            {
                k: str(v)
                for k, v in save_diagnostic_plots(
                    log, out / "plots", target_policy=target_policy
                ).items()
            }
        )
    return _finish(CheckOutcome(report, prop, log, files), out)


def _finish(outcome: CheckOutcome, out: Path | None) -> CheckOutcome:
    if out is None:
        return outcome
    out.mkdir(parents=True, exist_ok=True)
    files = dict(outcome.files, report=str(out / "check_report.json"))
    outcome = replace(outcome, files=files)
    (out / "check_report.json").write_text(json.dumps(outcome.to_dict(), indent=2, default=str))
    return outcome
