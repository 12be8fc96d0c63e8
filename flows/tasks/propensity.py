"""Propensity sanity checks (DESIGN §4.6) of the validated log."""

from __future__ import annotations

import tempfile
from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from flows.tasks import stage_done, task_logger
from flows.tracking import TrackedRun, log_artifact, log_json, log_metrics, log_text
from poem.diagnostics.plots import save_diagnostic_plots
from poem.exceptions import InvalidLogError, Violation


@task(name="diagnose-propensities", cache_policy=NO_CACHE, on_completion=[stage_done])
def record_propensities(report: Any, run: TrackedRun, log: Any = None) -> Any:
    """Log the check's :class:`~poem.diagnostics.propensity.PropensityReport`; raise on fail.

    With ``log`` (the checked log in memory) the diagnostic plots are logged too; a log
    checked on a cluster has none (they need every row).
    """
    client = run.client()
    if log is not None:
        with tempfile.TemporaryDirectory(prefix="poem-propensity-") as tmp:
            save_diagnostic_plots(log, tmp)
            log_artifact(client, run.run_id, tmp, "checks/propensity_plots")
    log_json(client, run.run_id, report.to_dict(), "checks/propensity_report.json")
    log_text(client, run.run_id, report.to_markdown(), "checks/propensity_report.md")
    quantiles = {f"propensity_{k}": v for k, v in report.quantiles.items()}
    log_metrics(client, run.run_id, {"suggested_clip": report.suggested_clip, **quantiles})
    create_table_artifact(
        key="propensity-report", table=report.to_dict()["checks"], description=report.status
    )
    task_logger().info("propensity checks: %s", report.status)
    if report.failed:
        raise InvalidLogError(
            [Violation(c.name, 0, report.n_rows, (), c.explanation) for c in report.failed]
        )
    return report
