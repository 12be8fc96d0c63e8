"""Register the challenger as a model version, and promote it (the flow's last step)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import TrackingConfig
from flows.integrity import check_model_files
from flows.registry import check_champion_compatible, log_policy_model, promote, register_version
from flows.story import describe_registry
from flows.tasks import IO_RETRIES, stage_done, task_logger
from flows.tracking import TrackedRun, client_for


@task(name="check-champion", cache_policy=NO_CACHE, on_completion=[stage_done])
def check_champion(log: Any, tracking: TrackingConfig) -> str | None:
    """Fail before training when the champion cannot score this log or its files are gone."""
    client = client_for(tracking)
    version = check_champion_compatible(client, tracking, log.family, log.n_features)
    if version is not None:
        check_model_files(client, tracking, version)  # a deleted model folder: now, in one line
    return version


@task(name="register-policy", cache_policy=NO_CACHE, **IO_RETRIES)
def register_policy(policy: Any, run: TrackedRun, tags: dict[str, Any]) -> str:
    """Log the policy model, create a version with ``tags`` and move ``challenger`` onto it."""
    client = run.client()
    logged = log_policy_model(client, run.tracking, run.experiment_id, run.run_id, policy)
    version = register_version(client, run.tracking, logged, run.run_id, tags)
    describe_registry(client, run.tracking, version)  # the version's and the model's description
    task_logger().info("registered %s version %s", run.tracking.registered_model, version)
    return version


@task(name="promote-policy", cache_policy=NO_CACHE, **IO_RETRIES)
def promote_policy(version: str, run: TrackedRun) -> str | None:
    """Move ``champion`` to ``version`` if it is still the one gated against (compare-and-set).

    Raises :class:`flows.registry.PromotionConflict` (not retried) when another run promoted
    first; ``version`` then stays registered with ``promotion=superseded``.
    """
    client = run.client()
    try:
        previous = promote(client, run.tracking, version)
    finally:  # now: which champion it replaced (or that it was superseded)
        describe_registry(client, run.tracking, version)
    task_logger().info("promoted version %s (previous champion: %s)", version, previous)
    return previous
