"""Direct method, doubly robust and self-normalized DR; the cross-fitted loss model."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.dummy import DummyRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.model_selection import KFold

from poem.data import CandidateSets, LoggedBandit
from poem.estimators import (
    direct_method,
    doubly_robust,
    evaluate_policy,
    evaluate_policy_dr,
    fit_loss_model,
    ips,
    self_normalized_doubly_robust,
)
from poem.estimators.dr import loss_model_features
from poem.policies import StochasticPolicy, family_from_log

# hand-computable: 4 rows
LOSSES = np.array([1.0, 0.0, 0.5, 1.0])
WEIGHTS = np.array([2.0, 0.5, 1.0, 0.5])
LOGGED_PRED = np.array([0.5, 0.5, 0.5, 0.5])
MODEL_VALUES = np.array([0.4, 0.6, 0.5, 0.3])


def test_direct_method_by_hand():
    est = direct_method(MODEL_VALUES)
    assert est.estimator == "dm" and est.value == pytest.approx(0.45)
    assert est.std_error == pytest.approx(np.std(MODEL_VALUES, ddof=1) / 2)
    assert est.effective_sample_size == 4 and est.method == "t"


def test_doubly_robust_by_hand():
    # tᵢ = v̂ᵢ + rᵢ(δᵢ − δ̂ᵢ) = 0.4 + 1.0, 0.6 − 0.25, 0.5 + 0, 0.3 + 0.25
    t = np.array([1.4, 0.35, 0.5, 0.55])
    est = doubly_robust(LOSSES, WEIGHTS, LOGGED_PRED, MODEL_VALUES)
    assert est.estimator == "dr" and est.value == pytest.approx(t.mean())
    assert est.std_error == pytest.approx(np.std(t, ddof=1) / 2)
    assert est.effective_sample_size == pytest.approx(4.0**2 / 5.5)


def test_self_normalized_doubly_robust_by_hand():
    # v̄ = 0.45; Σ rᵢ eᵢ / Σ rᵢ = (1.0 − 0.25 + 0 + 0.25) / 4 = 0.25
    est = self_normalized_doubly_robust(LOSSES, WEIGHTS, LOGGED_PRED, MODEL_VALUES)
    assert est.estimator == "sndr" and est.value == pytest.approx(0.70)
    e = LOSSES - LOGGED_PRED
    psi = (MODEL_VALUES - 0.45) + WEIGHTS * (e - 0.25) / WEIGHTS.mean()
    assert est.std_error == pytest.approx(np.std(psi, ddof=1) / 2)
    # with all weights 1, SNDR is DR
    ones = np.ones(4)
    assert self_normalized_doubly_robust(
        LOSSES, ones, LOGGED_PRED, MODEL_VALUES
    ).value == pytest.approx(doubly_robust(LOSSES, ones, LOGGED_PRED, MODEL_VALUES).value)


def test_dr_equals_ips_when_the_model_is_zero(rng):
    d, w = rng.random(50), rng.exponential(size=50)
    zero = np.zeros(50)
    dr, ref = doubly_robust(d, w, zero, zero), ips(d, w)
    assert dr.value == pytest.approx(ref.value, rel=1e-12)
    assert dr.std_error == pytest.approx(ref.std_error, rel=1e-12)
    assert (dr.lower, dr.upper) == pytest.approx((ref.lower, ref.upper))


def test_dr_equals_dm_when_weights_are_one_and_the_model_is_exact(rng):
    d, v = rng.random(50), rng.random(50)
    dr = doubly_robust(d, np.ones(50), d, v)  # exact model: δ̂(xᵢ, yᵢ) = δᵢ
    dm = direct_method(v)
    assert dr.value == pytest.approx(dm.value, rel=1e-12) and dr.std_error == pytest.approx(
        dm.std_error
    )


@pytest.mark.parametrize("fn", [direct_method, doubly_robust, self_normalized_doubly_robust])
def test_bootstrap_interval_option(fn):
    args = (MODEL_VALUES,) if fn is direct_method else (LOSSES, WEIGHTS, LOGGED_PRED, MODEL_VALUES)
    est = fn(*args, interval="bootstrap", random_state=3)
    assert est.method == "bootstrap" and est.lower <= est.value <= est.upper
    assert fn(*args, interval="bootstrap", random_state=3) == est  # seeded


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: doubly_robust(LOSSES, WEIGHTS, LOGGED_PRED[:3], MODEL_VALUES),
            r"logged_predictions has 3 rows but weights has 4",
        ),
        (
            lambda: doubly_robust(LOSSES, -WEIGHTS, LOGGED_PRED, MODEL_VALUES),
            r"weights: 4 of 4 values are negative",
        ),
        (lambda: direct_method([0.1, np.nan, 0.2]), r"model_values: 1 of 3 values are not finite"),
        (
            lambda: doubly_robust(LOSSES, WEIGHTS, LOGGED_PRED, MODEL_VALUES, interval="T"),
            r"interval must be one of",
        ),
        (
            lambda: self_normalized_doubly_robust(LOSSES, 0 * WEIGHTS, LOGGED_PRED, MODEL_VALUES),
            r"weights are all 0",
        ),
    ],
)
def test_bad_inputs(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# -- loss model ------------------------------------------------------------
def test_discrete_features_are_per_action_blocks(tiny_log):
    features, offsets = loss_model_features(tiny_log)
    np.testing.assert_array_equal(offsets, [0, 3, 6, 9, 12, 15])
    dense = features.toarray()
    assert dense.shape == (15, 2 * 3 + 3)
    np.testing.assert_array_equal(
        dense[2 * 3 + 2], [0, 0, 0, 0, 1, 1, 0, 0, 1]
    )  # x₂ = (1, 1), action 2


def test_cross_fitting_predicts_each_row_from_the_other_folds(synthetic_log):
    preds = fit_loss_model(synthetic_log, loss_model=DummyRegressor(), n_folds=4, random_state=0)
    folds = KFold(4, shuffle=True, random_state=0).split(np.arange(synthetic_log.n_rows))
    for train, test in folds:
        np.testing.assert_allclose(preds.logged[test], synthetic_log.losses[train].mean())
    K = synthetic_log.n_actions
    assert preds.values.shape == (synthetic_log.n_rows * K,) and preds.n_folds == 4
    np.testing.assert_array_equal(
        preds.values.reshape(-1, K)[np.arange(synthetic_log.n_rows), synthetic_log.actions],
        preds.logged,
    )


def test_loss_model_errors(synthetic_log, tiny_log):
    with pytest.raises(
        ValueError, match=r"n_folds must be an integer in \[2, n_rows=2000\], got 1"
    ):
        fit_loss_model(synthetic_log, n_folds=1)
    with pytest.raises(
        ValueError, match=r"a classifier loss model needs every loss equal to a loss bound"
    ):
        fit_loss_model(tiny_log, loss_model=LogisticRegression(), n_folds=2)
    ml = LoggedBandit(
        np.eye(3),
        np.array([[0, 1], [1, 0], [1, 1]]),
        [0.0, 1.0, 2.0],
        [0.5] * 3,
        loss_bounds=(0, 2),
        family="multilabel",
    )
    with pytest.raises(
        ValueError,
        match=r"DM/DR support the 'discrete' and 'candidates' families, got 'multilabel'",
    ):
        fit_loss_model(ml, n_folds=2)


def test_policy_estimates_on_the_synthetic_problem(synthetic_problem):
    log = synthetic_problem.log
    family = family_from_log(log, fit_intercept=True)
    policy = StochasticPolicy(family, np.random.default_rng(1).normal(size=family.coef_shape))
    truth = float(
        np.mean(
            np.sum(policy.predict_proba(log.contexts) * synthetic_problem.expected_loss, axis=1)
        )
    )
    preds = fit_loss_model(log, n_folds=5, random_state=0)  # default: logistic (losses are 0/1)
    results = {
        name: evaluate_policy_dr(policy, log, estimator=name, predictions=preds)
        for name in ("dm", "dr", "sndr")
    }
    for name in ("dr", "sndr"):
        assert abs(results[name].value - truth) < 3 * results[name].std_error, name
    # DR's correction shrinks the standard error relative to IPS on this problem
    assert results["dr"].std_error < evaluate_policy(policy, log).std_error
    assert results["dm"].effective_sample_size == log.n_rows
    with pytest.raises(ValueError, match=r"estimator must be one of"):
        evaluate_policy_dr(policy, log, estimator="DR", predictions=preds)


def test_candidate_family_with_a_regressor():
    rng = np.random.default_rng(0)
    sizes = rng.integers(2, 5, size=300)
    F = rng.normal(size=(sizes.sum(), 3))
    cs = CandidateSets.from_sizes(F, sizes)
    actions = rng.integers(0, sizes)
    idx = cs.offsets[:-1] + actions
    losses = np.clip(0.5 + 0.1 * F[idx] @ np.array([1.0, -1.0, 0.5]), 0, 1)
    log = LoggedBandit(
        None, actions, losses, 1.0 / sizes, loss_bounds=(0, 1), family="candidates", candidates=cs
    )
    preds = fit_loss_model(log, loss_model=LinearRegression(), n_folds=3, random_state=0)
    np.testing.assert_allclose(preds.logged, losses, atol=0.02)  # linear truth: near-exact model
    uniform = StochasticPolicy.uniform(family_from_log(log))
    dr, dm = (
        evaluate_policy_dr(uniform, log, estimator=e, predictions=preds) for e in ("dr", "dm")
    )
    assert dr.value == pytest.approx(dm.value, abs=0.01)
