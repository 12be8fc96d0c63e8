"""Validate the log table with the Great Expectations suite of its family (``data_checks``)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from data_checks.quarantine import write_quarantine
from data_checks.report import raise_for_failures
from data_checks.stages import quarantine_stage, validate_stage
from flows.config import ChecksConfig, DataConfig
from flows.tasks import IO_RETRIES, stage_done, task_logger
from flows.tasks.load import check_settings
from flows.tracking import TrackedRun, log_artifact, log_json, log_metrics, log_text


@task(name="validate-logs", cache_policy=NO_CACHE, on_completion=[stage_done])
def validate_logs(loaded: Any, data: DataConfig, checks: ChecksConfig) -> Any:
    """Run the family's GX suite and row rules (``data_checks.stages.validate_stage``).

    ``loaded`` is :func:`~flows.tasks.load.load_logs`'s ``(table, failure)``; an unreadable
    log's failed report is returned as is. No GX Data Docs are written: offline they are
    unstyled (CDN assets) and cost ~4 MB per run; the JSON and markdown report stand in.
    """
    table, failure = loaded
    if failure is not None:
        return failure
    return validate_stage(table, check_settings(checks, data))


@task(name="record-check-report", cache_policy=NO_CACHE, **IO_RETRIES)
def record_check_report(report: Any, run: TrackedRun) -> None:
    """Log the report (JSON, markdown, Data Docs, counts) to MLflow and to Prefect."""
    client = run.client()
    if report.docs_path:
        log_artifact(client, run.run_id, Path(report.docs_path).parent, "checks/data_docs")
        shutil.rmtree(Path(report.docs_path).parent, ignore_errors=True)
    log_json(client, run.run_id, report.to_dict(), "checks/data_check_report.json")
    log_text(client, run.run_id, report.to_markdown(), "checks/data_check_report.md")
    log_metrics(
        client,
        run.run_id,
        {
            "n_rows": report.n_rows,
            "n_quarantined": report.n_quarantined,
            "n_failed_expectations": len(report.failures),
        },
    )
    create_markdown_artifact(key="data-check-report", markdown=report.to_markdown())
    task_logger().info("data checks: %d rows, %d failures", report.n_rows, len(report.failures))


@task(name="enforce-checks", cache_policy=NO_CACHE, on_completion=[stage_done])
def enforce_checks(report: Any, checks: ChecksConfig) -> Any:
    """Raise :class:`poem.InvalidLogError` on hard failures (on any failure without quarantine).

    On a hard failure every failed expectation is listed, so the error names each column.
    """
    return raise_for_failures(report, quarantine=checks.quarantine and report.passed)


@task(name="quarantine-rows", cache_policy=NO_CACHE, on_completion=[stage_done])
def quarantine_rows(loaded: Any, report: Any, run: TrackedRun) -> Any:
    """Split off rows that failed row-level checks into ``checks/quarantine.parquet``.

    Kept + quarantined rows reconcile to the input (``data_checks.stages.quarantine_stage``);
    returns the kept table (None for an unreadable log).
    """
    kept, quarantined = quarantine_stage(loaded[0], report)
    if quarantined is not None:
        client = run.client()
        with tempfile.TemporaryDirectory(prefix="poem-quarantine-") as tmp:
            log_artifact(
                client,
                run.run_id,
                write_quarantine(quarantined, f"{tmp}/quarantine.parquet"),
                "checks",
            )
        log_json(client, run.run_id, report.quarantined_by_reason, "checks/quarantine_reasons.json")
        task_logger().warning(
            "quarantined %d of %d rows: %s",
            len(quarantined),
            report.n_rows,
            report.quarantined_by_reason,
        )
    return kept
