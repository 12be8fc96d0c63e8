"""``poem-pipeline check`` as a library call: :mod:`data_checks.partitioned`, plus plots and files.

In memory the log is one partition (Data Docs and plots then); with ``partitions`` one per
Parquet row group, on a Dask cluster or in this process: the same checks and report.

:func:`check_logs` never raises for bad data: unreadable files, missing columns and the like
become dataset-level failures of the returned :class:`CheckOutcome`, whose ``exit_code`` is 0
when the log is usable (warnings allowed) and 1 on any hard failure.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from data_checks.partitioned import (
    PartitionOptions,
    check_partitioned,
    open_client,
    use_partitions,
)
from data_checks.report import DataCheckReport
from data_checks.stages import CheckSettings, failed_report
from poem.data import LoggedBandit
from poem.diagnostics.plots import save_diagnostic_plots
from poem.diagnostics.propensity import PropensityReport, PropensityThresholds

__all__ = ["CheckOutcome", "check_logs"]

logger = logging.getLogger(__name__)


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
        lines += [f"skipped, not data: {f}" for f in r.skipped_files]
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


def check_logs(
    path: str | Path,
    *,
    family: str | None = None,
    out_dir: str | Path | None = None,
    window: tuple[Any, Any] | None = None,
    min_propensity: float = 0.0,
    min_rows: int = 1,
    max_quarantine_fraction: float = 0.05,
    thresholds: PropensityThresholds | None = None,
    target_policy: Any = None,
    context: Any = None,
    plots: bool = True,
    partitions: Any = None,
    client: Any = None,
    future_timestamps: str = "warn",
    now: Any = None,
    **overrides: Any,
) -> CheckOutcome:
    """Validate a log file or ``date=`` directory end to end.

    Parameters
    ----------
    path : str or Path
        Parquet file, partitioned directory or CSV file.
    family, window, min_propensity, min_rows, max_quarantine_fraction, thresholds
        The fields of :class:`~data_checks.stages.CheckSettings` (same defaults).
    out_dir : str or Path or None, default=None
        When given: ``check_report.json``, ``quarantine.parquet`` (if any row is
        quarantined), ``data_docs/index.html`` and the PNG plots are written there.
    target_policy : StochasticPolicy or None, default=None
        Policy for the ESS check and the weight plot.
    context : GX context or None, default=None
        Reused GX context (tests); a new ephemeral one otherwise.
    plots : bool, default=True
        Whether to write the plots (needs ``out_dir``).
    partitions : PartitionOptions or None, default=None
        When (and where) to check a Parquet log partition by partition
        (:mod:`data_checks.partitioned`); None always checks in memory.
    client : distributed.Client or None, default=None
        Cluster for the partitioned check, instead of the one ``partitions`` describes.
    future_timestamps : {"warn", "quarantine"}, default="warn"
        Rows dated later than the run's clock: a warning, or quarantined.
    now : datetime-like or None, default=None
        The run's clock (UTC); None reads the wall clock once, when the check starts.
    **overrides
        Metadata for logs without it (or replacing the declared one): ``loss_bounds``,
        ``reward_bounds``, ``n_actions``.

    Returns
    -------
    CheckOutcome
    """
    out = Path(out_dir) if out_dir is not None else None
    settings = CheckSettings(
        family=family,
        overrides={k: v for k, v in overrides.items() if v is not None},
        window=window,
        min_propensity=min_propensity,
        min_rows=min_rows,
        max_quarantine_fraction=max_quarantine_fraction,
        thresholds=thresholds,
        future_timestamps=future_timestamps,
        now=pd.Timestamp.now(tz="UTC") if now is None else now,
    )
    memory = client is None and not use_partitions(path, partitions)
    options = partitions or PartitionOptions(mode="always", scheduler="sync")
    own = not memory and client is None
    try:
        client = open_client(options) if own else client
        try:
            report, prop, files, *kept = check_partitioned(
                path,
                settings,
                out_dir=out,
                client=client,
                target_policy=target_policy,
                rows_per_bucket=options.rows_per_bucket,
                keep=memory,
                in_memory=memory,
                context=context,
            )
        finally:
            if own and client is not None:
                client.close()
                client.cluster.close()
        log = kept[0].items[0] if kept and kept[0] is not None else None
        if out is not None and plots and log is not None:
            saved = save_diagnostic_plots(log, out / "plots", target_policy=target_policy)
            files.update({k: str(v) for k, v in saved.items()})
        return _finish(CheckOutcome(report, prop, log, files), out)
    except Exception as exc:  # noqa: BLE001 - a report, never a traceback
        logger.debug("check of %s failed unexpectedly", path, exc_info=True)
        problem = RuntimeError(f"unexpected {type(exc).__name__}: {exc} (please report this)")
        return _finish(CheckOutcome(failed_report(str(path), problem, "check")), out)


def _finish(outcome: CheckOutcome, out: Path | None) -> CheckOutcome:
    if out is None:
        return outcome
    out.mkdir(parents=True, exist_ok=True)
    files = dict(outcome.files, report=str(out / "check_report.json"))
    outcome = replace(outcome, files=files)
    (out / "check_report.json").write_text(json.dumps(outcome.to_dict(), indent=2, default=str))
    return outcome
