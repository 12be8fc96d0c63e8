"""Record and enforce the check report of the log (:func:`flows.tasks.load.check_logs`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from data_checks.report import raise_for_failures
from flows.config import ChecksConfig
from flows.tasks import IO_RETRIES, stage_done, task_logger
from flows.tracking import TrackedRun, log_artifact, log_json, log_metrics, log_text


@task(name="record-check-report", cache_policy=NO_CACHE, **IO_RETRIES)
def record_check_report(report: Any, run: TrackedRun) -> None:
    """Log the report (JSON, markdown, Data Docs, counts) to MLflow and to Prefect."""
    client = run.client()
    if report.docs_path:
        log_artifact(client, run.run_id, Path(report.docs_path).parent, "checks/data_docs")
        shutil.rmtree(Path(report.docs_path).parent, ignore_errors=True)
    log_json(client, run.run_id, report.to_dict(), "checks/data_check_report.json")
    log_text(client, run.run_id, report.to_markdown(), "checks/data_check_report.md")
    counts = {"n_rows": report.n_rows, "n_quarantined": report.n_quarantined}
    log_metrics(client, run.run_id, {**counts, "n_failed_expectations": len(report.failures)})
    create_markdown_artifact(key="data-check-report", markdown=report.to_markdown())
    task_logger().info("data checks: %d rows, %d failures", report.n_rows, len(report.failures))


@task(name="enforce-checks", cache_policy=NO_CACHE, on_completion=[stage_done])
def enforce_checks(report: Any, checks: ChecksConfig) -> Any:
    """Raise :class:`poem.InvalidLogError` on hard failures (on any failure without quarantine).

    On a hard failure every failed expectation is listed, so the error names each column.
    """
    return raise_for_failures(report, quarantine=checks.quarantine and report.passed)
