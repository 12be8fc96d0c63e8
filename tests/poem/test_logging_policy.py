"""Estimating the logging policy of a log without propensities (poem.logging_policy)."""

from __future__ import annotations

import numpy as np
import pytest

from poem.data import CandidateSets, LoggedBandit
from poem.exceptions import InvalidLogError
from poem.logging_policy import (
    check_stochastic_logger,
    estimate_log_propensities,
    estimate_propensities,
)
from poem.policies.candidates import segment_logsumexp


def _softmax_logger(n, d=4, k=3, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    S = scale * X @ rng.normal(size=(d, k))
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    y = (P.cumsum(axis=1) < rng.random(n)[:, None]).sum(axis=1)
    return X, y, P[np.arange(n), y]


def test_discrete_estimates_recover_a_softmax_logger():
    X, y, true = _softmax_logger(3000)
    est = estimate_propensities(X, y, random_state=0)
    # a well-specified model: median relative error ~ 1/sqrt(n per fold): a few percent
    assert np.median(np.abs(est.propensities / true - 1)) < 0.06
    d = est.diagnostics
    assert d.log_loss < d.marginal_log_loss - 0.1  # the contexts tell about y
    assert d.brier < d.marginal_brier
    assert est.provenance == {
        "propensity_source": "estimated",
        "model": "logistic",
        "calibration": "none",
        "folds": 5,
        "seed": est.provenance["seed"],
        "unseen_action_rule": "laplace",
    }
    # reliability bins: predicted ≈ observed within a few binomial s.e.
    for predicted, observed, count in d.reliability:
        assert abs(predicted - observed) < 4 * np.sqrt(
            max(predicted * (1 - predicted), 1e-3) / count
        )


def test_estimates_are_cross_fitted():
    """A row's estimate does not depend on its own logged action (the model never saw it)."""
    X, y, _ = _softmax_logger(400, seed=1)
    base = estimate_propensities(X, y, random_state=3, n_folds=4).propensities
    flipped = y.copy()
    flipped[7] = (y[7] + 1) % 3
    again = estimate_propensities(X, flipped, random_state=3, n_folds=4).propensities
    # row 7's own probabilities come from a model fitted without row 7: the probability of the
    # new action under the same model is the estimate; rows of row 7's fold are untouched
    assert again[7] != base[7]
    same_fold = np.flatnonzero(again == base)
    assert same_fold.size > 0.15 * y.size  # the rest of row 7's fold (≈ n/4 − 1 rows)


def test_a_context_free_logger_is_reported_as_such():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 3))
    y = rng.choice(4, size=2000, p=[0.4, 0.3, 0.2, 0.1])
    d = estimate_propensities(X, y, random_state=0).diagnostics
    assert abs(d.log_loss_gain) < 0.01
    assert "add (almost) nothing" in d.lines()[0]


def test_unseen_and_rare_actions_get_laplace_estimates_and_are_named():
    X, y, _ = _softmax_logger(500, k=3, seed=4)
    y = y.copy()
    y[0] = 3  # action 3 logged once: the folds that hold out row 0 never saw it
    est = estimate_propensities(X, y, n_actions=5, random_state=0)
    assert est.propensities[0] == pytest.approx(1 / (400 + 5), rel=0.02)
    rare = {a: (largest, count) for a, largest, count in est.diagnostics.rare_actions}
    assert rare[4] == (pytest.approx(1 / 405), 0)  # never logged: the Laplace estimate
    assert all(largest < 0.01 or count == 0 for largest, count in rare.values())
    assert np.all(est.propensities > 0)


def test_multilabel_product_form():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(3000, 4))
    sig = 1 / (1 + np.exp(-X @ rng.normal(size=(4, 3))))
    Y = (rng.random(sig.shape) < sig).astype(int)
    est = estimate_propensities(X, Y, family="multilabel", random_state=0)
    true = np.prod(np.where(Y == 1, sig, 1 - sig), axis=1)
    assert np.median(np.abs(est.propensities / true - 1)) < 0.08
    assert est.diagnostics.n_actions == 3


def test_candidate_sets_conditional_logit():
    rng = np.random.default_rng(6)
    sizes = rng.integers(2, 6, size=2000)
    F = rng.normal(size=(sizes.sum(), 3))
    cands = CandidateSets.from_sizes(F, sizes)
    s = F @ np.array([1.0, -1.0, 0.5])
    prob = np.exp(s - np.repeat(segment_logsumexp(s, cands.offsets), sizes))
    y = np.array(
        [rng.choice(k, p=prob[o : o + k]) for o, k in zip(cands.offsets[:-1], sizes, strict=True)]
    )
    est = estimate_propensities(None, y, family="candidates", candidates=cands, random_state=0)
    true = prob[cands.offsets[:-1] + y]
    assert np.median(np.abs(est.propensities / true - 1)) < 0.05
    assert est.provenance["model"] == "conditional-logit"


def test_boosting_is_calibrated_by_default():
    X, y, true = _softmax_logger(600, seed=7)
    est = estimate_propensities(X, y, model="boosting", random_state=0)
    assert est.provenance["calibration"] == "sigmoid"
    assert est.diagnostics.log_loss < est.diagnostics.marginal_log_loss


def test_a_deterministic_logger_is_refused_in_one_line():
    X, _, _ = _softmax_logger(1500, seed=8)
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0.5).astype(int)  # a rules engine
    est = estimate_propensities(X, y, random_state=0)
    with pytest.raises(
        InvalidLogError,
        match=r"^action: [\d,]+ of 1,500 rows look chosen by a deterministic logger",
    ) as info:
        check_stochastic_logger(est)
    assert "\n" not in str(info.value)
    stochastic = estimate_propensities(*_softmax_logger(1500, seed=8)[:2], random_state=0)
    check_stochastic_logger(stochastic)  # no error


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"family": "ranking"}, "family must be one of"),
        ({"model": "forest"}, "model must be one of"),
        ({"calibration": "platt"}, "calibration must be"),
        ({"n_folds": 1}, "n_folds must be between 2"),
        ({"epsilon": 0.7}, "epsilon must be in"),
        ({"n_actions": 2}, r"discrete actions must be indices in 0\.\.1"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    X, y, _ = _softmax_logger(100, seed=9)
    with pytest.raises(ValueError, match=message):
        estimate_propensities(X, y, **kwargs)


def test_string_actions_are_refused_with_the_fix():
    X, _, _ = _softmax_logger(50)
    with pytest.raises(ValueError, match="map string ids to 0..K-1 first"):
        estimate_propensities(X, np.array(["a", "b"] * 25))


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_a_log_gets_its_estimates_in_place_of_its_propensities(family):
    """estimate_log_propensities: every family, the rows unchanged, the placeholder replaced."""
    rng = np.random.default_rng(8)
    n = 400
    X = rng.normal(size=(n, 3))
    kwargs = {"contexts": X, "loss_bounds": (0.0, 1.0), "family": family}
    if family == "discrete":
        _, y, _ = _softmax_logger(n, d=3, seed=8)
        kwargs.update(actions=y, n_actions=3)
    elif family == "multilabel":
        kwargs.update(actions=(rng.random((n, 2)) < 1 / (1 + np.exp(-X[:, :2]))).astype(int))
    else:
        sizes = rng.integers(2, 4, size=n)
        cands = CandidateSets.from_sizes(rng.normal(size=(sizes.sum(), 2)), sizes)
        kwargs.update(contexts=None, candidates=cands, actions=rng.integers(0, 2, size=n))
    log = LoggedBandit(losses=rng.random(n), propensities=np.ones(n), **kwargs)
    estimated, est = estimate_log_propensities(log, n_folds=3, random_state=0)
    np.testing.assert_array_equal(estimated.propensities, est.propensities)
    assert np.all((estimated.propensities > 0) & (estimated.propensities < 1))
    np.testing.assert_array_equal(estimated.actions, log.actions)
    np.testing.assert_array_equal(estimated.losses, log.losses)
    assert est.provenance["folds"] == 3 and est.diagnostics.family == family
