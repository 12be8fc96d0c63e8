"""Propensity sanity checks (DESIGN §4.6) of the validated log."""

from __future__ import annotations

import tempfile
from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from data_checks.stages import propensity_stage
from flows.config import ChecksConfig
from flows.tasks import stage_done, task_logger
from flows.tasks.load import check_settings
from flows.tracking import TrackedRun, log_artifact, log_json, log_metrics, log_text
from poem.diagnostics.plots import save_diagnostic_plots
from poem.exceptions import InvalidLogError, Violation


@task(name="diagnose-propensities", cache_policy=NO_CACHE, on_completion=[stage_done])
def diagnose_propensities(log: Any, checks: ChecksConfig, run: TrackedRun) -> Any:
    """Run ``data_checks.stages.propensity_stage``; log the report and plots; raise on fail."""
    report = propensity_stage(log, check_settings(checks))
    with tempfile.TemporaryDirectory(prefix="poem-propensity-") as tmp:
        save_diagnostic_plots(log, tmp)
        log_artifact(run.client(), run.run_id, tmp, "checks/propensity_plots")
    return record_propensity_report(report, run)


def record_propensity_report(report: Any, run: TrackedRun) -> Any:
    """Log a :class:`~poem.diagnostics.propensity.PropensityReport`; raise when a check failed.

    Shared by :func:`diagnose_propensities` and the partitioned path (whose report comes from
    the merged per-partition summaries, without plots).
    """
    client = run.client()
    log_json(client, run.run_id, report.to_dict(), "checks/propensity_report.json")
    log_text(client, run.run_id, report.to_markdown(), "checks/propensity_report.md")
    log_metrics(
        client,
        run.run_id,
        {
            "suggested_clip": report.suggested_clip,
            **{f"propensity_{k}": v for k, v in report.quantiles.items()},
        },
    )
    create_table_artifact(
        key="propensity-report", table=report.to_dict()["checks"], description=report.status
    )
    task_logger().info("propensity checks: %s", report.status)
    if report.failed:
        raise InvalidLogError(
            [Violation(c.name, 0, report.n_rows, (), c.explanation) for c in report.failed]
        )
    return report


@task(name="diagnose-propensities", cache_policy=NO_CACHE, on_completion=[stage_done])
def record_propensities(report: Any, run: TrackedRun) -> Any:
    """Log the merged propensity report of a log checked on a cluster (no plots); raise on fail."""
    return record_propensity_report(report, run)
