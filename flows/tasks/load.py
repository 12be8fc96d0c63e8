"""Read and check the logs named in ``cfg.data`` through the front door.

The check is :func:`data_checks.check.check_partitioned`, the one ``poem-pipeline check`` runs;
the checked log leaves here as a partition set (:mod:`poem.io.partitions`), in this process or
on a cluster; every later stage is the same code for both.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from data_checks.check import check_partitioned
from flows.checking import check_settings
from flows.config import ChecksConfig, DataConfig
from flows.tasks import IO_RETRIES, task_logger
from flows.tracking import TrackedRun, log_artifact, log_json
from poem.io.logs import log_fingerprint
from poem.log_rows import log_header


@task(name="fingerprint-logs", cache_policy=NO_CACHE, **IO_RETRIES)
def fingerprint_logs(data: DataConfig) -> str:
    """SHA-256 of exactly the files read (names and bytes): the runs' data fingerprint."""
    if not Path(data.path).exists():
        raise FileNotFoundError(f"data.path: log {data.path} does not exist")
    return log_fingerprint(data.path)


@task(name="validate-logs", cache_policy=NO_CACHE, **IO_RETRIES)
def check_logs(
    data: DataConfig,
    checks: ChecksConfig,
    run: TrackedRun,
    client: Any = None,
    restart: bool = False,
):
    """Check the log; log the quarantine; keep the checked rows as a partition set.

    Without ``client`` the log is one partition in this process; with one, each Parquet row
    group is a partition checked and kept on the workers (``restart`` restarts them between
    the check and the load). Quarantined rows go to ``checks/quarantine.parquet`` (or
    ``checks/quarantine/``), their counts by reason to ``checks/quarantine_reasons.json``.

    Returns ``(report, propensity_report, kept, header)``; the propensity report and the
    :class:`~poem.log_rows.LogHeader` are None when the check failed.
    """
    with tempfile.TemporaryDirectory(prefix="poem-check-") as tmp:
        report, propensity, files, kept = check_partitioned(
            data.path,
            check_settings(checks, data),
            out_dir=tmp,
            client=client,
            keep=True,
            restart=restart,
            in_memory=client is None,
        )
        if "quarantine" in files:
            quarantine, mlflow = Path(files["quarantine"]), run.client()
            where = "checks" if quarantine.is_file() else "checks/quarantine"
            reasons = report.quarantined_by_reason
            log_artifact(mlflow, run.run_id, quarantine, where)
            log_json(mlflow, run.run_id, reasons, "checks/quarantine_reasons.json")
            task_logger().warning(
                "quarantined %d of %d rows: %s", report.n_quarantined, report.n_rows, reasons
            )
    header = log_header(kept) if report.passed else None
    return report, propensity, kept, header
