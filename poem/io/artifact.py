"""Policy artifact: arrays in ``policy.npz`` plus a JSON spec with their SHA-256 (DESIGN §6).

No pickles: the spec holds the family structure, the serving knobs (temperature α,
exploration floor ε) and JSON metadata (feature names, action ids, hyperparameters);
the arrays file holds the coefficients. :func:`load_policy` refuses an artifact whose
arrays do not match the recorded checksum, whose spec is malformed (one :class:`ArtifactError`
naming the key), or whose arrays file lies outside the artifact folder. That checksum only
detects accidental corruption; edits are detected by :func:`artifact_digest`, recorded
outside the artifact by the registry.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from poem.policies.stochastic import StochasticPolicy, make_family

__all__ = [
    "ARRAYS_FILE",
    "SPEC_FILE",
    "ArtifactError",
    "artifact_digest",
    "load_policy",
    "read_spec",
    "save_policy",
]

SPEC_FILE = "policy.json"
ARRAYS_FILE = "policy.npz"
_FORMAT = "poem-policy"
_VERSION = 1
_MAX_SPEC_BYTES = 8 << 20  # feature names of a wide log fit easily; a bomb does not
_SHA256 = re.compile(r"[0-9a-f]{64}")


class ArtifactError(ValueError):
    """A policy artifact is missing, malformed or fails its checksum."""


def _sha256(path: Path, digest: Any = None) -> str:
    digest = hashlib.sha256() if digest is None else digest
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def artifact_digest(directory: str | Path) -> str:
    """SHA-256 over the spec file and the arrays file of an artifact folder, as stored.

    Any edit of either (temperature, floor, family sizes, coefficients, the arrays' own
    checksum) changes it. Record it where the artifact's writer cannot reach (the registry)
    and pass it to :func:`load_policy` as ``expected_digest``.

    Raises
    ------
    ArtifactError
        If either file is missing.
    """
    directory = Path(directory)
    digest = hashlib.sha256(b"poem-policy-digest-v1\0")
    for name in (SPEC_FILE, ARRAYS_FILE):
        path = directory / name
        if not path.is_file():
            raise ArtifactError(f"{path}: not found; cannot compute the artifact digest")
        digest.update(f"{name}\0{path.stat().st_size}\0".encode())
        _sha256(path, digest)
    return digest.hexdigest()


def save_policy(policy: StochasticPolicy, directory: str | Path) -> Path:
    """Write ``policy.npz`` and ``policy.json`` into ``directory`` (created if needed).

    Parameters
    ----------
    policy : StochasticPolicy
        The policy to save; ``policy.metadata`` must be JSON-serialisable.
    directory : str or Path
        Target folder.

    Returns
    -------
    Path
        Path of the JSON spec.

    Raises
    ------
    TypeError
        If the metadata is not JSON-serialisable.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    arrays_path = directory / ARRAYS_FILE
    with open(arrays_path, "wb") as fh:
        np.savez(fh, coef=np.asarray(policy.coef, dtype=np.float64))
    spec: dict[str, Any] = {
        "format": _FORMAT,
        "format_version": _VERSION,
        **policy.family.spec(),
        "coef_shape": list(policy.family.coef_shape),
        "temperature": policy.temperature,
        "exploration_floor": policy.exploration_floor,
        "arrays": {"file": ARRAYS_FILE, "sha256": _sha256(arrays_path)},
        "metadata": policy.metadata,
    }
    spec_path = directory / SPEC_FILE
    spec_path.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
    return spec_path


def read_spec(directory: str | Path) -> dict[str, Any]:
    """Parse and check the JSON spec of an artifact folder.

    Raises
    ------
    ArtifactError
        If the spec is missing, not JSON, or not a poem policy spec.
    """
    spec_path = Path(directory) / SPEC_FILE
    if not spec_path.is_file():
        raise ArtifactError(f"{spec_path}: policy spec not found")
    size = spec_path.stat().st_size
    if size > _MAX_SPEC_BYTES:
        raise ArtifactError(f"{spec_path}: {size:,} bytes, more than a policy spec can hold")
    try:
        spec = json.loads(spec_path.read_text())
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:  # JSONDecodeError ⊂ ValueError
        raise ArtifactError(f"{spec_path}: not valid JSON ({type(exc).__name__}: {exc})") from exc
    if not isinstance(spec, dict) or spec.get("format") != _FORMAT:
        raise ArtifactError(f"{spec_path}: not a {_FORMAT} spec")
    if spec.get("format_version") != _VERSION:
        raise ArtifactError(
            f"{spec_path}: unsupported format_version {spec.get('format_version')!r}"
        )
    problems = _spec_problems(spec)
    if problems:
        raise ArtifactError(f"{spec_path}: invalid policy spec: " + "; ".join(problems))
    return spec


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _spec_problems(spec: dict[str, Any]) -> list[str]:
    """Every problem of a parsed spec, each naming its key (empty when the spec is valid)."""
    problems = []
    family = spec.get("family")
    if family not in ("discrete", "multilabel", "candidates"):
        problems.append(
            f"'family' must be one of ['candidates', 'discrete', 'multilabel'], got {family!r}"
        )
    n_features, n_actions = spec.get("n_features"), spec.get("n_actions")
    if not (_is_int(n_features) and n_features >= 1):
        problems.append(f"'n_features' must be an integer >= 1, got {n_features!r}")
    if family == "candidates":
        if n_actions is not None:
            problems.append(f"'n_actions' must be null for candidate sets, got {n_actions!r}")
    elif not (_is_int(n_actions) and n_actions >= 2):
        problems.append(f"'n_actions' must be an integer >= 2, got {n_actions!r}")
    if not isinstance(spec.get("fit_intercept"), bool):
        problems.append(f"'fit_intercept' must be true or false, got {spec.get('fit_intercept')!r}")
    shape = spec.get("coef_shape")
    if not (isinstance(shape, list) and shape and all(_is_int(v) and v >= 1 for v in shape)):
        problems.append(f"'coef_shape' must be a list of positive integers, got {shape!r}")
    temperature = spec.get("temperature")
    if not (_is_number(temperature) and temperature > 0):
        problems.append(f"'temperature' must be a finite number > 0, got {temperature!r}")
    floor = spec.get("exploration_floor")
    if not (_is_number(floor) and 0 <= floor < 1):
        problems.append(f"'exploration_floor' must be a number in [0, 1), got {floor!r}")
    elif _is_int(n_actions) and n_actions >= 2 and floor * n_actions > 1:
        problems.append(f"'exploration_floor' {floor!r} exceeds 1/n_actions = {1 / n_actions:.4g}")
    arrays = spec.get("arrays")
    if not isinstance(arrays, dict):
        problems.append(f"'arrays' must be an object with 'file' and 'sha256', got {arrays!r}")
    else:
        name = arrays.get("file")
        if not (isinstance(name, str) and name and Path(name).name == name and name != ".."):
            problems.append(
                f"'arrays.file' must be a file name inside the artifact folder, got {name!r}"
            )
        sha = arrays.get("sha256")
        if not (isinstance(sha, str) and _SHA256.fullmatch(sha)):
            problems.append(f"'arrays.sha256' must be 64 hex digits, got {str(sha)[:80]!r}")
    metadata = spec.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        problems.append(f"'metadata' must be an object, got {type(metadata).__name__}")
    return problems


def load_policy(directory: str | Path, expected_digest: str | None = None) -> StochasticPolicy:
    """Load a policy saved by :func:`save_policy`, verifying the arrays' SHA-256.

    Parameters
    ----------
    directory : str or Path
        Artifact folder holding ``policy.json`` and ``policy.npz``.
    expected_digest : str or None, default=None
        :func:`artifact_digest` recorded at registration; when given, the folder must match
        it (spec and arrays), before anything in it is used.

    Returns
    -------
    StochasticPolicy
        The policy, with its serving temperature, floor and metadata.

    Raises
    ------
    ArtifactError
        If a file is missing, the digest or checksum differs (tampered or corrupt artifact),
        the spec is malformed, or the arrays do not match the spec.
    """
    directory = Path(directory)
    if expected_digest is not None:
        actual = artifact_digest(directory)
        if actual != expected_digest:
            raise ArtifactError(
                f"{directory}: artifact digest {actual[:12]}… differs from the registered "
                f"{expected_digest[:12]}…; the policy was modified after registration"
            )
    spec = read_spec(directory)
    arrays_path = directory / spec["arrays"]["file"]
    if arrays_path.resolve().parent != directory.resolve():
        raise ArtifactError(f"{arrays_path}: policy arrays must lie inside {directory}")
    if not arrays_path.is_file():
        raise ArtifactError(f"{arrays_path}: policy arrays not found")
    actual = _sha256(arrays_path)
    if actual != spec["arrays"]["sha256"]:
        raise ArtifactError(
            f"{arrays_path}: SHA-256 mismatch (spec {spec['arrays']['sha256'][:12]}…, "
            f"file {actual[:12]}…); the artifact was modified after it was saved"
        )
    try:
        with np.load(arrays_path, allow_pickle=False) as data:
            coef = np.array(data["coef"])
    except (
        KeyError,
        ValueError,
        OSError,
        TypeError,
        AttributeError,
        EOFError,
        zipfile.BadZipFile,
    ) as exc:
        raise ArtifactError(f"{arrays_path}: unreadable policy arrays ({exc})") from exc
    family = make_family(
        spec["family"], spec["n_features"], spec["n_actions"], spec["fit_intercept"]
    )
    if list(coef.shape) != list(spec["coef_shape"]) or coef.shape != family.coef_shape:
        raise ArtifactError(
            f"{arrays_path}: coef shape {coef.shape} differs from spec {spec['coef_shape']} "
            f"or from the family's {family.coef_shape}"
        )
    if coef.dtype.kind != "f" or not np.all(np.isfinite(coef)):
        raise ArtifactError(f"{arrays_path}: coef must be finite floats")
    return StochasticPolicy(
        family,
        coef,
        spec["temperature"],
        spec["exploration_floor"],
        dict(spec.get("metadata") or {}),
    )
