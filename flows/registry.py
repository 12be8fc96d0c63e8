"""MLflow Model Registry protocol (DESIGN §6): versions, tags and aliases.

Every trained challenger becomes a version of ``tracking.registered_model`` with its tags
(:func:`version_tags`) and the ``challenger`` alias; the registered artifact is decided by
:func:`log_policy_model` alone. ``champion`` moves only in :func:`promote` (the flow's last
step) and :func:`rollback`, both under :func:`flows.registry_lock.registry_lock` (held in the
registry's own database, so across machines sharing a tracking server).

:func:`promote` is a compare-and-set: it moves ``champion`` only if it is still the version
recorded in ``gated_against`` (else ``promotion=superseded`` and :class:`PromotionConflict`), so
each champion was gated against the one it replaced. Its steps: tag ``replaced_champion``; move
``champion`` (the commit point); move ``previous-champion`` (never equal to ``champion``); tag
``promotion=done``. :func:`repair_promotions`, at the start of every run, completes a killed
promotion after the commit point and tags it ``promotion=interrupted`` before it. A version
the gate rejected is never promoted, and :func:`rollback` refuses it unless forced.

A model that had a champion which no longer resolves (a deleted version) is never gated against
the logging policy by accident (:func:`resolve_champion`, and :func:`promote` once more), only
with ``tracking.start_over_from_logger``; :func:`rollback` verifies its target's files and code
(:func:`flows.integrity.verify_model_version`) before the alias moves.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import LoggedModelOutput
from mlflow.exceptions import MlflowException

import deploy.pyfunc as serving
from flows.config import TrackingConfig
from flows.integrity import (
    CODE_DIGEST_TAG,
    CODE_PARTS_TAG,
    MODEL_LOCATION_TAG,
    POLICY_DIGEST_TAG,
    POLICY_URI_TAG,
    check_model_files,
    model_code_digest,
    model_code_parts,
    verify_model_version,
)
from flows.registry_lock import registry_lock
from flows.tracking import redact, tracking_uri_scope
from poem.io.artifact import ArtifactError, artifact_digest, load_policy, save_policy

__all__ = [
    "ChampionMissingError",
    "LoggedPolicy",
    "PromotionConflict",
    "PromotionRefused",
    "RollbackError",
    "RollbackResult",
    "alias_version",
    "champion_history",
    "check_champion_compatible",
    "resolve_champion",
    "ensure_registered_model",
    "repair_promotions",
    "load_version_policy",
    "version_tags",
    "FEEDBACK_TAG",
    "log_policy_model",
    "promote",
    "register_version",
    "rollback",
]

REPLACED_TAG = "replaced_champion"
GATED_AGAINST_TAG = "gated_against"
PROMOTION_TAG = "promotion"
DECISION_TAG = "gate_decision"
LOGGING_POLICY = "logging-policy"
LAST_CHAMPION_TAG = "last_champion"  # registered-model tag: the champion promote/rollback set
START_OVER_TAG = "started_over_from_logger"  # version tag: why it was gated against the logger
FEEDBACK_TAG, REWARD, LOSS = "feedback", "reward", "loss"  # version tag: what the log gave


class ChampionMissingError(RuntimeError):
    """The registered model had a champion, but ``champion`` resolves to no version now."""


class RollbackError(RuntimeError):
    """There is no champion, or no earlier champion to return to, or the target is refused."""


class PromotionConflict(RuntimeError):
    """The champion moved after the challenger was gated against it; nothing was promoted."""


class PromotionRefused(RuntimeError):
    """The version was rejected by the gate and cannot become champion."""


class IncompatibleChampionError(ValueError):
    """The champion's policy cannot score this log (other family or feature count)."""


@dataclass(frozen=True)
class RollbackResult:
    """Outcome of :func:`rollback`: the version demoted, the new champion, and the direction."""

    demoted: str
    champion: str
    direction: str  # "back" (to an older version) or "forward"


@dataclass(frozen=True)
class LoggedPolicy:
    """Where a logged policy model lives, and the tags its registered version gets.

    ``tags``: the policy's family and sizes, and the digests of the policy folder and of the
    model code MLflow imports at load.
    """

    model_uri: str
    model_id: str | None
    policy_uri: str
    tags: dict[str, str] = field(default_factory=dict)


def log_policy_model(
    client: MlflowClient, tracking: TrackingConfig, experiment_id: str, run_id: str, policy: Any
) -> LoggedPolicy:
    """Log ``policy`` as the serving pyfunc model of :mod:`deploy.pyfunc`, linked to ``run_id``.

    The policy folder (``policy.npz`` + ``policy.json``) sits under ``artifacts/policy``.

    Parameters
    ----------
    client : MlflowClient
    tracking : TrackingConfig
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
    model = client.create_logged_model(experiment_id, name="policy", source_run_id=run_id)
    # log_model resolves its store from the global URI: scoped, so it does not leak
    with (
        tracking_uri_scope(tracking.uri),
        tempfile.TemporaryDirectory(prefix="poem-policy-") as tmp,
    ):
        folder = Path(tmp) / serving.ARTIFACT_KEY
        save_policy(policy, folder)
        info = serving.log_policy_model(folder, "policy", model_id=model.model_id)
        logged = mlflow.artifacts.download_artifacts(
            artifact_uri=model.artifact_location, dst_path=f"{tmp}/model"
        )
        tags = {
            POLICY_DIGEST_TAG: artifact_digest(folder),
            CODE_DIGEST_TAG: model_code_digest(logged),
            CODE_PARTS_TAG: json.dumps(model_code_parts(logged), sort_keys=True),
            MODEL_LOCATION_TAG: model.artifact_location,
            "policy_family": policy.family.name,
            "n_features": str(policy.family.n_features),
            "n_actions": str(policy.family.n_actions),
        }
    client.log_outputs(run_id, [LoggedModelOutput(model.model_id, step=0)])  # run's models tab
    policy_uri = f"{model.artifact_location}/artifacts/{serving.ARTIFACT_KEY}"
    return LoggedPolicy(info.model_uri, model.model_id, policy_uri, tags)


def version_tags(
    comparison: Any,
    *,
    data_fingerprint: str,
    flow_run_id: str,
    n_rows: int,
    champion_version: str | None = None,
    rewards: bool = False,
) -> dict[str, Any]:
    """Tags of a new version: data fingerprint, flow run, gate decision, reasons and estimates.

    ``feedback`` says what the log gave: ``loss``, or ``reward`` (``rewards=True``: the risks
    in the tags are −reward, DESIGN §3; the version's description shows rewards).

    The gate's verdict goes in ``gate_decision``; ``gated_against`` names the champion it was
    compared with (``champion_version``, or ``logging-policy``); a passed gate also gets
    ``promotion=pending`` until :func:`promote` has moved the alias.
    """
    tags: dict[str, Any] = {
        GATED_AGAINST_TAG: champion_version or LOGGING_POLICY,
        "data_fingerprint": data_fingerprint,
        "prefect_flow_run_id": flow_run_id,
        "n_rows": n_rows,
        "gate_decision": comparison.decision,
        "gate_reasons": " | ".join(comparison.reasons),
        "gate_upper_bound": f"{comparison.upper_bound:.6g}",
        FEEDBACK_TAG: REWARD if rewards else LOSS,
    }
    for role in ("challenger", "champion", "difference"):
        est = getattr(comparison, role)
        tags[f"{role}_risk"] = (
            f"{est.value:.6g} [{est.lower:.6g}, {est.upper:.6g}] ({est.estimator})"
        )
    if comparison.promote:
        tags[PROMOTION_TAG] = "pending"
    return tags


def ensure_registered_model(client: MlflowClient, name: str) -> None:
    """Create the registered model ``name`` unless it exists (or is created concurrently)."""
    try:
        client.get_registered_model(name)
    except MlflowException:
        try:
            client.create_registered_model(name)
        except MlflowException:  # created concurrently
            client.get_registered_model(name)


def register_version(
    client: MlflowClient,
    tracking: TrackingConfig,
    logged: LoggedPolicy,
    run_id: str,
    tags: dict[str, Any],
) -> str:
    """Create a model version with ``tags`` and point the ``challenger`` alias at it.

    The version also gets ``logged.tags`` and the URI of its policy folder.
    """
    ensure_registered_model(client, tracking.registered_model)
    all_tags = {
        **{k: redact(v)[:5000] for k, v in tags.items()},
        **{k: redact(v) for k, v in logged.tags.items()},
        POLICY_URI_TAG: logged.policy_uri,
    }
    with tracking_uri_scope(tracking.uri):  # the registry resolves models:/m-… through it
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


def load_version_policy(
    client: MlflowClient, tracking: TrackingConfig, version: str, role: str = "champion"
) -> Any:
    """Download a version's model, verify it, and load its policy.

    A version with a code digest (``model_code_sha256``) is verified whole first
    (:func:`flows.integrity.verify_model_version`: files present, code and policy digests);
    an older one only by its policy digest.

    Raises
    ------
    poem.io.artifact.ArtifactError
        One line naming the version and the file missing or modified since registration.
    """
    mv = client.get_model_version(tracking.registered_model, version)
    with tempfile.TemporaryDirectory(prefix="poem-champion-") as tmp:
        if CODE_DIGEST_TAG in mv.tags:
            local = verify_model_version(client, tracking, version, tmp, role)
            return load_policy(
                local / "artifacts" / serving.ARTIFACT_KEY,
                expected_digest=mv.tags[POLICY_DIGEST_TAG],
            )
        check_model_files(client, tracking, version, role)  # gone: one line
        with tracking_uri_scope(tracking.uri):  # models:/ URIs resolve through the global URI
            local = mlflow.artifacts.download_artifacts(
                artifact_uri=mv.tags[POLICY_URI_TAG], dst_path=tmp
            )
        return load_policy(local, expected_digest=mv.tags.get(POLICY_DIGEST_TAG))


def champion_history(client: MlflowClient, tracking: TrackingConfig) -> str | None:
    """Why the registered model is known to have had a champion (None: it never had one).

    The evidence, first found: a ``champion`` alias naming a version that does not exist; the
    registered-model tag ``last_champion`` (set by every promotion and rollback); the
    ``previous-champion`` alias; a version tagged ``promotion=done``.
    """
    name = tracking.registered_model
    try:
        model = client.get_registered_model(name)
    except MlflowException:
        return None  # no registered model: nothing was ever promoted
    dangling = (model.aliases or {}).get(tracking.champion_alias)
    if dangling is not None:
        alias = tracking.champion_alias
        return f"the {alias!r} alias points at version {dangling}, which does not exist"
    last = (model.tags or {}).get(LAST_CHAMPION_TAG)
    if last is not None:
        return f"version {last} was the last {tracking.champion_alias!r}"
    previous = alias_version(client, tracking, tracking.previous_champion_alias)
    if previous is not None:
        return f"{tracking.previous_champion_alias!r} is version {previous}"
    try:
        done = client.search_model_versions(
            f"name='{name}' and tag.{PROMOTION_TAG}='done'", max_results=1
        )
    except MlflowException:
        done = []
    if done:
        return f"version {done[0].version} was promoted"
    return None


def resolve_champion(client: MlflowClient, tracking: TrackingConfig) -> str | None:
    """The champion version; None when the gate is to compare with the logging policy.

    That is when the registered model never had a champion, or when it had one and
    ``tracking.start_over_from_logger`` is set (``retrain --start-over-from-logger``).

    Raises
    ------
    ChampionMissingError
        When the model had a champion and ``champion`` resolves to no version (deleted
        version, dangling or deleted alias): one line, what happened and what to do.
    """
    version = alias_version(client, tracking, tracking.champion_alias)
    if version is not None or tracking.start_over_from_logger:
        return version
    history = champion_history(client, tracking)
    if history is None:
        return None
    raise ChampionMissingError(
        f"{tracking.registered_model!r} had a {tracking.champion_alias!r} ({history}) but "
        "none resolves now; refusing to gate against the logging policy. Restore one "
        "(poem-pipeline rollback --to N), or retrain --start-over-from-logger (recorded on "
        "the new version)"
    )


def check_champion_compatible(
    client: MlflowClient, tracking: TrackingConfig, family: str, n_features: int
) -> str | None:
    """Check that the champion can score a log of ``family`` with ``n_features`` features.

    Reads the champion version's tags (``policy_family``, ``n_features``), else its policy.
    Returns the champion version (None: no champion yet, :func:`resolve_champion`).

    Raises
    ------
    ChampionMissingError
        When the model had a champion that no longer resolves (:func:`resolve_champion`).
    IncompatibleChampionError
        Naming both families / feature counts and what to do.
    """
    version = resolve_champion(client, tracking)
    if version is None:
        return None
    tags = client.get_model_version(tracking.registered_model, version).tags
    if "policy_family" in tags and "n_features" in tags:
        champ_family, champ_features = tags["policy_family"], int(tags["n_features"])
    else:
        policy = load_version_policy(client, tracking, version)
        champ_family, champ_features = policy.family.name, policy.family.n_features
    if (champ_family, champ_features) != (family, int(n_features)):
        raise IncompatibleChampionError(
            f"the {tracking.champion_alias!r} of {tracking.registered_model!r} (version "
            f"{version}) is a {champ_family} policy over {champ_features} features, but the "
            f"log is {family} with {n_features} features; the gate cannot compare them. Use "
            "another tracking.registered_model for this log, or fix data.family / the feature "
            "columns"
        )
    return version


def _set_alias(client: MlflowClient, tracking: TrackingConfig, alias: str, version: str | None):
    """Point ``alias`` at ``version``, or delete it when ``version`` is None."""
    name = tracking.registered_model
    if version is not None:
        client.set_registered_model_alias(name, alias, version)
    elif alias_version(client, tracking, alias) is not None:
        client.delete_registered_model_alias(name, alias)


def _finish_promotion(
    client: MlflowClient, tracking: TrackingConfig, version: str, replaced: str | None
) -> None:
    """The steps after the commit point: ``previous-champion`` and ``promotion=done``."""
    previous = replaced if replaced != version else None
    _set_alias(client, tracking, tracking.previous_champion_alias, previous)
    client.set_registered_model_tag(tracking.registered_model, LAST_CHAMPION_TAG, version)
    client.set_model_version_tag(tracking.registered_model, version, PROMOTION_TAG, "done")


def promote(
    client: MlflowClient,
    tracking: TrackingConfig,
    version: str,
    *,
    force: bool = False,
    lock_timeout: float = 300.0,
) -> str | None:
    """Make ``version`` the champion (compare-and-set under the registry lock); return the replaced.

    Parameters
    ----------
    client : MlflowClient
    tracking : TrackingConfig
    version : str
        Version to promote.
    force : bool, default=False
        Promote even a version the gate rejected, or one gated against another champion
        (``rollback --force``).
    lock_timeout : float, default=300.0
        Seconds to wait for the registry lock held by another process.

    Returns
    -------
    str or None
        The replaced champion (None: there was none, or ``version`` already was champion).

    Raises
    ------
    PromotionRefused
        If the gate rejected ``version`` (tag ``gate_decision=rejected``).
    PromotionConflict
        If the champion is no longer the one ``version`` was gated against (tag
        ``gated_against``), or ``version`` was gated against the logging policy although the
        model had a champion (:func:`champion_history`) and it did not start over from the
        logger (tag ``started_over_from_logger``); the version is tagged
        ``promotion=superseded``.
    flows.registry_lock.RegistryLockTimeout
        If another process held the registry lock for more than ``lock_timeout`` seconds.
    """
    name = tracking.registered_model
    with registry_lock(client, tracking.uri, name, timeout=lock_timeout):
        tags = client.get_model_version(name, version).tags
        if tags.get(DECISION_TAG) == "rejected" and not force:
            raise PromotionRefused(
                f"version {version} of {name!r} was rejected by the gate "
                f"({tags.get('gate_reasons', 'no reasons recorded')}); it cannot become "
                f"{tracking.champion_alias!r} (use rollback --force to override)"
            )
        current = alias_version(client, tracking, tracking.champion_alias)
        if current == version:
            if tags.get(PROMOTION_TAG) == "pending":
                _finish_promotion(client, tracking, version, tags.get(REPLACED_TAG))
            return None
        expected = tags.get(GATED_AGAINST_TAG)
        if expected is not None and expected != (current or LOGGING_POLICY) and not force:
            client.set_model_version_tag(name, version, PROMOTION_TAG, "superseded")
            raise PromotionConflict(
                f"version {version} of {name!r} was gated against {expected} but the "
                f"{tracking.champion_alias!r} is now {current or LOGGING_POLICY}; it was not "
                "promoted (tag promotion=superseded). Run retrain again to gate against the "
                "new champion"
            )
        history = None
        if current is None and expected == LOGGING_POLICY:  # a model that had a champion?
            history = champion_history(client, tracking)
        if history is not None and START_OVER_TAG not in tags and not force:
            client.set_model_version_tag(name, version, PROMOTION_TAG, "superseded")
            raise PromotionConflict(
                f"version {version} of {name!r} was gated against the logging policy, but "
                f"{name!r} had a {tracking.champion_alias!r} ({history}); it was not promoted "
                "(tag promotion=superseded). Make a version champion again (poem-pipeline "
                "rollback --to N), or retrain with --start-over-from-logger"
            )
        if current is not None:
            client.set_model_version_tag(name, version, REPLACED_TAG, current)
        client.set_registered_model_alias(name, tracking.champion_alias, version)  # commit point
        _finish_promotion(client, tracking, version, current)
    return current


def repair_promotions(client: MlflowClient, tracking: TrackingConfig) -> list[str]:
    """Finish or close promotions a killed run left half-done; returns the repaired versions.

    A ``promotion=pending`` version that is champion gets the remaining steps; one whose run
    is no longer RUNNING gets ``promotion=interrupted``. A ``previous-champion`` equal to
    ``champion`` is removed. Call after :func:`flows.tracking.reap_stale_runs`.
    """
    name = tracking.registered_model
    repaired: list[str] = []
    with registry_lock(client, tracking.uri, name):
        try:
            pending = client.search_model_versions(
                f"name='{name}' and tag.{PROMOTION_TAG}='pending'"
            )
        except MlflowException:
            return repaired
        champion = alias_version(client, tracking, tracking.champion_alias)
        for mv in pending:
            version = str(mv.version)
            if version == champion:
                _finish_promotion(client, tracking, version, mv.tags.get(REPLACED_TAG))
            elif client.get_run(mv.run_id).info.status != "RUNNING":
                client.set_model_version_tag(name, version, PROMOTION_TAG, "interrupted")
            else:
                continue  # a concurrent run that has not promoted yet
            repaired.append(version)
        previous = alias_version(client, tracking, tracking.previous_champion_alias)
        if champion is not None and previous == champion:
            _set_alias(client, tracking, tracking.previous_champion_alias, None)
    return repaired


def rollback(
    client: MlflowClient,
    tracking: TrackingConfig,
    to_version: str | None = None,
    *,
    force: bool = False,
) -> RollbackResult:
    """Move ``champion`` to ``to_version`` (default: the previous champion), verified first.

    The target's files and code are verified (:func:`flows.integrity.verify_model_version`)
    before the alias moves. With no resolvable champion (a deleted version), ``to_version``
    makes a version champion again.

    Parameters
    ----------
    client : MlflowClient
    tracking : TrackingConfig
    to_version : str or None, default=None
        Target version; default the ``previous-champion`` alias.
    force : bool, default=False
        Allow a target the gate rejected.

    Returns
    -------
    RollbackResult
        The version demoted (``"none"`` when there was no champion), the new champion, and
        ``direction`` (``"back"`` to an older version, ``"forward"`` to a newer one).

    Raises
    ------
    RollbackError
        If there is no champion (and no ``to_version``), nothing to roll back to, the target
        does not exist, is already champion, was rejected by the gate (without ``force``), or
        its files or code differ from those registered (one line naming the version and file).
    """
    name = tracking.registered_model
    with registry_lock(client, tracking.uri, name):
        current = alias_version(client, tracking, tracking.champion_alias)
        if current is None and to_version is None:
            raise RollbackError(
                f"registered model {name!r} has no {tracking.champion_alias!r} alias to roll "
                "back; name the version to make champion with --to N"
            )
        target = to_version or alias_version(client, tracking, tracking.previous_champion_alias)
        if target is None:
            raise RollbackError(
                f"version {current} of {name!r} is the first champion; "
                "there is no previous champion to restore"
            )
        target = str(target)
        if target == current:
            raise RollbackError(f"version {target} of {name!r} is already the champion")
        try:
            tags = client.get_model_version(name, target).tags
        except MlflowException as exc:
            raise RollbackError(f"registered model {name!r} has no version {target!r}") from exc
        if tags.get(DECISION_TAG) == "rejected" and not force:
            raise RollbackError(
                f"version {target} of {name!r} was rejected by the gate "
                f"({tags.get('gate_reasons', 'no reasons recorded')}); refusing to make it "
                f"{tracking.champion_alias!r}. Pass --force to do it anyway"
            )
        try:  # files, code and policy digests (the policy's alone for an older version)
            load_version_policy(client, tracking, target, "rollback target")
        except (ArtifactError, MlflowException, OSError) as exc:
            raise RollbackError(f"{exc}; {tracking.champion_alias!r} did not move") from exc
        earlier = tags.get(REPLACED_TAG)
        previous = earlier if earlier != target else None
        if current is not None:
            client.set_model_version_tag(name, current, "rolled_back_to", target)
        client.set_registered_model_alias(name, tracking.champion_alias, target)  # commit point
        _set_alias(client, tracking, tracking.previous_champion_alias, previous)
        client.set_registered_model_tag(name, LAST_CHAMPION_TAG, target)
    if current is None:
        return RollbackResult("none", target, "back")
    direction = "back" if int(target) < int(current) else "forward"
    return RollbackResult(current, target, direction)
