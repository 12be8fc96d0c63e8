"""Register the challenger as a model version, and promote it (the flow's last step)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import TrackingConfig
from flows.integrity import check_model_files
from flows.registry import (
    GATED_AGAINST_TAG,
    LOGGING_POLICY,
    START_OVER_TAG,
    champion_history,
    check_champion_compatible,
    log_policy_model,
    promote,
    register_version,
)
from flows.story import describe_registry
from flows.tasks import IO_RETRIES, body_started, stage_done, task_logger
from flows.tracking import TrackedRun, client_for


@task(name="check-champion", cache_policy=NO_CACHE, on_completion=[stage_done])
def check_champion(log: Any, tracking: TrackingConfig) -> str | None:
    """Fail before training when the champion cannot score this log or its files are gone."""
    client = client_for(tracking)
    version = check_champion_compatible(client, tracking, log.family, log.n_features)
    if version is not None:
        check_model_files(client, tracking, version)  # a deleted model folder: now, in one line
    return version


def with_action_ids(policy: Any, action_ids: Any) -> Any:
    """The policy with the log's own action ids in its metadata (``data.action_ids``).

    The served model answers with them (:mod:`deploy.pyfunc`): action k is ``action_ids[k]``.
    """
    if action_ids is None:
        return policy
    return replace(policy, metadata={**policy.metadata, "action_ids": [str(a) for a in action_ids]})


@task(name="register-policy", cache_policy=NO_CACHE, **IO_RETRIES)
def register_policy(policy: Any, run: TrackedRun, tags: dict[str, Any]) -> str:
    """Log the policy model, create a version with ``tags`` and move ``challenger`` onto it.

    A version gated against the logging policy although the model had a champion
    (``tracking.start_over_from_logger``) also gets the tag ``started_over_from_logger``.
    """
    body_started("register-policy")
    client = run.client()
    if run.tracking.start_over_from_logger and tags.get(GATED_AGAINST_TAG) == LOGGING_POLICY:
        history = champion_history(client, run.tracking)
        if history is not None:  # the model had a champion: say why it was not gated against
            tags = {**tags, START_OVER_TAG: f"tracking.start_over_from_logger: {history}"}
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
    body_started("promote-policy")  # from here the champion may move
    client = run.client()
    try:
        previous = promote(client, run.tracking, version)
    finally:  # now: which champion it replaced (or that it was superseded)
        describe_registry(client, run.tracking, version)
    task_logger().info("promoted version %s (previous champion: %s)", version, previous)
    return previous
