"""MLflow Model Registry protocol (DESIGN §6): versions, tags and aliases.

- Every trained challenger becomes a version of ``tracking.registered_model`` with tags
  (data fingerprint, flow run id, gate decision and reasons, estimator values) and the
  ``challenger`` alias.
- ``champion`` moves only in :func:`promote`, the flow's last step; the replaced champion
  gets ``previous-champion`` and the new version records it in the tag ``replaced_champion``.
- :func:`rollback` moves ``champion`` back along that chain.

The registered model is the serving pyfunc of :mod:`deploy.pyfunc` around the policy folder
(``policy.npz`` + ``policy.json`` with its SHA-256, :mod:`poem.io.artifact`), logged by
:func:`log_policy_model` — the one function that decides the registered artifact.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from flows.config import TrackingConfig
from poem.io.artifact import load_policy

__all__ = [
    "LoggedPolicy",
    "RollbackError",
    "alias_version",
    "load_version_policy",
    "version_tags",
    "log_policy_model",
    "promote",
    "register_version",
    "rollback",
]

POLICY_URI_TAG = "policy_uri"
REPLACED_TAG = "replaced_champion"


class RollbackError(RuntimeError):
    """There is no champion, or no earlier champion to return to."""


@dataclass(frozen=True)
class LoggedPolicy:
    """Where a logged policy model lives: registry source, logged-model id, policy folder URI."""

    model_uri: str
    model_id: str | None
    policy_uri: str


def log_policy_model(
    client: MlflowClient, tracking: TrackingConfig, experiment_id: str, run_id: str, policy: Any
) -> LoggedPolicy:
    """Log ``policy`` as the serving pyfunc model of :mod:`deploy.pyfunc`, linked to ``run_id``.

    This is the one place that decides the registered artifact; the policy folder
    (``policy.npz`` + ``policy.json``) sits under the model's ``artifacts/policy``.

    Parameters
    ----------
    client : MlflowClient
        Client of the tracking store.
    tracking : TrackingConfig
        Tracking settings (``uri``).
    experiment_id : str
        Experiment of the parent run.
    run_id : str
        The flow's parent run.
    policy : StochasticPolicy
        The trained policy, with its serving temperature and exploration floor.

    Returns
    -------
    LoggedPolicy
        The model URI to register and the URI of the policy folder inside it.
    """
    from deploy.pyfunc import ARTIFACT_KEY
    from deploy.pyfunc import log_policy_model as log_serving_model

    mlflow.set_tracking_uri(tracking.uri)  # log_model resolves its store from the global URI
    model = client.create_logged_model(experiment_id, name="policy", source_run_id=run_id)
    info = log_serving_model(policy, "policy", model_id=model.model_id)
    return LoggedPolicy(
        info.model_uri, model.model_id, f"{model.artifact_location}/artifacts/{ARTIFACT_KEY}"
    )


def version_tags(
    comparison: Any, *, data_fingerprint: str, flow_run_id: str, n_rows: int
) -> dict[str, Any]:
    """Tags of a new version: data fingerprint, flow run, gate decision, reasons and estimates."""
    tags: dict[str, Any] = {
        "data_fingerprint": data_fingerprint,
        "prefect_flow_run_id": flow_run_id,
        "n_rows": n_rows,
        "gate_decision": comparison.decision,
        "gate_reasons": " | ".join(comparison.reasons),
        "gate_upper_bound": f"{comparison.upper_bound:.6g}",
    }
    for role in ("challenger", "champion", "difference"):
        est = getattr(comparison, role)
        tags[f"{role}_risk"] = (
            f"{est.value:.6g} [{est.lower:.6g}, {est.upper:.6g}] ({est.estimator})"
        )
    return tags


def register_version(
    client: MlflowClient,
    tracking: TrackingConfig,
    logged: LoggedPolicy,
    run_id: str,
    tags: dict[str, Any],
) -> str:
    """Create a model version with ``tags`` and point the ``challenger`` alias at it."""
    try:
        client.get_registered_model(tracking.registered_model)
    except MlflowException:
        client.create_registered_model(tracking.registered_model)
    all_tags = {**{k: str(v)[:5000] for k, v in tags.items()}, POLICY_URI_TAG: logged.policy_uri}
    version = client.create_model_version(
        tracking.registered_model,
        logged.model_uri,
        run_id=run_id,
        tags=all_tags,
        model_id=logged.model_id,
    )
    client.set_registered_model_alias(
        tracking.registered_model, tracking.challenger_alias, version.version
    )
    return str(version.version)


def alias_version(client: MlflowClient, tracking: TrackingConfig, alias: str) -> str | None:
    """Version number the alias points at, or None when the alias (or the model) is absent."""
    try:
        return str(client.get_model_version_by_alias(tracking.registered_model, alias).version)
    except MlflowException:
        return None


def load_version_policy(client: MlflowClient, tracking: TrackingConfig, version: str) -> Any:
    """Download a version's policy folder and load it (checksum verified)."""
    mv = client.get_model_version(tracking.registered_model, version)
    uri = mv.tags[POLICY_URI_TAG]
    with tempfile.TemporaryDirectory(prefix="poem-champion-") as tmp:
        local = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=tmp)
        return load_policy(local)


def promote(client: MlflowClient, tracking: TrackingConfig, version: str) -> str | None:
    """Make ``version`` the champion; returns the replaced champion (or None).

    The ``champion`` alias is set last, so an interruption before it leaves production as it was.
    """
    name = tracking.registered_model
    previous = alias_version(client, tracking, tracking.champion_alias)
    if previous == version:
        return None
    if previous is not None:
        client.set_model_version_tag(name, version, REPLACED_TAG, previous)
        client.set_registered_model_alias(name, tracking.previous_champion_alias, previous)
    client.set_registered_model_alias(name, tracking.champion_alias, version)
    return previous


def rollback(
    client: MlflowClient, tracking: TrackingConfig, to_version: str | None = None
) -> tuple[str, str]:
    """Move ``champion`` back to ``to_version`` (default: the previous champion).

    Returns
    -------
    tuple of str
        (version demoted, version now champion).

    Raises
    ------
    RollbackError
        If there is no champion or nothing to roll back to.
    """
    name = tracking.registered_model
    current = alias_version(client, tracking, tracking.champion_alias)
    if current is None:
        raise RollbackError(
            f"registered model {name!r} has no {tracking.champion_alias!r} alias to roll back"
        )
    target = to_version or alias_version(client, tracking, tracking.previous_champion_alias)
    if target is None:
        raise RollbackError(
            f"version {current} of {name!r} is the first champion; "
            "there is no previous champion to restore"
        )
    if target == current:
        raise RollbackError(f"version {target} of {name!r} is already the champion")
    earlier = client.get_model_version(name, target).tags.get(REPLACED_TAG)
    client.set_model_version_tag(name, current, "rolled_back_to", target)
    if earlier is not None and earlier != current:
        client.set_registered_model_alias(name, tracking.previous_champion_alias, earlier)
    elif alias_version(client, tracking, tracking.previous_champion_alias) is not None:
        client.delete_registered_model_alias(name, tracking.previous_champion_alias)
    client.set_registered_model_alias(name, tracking.champion_alias, target)
    return current, target
