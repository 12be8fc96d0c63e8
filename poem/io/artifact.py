"""Policy artifact: arrays in ``policy.npz`` plus a JSON spec with their SHA-256 (DESIGN §6).

No pickles: the spec holds the family structure, the serving knobs (temperature α,
exploration floor ε) and JSON metadata (feature names, action ids, hyperparameters);
the arrays file holds the coefficients. :func:`load_policy` refuses an artifact whose
arrays do not match the recorded checksum.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from poem.policies.stochastic import StochasticPolicy, make_family

__all__ = ["ARRAYS_FILE", "SPEC_FILE", "ArtifactError", "load_policy", "save_policy"]

SPEC_FILE = "policy.json"
ARRAYS_FILE = "policy.npz"
_FORMAT = "poem-policy"
_VERSION = 1


class ArtifactError(ValueError):
    """A policy artifact is missing, malformed or fails its checksum."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
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
    try:
        spec = json.loads(spec_path.read_text())
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{spec_path}: not valid JSON ({exc})") from exc
    if not isinstance(spec, dict) or spec.get("format") != _FORMAT:
        raise ArtifactError(f"{spec_path}: not a {_FORMAT} spec")
    if spec.get("format_version") != _VERSION:
        raise ArtifactError(
            f"{spec_path}: unsupported format_version {spec.get('format_version')!r}"
        )
    return spec


def load_policy(directory: str | Path) -> StochasticPolicy:
    """Load a policy saved by :func:`save_policy`, verifying the arrays' SHA-256.

    Parameters
    ----------
    directory : str or Path
        Artifact folder holding ``policy.json`` and ``policy.npz``.

    Returns
    -------
    StochasticPolicy
        The policy, with its serving temperature, floor and metadata.

    Raises
    ------
    ArtifactError
        If a file is missing, the checksum differs (tampered or corrupt arrays), or the
        arrays do not match the spec.
    """
    directory = Path(directory)
    spec = read_spec(directory)
    arrays_path = directory / spec["arrays"]["file"]
    if not arrays_path.is_file():
        raise ArtifactError(f"{arrays_path}: policy arrays not found")
    actual = _sha256(arrays_path)
    if actual != spec["arrays"]["sha256"]:
        raise ArtifactError(
            f"{arrays_path}: SHA-256 mismatch "
            f"(spec {spec['arrays']['sha256'][:12]}…, file {actual[:12]}…); "
            "the artifact was modified after it was saved"
        )
    try:
        with np.load(arrays_path, allow_pickle=False) as data:
            coef = np.array(data["coef"])
    except (KeyError, ValueError, OSError) as exc:
        raise ArtifactError(f"{arrays_path}: unreadable policy arrays ({exc})") from exc
    family = make_family(
        spec["family"], spec["n_features"], spec["n_actions"], spec["fit_intercept"]
    )
    if list(coef.shape) != list(spec["coef_shape"]):
        raise ArtifactError(
            f"{arrays_path}: coef shape {coef.shape} differs from spec {spec['coef_shape']}"
        )
    return StochasticPolicy(
        family,
        coef,
        spec["temperature"],
        spec["exploration_floor"],
        dict(spec.get("metadata") or {}),
    )
