"""A Dask cluster for one run, and where its log lines go (DESIGN §8).

A ``LocalCluster``'s workers are child processes writing to this terminal: :func:`local_client`
silences them and forwards their records here, and :func:`dask_logging` sends this process's
Dask records and warnings to one log file. Imports ``distributed`` only when a function is
called (optional dependency).
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["DASK_LOGGERS", "WORKER_MALLOC", "dask_logging", "dask_setup", "local_client"]

DASK_LOGGERS = ("distributed", "tornado")
"""The loggers Dask writes to (``tornado``: its network layer)."""

WORKER_MALLOC = {"MALLOC_TRIM_THRESHOLD_": 128 * 2**20, "MALLOC_MMAP_THRESHOLD_": 32 * 2**20}
"""glibc's allocator settings of the workers (set before they start).

Temporaries up to 32 MiB are reused from the heap and up to 128 MiB of freed heap is kept per
worker, instead of Dask's default (a fresh kernel-zeroed ``mmap`` for every temporary above
128 KiB; ``benchmarks/scale_retrain.py``).
"""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s%(worker_suffix)s: %(message)s"


class _Format(logging.Formatter):
    """``LOG_FORMAT``; records forwarded from a worker name it (``[worker tcp://...]``)."""

    def format(self, record: logging.LogRecord) -> str:  # noqa: D102
        worker = getattr(record, "worker", None)
        record.worker_suffix = f" [worker {worker}]" if worker else ""
        return super().format(record)


class _FileLog(logging.Handler):
    """Appends formatted records to a file.

    Not a ``logging.StreamHandler``, whose level a ``LocalCluster``'s ``silence_logs`` lowers
    while it runs: this file keeps Dask's INFO lines.
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.file = path.open("a", encoding="utf-8")

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102
        try:
            self.file.write(self.format(record) + "\n")
            self.file.flush()
        except Exception:  # noqa: BLE001 - as logging's own handlers: report, never raise
            self.handleError(record)

    def close(self) -> None:  # noqa: D102
        self.file.close()
        super().close()


def dask_setup(worker: Any) -> None:
    """Preload hook of the workers of :func:`local_client` (Dask calls it at worker start).

    The worker's ``distributed`` loggers lose their stderr handler (``Client.forward_logging``
    sends their records to the client instead) and its warnings become
    ``distributed.worker.warnings`` records, so nothing it reports reaches the terminal.
    """
    for name in DASK_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            if type(handler) is logging.StreamHandler:  # distributed's stderr handler
                logger.removeHandler(handler)
        logger.addHandler(logging.NullHandler())  # no "last resort" printing either
        logger.propagate = False
    records = logging.getLogger("distributed.worker.warnings")

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        records.warning("%s:%s: %s: %s", filename, lineno, category.__name__, message)

    warnings.showwarning = show


def local_client(
    *,
    n_workers: int,
    threads_per_worker: int,
    memory_limit: str | float,
    env: dict[str, str] | None = None,
) -> Any:
    """A ``distributed.Client`` of a new ``LocalCluster`` whose workers log to the client.

    Parameters
    ----------
    n_workers, threads_per_worker : int
        Worker processes and threads each.
    memory_limit : str or float
        Per worker (e.g. ``"4GiB"``).
    env : dict or None, default=None
        Environment variables of the workers.

    Returns
    -------
    distributed.Client
        Closing it closes the cluster. The workers run :func:`dask_setup` at start (also after
        ``Client.restart``) and forward their ``distributed`` records at WARNING and above to
        this process's loggers of the same name; :data:`WORKER_MALLOC` sets their allocator.
    """
    import dask
    from distributed import Client

    spawn = {f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()}
    with dask.config.set(spawn):  # read by each nanny when it starts (restarts keep them)
        client = Client(
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            processes=True,
            memory_limit=memory_limit,
            dashboard_address=None,
            silence_logs=logging.WARNING,  # the workers' level from their start (Dask's default)
            preload=[__name__],
            env=dict(env or {}),
        )
    client.forward_logging("distributed")
    return client


@contextlib.contextmanager
def dask_logging(log_file: str | Path) -> Iterator[Path]:
    """While the block runs, Dask's log lines and warnings in this process go to ``log_file``.

    The :data:`DASK_LOGGERS` get ``log_file`` as their only handler and stop propagating (to
    the terminal's handlers); warnings raised by ``distributed`` or ``dask`` code are shown
    (each time, whatever the filters said) as ``distributed.warnings`` records in the file.
    Everything is restored at the end. Other warnings and loggers are not touched.

    Parameters
    ----------
    log_file : str or Path
        Appended to (created when missing).

    Yields
    ------
    Path
        ``log_file``.
    """
    import dask
    import distributed

    path = Path(log_file)
    handler = _FileLog(path)
    handler.setFormatter(_Format(LOG_FORMAT))
    records = logging.getLogger("distributed.warnings")
    packages = tuple(str(Path(m.__file__).parent) for m in (dask, distributed))
    saved = []
    for name in DASK_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.handlers[:], logger.propagate))
        logger.handlers = [handler]
        logger.propagate = False
    try:
        with warnings.catch_warnings():
            previous = warnings.showwarning

            def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
                if str(filename).startswith(packages):
                    records.warning("%s: %s", category.__name__, message)
                else:
                    previous(message, category, filename, lineno, file, line)

            warnings.filterwarnings("always", module=r"(distributed|dask)(\.|$)")
            warnings.showwarning = show
            yield path
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers = handlers
            logger.propagate = propagate
        handler.close()
