"""Propensity sanity checks (DESIGN §4.6) of the validated log, and the estimated logger.

With ``data.propensity: estimate`` the log recorded no propensities; :func:`estimate_logging_policy`
replaces the check's placeholder by cross-fitted estimates and records how far to trust them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from data_checks.estimation import ESTIMATED, PROPENSITY_SOURCE_KEY, estimate_stage
from flows.checking import check_settings
from flows.config import ChecksConfig, DataConfig
from flows.tasks import IO_RETRIES, stage_done, task_logger
from flows.tracking import TrackedRun, log_artifact, log_json, log_metrics, log_text
from poem.diagnostics.plots import plot_reliability, save_diagnostic_plots
from poem.exceptions import InvalidLogError, Violation
from poem.io.estimates import write_estimates
from poem.io.partitions import LocalPartitions


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


@task(name="estimate-propensities", cache_policy=NO_CACHE, **IO_RETRIES)
def estimate_logging_policy(
    report: Any, source: Any, data: DataConfig, checks: ChecksConfig, run: TrackedRun
) -> tuple:
    """``data.propensity: estimate``: cross-fitted propensities of the checked rows.

    Calls :func:`data_checks.estimation.estimate_stage` (as ``poem-pipeline check`` does) on
    the log in memory: :func:`poem.logging_policy.estimate_log_propensities` on the log's own
    contexts and actions, a (nearly) deterministic logger refused as a failure of ``report``.
    Logs the model's held-out diagnostics as metrics (``propensity_model_*``,
    ``estimated_propensity_*``, ``estimated_uniform_effective_sample_size``), the prepared
    log's metadata (``checks/propensity_model.json``: ``propensity_source: estimated``, model,
    folds, seed), the estimates (``checks/estimated_propensities.parquet``, each row with its
    ``event_id`` or ``row`` + ``row_digest``: :mod:`poem.io.estimates`) and the
    reliability diagram beside the propensity plots (``checks/propensity_plots``).

    Returns ``(report, propensity_report, source, metadata)``: the source's one partition
    with the estimates (None when refused) and the prepared log's metadata.
    """
    (log,) = source.items  # in memory: one partition (a cluster is refused before)
    out = estimate_stage(log, report, check_settings(checks, data))
    client, d = run.client(), out.estimate.diagnostics
    metadata = out.metadata
    log_json(
        client,
        run.run_id,
        {
            **metadata,
            "random_state": data.propensity_estimation.seed,
            "diagnostics": d.lines(),
            "reliability": [list(r) for r in d.reliability],
            "rare_actions": [list(r) for r in d.rare_actions],
        },
        "checks/propensity_model.json",
    )
    log_metrics(client, run.run_id, d.metrics())
    client.set_tag(run.run_id, PROPENSITY_SOURCE_KEY, ESTIMATED)
    with tempfile.TemporaryDirectory(prefix="poem-propensity-") as tmp:
        plot = plot_reliability(d, Path(tmp) / "propensity_reliability.png")
        log_artifact(client, run.run_id, plot, "checks/propensity_plots")
        table = Path(tmp) / "estimated_propensities.parquet"
        write_estimates(out.estimate.propensities, log, table)
        log_artifact(client, run.run_id, table, "checks")
    logger = task_logger()
    for line in d.lines():
        logger.info("estimated logging policy: %s", line)
    if out.log is None:
        logger.warning("estimated logging policy refused: %s", out.report.failures[-1].reason)
        return out.report, None, None, metadata
    return out.report, out.propensity, LocalPartitions([out.log]), metadata
