import json

import numpy as np
import pytest

from poem.io.artifact import ArtifactError, artifact_digest, load_policy, save_policy
from poem.policies import StochasticPolicy, make_family


@pytest.mark.parametrize(
    "family",
    [
        make_family("discrete", 3, 4, fit_intercept=True),
        make_family("multilabel", 3, 5, fit_intercept=False),
        make_family("candidates", 3),
    ],
    ids=lambda f: f.name,
)
def test_round_trip_is_exact(tmp_path, rng, family):
    policy = StochasticPolicy(
        family,
        rng.normal(size=family.coef_shape),
        temperature=0.7,
        exploration_floor=0.01,
        metadata={"feature_names": ["a", "b", "c"]},
    )
    save_policy(policy, tmp_path)
    loaded = load_policy(tmp_path)
    np.testing.assert_array_equal(loaded.coef, policy.coef)
    assert loaded.family.spec() == family.spec()
    assert (loaded.temperature, loaded.exploration_floor) == (0.7, 0.01)
    assert loaded.metadata == {"feature_names": ["a", "b", "c"]}


def test_tampered_arrays_fail_with_the_file_named(tmp_path, rng):
    family = make_family("discrete", 2, 3)
    save_policy(StochasticPolicy(family, rng.normal(size=family.coef_shape)), tmp_path)
    with open(tmp_path / "policy.npz", "wb") as fh:
        np.savez(fh, coef=np.zeros(family.coef_shape))
    with pytest.raises(ArtifactError, match=r"policy\.npz: SHA-256 mismatch"):
        load_policy(tmp_path)


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: (d / "policy.json").unlink(), r"policy\.json: policy spec not found"),
        (lambda d: (d / "policy.npz").unlink(), r"policy\.npz: policy arrays not found"),
        (lambda d: (d / "policy.json").write_text("{"), r"not valid JSON"),
        (
            lambda d: (d / "policy.json").write_text(json.dumps({"format": "x"})),
            r"not a poem-policy spec",
        ),
    ],
)
def test_broken_artifacts(tmp_path, rng, mutate, message):
    family = make_family("discrete", 2, 3)
    save_policy(StochasticPolicy(family, rng.normal(size=family.coef_shape)), tmp_path)
    mutate(tmp_path)
    with pytest.raises(ArtifactError, match=message):
        load_policy(tmp_path)


def _saved(tmp_path, rng):
    family = make_family("discrete", 2, 3)
    save_policy(StochasticPolicy(family, rng.normal(size=family.coef_shape)), tmp_path)
    return artifact_digest(tmp_path)


def _edit_spec(directory, **changes):
    spec = json.loads((directory / "policy.json").read_text())
    spec.update(changes)
    (directory / "policy.json").write_text(json.dumps(spec))


def test_digest_covers_the_spec_and_the_arrays(tmp_path, rng):
    digest = _saved(tmp_path, rng)
    assert load_policy(tmp_path, expected_digest=digest).temperature == 1.0
    _edit_spec(tmp_path, temperature=9.0, exploration_floor=0.0)  # loads without the digest...
    assert load_policy(tmp_path).temperature == 9.0
    with pytest.raises(ArtifactError, match=r"digest .* differs from the registered"):
        load_policy(tmp_path, expected_digest=digest)  # ...not against the registered one


def test_replacing_arrays_and_their_hash_fails_the_digest(tmp_path, rng):
    digest = _saved(tmp_path, rng)
    with open(tmp_path / "policy.npz", "wb") as fh:
        np.savez(fh, coef=np.zeros((3, 2)))
    import hashlib

    _edit_spec(
        tmp_path,
        arrays={
            "file": "policy.npz",
            "sha256": hashlib.sha256((tmp_path / "policy.npz").read_bytes()).hexdigest(),
        },
    )
    load_policy(tmp_path)  # self-consistent forgery
    with pytest.raises(ArtifactError, match="modified after registration"):
        load_policy(tmp_path, expected_digest=digest)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"arrays": {"file": "../../etc/passwd", "sha256": "0" * 64}}, r"'arrays\.file' must be"),
        ({"arrays": {"file": "/etc/passwd", "sha256": "0" * 64}}, r"'arrays\.file' must be"),
        ({"arrays": "policy.npz"}, r"'arrays' must be an object"),
        ({"n_features": "3"}, r"'n_features' must be an integer >= 1, got '3'"),
        ({"n_actions": -3}, r"'n_actions' must be an integer >= 2, got -3"),
        ({"temperature": 0}, r"'temperature' must be a finite number > 0, got 0"),
        ({"exploration_floor": 0.5}, r"'exploration_floor' 0.5 exceeds 1/n_actions"),
        ({"family": "tree"}, r"'family' must be one of"),
        ({"coef_shape": None}, r"'coef_shape' must be a list"),
        ({"metadata": [1]}, r"'metadata' must be an object"),
    ],
)
def test_malformed_spec_is_one_clear_error(tmp_path, rng, changes, message):
    _saved(tmp_path, rng)
    _edit_spec(tmp_path, **changes)
    with pytest.raises(ArtifactError, match=r"policy\.json: invalid policy spec: .*" + message):
        load_policy(tmp_path)


def test_deeply_nested_or_huge_int_spec_is_an_artifact_error(tmp_path, rng):
    _saved(tmp_path, rng)
    (tmp_path / "policy.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ArtifactError, match=r"not valid JSON \(RecursionError"):
        load_policy(tmp_path)
    (tmp_path / "policy.json").write_text('{"format": ' + "9" * 5000 + "}")
    with pytest.raises(ArtifactError, match=r"not valid JSON \(ValueError"):
        load_policy(tmp_path)
