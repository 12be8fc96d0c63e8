"""What the registry records to check a model before it is used: digests of policy and code.

A registered version carries, as tags written by :func:`flows.registry.log_policy_model`:
``policy_sha256`` (:func:`poem.io.artifact.artifact_digest` of the policy folder),
``model_code_sha256`` (:func:`model_code_digest`: what MLflow imports when it loads the model),
``model_code_parts`` (the same per part, to name the part edited) and ``model_location`` (the
logged model's folder). The registry is outside the artifact store, so an edit of the artifacts
is caught against these tags (README, "Reliability"): :func:`verify_model_version` runs before
``rollback`` moves the alias, before the flow loads the champion, and before
``poem-pipeline serve`` serves a version.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from urllib.parse import unquote, urlparse

import mlflow
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

import deploy.pyfunc as serving
from flows.config import TrackingConfig
from flows.tracking import tracking_uri_scope
from poem.io.artifact import ArtifactError, load_policy

__all__ = [
    "CODE_DIGEST_TAG",
    "CODE_PARTS_TAG",
    "MODEL_LOCATION_TAG",
    "POLICY_DIGEST_TAG",
    "POLICY_URI_TAG",
    "MissingModelError",
    "check_model_files",
    "model_code_digest",
    "model_code_parts",
    "verify_model_version",
]

POLICY_URI_TAG = "policy_uri"
POLICY_DIGEST_TAG = "policy_sha256"
CODE_DIGEST_TAG = "model_code_sha256"
CODE_PARTS_TAG = "model_code_parts"  # JSON: MLmodel, the code file, code/ -> SHA-256 (12 hex)
MODEL_LOCATION_TAG = "model_location"


class MissingModelError(ArtifactError):
    """A registered version's model folder is gone from the artifact store."""


def check_model_files(
    client: MlflowClient, tracking: TrackingConfig, version: str, role: str = "champion"
) -> None:
    """Fail at once when a version's policy folder is missing (before any training).

    Local (``file:``) artifact stores are checked on disk, others by listing the folder.

    Raises
    ------
    MissingModelError
        One line naming the version and the missing path.
    """
    tags = client.get_model_version(tracking.registered_model, version).tags
    uri = tags.get(POLICY_URI_TAG)
    if uri is None:
        return  # registered by an older release: load_version_policy reports what it finds
    parsed = urlparse(uri)
    if parsed.scheme in ("", "file"):
        policy = Path(unquote(parsed.path))
        present = (policy / "policy.json").is_file()
        model = Path(unquote(urlparse(tags.get(MODEL_LOCATION_TAG, uri)).path))
        missing = model if not model.is_dir() else policy
    else:
        with tracking_uri_scope(tracking.uri):
            present = bool(mlflow.artifacts.list_artifacts(artifact_uri=uri))
        missing = uri
    if not present:
        raise MissingModelError(
            f"the {role} (version {version} of {tracking.registered_model!r}) has no model "
            f"files: {missing} is missing; restore it from a backup, or move "
            f"{tracking.champion_alias!r} to another version (poem-pipeline rollback --to N)"
        )


def _code_files(model_dir: Path) -> tuple[str, list[Path]]:
    """The models-from-code file's name and every file :func:`model_code_digest` covers."""
    import yaml

    try:
        mlmodel = yaml.safe_load((model_dir / "MLmodel").read_text())
        code_file = Path(str(mlmodel["flavors"]["python_function"]["model_code_path"])).name
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise ArtifactError(f"{model_dir}/MLmodel: no models-from-code file ({exc})") from exc
    files = [model_dir / "MLmodel", model_dir / code_file]
    if (model_dir / "code").is_dir():
        files += sorted(
            p
            for p in (model_dir / "code").rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
        )
    return code_file, files


def _digest(model_dir: Path, files: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        if not path.is_file():
            raise ArtifactError(f"{path}: model file missing")
        data = path.read_bytes()
        digest.update(f"{path.relative_to(model_dir).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def model_code_digest(model_dir: str | Path) -> str:
    """SHA-256 over everything MLflow imports or obeys when it loads the model folder.

    That is ``MLmodel`` (loader and code paths), the models-from-code file it names
    (``model_code_path``) and every file under ``code/`` (the shipped ``poem`` package),
    by relative name and bytes; byte-code caches are skipped.

    Raises
    ------
    poem.io.artifact.ArtifactError
        If ``MLmodel`` or the code file it names is missing.
    """
    model_dir = Path(model_dir)
    return _digest(model_dir, _code_files(model_dir)[1])


def model_code_parts(model_dir: str | Path) -> dict[str, str]:
    """:func:`model_code_digest` per part: ``MLmodel``, the code file and ``code/`` (12 hex each).

    Recorded as the version tag ``model_code_parts`` so that a mismatch names the part edited.
    """
    model_dir = Path(model_dir)
    code_file, files = _code_files(model_dir)
    parts = {"MLmodel": files[:1], code_file: files[1:2], "code/": files[2:]}
    return {name: _digest(model_dir, part)[:12] for name, part in parts.items()}


def _changed_part(local: Path, recorded: str | None) -> str:
    """Which part of the model code differs from the ``model_code_parts`` tag (JSON)."""
    import json

    try:
        expected = json.loads(recorded) if recorded else {}
        actual = model_code_parts(local)
    except (ValueError, ArtifactError):
        return "MLmodel, the models-from-code file or code/"
    changed = [name for name, digest in actual.items() if expected.get(name) != digest]
    return ", ".join(changed) or "MLmodel, the models-from-code file or code/"


def verify_model_version(
    client: MlflowClient,
    tracking: TrackingConfig,
    version: str,
    dst_path: str | Path,
    role: str = "version",
) -> Path:
    """Download a version's model folder and verify it before anything in it is imported.

    MLflow imports a models-from-code model's code file when it loads it, so the code and the
    policy folder are checked against the digests recorded at registration; serve the returned
    folder (``mlflow models serve -m <folder>``, ``poem-pipeline serve``) so what runs is what
    was checked.

    Parameters
    ----------
    client : MlflowClient
    tracking : TrackingConfig
    version : str
        The registered version.
    dst_path : str or Path
        Folder to download the model into.
    role : str, default="version"
        What the version is to the caller (``champion``, ``rollback target``), for messages.

    Returns
    -------
    Path
        The verified local model folder.

    Raises
    ------
    MissingModelError
        If the version's model folder is gone (one line naming the version and the path).
    poem.io.artifact.ArtifactError
        If a digest is missing or differs (one line naming the version and the file).
    """
    name = tracking.registered_model
    mv = client.get_model_version(name, version)
    what = f"the {role} (version {version} of {name!r})"
    missing = [t for t in (CODE_DIGEST_TAG, POLICY_DIGEST_TAG) if t not in mv.tags]
    if missing:
        raise ArtifactError(
            f"{what} has no {missing} tag(s); it was registered before digests were recorded "
            "and cannot be verified"
        )
    check_model_files(client, tracking, version, role)
    location = mv.tags.get(MODEL_LOCATION_TAG) or mv.tags[POLICY_URI_TAG].removesuffix(
        "/artifacts/policy"
    )
    try:
        with tracking_uri_scope(tracking.uri):  # a models:/ URI resolves through the global URI
            local = Path(
                mlflow.artifacts.download_artifacts(artifact_uri=location, dst_path=str(dst_path))
            )
    except (MlflowException, OSError) as exc:
        first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
        raise MissingModelError(
            f"{what}: its model folder {location} cannot be read ({first}); restore it from a "
            f"backup, or move {tracking.champion_alias!r} to another version "
            "(poem-pipeline rollback --to N)"
        ) from exc
    try:
        actual = model_code_digest(local)
    except ArtifactError as exc:
        raise ArtifactError(f"{what}: {exc}; refusing to import it") from exc
    if actual != mv.tags[CODE_DIGEST_TAG]:
        changed = _changed_part(local, mv.tags.get(CODE_PARTS_TAG))
        raise ArtifactError(
            f"{what}: model code {changed} in {location} differs from the code registered "
            f"with it (SHA-256 {actual[:12]}… != {mv.tags[CODE_DIGEST_TAG][:12]}…); refusing "
            "to import it. Restore the folder from a backup, or use another version"
        )
    try:
        load_policy(
            local / "artifacts" / serving.ARTIFACT_KEY, expected_digest=mv.tags[POLICY_DIGEST_TAG]
        )
    except ArtifactError as exc:
        raise ArtifactError(f"{what}: {exc}") from exc
    return local
