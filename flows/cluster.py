"""Where the log's partitions live: this process or a Dask cluster (DESIGN §8).

The one place that reads the config's ``dask`` section. A cluster is used by size of the log,
always, or an existing scheduler (:func:`dask_active`), and then:

- ``partitioned: true`` with a Parquet log (:func:`use_partitions`): the log's partitions stay
  in the workers' memory (:func:`data_client`) and the flow's Prefect tasks in its thread pool;
- otherwise the log is one partition in this process and the search trials run on the cluster
  as Prefect tasks (:func:`select_task_runner`). Dask workers then call Prefect's API, so a
  Prefect server is required (each worker would start its own temporary one): a
  ``LocalCluster``'s workers get ``PREFECT_API_URL``, an existing cluster's need it set.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from flows.config import ConfigError, DaskConfig
from flows.tracking import TrackedRun, log_artifact
from poem._dask_cluster import dask_logging, local_client

__all__ = [
    "DASK_LOG",
    "dask_active",
    "data_client",
    "flow_task_runner",
    "log_size_mib",
    "open_data_client",
    "select_task_runner",
    "use_partitions",
    "worker_environment",
]

DASK_LOG = "logs/dask.log"
"""Where a run's Dask log lines are kept (artifact of the run's MLflow run)."""


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


def dask_active(dask: DaskConfig, log_mib: float) -> bool:
    """Whether a log of ``log_mib`` MiB runs on a cluster (scheduler address, mode, size)."""
    return dask.scheduler_address is not None or (
        dask.mode == "always" or (dask.mode == "auto" and log_mib > dask.min_log_mib)
    )


def use_partitions(dask: DaskConfig, path: str | Path) -> bool:
    """Whether the flow processes the log at ``path`` as partitions on a cluster.

    ``dask.partitioned``, a cluster selected (:func:`dask_active`) and a Parquet log (a
    ``.parquet`` file or a folder; CSV logs are read whole).
    """
    path = Path(path)
    parquet = path.is_dir() or path.suffix.lower() == ".parquet"
    return dask.partitioned and parquet and dask_active(dask, log_size_mib(path))


def open_data_client(dask: DaskConfig) -> Any:
    """A ``distributed.Client`` for the partitioned path (closing it closes a local cluster).

    Connects to ``scheduler_address``, or starts a ``LocalCluster`` of ``n_workers``
    processes with ``threads_per_worker`` threads and ``memory_limit`` each, whose workers
    send their log lines to this process (:func:`poem._dask_cluster.local_client`).
    """
    if dask.scheduler_address is not None:
        from distributed import Client

        return Client(dask.scheduler_address)
    return local_client(
        n_workers=dask.n_workers,
        threads_per_worker=dask.threads_per_worker,
        memory_limit=dask.memory_limit,
        env={"ARROW_DEFAULT_MEMORY_POOL": "system"},  # freed memory returns to the system
    )


@contextlib.contextmanager
def data_client(
    dask: DaskConfig, run: TrackedRun | None = None, *, log_file: str | Path | None = None
) -> Iterator[Any]:
    """:func:`open_data_client` for the block; Dask's log lines go to a file, not the terminal.

    The file (:func:`poem._dask_cluster.dask_logging`) is logged to ``run`` as :data:`DASK_LOG`
    at the end, also when the block failed (then without hiding the block's error).

    Parameters
    ----------
    dask : DaskConfig
        Which cluster.
    run : TrackedRun or None, default=None
        The run that keeps the log; None keeps it only in ``log_file``.
    log_file : str or Path or None, default=None
        The file; None: a temporary file, deleted once uploaded.

    Yields
    ------
    distributed.Client
    """
    with tempfile.TemporaryDirectory(prefix="poem-dask-") as tmp:
        path = Path(log_file) if log_file is not None else Path(tmp) / Path(DASK_LOG).name
        try:
            with dask_logging(path):
                client = open_data_client(dask)
                try:
                    yield client
                finally:
                    client.close()
        except BaseException:
            with contextlib.suppress(Exception):  # the block's error is the one to report
                _keep_log(run, path)
            raise
        _keep_log(run, path)


def _keep_log(run: TrackedRun | None, path: Path) -> None:
    if run is not None and path.exists():
        log_artifact(run.client(), run.run_id, path, str(Path(DASK_LOG).parent))


def select_task_runner(dask: DaskConfig, log_mib: float) -> Any | None:
    """The task runner for a log of ``log_mib`` MiB; None keeps the flow's thread pool.

    Raises
    ------
    ConfigError
        When a cluster is selected without a Prefect server (:func:`worker_environment`).
    """
    if not dask_active(dask, log_mib):
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


def flow_task_runner(dask: DaskConfig, path: str | Path) -> Any | None:
    """The ``retrain`` flow's task runner for the log at ``path`` (None: its thread pool).

    None with partitions on a cluster (:func:`use_partitions`), else :func:`select_task_runner`.
    """
    if use_partitions(dask, path):
        return None
    return select_task_runner(dask, log_size_mib(path))
