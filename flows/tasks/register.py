"""Register the challenger as a model version, and promote it (the flow's last step)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.registry import log_policy_model, promote, register_version
from flows.tasks import IO_RETRIES, task_logger
from flows.tracking import TrackedRun


@task(name="register-policy", cache_policy=NO_CACHE, **IO_RETRIES)
def register_policy(policy: Any, run: TrackedRun, tags: dict[str, Any]) -> str:
    """Log the policy model, create a version with ``tags`` and move ``challenger`` onto it."""
    client = run.client()
    logged = log_policy_model(client, run.tracking, run.experiment_id, run.run_id, policy)
    version = register_version(client, run.tracking, logged, run.run_id, tags)
    task_logger().info("registered %s version %s", run.tracking.registered_model, version)
    return version


@task(name="promote-policy", cache_policy=NO_CACHE, **IO_RETRIES)
def promote_policy(version: str, run: TrackedRun) -> str | None:
    """Move ``champion`` to ``version`` (``previous-champion`` to the replaced one); returns it."""
    previous = promote(run.client(), run.tracking, version)
    task_logger().info("promoted version %s (previous champion: %s)", version, previous)
    return previous
