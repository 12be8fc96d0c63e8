"""Thin Prefect tasks of the ``retrain`` flow, one module per stage (STYLE §8).

Each task unpacks its config section, calls one ``poem`` / ``data_checks`` function, logs to
MLflow or emits a Prefect artifact, and returns. Only I/O tasks retry (:data:`IO_RETRIES`),
and only on transient I/O errors; only the search trials are cached.
"""

from __future__ import annotations

import logging
import re
import warnings
from contextvars import ContextVar
from typing import Any

from flows.store_faults import is_permanent_store_error

__all__ = [
    "IO_RETRIES",
    "PROGRESS",
    "RETRAIN_STATE",
    "body_started",
    "current_progress",
    "is_transient_io_error",
    "reset_progress",
    "set_progress",
    "stage_done",
    "task_logger",
]

PROGRESS = logging.getLogger("flows.progress")  # one INFO record per finished stage (CLI progress)

# A fit's non-convergence is recorded (the trials' ``converged``, the refit's
# ``train_converged``); the learners' ConvergenceWarning is not printed in every run's output.
# Process-wide: the search's per-trial ``warnings.catch_warnings`` is not thread-safe
# (concurrent trials restore each other's filters, and the warning got through).
warnings.filterwarnings("ignore", message=r"\w+(\(.*\))? did not converge", module=r"poem\.")


# the running retrain's flows.retrain.RetrainProgress (None outside a command's retrain)
RETRAIN_STATE: ContextVar[Any] = ContextVar("retrain_state", default=None)


def current_progress() -> Any:
    """The running retrain's progress record, or None.

    The flow reaches the ContextVar through this function, never directly: Prefect and Dask
    cloudpickle the flow's function by value, and a ContextVar does not pickle.
    """
    return RETRAIN_STATE.get()


def set_progress(progress: Any) -> Any:
    """Make ``progress`` the running retrain's record; returns the token to reset it."""
    return RETRAIN_STATE.set(progress)


def reset_progress(token: Any) -> None:
    """Undo :func:`set_progress`."""
    RETRAIN_STATE.reset(token)


def body_started(name: str) -> None:
    """Record in the running retrain's progress that task ``name``'s body started.

    Prefect can fail before a task's body runs (its API down): then nothing the body would
    have done happened (``promote-policy``: the champion did not move).
    """
    state = RETRAIN_STATE.get()
    if state is not None:
        state.started.add(name)


def task_logger() -> Any:
    """Return the Prefect run logger, or a plain logger when a task is called via ``.fn()``."""
    from prefect import get_run_logger
    from prefect.exceptions import MissingContextError

    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("flows.tasks")


def stage_done(task: Any, task_run: Any, state: Any) -> None:
    """Prefect ``on_completion`` hook: record that a stage finished (or was cached)."""
    suffix = " (cached)" if getattr(state, "name", "") == "Cached" else ""
    PROGRESS.info("%s%s", task.name, suffix)


# urllib3's words when a server answered 5xx to every HTTP retry (MLflow's "failed with exception")
SERVER_OUTAGE = re.compile(r"too many 5\d\d error responses")

_PERMANENT_MLFLOW_ERRORS = {
    "RESOURCE_DOES_NOT_EXIST",
    "RESOURCE_ALREADY_EXISTS",
    "INVALID_PARAMETER_VALUE",
    "BAD_REQUEST",
}


def is_transient_io_error(task: Any, task_run: Any, state: Any) -> bool:
    """Retry OS and MLflow store errors, never data or logic errors (``retry_condition_fn``).

    Missing files, permissions, a read-only or full store are permanent
    (:func:`flows.store_faults.is_permanent_store_error`).
    """
    from mlflow.exceptions import MlflowException

    exc = getattr(state, "data", None)
    if isinstance(
        exc, FileNotFoundError | IsADirectoryError | NotADirectoryError | PermissionError
    ):
        return False
    if isinstance(exc, BaseException) and is_permanent_store_error(exc):
        return False  # full disk (ENOSPC, sqlite's "database or disk is full"), read-only
    if isinstance(exc, MlflowException):
        if "failed with exception" in exc.message and exc.message.startswith("API request to"):
            # MLflow's HTTP client already retried (flows.tracking.HTTP_DEFAULTS); a server that
            # answered 5xx to each is up with its database down (a PostgreSQL restart): again
            return SERVER_OUTAGE.search(exc.message) is not None
        return exc.error_code not in _PERMANENT_MLFLOW_ERRORS
    return isinstance(exc, OSError)


IO_RETRIES: dict[str, Any] = {
    "on_completion": [stage_done],
    "retries": 3,
    "retry_delay_seconds": [5, 30, 120],
    "retry_condition_fn": is_transient_io_error,
}
