"""Read the logs named in ``cfg.data`` through the front door (I/O: the only tasks here that retry).

The stages are :mod:`data_checks.stages`, shared with ``poem-pipeline check``; these tasks only
turn ``cfg.data`` / ``cfg.checks`` into :class:`~data_checks.stages.CheckSettings` and call them.
Either way the checked log leaves here as a partition set (:mod:`poem.io.partitions`): one
partition in memory (:func:`partition_set`), or the partitions the check kept on a cluster
(:func:`validate_partitions`); every later stage is the same code for both.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from data_checks.check import check_partitioned
from data_checks.stages import CheckSettings, build_stage, read_stage
from flows.config import ChecksConfig, DataConfig
from flows.tasks import IO_RETRIES, stage_done, task_logger
from flows.tracking import TrackedRun, log_artifact
from poem.diagnostics.propensity import PropensityThresholds
from poem.io.logs import log_fingerprint
from poem.log_rows import as_partitions, log_header


def check_settings(checks: ChecksConfig, data: DataConfig | None = None) -> CheckSettings:
    """The :class:`~data_checks.stages.CheckSettings` of ``mlflow.yml``'s data and checks."""
    return CheckSettings(
        family=None if data is None else data.family,
        overrides={} if data is None else data.overrides(),
        window=None if data is None else data.window(),
        min_propensity=checks.min_propensity,
        min_rows=checks.min_rows,
        max_quarantine_fraction=checks.max_quarantine_fraction,
        thresholds=PropensityThresholds(**checks.propensity.model_dump()),
        future_timestamps=checks.future_timestamps,
    )


@task(name="fingerprint-logs", cache_policy=NO_CACHE, **IO_RETRIES)
def fingerprint_logs(data: DataConfig) -> str:
    """SHA-256 of exactly the files read (names and bytes): the runs' data fingerprint."""
    if not Path(data.path).exists():
        raise FileNotFoundError(f"data.path: log {data.path} does not exist")
    return log_fingerprint(data.path)


@task(name="load-logs", cache_policy=NO_CACHE, **IO_RETRIES)
def load_logs(data: DataConfig) -> tuple[Any, Any]:
    """Read the log (``data_checks.stages.read_stage``): ``(table, None)`` or ``(None, report)``."""
    table, failure = read_stage(data.path, check_settings(ChecksConfig(), data))
    if table is not None:
        task_logger().info("loaded %d rows from %s", table.n_rows, data.path)
    return table, failure


@task(name="build-log", cache_policy=NO_CACHE, on_completion=[stage_done])
def build_log(kept: Any, report: Any) -> tuple[Any, Any]:
    """Build the :class:`poem.data.LoggedBandit` of the kept rows: ``(log, report)``."""
    return build_stage(kept, report)


@task(name="partition-set", cache_policy=NO_CACHE)
def partition_set(log: Any) -> tuple[Any, Any]:
    """The checked log in memory as a one-partition set, and its shape: ``(source, header)``."""
    source = as_partitions(log)
    return source, log_header(source)


@task(name="validate-logs", cache_policy=NO_CACHE, on_completion=[stage_done])
def validate_partitions(
    data: DataConfig, checks: ChecksConfig, client: Any, run: TrackedRun, restart: bool = False
):
    """Check the log partition by partition; log the quarantine; keep the rows on the workers.

    ``restart`` restarts the workers between the check and the load (a cluster of this run).

    Returns ``(report, propensity_report, kept, header)``: the merged check report, the
    merged propensity report (None when the check failed), the kept rows as a partition set
    and their :class:`~poem.log_rows.LogHeader` (None when the check failed).
    """
    with tempfile.TemporaryDirectory(prefix="poem-partitions-") as tmp:
        report, propensity, files, kept = check_partitioned(
            data.path,
            check_settings(checks, data),
            out_dir=tmp,
            client=client,
            keep=True,
            restart=restart,
        )
        if "quarantine" in files:
            log_artifact(run.client(), run.run_id, files["quarantine"], "checks/quarantine")
            task_logger().warning("quarantined %d of %d rows", report.n_quarantined, report.n_rows)
    header = log_header(kept) if report.passed else None
    return report, propensity, kept, header
