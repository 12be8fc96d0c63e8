"""The doubly robust CRM objective with a cross-fitted additive loss model (issue 21)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from poem.learners import POEM
from poem.learners._additive import fit_additive_loss_model
from poem.learners.learning_evidence import learning_evidence
from poem.learners.objective import (
    crm_objective_from_statistics,
    crm_statistics,
    majorized_batch_gradient,
    majorized_gradient,
    majorizer_coefficients,
)
from poem.learners.prepared import prepare_log
from poem.learners.search import search_hyperparameters
from poem.policies.multilabel import MultilabelFamily
from poem.simulate import fit_logging_policy, supervised_to_bandit, true_expected_loss


def _rows(seed: int = 0, n: int = 200, d: int = 4, q: int = 3, marginal: bool = False):
    """Random rows and their additive loss model; ``marginal``: logged by a known factorized
    logger, whose marginals follow the model's columns (the per-label objective, issue 35)."""
    rng = np.random.default_rng(seed)
    family = MultilabelFamily(d, q, fit_intercept=True)
    X = family.prepare(rng.normal(size=(n, d)))
    if not marginal:
        Y = rng.integers(0, 2, size=(n, q))
        p = rng.uniform(0.05, 0.3, n)
        scaled = -rng.uniform(0.0, 1.0, n)
        return family, X, Y, p, scaled, fit_additive_loss_model(X, Y, scaled)
    logger = rng.uniform(0.1, 0.9, size=(n, q))
    Y = (rng.random((n, q)) < logger).astype(np.int64)
    p = np.prod(np.where(Y > 0, logger, 1.0 - logger), axis=1)
    scaled = -rng.uniform(0.0, 1.0, n)
    model = np.concatenate([fit_additive_loss_model(X, Y, scaled), logger], axis=1)
    return family, X, Y, p, scaled, model


@pytest.mark.parametrize("marginal", [False, True], ids=["joint", "per-label"])
@pytest.mark.parametrize("penalty", [0.0, 2.0])
def test_dr_gradient_matches_finite_differences(penalty, marginal):
    family, X, Y, p, scaled, model = _rows(marginal=marginal)
    w = np.random.default_rng(1).normal(size=family.coef_shape) * 0.3

    def objective(coef):
        stats = crm_statistics(coef, family, X, Y, scaled, p, 5.0, loss_model=model)
        return crm_objective_from_statistics(stats, coef, penalty, 0.0)

    _, grad = objective(w)
    numeric = np.zeros_like(w)
    for idx in np.ndindex(w.shape):
        step = np.zeros_like(w)
        step[idx] = 1e-6
        numeric[idx] = (objective(w + step)[0] - objective(w - step)[0]) / 2e-6
    np.testing.assert_allclose(grad, numeric, atol=1e-8)
    assert np.abs(grad).max() > 1e-3  # not a vacuous comparison


def test_marginal_u_is_the_model_term_plus_the_residual_times_the_summed_label_weights():
    family, X, Y, p, scaled, model = _rows(n=5, marginal=True)
    q = Y.shape[1]
    logger = model[:, q + 1 :]
    w = np.zeros(family.coef_shape)  # σ = 1/2 for every label
    stats = crm_statistics(w, family, X, Y, scaled, p, np.inf, loss_model=model)
    gains, offsets = model[:, :q], model[:, q]
    residual = scaled - offsets - np.sum(Y * gains, axis=1)
    label_weights = 0.5 / np.where(Y > 0, logger, 1.0 - logger)
    u = offsets + 0.5 * gains.sum(axis=1) + residual * (label_weights.sum(axis=1) - q + 1)
    assert stats.sum_u == pytest.approx(u.sum(), rel=1e-12)
    assert stats.sum_u2 == pytest.approx(u @ u, rel=1e-12)
    # the joint weight of the same rows is 2^-q / p: a different objective
    joint = crm_statistics(w, family, X, Y, scaled, p, np.inf, loss_model=model[:, : q + 1])
    assert joint.sum_u != pytest.approx(stats.sum_u, rel=1e-3)


@pytest.mark.parametrize("marginal", [False, True], ids=["joint", "per-label"])
def test_dr_statistics_add_over_chunks_and_batch_gradient_agrees(marginal):
    family, X, Y, p, scaled, model = _rows(marginal=marginal)
    w = np.random.default_rng(2).normal(size=family.coef_shape) * 0.3
    whole = crm_statistics(w, family, X, Y, scaled, p, 5.0, loss_model=model)
    chunked = crm_statistics(w, family, X, Y, scaled, p, 5.0, loss_model=model, chunk_size=37)
    assert chunked.sum_u == pytest.approx(whole.sum_u, abs=1e-12)
    np.testing.assert_allclose(chunked.sum_u_grad_u, whole.sum_u_grad_u, atol=1e-12)
    coefficients = majorizer_coefficients(whole)
    kw = dict(n_total=200, variance_penalty=2.0, l2_penalty=0.0)
    one_pass = majorized_batch_gradient(
        w, family, X, Y, scaled, p, 5.0, coefficients, loss_model=model, **kw
    )
    np.testing.assert_allclose(one_pass, majorized_gradient(whole, w, coefficients, **kw))


def test_dr_u_is_the_model_expectation_plus_the_weighted_residual():
    family, X, Y, p, scaled, model = _rows(n=5)
    w = np.zeros(family.coef_shape)  # σ = 1/2 for every label: π(y|x) = 2^-q
    stats = crm_statistics(w, family, X, Y, scaled, p, np.inf, loss_model=model)
    gains, offsets = model[:, :-1], model[:, -1]
    residual = scaled - offsets - np.sum(Y * gains, axis=1)
    u = offsets + 0.5 * gains.sum(axis=1) + residual * (0.125 / p)
    assert stats.sum_u == pytest.approx(u.sum(), rel=1e-12)
    assert stats.sum_u2 == pytest.approx(u @ u, rel=1e-12)


def test_additive_loss_model_recovers_an_additive_loss():
    rng = np.random.default_rng(3)
    n, d, q = 2000, 3, 4
    X = np.column_stack([rng.normal(size=(n, d)), np.ones(n)])
    Y = rng.integers(0, 2, size=(n, q))
    A, b = rng.normal(size=(q, d + 1)) * 0.1, rng.normal(size=d + 1) * 0.1
    loss = X @ b + np.sum(Y * (X @ A.T), axis=1)
    model = fit_additive_loss_model(X, Y, loss, ridge=1e-3, max_iter=200)
    fitted = model[:, -1] + np.sum(Y * model[:, :-1], axis=1)
    assert np.corrcoef(fitted, loss)[0, 1] > 0.999
    np.testing.assert_allclose(model[:, :-1], X @ A.T, atol=0.02)


def test_additive_loss_model_rejects_bad_settings():
    X, Y = np.ones((4, 2)), np.zeros((4, 2))
    with pytest.raises(ValueError, match=r"folds must be in \[1, n_samples=4\], got 5"):
        fit_additive_loss_model(X, Y, np.zeros(4), folds=5)
    with pytest.raises(ValueError, match="ridge must be > 0, got 0"):
        fit_additive_loss_model(X, Y, np.zeros(4), ridge=0)


def test_objective_option_is_checked(make_log):
    with pytest.raises(
        ValueError, match="objective must be one of \\['ips', 'dr', 'auto', 'marginal'\\]"
    ):
        POEM(objective="DR").fit(make_log("discrete"))
    with pytest.raises(ValueError, match="objective='dr' needs a family with an additive loss"):
        POEM(objective="dr").fit(make_log("discrete"))


def test_auto_is_ips_for_discrete_and_dr_for_multilabel(make_log):
    kw = dict(solver="lbfgs", max_iter=5, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        log = make_log("discrete")
        auto = POEM(objective="auto", **kw).fit(log)
        np.testing.assert_array_equal(auto.coef_, POEM(objective="ips", **kw).fit(log).coef_)
        ml = make_log("multilabel")
        kw["policy"] = "multilabel"
        auto = POEM(objective="auto", **kw).fit(ml)
        np.testing.assert_array_equal(auto.coef_, POEM(objective="dr", **kw).fit(ml).coef_)
        assert not np.allclose(auto.coef_, POEM(objective="ips", **kw).fit(ml).coef_)


@pytest.fixture(scope="module")
def multilabel_problem():
    """A logger on 5 % of a synthetic multilabel set, 4 replays (DESIGN §9 protocol)."""
    rng = np.random.default_rng(0)
    n, d, q = 1200, 8, 6
    X = rng.normal(size=(n, d))
    Y = (X @ rng.normal(size=(d, q)) + 0.3 * rng.normal(size=(n, q)) > 0).astype(int)
    h0 = fit_logging_policy(X[:800], Y[:800], family="multilabel", fraction=0.05, random_state=0)
    log = supervised_to_bandit(X[:800], Y[:800], h0, n_replays=4, random_state=0)
    return h0, log, X[800:], Y[800:]


@pytest.mark.parametrize("solver", ["lbfgs", "adagrad"])
def test_dr_fit_from_the_logger_beats_the_ips_fit_in_true_loss(multilabel_problem, solver):
    # the root cause of issue 21: the joint IPS weight Π_l σ_l/p_l over q labels makes the
    # clipped IPS minimizer worse than its start; the doubly robust u uses it only on the
    # residual of an additive loss model
    h0, log, X_test, Y_test = multilabel_problem
    losses = {}
    for objective in ("ips", "dr"):
        model = POEM(
            policy="multilabel",
            solver=solver,
            objective=objective,
            variance_penalty="calibrated",
            variance_scale=0.001,
            max_iter=50,
            max_epochs=2,
            learning_rate=1000.0,
            learning_rate_unit="epoch",
            batch_size=300,
            warm_start=h0,
            random_state=0,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            losses[objective] = true_expected_loss(model.fit(log).policy_, X_test, Y_test)
    start = true_expected_loss(h0, X_test, Y_test)
    assert losses["dr"] < start - 0.1
    assert losses["dr"] < losses["ips"] - 0.05


def test_no_harm_a_fit_must_be_shown_better_than_the_logger(multilabel_problem):
    """A 3-step fit from zeros is not shown better than h₀; a DR fit from h₀ is (paired DR)."""
    h0, log, _, _ = multilabel_problem
    train, valid = log.take(np.arange(800, log.n_rows)), log.take(np.arange(800))
    bad = POEM(policy="multilabel", solver="lbfgs", max_iter=3, warm_start="zeros")
    good = POEM(policy="multilabel", solver="lbfgs", objective="dr", warm_start=h0, max_iter=50)
    verdicts = {}
    for name, model in (("bad", bad), ("good", good)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit = search_hyperparameters(
                model, train, valid, {"variance_penalty": [0.0]}, keep_estimators=True
            ).best_trial
        verdicts[name] = learning_evidence(fit.estimator.policy_, h0, valid, train)
    assert not verdicts["bad"].learned and verdicts["bad"].difference > 0
    assert verdicts["good"].learned and verdicts["good"].upper < 0


def test_adagrad_checks_its_epochs_on_the_doubly_robust_objective(multilabel_problem):
    # the epoch check, the majorizer and the reported J(w) must be the objective the steps
    # descend: before the fix AdaGrad compared the DR J(w₀) with the IPS J of each new epoch
    h0, log, _, _ = multilabel_problem
    model = POEM(
        policy="multilabel",
        solver="adagrad",
        objective="dr",
        variance_penalty="calibrated",
        variance_scale=0.001,
        max_epochs=3,
        learning_rate=1000.0,
        learning_rate_unit="epoch",
        batch_size=300,
        warm_start=h0,
        random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(log)
    prepared = model._with_loss_model(
        prepare_log(log, fit_intercept=True, standardize_features=True)
    )  # the rows the fit descends, with their cross-fitted loss model
    coef = prepared.scaling.from_raw(model.coef_)
    stats = prepared.statistics(coef, model.clip_)
    value, _ = crm_objective_from_statistics(stats, coef, model.variance_penalty_, 0.0)
    assert model.objective_ == pytest.approx(value, rel=1e-9)
    start = prepared.scaling.from_raw(h0.coef / h0.temperature)
    at_start = prepared.statistics(start, model.clip_)
    assert value < crm_objective_from_statistics(at_start, start, model.variance_penalty_, 0.0)[0]
