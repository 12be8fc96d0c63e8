import json

import numpy as np
import pytest

from poem.io.artifact import ArtifactError, load_policy, save_policy
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
