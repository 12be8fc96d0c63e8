"""BanditNet: translated objective, λ search by held-out SNIPS, improvement, contract."""

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

from poem.learners.banditnet import BanditNet, translated_ips_objective
from poem.policies import StochasticPolicy, family_from_log

GRID = [-1.0, -0.6, -0.3, 0.0]  # translations in loss units (losses −click ∈ [−1, 0])


@pytest.fixture(scope="module")
def problem(candidate_problem):
    return candidate_problem


def test_translated_objective_value_and_gradient(problem):
    log = problem[0]
    family = family_from_log(log)
    args = (family, log.candidates, log.actions, log.scaled_losses(), log.propensities, -0.4, 0.01)
    value, _ = translated_ips_objective(np.zeros(5), *args)
    uniform = 1.0 / log.candidates.sizes
    assert value == pytest.approx(np.mean((log.scaled_losses() + 0.4) * uniform / log.propensities))
    w0 = np.random.default_rng(2).normal(scale=0.3, size=5)
    err = check_grad(
        lambda w: translated_ips_objective(w, *args)[0],
        lambda w: translated_ips_objective(w, *args)[1],
        w0,
    )
    assert err < 1e-6


def test_improves_the_true_value_over_the_logger(problem):
    log, click, P = problem
    est = BanditNet(policy="candidates", loss_translations=GRID, random_state=0).fit(log)
    offsets = log.candidates.offsets
    logging_value = -np.mean(np.add.reduceat(P * click, offsets[:-1]))
    learned = -np.mean(np.add.reduceat(est.predict_proba(log.candidates) * click, offsets[:-1]))
    assert learned < logging_value - 0.1, (learned, logging_value)
    assert [r["loss_translation"] for r in est.search_results_] == GRID
    best = min(est.search_results_, key=lambda r: r["snips_risk"])
    assert est.loss_translation_ == best["loss_translation"]
    # translating towards δ_min pushes the weights' mean S down, towards δ_max up
    # (the Lagrangian trade-off)
    assert est.search_results_[0]["mean_weight"] < est.search_results_[-1]["mean_weight"]


def test_discrete_family_improves_on_the_synthetic_problem(synthetic_problem):
    rows = np.arange(1000)
    log = synthetic_problem.log.take(rows)
    expected = synthetic_problem.expected_loss[rows]
    est = BanditNet(loss_translations=[0.3, 0.7], tol=1e-5, random_state=0).fit(log)
    truth = float(np.mean(np.sum(est.predict_proba(log.contexts) * expected, axis=1)))
    logging = float(np.mean(np.sum(synthetic_problem.logging_probs[rows] * expected, axis=1)))
    assert truth < logging - 0.15, (truth, logging)  # 0.51 → about 0.2
    assert est.coef_.shape == (4, 6) and isinstance(est.policy_, StochasticPolicy)


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
    check("BanditNet", BanditNet())


def test_fit_contract_single_translation_and_pickle(problem):
    log = problem[0]
    params = {"policy": "candidates", "loss_translations": [-0.5], "temperature": 0.5}
    est = BanditNet(**params)
    with pytest.raises(NotFittedError):
        est.predict_proba(log.candidates)
    before = est.get_params()
    assert est.fit(log) is est and est.get_params() == before
    assert est.search_results_ == () and est.loss_translation_ == -0.5 and est.converged_
    P = est.predict_proba(log.candidates)
    np.testing.assert_allclose(np.add.reduceat(P, log.candidates.offsets[:-1]), 1.0)
    actions, probs = est.sample(log.candidates, random_state=0)
    np.testing.assert_allclose(probs, P[log.candidates.offsets[:-1] + actions])
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(est)).coef_, est.coef_)
    seeded = [
        BanditNet(policy="candidates", loss_translations=GRID[:2], refit=False, random_state=5)
        .fit(log)
        .coef_
        for _ in range(2)
    ]
    np.testing.assert_array_equal(*seeded)


@pytest.mark.parametrize(
    ("params", "exception", "message"),
    [
        (
            {"policy": "candidate"},
            ValueError,
            r"policy must be one of \['discrete', 'multilabel', 'candidates'\]",
        ),
        (
            {"policy": "discrete"},
            ValueError,
            r"policy='discrete' but the log's family is 'candidates'",
        ),
        (
            {"policy": "candidates", "loss_translations": []},
            ValueError,
            r"loss_translations must be a non-empty",
        ),
        (
            {"policy": "candidates", "validation_fraction": 1.0},
            ValueError,
            r"validation_fraction == 1\.0, must be < 1",
        ),
        (
            {"policy": "candidates", "validation_fraction": 0.001},
            ValueError,
            r"leaves 1 validation and 599 training rows",
        ),
        ({"policy": "candidates", "refit": 1}, TypeError, r"refit must be a bool"),
    ],
)
def test_bad_hyperparameters(problem, params, exception, message):
    with pytest.raises(exception, match=message):
        BanditNet(**params).fit(problem[0])


def test_usable_by_the_counterfactual_search(problem):
    from poem.learners.search import run_trial

    log = problem[0]
    params = {"policy": "candidates", "loss_translations": [-0.5]}
    trial = run_trial(BanditNet(), params, log.take(np.arange(400)), log.take(np.arange(400, 600)))
    assert trial.params == params and trial.ips.n == 200 and trial.clipped_fraction == 0.0
