"""Hybrid counterfactual–supervised learner: gradient, improvement, sklearn contract."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from scipy.optimize import check_grad
from sklearn.exceptions import NotFittedError
from sklearn.utils.estimator_checks import (
    check_estimator_cloneable,
    check_estimator_repr,
    check_get_params_invariance,
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
    check_set_params,
)

from poem.learners.hybrid import REGULARIZERS, WEIGHTINGS, HybridLearner, hybrid_objective
from poem.policies import StochasticPolicy, family_from_log


def true_loss(probs, click, offsets):
    """Expected loss −E[click] of a candidate distribution."""
    return -float(np.mean(np.add.reduceat(probs * click, offsets[:-1])))


@pytest.fixture(scope="module")
def problem(candidate_problem):
    return candidate_problem


@pytest.mark.parametrize("weighting", WEIGHTINGS)
@pytest.mark.parametrize("regularizer", [None, *REGULARIZERS])
def test_gradient_matches_finite_differences(problem, weighting, regularizer):
    log = problem[0]
    family = family_from_log(log)
    args = (family, log.candidates, log.actions, log.scaled_losses(), log.propensities)
    kw = dict(
        weighting=weighting,
        clip=4.0,
        regularizer=regularizer,
        regularizer_weight=0.5,
        l2_penalty=0.01,
    )
    w0 = np.random.default_rng(1).normal(scale=0.3, size=5)
    err = check_grad(
        lambda w: hybrid_objective(w, *args, **kw)[0],
        lambda w: hybrid_objective(w, *args, **kw)[1],
        w0,
    )
    assert err < 1e-5


def test_plain_cross_entropy_value_by_hand(problem):
    log = problem[0]
    family = family_from_log(log)
    value, _, n_clipped = hybrid_objective(
        np.zeros(5),
        family,
        log.candidates,
        log.actions,
        log.scaled_losses(),
        log.propensities,
        weighting="none",
        clip=np.inf,
    )
    assert value == pytest.approx(np.log(2.0)) and n_clipped == 0  # σ(0) = 1/2 for every row
    value, _, n_clipped = hybrid_objective(
        np.zeros(5),
        family,
        log.candidates,
        log.actions,
        log.scaled_losses(),
        log.propensities,
        weighting="clipped_inverse_propensity",
        clip=5.0,
    )
    assert value == pytest.approx(np.log(2.0) * np.mean(np.minimum(5.0, 1 / log.propensities)))
    assert n_clipped == int(np.sum(1 / log.propensities >= 5.0))


@pytest.mark.parametrize("weighting", WEIGHTINGS)
def test_improves_the_true_value_over_the_logger(problem, weighting):
    log, click, P = problem
    est = HybridLearner(weighting=weighting, clip=10.0).fit(log)
    logging_value = true_loss(P, click, log.candidates.offsets)
    learned = true_loss(est.predict_proba(log.candidates), click, log.candidates.offsets)
    assert learned < logging_value - 0.1, (
        learned,
        logging_value,
    )  # logger −0.39, learned ≈ −0.51..−0.56
    assert est.converged_ and isinstance(est.policy_, StochasticPolicy)


def test_regularized_variants_improve_too(problem):
    log, click, P = problem
    logging_value = true_loss(P, click, log.candidates.offsets)
    for reg in REGULARIZERS:
        est = HybridLearner(regularizer=reg, regularizer_weight=0.1, weight_gradient=False).fit(log)
        assert est.converged_
        assert (
            true_loss(est.predict_proba(log.candidates), click, log.candidates.offsets)
            < logging_value - 0.1
        )


@pytest.mark.parametrize(
    "check",
    [
        check_no_attributes_set_in_init,
        check_parameters_default_constructible,
        check_get_params_invariance,
        check_set_params,
        check_estimator_cloneable,
        check_estimator_repr,
    ],
)
def test_sklearn_contract(check):
    check("HybridLearner", HybridLearner())


def test_fit_contract_serving_and_pickle(problem):
    log = problem[0]
    params = {
        "weighting": "hybrid",
        "clip": "p90/p10",
        "temperature": 2.0,
        "exploration_floor": 0.05,
    }
    est = HybridLearner(**params)  # constructible from a plain dict (mlflow.yml)
    with pytest.raises(NotFittedError):
        est.predict(log.candidates)
    before = est.get_params()
    assert est.fit(log) is est and est.get_params() == before
    P = est.predict_proba(log.candidates)
    np.testing.assert_allclose(np.add.reduceat(P, log.candidates.offsets[:-1]), 1.0)
    assert P.min() >= 0.05 - 1e-12 and est.clip_ > 1
    actions, probs = est.sample(log.candidates, random_state=0)
    np.testing.assert_allclose(probs, P[log.candidates.offsets[:-1] + actions])
    again = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(again.coef_, est.coef_)
    np.testing.assert_array_equal(
        HybridLearner(**params).fit(log).coef_, est.coef_
    )  # deterministic
    h = est.predict_outcome(log.candidates)
    assert h.shape == (log.candidates.features.shape[0],) and np.all((h > 0) & (h < 1))


@pytest.mark.parametrize(
    ("params", "exception", "message"),
    [
        ({"policy": "discrete"}, ValueError, r"policy must be 'candidates'"),
        (
            {"weighting": "Hybrid"},
            ValueError,
            r"weighting must be one of \['none', 'inverse_propensity'",
        ),
        (
            {"regularizer": "var"},
            ValueError,
            r"regularizer must be one of \['variance', 'tanh_mse'\] or None",
        ),
        ({"clip": -1.0}, ValueError, r"clip must be > 0, got -1\.0"),
        ({"regularizer_weight": -0.1}, ValueError, r"regularizer_weight == -0\.1, must be >= 0"),
        ({"weight_gradient": "yes"}, TypeError, r"weight_gradient must be a bool"),
    ],
)
def test_bad_hyperparameters(problem, params, exception, message):
    with pytest.raises(exception, match=message):
        HybridLearner(**params).fit(problem[0])


def test_rejects_other_families(synthetic_log):
    with pytest.raises(
        ValueError, match=r"HybridLearner needs a candidate-set log, got family 'discrete'"
    ):
        HybridLearner().fit(synthetic_log)


def test_usable_by_the_counterfactual_search(problem):
    from poem.learners.search import run_trial

    log = problem[0]
    trial = run_trial(
        HybridLearner(),
        {"weighting": "none"},
        log.take(np.arange(400)),
        log.take(np.arange(400, 600)),
    )
    assert trial.params == {"weighting": "none"} and trial.converged
    assert trial.ips.n == 200 and trial.clipped_fraction == 0.0
