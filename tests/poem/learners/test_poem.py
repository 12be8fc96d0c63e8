"""The POEM estimator: scikit-learn contract, solvers, calibration rules and bad inputs."""

from __future__ import annotations

import pickle
import re
import warnings
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.utils.estimator_checks import (
    check_estimator_cloneable,
    check_estimator_repr,
    check_get_params_invariance,
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
    check_set_params,
)

from poem.data import LoggedBandit
from poem.exceptions import InvalidLogError
from poem.learners import POEM, calibrated_variance_penalty, crm_objective
from poem.policies import StochasticPolicy

FAST = dict(max_iter=30, tol=1e-4)


def _quiet_fit(est, log):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(log)


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
    check("POEM", POEM())


def test_fit_returns_self_and_keeps_params(synthetic_log):
    est = POEM(solver="lbfgs", variance_penalty="calibrated", variance_scale=0.1, random_state=0)
    before = est.get_params()
    assert est.fit(synthetic_log) is est
    assert est.get_params() == before
    assert est.n_features_in_ == 5 and est.coef_.shape == (4, 6)
    assert isinstance(est.policy_, StochasticPolicy)


@pytest.mark.parametrize("method", ["predict", "predict_proba", "sample"])
def test_not_fitted_error(method, synthetic_log):
    with pytest.raises(NotFittedError):
        getattr(POEM(), method)(synthetic_log.contexts)


def test_rows_sum_to_one_pickle_and_serving_knobs(synthetic_log):
    est = _quiet_fit(
        POEM(temperature=2.0, exploration_floor=0.05, random_state=0, **FAST), synthetic_log
    )
    X = synthetic_log.contexts[:50]
    P = est.predict_proba(X)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    assert P.min() >= 0.05 - 1e-12
    assert (est.policy_.temperature, est.policy_.exploration_floor) == (2.0, 0.05)
    actions, probs = est.sample(X, random_state=1)
    np.testing.assert_allclose(probs, P[np.arange(50), actions])
    clone_ = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(clone_.coef_, est.coef_)
    np.testing.assert_array_equal(clone_.predict_proba(X), P)
    np.testing.assert_array_equal(clone_.predict(X), P.argmax(axis=1))


def test_adagrad_is_seeded_and_reproducible(synthetic_log):
    fits = [_quiet_fit(POEM(random_state=s, max_iter=3), synthetic_log).coef_ for s in (7, 7, 8)]
    np.testing.assert_array_equal(fits[0], fits[1])
    assert not np.array_equal(fits[0], fits[2])


def test_both_solvers_reach_the_same_objective(synthetic_log):
    log = synthetic_log.take(np.arange(600))
    common = dict(clip=20.0, variance_penalty=0.5, l2_penalty=0.01, random_state=0)
    batch = POEM(solver="lbfgs", max_iter=500, tol=1e-10, **common).fit(log)
    sgd = _quiet_fit(
        POEM(solver="adagrad", max_iter=100, tol=1e-9, learning_rate=3.0, **common), log
    )
    assert batch.converged_
    assert sgd.objective_ == pytest.approx(batch.objective_, abs=2e-3)
    assert sgd.objective_ >= batch.objective_ - 1e-6  # L-BFGS found the (local) minimum


def test_objective_matches_the_objective_module(synthetic_log):
    est = _quiet_fit(POEM(variance_penalty=0.3, clip=5.0, random_state=0, **FAST), synthetic_log)
    family = est.family_
    value, _ = crm_objective(
        est.coef_,
        family,
        family.inputs_from_log(synthetic_log),
        synthetic_log.actions,
        synthetic_log.scaled_losses(),
        synthetic_log.propensities,
        clip=5.0,
        variance_penalty=0.3,
    )
    assert est.objective_ == pytest.approx(value, rel=1e-10)


@pytest.mark.parametrize("solver", ["lbfgs", "adagrad"])
def test_anchor_penalty_holds_a_warm_start_and_ignores_zeros(solver, synthetic_log):
    """κ·(d/n)·‖w − w₀‖²: larger κ, closer to w₀; from zeros, the L2 penalty κ·d/n."""
    log = synthetic_log.take(np.arange(600))
    base = dict(solver=solver, clip=20.0, variance_penalty=0.5, random_state=0, max_iter=40,
                learning_rate=3.0, tol=1e-9, standardize=False)  # fmt: skip
    w0 = 0.3 * np.random.default_rng(5).normal(size=_quiet_fit(POEM(**FAST), log).coef_.shape)
    fits = [_quiet_fit(POEM(**base, warm_start=w0, anchor_penalty=k), log) for k in (0, 0.3, 30)]
    moved = [np.linalg.norm(f.coef_ - w0) for f in fits]
    assert moved[0] > moved[1] > moved[2] and moved[2] < 0.05 * moved[0]
    assert fits[2].policy_.metadata["anchor_penalty"] == 30.0
    if solver == "lbfgs":  # objective_ is J(w) plus the anchor term exactly (μ = 0)
        est = fits[1]
        value, _ = crm_objective(
            est.coef_,
            est.family_,
            est.family_.inputs_from_log(log),
            log.actions,
            log.scaled_losses(),
            log.propensities,
            clip=20.0,
            variance_penalty=est.variance_penalty_,
        )
        anchor = 0.3 * w0.size / log.n_rows * np.sum((est.coef_ - w0) ** 2)
        assert est.objective_ == pytest.approx(value + anchor, rel=1e-10)
    anchored = _quiet_fit(POEM(**base, anchor_penalty=0.3), log)
    l2 = _quiet_fit(POEM(**base, l2_penalty=0.3 * w0.size / log.n_rows), log)
    np.testing.assert_array_equal(anchored.coef_, l2.coef_)
    assert np.linalg.norm(anchored.coef_) < np.linalg.norm(_quiet_fit(POEM(**base), log).coef_)


@pytest.mark.parametrize("objective", ["ips", "dr"])
def test_implicit_exploration_is_the_objective_on_propensities_plus_gamma(objective, make_log):
    """IX weights π/(p + γ): the fit equals the plain fit on a log with pᵢ + γ (clip from p)."""
    family = "discrete" if objective == "ips" else "multilabel"
    log = make_log(family, n=160, seed=3)
    log = log.take(np.flatnonzero(log.propensities <= 0.8))  # p + γ stays a probability
    gamma = float(np.percentile(log.propensities, 10))
    assert 0.0 < gamma < 0.2
    shifted = replace(log, propensities=log.propensities + gamma)
    base = dict(policy=family, objective=objective, solver="lbfgs", variance_penalty=0.2, **FAST)
    ix = _quiet_fit(POEM(**base, clip=None, implicit_exploration="p10"), log)
    plain = _quiet_fit(POEM(**base, clip=None), shifted)
    np.testing.assert_allclose(ix.coef_, plain.coef_, rtol=1e-10, atol=1e-12)
    assert ix.objective_ == pytest.approx(plain.objective_, rel=1e-10)
    fixed = _quiet_fit(POEM(**base, clip=None, implicit_exploration=gamma), log)
    np.testing.assert_array_equal(fixed.coef_, ix.coef_)
    assert _quiet_fit(POEM(**base, clip=None), log).objective_ != pytest.approx(ix.objective_)


def test_implicit_exploration_is_pessimistic_for_ips(synthetic_log):
    """δ' ≤ 0 and smaller weights: the IX estimate of any fixed policy is ≥ the IPS one."""
    est = _quiet_fit(POEM(solver="lbfgs", clip=None, variance_penalty=0.0, **FAST), synthetic_log)
    family, log = est.family_, synthetic_log
    args = (est.coef_, family, family.inputs_from_log(log), log.actions, log.scaled_losses())
    ips, _ = crm_objective(*args, log.propensities, clip=np.inf, variance_penalty=0.0)
    ix, _ = crm_objective(*args, log.propensities + 0.05, clip=np.inf, variance_penalty=0.0)
    assert ips < ix <= 0.0


def test_implicit_exploration_refuses_the_marginal_objective(make_log):
    with pytest.raises(ValueError, match=r"objective='marginal' uses per-label weights"):
        POEM(policy="multilabel", objective="marginal", implicit_exploration="p10").fit(
            make_log("multilabel")
        )


def test_poem_improves_true_risk_over_the_logger(synthetic_problem):
    prob = synthetic_problem
    logger = float(np.mean(np.sum(prob.logging_probs * prob.expected_loss, axis=1)))
    for solver in ("adagrad", "lbfgs"):
        est = _quiet_fit(
            POEM(
                solver=solver,
                variance_penalty="calibrated",
                variance_scale=0.1,
                random_state=0,
                **FAST,
            ),
            prob.log,
        )
        risk = float(
            np.mean(np.sum(est.predict_proba(prob.log.contexts) * prob.expected_loss, axis=1))
        )
        assert risk < logger - 0.1, (solver, risk, logger)


def test_calibration_rules(synthetic_log):
    p = synthetic_log.propensities
    d = synthetic_log.scaled_losses()
    lam_star = -d.mean() / np.sqrt(d.var(ddof=1) / d.size)
    assert calibrated_variance_penalty(d) == pytest.approx(lam_star, rel=1e-12)
    cases = [
        ("p90/p10", np.percentile(p, 90) / np.percentile(p, 10)),
        ("max/min", p.max() / p.min()),
        (7.5, 7.5),
        (None, np.inf),
    ]
    for clip, expected in cases:
        est = POEM(
            solver="lbfgs",
            clip=clip,
            variance_penalty="calibrated",
            variance_scale=0.25,
            max_iter=2,
        ).set_params()
        _quiet_fit(est, synthetic_log)
        assert est.clip_ == pytest.approx(expected, rel=1e-12)
        assert est.variance_penalty_ == pytest.approx(0.25 * lam_star, rel=1e-12)
    assert (
        _quiet_fit(POEM(variance_penalty=0.0, max_iter=1), synthetic_log).variance_penalty_ == 0.0
    )


def test_convergence_warning_names_a_remedy(synthetic_log):
    for solver in ("adagrad", "lbfgs"):
        with pytest.warns(ConvergenceWarning, match="increase max_iter"):
            est = POEM(solver=solver, max_iter=1, tol=0.0).fit(synthetic_log)
        assert est.converged_ is False and est.n_iter_ == 1


@pytest.mark.parametrize("family", ["multilabel", "candidates"])
def test_other_families_fit_and_predict(family, make_log):
    log = make_log(family, n=60)
    est = _quiet_fit(POEM(policy=family, variance_penalty=0.1, random_state=0, **FAST), log)
    inputs = log.contexts if family == "multilabel" else log.candidates
    assert np.all(np.isfinite(est.coef_)) and est.objective_ < 0
    assert est.predict(inputs).shape[0] == 60


def test_plain_array_form_equals_log_form(synthetic_log):
    log = synthetic_log
    a = POEM(solver="lbfgs", max_iter=200, tol=1e-4).fit(
        log.contexts,
        log.actions,
        propensities=log.propensities,
        losses=log.losses,
        loss_bounds=log.loss_bounds,
    )
    b = POEM(solver="lbfgs", max_iter=200, tol=1e-4).fit(log)
    np.testing.assert_allclose(a.coef_, b.coef_)


BAD_PARAMS = [
    (
        dict(solver="Adagrad"),
        ValueError,
        r"solver must be one of \['adagrad', 'lbfgs'\], got 'Adagrad'",
    ),
    (dict(policy="multi"), ValueError, r"policy must be one of .*got 'multi'"),
    (dict(clip="p90"), ValueError, r"clip must be one of \['p90/p10', 'max/min'\].*got 'p90'"),
    (dict(clip=0), ValueError, r"clip must be > 0, got 0"),
    (dict(clip=-2.5), ValueError, r"clip must be > 0, got -2.5"),
    (dict(clip=[3]), TypeError, r"clip must be a str, a real number or None, got list"),
    (
        dict(variance_penalty="calib"),
        ValueError,
        r"variance_penalty must be .*'calibrated', got 'calib'",
    ),
    (dict(variance_penalty=-1.0), ValueError, r"variance_penalty == -1.0, must be >= 0"),
    (dict(l2_penalty=-0.1), ValueError, r"l2_penalty == -0.1, must be >= 0"),
    (dict(anchor_penalty=-1.0), ValueError, r"anchor_penalty == -1.0, must be >= 0"),
    (dict(anchor_penalty="1e-5"), TypeError, r"anchor_penalty must be an instance of float"),
    (dict(implicit_exploration=-0.1), ValueError, r"implicit_exploration must be >= 0, got -0.1"),
    (
        dict(implicit_exploration="p0"),
        ValueError,
        r"implicit_exploration must be .*rule 'p1'..'p99', got 'p0'",
    ),
    (dict(implicit_exploration=[0.1]), TypeError, r"implicit_exploration must be a real number"),
    (dict(learning_rate=0.0), ValueError, r"learning_rate == 0.0, must be > 0"),
    (dict(batch_size=0), ValueError, r"batch_size == 0, must be >= 1"),
    (dict(max_iter=2.5), TypeError, r"max_iter must be an instance of"),
    (dict(progressive="yes"), TypeError, r"progressive must be a bool, got str"),
    (dict(temperature=0.0), ValueError, r"temperature == 0.0, must be > 0"),
    (
        dict(exploration_floor=0.4),
        ValueError,
        r"exploration_floor must be in \[0, 0.333333\].*got 0.4",
    ),
]


@pytest.mark.parametrize(("params", "exc", "regex"), BAD_PARAMS)
def test_bad_hyperparameters(params, exc, regex, tiny_log):
    with pytest.raises(exc, match=regex):
        POEM(**params).fit(tiny_log)


def _single_row(log):
    return log.take([0])


def _identical_actions(log):
    return LoggedBandit(
        log.contexts,
        np.zeros(log.n_rows, dtype=int),
        log.losses,
        log.propensities,
        loss_bounds=log.loss_bounds,
        n_actions=3,
    )


BAD_LOGS = [
    (_single_row, InvalidLogError, r"rows.*1 row\(s\); at least 2"),
    (_identical_actions, InvalidLogError, r"action.*5"),
]


@pytest.mark.parametrize(("mutate", "exc", "regex"), BAD_LOGS)
def test_bad_logs(mutate, exc, regex, tiny_log):
    with pytest.raises(exc, match=regex):
        POEM().fit(mutate(tiny_log))


def test_wrong_family_is_rejected(make_log):
    log = make_log("multilabel", n=20)
    with pytest.raises(
        ValueError, match=re.escape("policy='discrete' but the log's family is 'multilabel'")
    ):
        POEM(policy="discrete").fit(log)


@pytest.mark.parametrize("sparse_fit", [False, True])
def test_feature_count_mismatch_at_predict_time(sparse_fit, make_log):
    log = make_log("discrete", n=30, sparse=sparse_fit)
    est = _quiet_fit(POEM(solver="lbfgs", max_iter=5), log)
    bad = np.ones((4, 5))
    for X in (bad, sp.csr_matrix(bad)):
        for method in (est.predict, est.predict_proba, est.sample):
            with pytest.raises(
                ValueError, match="X has 5 features, but the policy was fitted with 3 features"
            ):
                method(X)
    assert est.predict_proba(sp.csr_matrix(np.ones((4, 3)))).shape == (4, 4)
    assert clone(est).get_params() == est.get_params()


def test_progressive_majorization_is_exact_at_the_end(synthetic_log):
    est = _quiet_fit(
        POEM(progressive=True, variance_penalty=0.3, clip=5.0, random_state=0, **FAST),
        synthetic_log,
    )
    family = est.family_
    value, grad = crm_objective(
        est.coef_,
        family,
        family.inputs_from_log(synthetic_log),
        synthetic_log.actions,
        synthetic_log.scaled_losses(),
        synthetic_log.propensities,
        clip=5.0,
        variance_penalty=0.3,
    )
    assert est.objective_ == pytest.approx(value, rel=1e-12)
    again = _quiet_fit(
        POEM(progressive=True, variance_penalty=0.3, clip=5.0, random_state=0, **FAST),
        synthetic_log,
    )
    np.testing.assert_array_equal(est.coef_, again.coef_)
    zero = crm_objective(
        np.zeros_like(est.coef_),
        family,
        family.inputs_from_log(synthetic_log),
        synthetic_log.actions,
        synthetic_log.scaled_losses(),
        synthetic_log.propensities,
        clip=5.0,
        variance_penalty=0.3,
    )[0]
    assert value < zero  # it learned something from w = 0


def test_rejected_epochs_shrink_the_step_and_never_raise_the_objective(synthetic_log):
    """The MM safeguard: with an absurd step size every accepted epoch still lowers J."""
    est = _quiet_fit(
        POEM(learning_rate=1e4, variance_penalty=0.5, random_state=0, max_iter=6), synthetic_log
    )
    family = est.family_
    zero = crm_objective(
        np.zeros_like(est.coef_),
        family,
        family.inputs_from_log(synthetic_log),
        synthetic_log.actions,
        synthetic_log.scaled_losses(),
        synthetic_log.propensities,
        clip=est.clip_,
        variance_penalty=0.5,
    )[0]
    assert est.objective_ <= zero


def test_overshooting_epochs_shrink_the_step_by_the_fraction_that_worked(synthetic_log):
    """η shrinks by the backtracking fraction (⅛ on rejection): few wasted epochs at η = 10⁴."""
    est = _quiet_fit(
        POEM(learning_rate=1e4, variance_penalty=0.5, random_state=0, max_epochs=2),
        synthetic_log,
    )
    # two accepted epochs; each rejection divides η by 8, so at most 4 rejections (8⁴ > 10³)
    assert 2 <= est.n_iter_ <= 6


def test_fits_on_one_log_share_its_checked_and_standardized_inputs(synthetic_log):
    """A search's trials prepare the training log once; the kept arrays are read-only."""
    first = _quiet_fit(POEM(variance_penalty=0.1, random_state=0, max_iter=3), synthetic_log)
    kept = synthetic_log.__dict__["_prepared_for_fit"]
    assert list(kept) == [(True, True)]
    (part,) = kept[(True, True)].partitions.items  # a log in memory: one partition
    assert not part.inputs.flags.writeable and not part.scaled_losses.flags.writeable
    second = _quiet_fit(POEM(variance_penalty=0.1, random_state=0, max_iter=3), synthetic_log)
    np.testing.assert_array_equal(first.coef_, second.coef_)
    assert len(kept[(True, True)].cache["starts"]) == 1  # one w₀, one clip: one pass
    fresh = LoggedBandit(
        synthetic_log.contexts,
        synthetic_log.actions,
        synthetic_log.losses,
        synthetic_log.propensities,
        loss_bounds=synthetic_log.loss_bounds,
    )
    third = _quiet_fit(POEM(variance_penalty=0.1, random_state=0, max_iter=3), fresh)
    np.testing.assert_array_equal(first.coef_, third.coef_)
    _quiet_fit(POEM(fit_intercept=False, max_iter=2, random_state=0), synthetic_log)
    assert sorted(kept) == [(False, True), (True, True)]
