"""The terminal of the commands that run the ``retrain`` flow (``retrain``, ``demo``).

One line per finished stage, libraries silenced on stderr (Prefect, MLflow, GX, alembic), the
temporary Prefect server started in its own session so that Ctrl-C reaches only the CLI, and
Ctrl-C turned into a clean exit 130 (a second Ctrl-C exits at once).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

from flows.redact import redact
from flows.tasks import PROGRESS

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNKNOWN",
    "StageProgress",
    "drain_prefect",
    "exit_now",
    "fail",
    "interruptible",
    "quiet",
]

EXIT_OK, EXIT_FAILED, EXIT_CONFIG, EXIT_INTERRUPTED = 0, 1, 2, 130
# a run that failed once promote-policy had started, with the registry unreadable (server down):
# whether the champion moved is unknown; the last line says how to check the alias
EXIT_UNKNOWN = 3

# Quiet, offline defaults for a direct `poem-pipeline retrain|demo` (.ci/env.sh sets the same).
_QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_LEVEL": "ERROR",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}
_NOISY = (
    "mlflow",
    "great_expectations",
    "alembic",
    "py.warnings",
    "prefect",
    "httpx",
    "uvicorn",
    "urllib3",  # "Retrying (Retry(total=1, …))": MLflow's HTTP client, a server that is down
)


def fail(message: str, code: int) -> int:
    """Print ``error: <message>`` (passwords redacted) on stderr; return the exit ``code``."""
    print(f"error: {redact(message)}", file=sys.stderr)
    return code


def quiet(*, libraries: bool = True) -> None:
    """Set the quiet environment defaults; silence the libraries' loggers below ERROR.

    Call it again after importing Prefect or GX (both configure logging at import). With
    ``libraries`` the Prefect loggers are raised to CRITICAL (the CLI reports failures itself).
    """
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    warnings.simplefilter("ignore")
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] in _NOISY]
    for name in (*_NOISY, *names):
        level = logging.CRITICAL if libraries and name.startswith("prefect") else logging.ERROR
        logging.getLogger(name).setLevel(level)
    if libraries and os.environ.get("PREFECT_API_URL"):
        run_logs_to_api_only()


RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")  # get_run_logger()'s


def run_logs_to_api_only() -> None:
    """Send the runs' INFO lines to the Prefect API only: its flow-run pages show them.

    For a server that outlives the command (an exported ``PREFECT_API_URL``); the terminal
    keeps its one line per stage (the loggers' handler is Prefect's API handler; they no longer
    propagate to the console).
    """
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        logger.propagate = False


class StageProgress(logging.Handler):
    """Prints one line per finished flow stage, with the time since :meth:`restart`."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.start = time.perf_counter()

    def restart(self) -> None:
        """Count from now (the next run)."""
        self.start = time.perf_counter()

    def emit(self, record: logging.LogRecord) -> None:  # noqa: D102
        print(f"    {time.perf_counter() - self.start:6.1f}s  {record.getMessage()}", flush=True)

    @contextlib.contextmanager
    def attached(self) -> Iterator[StageProgress]:
        """Receive the ``flows.progress`` records while the block runs."""
        PROGRESS.addHandler(self)
        PROGRESS.setLevel(logging.INFO)
        PROGRESS.propagate = False
        try:
            yield self
        finally:
            PROGRESS.removeHandler(self)


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """First Ctrl-C: silence the libraries and raise ``KeyboardInterrupt``; second: exit 130."""
    interrupted = False

    def handler(signum: int, frame: Any) -> None:
        nonlocal interrupted
        if interrupted:
            os._exit(EXIT_INTERRUPTED)
        interrupted = True
        logging.disable(logging.CRITICAL)  # no "Crashed"/websocket noise while unwinding
        print("\ninterrupted: stopping (Ctrl-C again to exit at once)", file=sys.stderr)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        logging.disable(logging.NOTSET)


def drain_prefect(timeout: float = 5.0) -> None:
    """Send Prefect's queued logs and events now, while its API server still runs.

    Otherwise they are sent at exit, after the temporary server stopped, and the command's
    stderr ends with ``--- Error logging to API --- All connection attempts failed``.
    """
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        with contextlib.suppress(Exception):  # best effort: the run's outcome is decided
            worker.drain_all(timeout=timeout)


def exit_now(code: int) -> None:
    """Exit at once with ``code``: stop Prefect's temporary server, flush, ``os._exit``.

    For after Ctrl-C: the run is already marked KILLED, the search's threads are not waited for.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if "prefect.server.api.server" in sys.modules:
        from prefect.server.api.server import SubprocessASGIServer

        for server in list(SubprocessASGIServer._instances.values()):
            server.stop()
    os._exit(code)
