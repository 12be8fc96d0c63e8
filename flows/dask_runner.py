"""Run the ``retrain`` flow's trials on a Dask cluster (DESIGN §8).

The flow submits its search trials to whatever task runner it runs with; this module picks it
from the config's ``dask`` section (:class:`flows.config.DaskConfig`): Prefect's thread pool
(the flow's default), a ``LocalCluster`` started for the run (by size of the log, or always),
or an existing scheduler. Trials, their MLflow records and the flow's outputs are the same on
every runner; only where the trials compute changes.

Dask worker processes call Prefect's API themselves. With Prefect's ephemeral API (no
``PREFECT_API_URL``) each worker would start its own temporary server and the tasks fail
(``../shared/ECOSYSTEM.md`` §6), so a cluster run requires a Prefect server: the workers of a
``LocalCluster`` get the parent's ``PREFECT_API_URL`` (and result storage) in their
environment; workers of an existing cluster must be configured with it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flows.config import ConfigError, DaskConfig, load_config

__all__ = ["log_size_mib", "run_retrain", "select_task_runner", "worker_environment"]


def log_size_mib(path: str | Path) -> float:
    """Size on disk of a log (a file, or every file below a folder), in MiB."""
    path = Path(path)
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return sum(p.stat().st_size for p in files if p.exists()) / 2**20


def worker_environment() -> dict[str, str]:
    """Prefect settings the Dask workers need: the API URL and where results are stored.

    Raises
    ------
    ConfigError
        When no Prefect server is configured (ephemeral mode).
    """
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME, PREFECT_LOCAL_STORAGE_PATH

    url = PREFECT_API_URL.value()
    if not url:
        raise ConfigError(
            "dask: trials on a Dask cluster need a Prefect server, but PREFECT_API_URL is not "
            "set (ephemeral mode: each Dask worker would start its own temporary server). Run "
            "`prefect server start --background`, then `export "
            "PREFECT_API_URL=http://127.0.0.1:4200/api`; or set dask.mode: never"
        )
    return {
        "PREFECT_API_URL": str(url),
        "PREFECT_HOME": str(PREFECT_HOME.value()),
        "PREFECT_LOCAL_STORAGE_PATH": str(PREFECT_LOCAL_STORAGE_PATH.value()),
    }


def select_task_runner(dask: DaskConfig, log_mib: float) -> Any | None:
    """The task runner for a log of ``log_mib`` MiB; None keeps the flow's thread pool.

    Raises
    ------
    ConfigError
        When a cluster is selected without a Prefect server (:func:`worker_environment`).
    """
    if dask.scheduler_address is None and (
        dask.mode == "never" or (dask.mode == "auto" and log_mib <= dask.min_log_mib)
    ):
        return None
    env = worker_environment()
    from prefect_dask import DaskTaskRunner

    if dask.scheduler_address is not None:
        return DaskTaskRunner(address=dask.scheduler_address)
    return DaskTaskRunner(
        cluster_class="distributed.LocalCluster",
        cluster_kwargs={
            "n_workers": dask.n_workers,
            "threads_per_worker": dask.threads_per_worker,
            "processes": True,
            "memory_limit": dask.memory_limit,
            "dashboard_address": None,
            "env": env,
        },
    )


def run_retrain(
    config_path: str | Path,
    logs: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """Run the ``retrain`` flow on the task runner the config's ``dask`` section selects.

    ``overrides`` are the CLI's ``--set`` values (dotted keys), as :func:`flows.retrain.retrain`
    takes them.

    Returns
    -------
    flows.retrain.RetrainResult
        As :func:`flows.retrain.retrain`.
    """
    from flows.retrain import retrain

    cfg = load_config(config_path, overrides)
    runner = select_task_runner(cfg.dask, log_size_mib(logs if logs is not None else cfg.data.path))
    flow = retrain if runner is None else retrain.with_options(task_runner=runner)
    return flow(config_path, logs, overrides)
