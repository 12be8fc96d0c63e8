"""Doubly robust paired evidence that a fit beats the best re-tempered champion (issue 21)."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from poem.learners.learning_evidence import learning_evidence
from poem.policies import StochasticPolicy, make_family
from poem.simulate import fit_logging_policy, supervised_to_bandit, true_expected_loss
from tests.conftest import make_synthetic


def _discrete_policy(coef: np.ndarray) -> StochasticPolicy:
    return StochasticPolicy(make_family("discrete", coef.shape[1] - 1, coef.shape[0], True), coef)


def test_discrete_difference_is_unbiased_and_decides():
    """Known truth: E[δ|x,a] = σ(x·θ_a); a policy that avoids high losses vs the uniform one."""
    problem = make_synthetic(n=3000, seed=4)
    log = problem.log
    stream = np.random.default_rng(4)  # make_synthetic's stream: X, then θ
    stream.normal(size=(3000, 5))
    theta = stream.normal(size=(4, 5))
    good = _discrete_policy(np.hstack([-2.0 * theta, np.zeros((4, 1))]))
    uniform = _discrete_policy(np.zeros((4, 6)))
    risk = [
        float(np.mean(np.sum(p.predict_proba(log.contexts) * problem.expected_loss, axis=1)))
        for p in (good, uniform)
    ]
    valid, rest = log.take(np.arange(1000)), log.take(np.arange(1000, 3000))
    ev = learning_evidence(good, uniform, valid, rest)
    truth = risk[0] - risk[1]
    assert truth < -0.15  # the test's premise: the fit is much better
    assert abs(ev.difference - truth) < 3 * ev.std_error + 0.02
    assert ev.learned and ev.upper < 0 and ev.model_difference < ev.model_upper < 0
    assert (ev.n_validation, ev.n_model_rows, ev.confidence_level) == (1000, 3000, 0.95)
    assert 0.0 < ev.loss_model_r2 < 1.0
    assert ev.covered and abs(ev.weight_mean - 1.0) < 3 * ev.weight_std_error  # E[r] = 1
    assert ev.coverage_penalty == 0.0 and not ev.refused_for_coverage
    back = learning_evidence(uniform, good, valid, rest)  # the other way round: not learned
    assert back.difference == pytest.approx(-ev.difference, abs=1e-12) and not back.learned


class _RowTable:
    """A policy that is a table over the validation rows (in their order): the memorizer."""

    def __init__(self, probabilities: np.ndarray):
        self.probabilities = probabilities

    def predict_proba(self, contexts):
        return self.probabilities

    def action_probability(self, contexts, actions):
        return self.probabilities[np.arange(len(actions)), np.asarray(actions)]


def test_a_fit_carried_by_the_residual_term_alone_is_not_shown_better():
    """Selection on the validation rows leaks into the weighted residual, not the model term.

    Action 0 has expected loss 0.7, the others 0.4, at every context. The "fit" puts 0.9 on
    action 0, except on the validation rows whose logged loss was 0, where it puts 0.9 on the
    logged action (a lookup of realised noise, as a fit selected on these rows partly is): worse
    than uniform in truth. The DR bound alone shows it better; its model term shows it worse,
    so it is not served (the same outcome on seeds 4-11).
    """
    problem = make_synthetic(n=3000, seed=4)
    mu = np.array([0.7, 0.4, 0.4, 0.4])
    coin = np.random.default_rng(5).random(3000) < mu[np.asarray(problem.log.actions)]
    log = replace(problem.log, losses=coin.astype(float))
    valid, rest = log.take(np.arange(1000)), log.take(np.arange(1000, 3000))
    k = log.n_actions
    table = np.full((1000, k), 0.1 / (k - 1))
    table[:, 0] = 0.9
    lucky = np.flatnonzero(np.asarray(valid.losses) == 0.0)
    table[lucky] = 0.1 / (k - 1)
    table[lucky, np.asarray(valid.actions)[lucky]] = 0.9
    fit, uniform = _RowTable(table), _RowTable(np.full((1000, k), 1.0 / k))
    truth = float(np.mean(table @ mu) - mu.mean())
    ev = learning_evidence(fit, uniform, valid, rest)
    assert truth > 0.05  # the premise: worse in truth
    assert ev.upper < -0.3  # the DR bound alone is fooled by the row-wise selection ...
    assert abs(ev.model_difference - truth) < 0.03 and ev.model_upper > 0  # ... its model term not
    assert not ev.learned and ev.to_dict()["learned"] == 0.0


def test_a_fit_whose_weights_under_cover_the_rows_is_not_shown_better():
    """A fit that never plays the logged action: both bounds < 0, weights shown to average < 1.

    Action 0 has expected loss 0.7, the others 0.4. The fit puts 0.99 on the low-loss actions
    other than the logged one, so every rᵢ ≤ 0.01/pᵢ: the DR difference is the loss model's
    alone (right here, the fit is truly better), and nothing on these rows could show it wrong.
    Its mean weight, 1 in expectation for any policy, is bounded far below 1; that unseen share
    valued at the loss range turns the bound positive: not served.
    """
    problem = make_synthetic(n=3000, seed=4)
    mu = np.array([0.7, 0.4, 0.4, 0.4])
    coin = np.random.default_rng(5).random(3000) < mu[np.asarray(problem.log.actions)]
    log = replace(problem.log, losses=coin.astype(float))
    valid, rest = log.take(np.arange(1000)), log.take(np.arange(1000, 3000))
    k, logged = log.n_actions, np.asarray(valid.actions)
    avoid = np.zeros((1000, k), dtype=bool)
    avoid[:, 0] = True
    avoid[np.arange(1000), logged] = True
    table = np.where(avoid, 0.01, 0.99)
    table /= table.sum(axis=1, keepdims=True)
    fit, uniform = _RowTable(table), _RowTable(np.full((1000, k), 1.0 / k))
    ev = learning_evidence(fit, uniform, valid, rest)
    assert ev.upper < 0 and ev.model_upper < 0  # both halves say better ...
    assert ev.weight_mean < 0.1 and ev.weight_upper < 0.2  # ... on weights that cover nothing
    lo, hi = valid.loss_bounds  # the unseen share (1 − U_f), the uniform policy's none
    assert ev.coverage_penalty == pytest.approx((hi - lo) * (1.0 - ev.weight_upper), rel=1e-9)
    assert ev.upper + ev.coverage_penalty > 0.5 and not ev.covered and not ev.learned
    assert ev.refused_for_coverage  # the penalty alone keeps it out
    assert ev.to_dict()["covered"] == 0.0 and ev.to_dict()["learned"] == 0.0


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_the_same_policy_is_never_shown_better(make_log, family):
    """Identical served policies: Δ̂ = 0 exactly, se 0, so the fit is not served."""
    log = make_log(family, n=60, seed=1)
    family_ = make_family(family, 3, 5 if family == "multilabel" else 4, True)
    shape = family_.coef_shape
    policy = StochasticPolicy(family_, np.random.default_rng(2).normal(size=shape))
    ev = learning_evidence(policy, policy, log.take(np.arange(30)), log.take(np.arange(30, 60)))
    assert (ev.difference, ev.std_error, ev.upper) == (0.0, 0.0, 0.0)
    assert (ev.model_difference, ev.model_upper) == (0.0, 0.0)
    assert not ev.learned
    assert ev.to_dict()["learned"] == 0.0


def test_multilabel_difference_tracks_the_true_hamming_loss():
    """Multilabel: h₀ sharpened vs h₀ on a simulated log; Δ̂ within 3 se of the true difference."""
    rng = np.random.default_rng(7)
    n, d, q = 1500, 6, 5
    X = rng.normal(size=(n, d))
    Y = (X @ rng.normal(size=(d, q)) + 0.3 * rng.normal(size=(n, q)) > 0).astype(int)
    h0 = fit_logging_policy(X, Y, family="multilabel", fraction=0.1, random_state=0)
    log = supervised_to_bandit(X, Y, h0, n_replays=2, random_state=0)
    sharp = h0.with_serving(temperature=0.25)
    truth = true_expected_loss(sharp, X, Y) - true_expected_loss(h0, X, Y)
    valid, rest = log.take(np.arange(0, n)), log.take(np.arange(n, 2 * n))  # pass 1, pass 2
    ev = learning_evidence(sharp, h0, valid, rest)
    assert truth < 0
    assert abs(ev.difference - truth) < 3 * ev.std_error
    assert ev.learned
    assert ev.loss_model_r2 > 0.3  # the additive model explains the Hamming loss
    alone = learning_evidence(sharp, h0, valid)  # the model cross-fitted on validation only
    assert alone.n_model_rows == n and abs(alone.difference - truth) < 3 * alone.std_error


def test_bad_inputs_are_named(make_log):
    log = make_log("discrete", n=40, seed=0)
    policy = _discrete_policy(np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"confidence_level must be in \(0, 1\), got 1.0"):
        learning_evidence(policy, policy, log, confidence_level=1.0)
    with pytest.raises(ValueError, match="at least 2 validation rows, got 1"):
        learning_evidence(policy, policy, log.take([0]))
    other = make_log("multilabel", n=40, seed=0)
    with pytest.raises(
        ValueError, match="model_log is a 'multilabel' log, validation_log 'discrete'"
    ):
        learning_evidence(policy, policy, log, other)
    nan = learning_evidence(policy, policy, replace(log, losses=np.full(40, 0.5)))
    assert math.isnan(nan.loss_model_r2) and not nan.learned  # constant losses: R² undefined


def _replayed(log, times: int):
    """Each row of ``log`` ``times`` times in a row, and its cluster label (the original row)."""
    index = np.repeat(np.arange(log.n_rows), times)
    return replace(log, event_ids=None).take(index), index  # a replay is a new event


def test_replays_of_one_context_are_one_cluster():
    """Four copies of each row: row-wise s.e. halves (a false gain in power), clustered does not.

    With every row copied k times the cluster-robust standard error of a mean equals the row-wise
    one of the original rows exactly (G/(G−1)·Σ(k·(t_g − t̄))²/(k·G)² = s²/G), so the clustered
    evidence on the copies has the original's standard error up to the loss model's folds.
    """
    problem = make_synthetic(n=1600, seed=5)
    log = problem.log
    stream = np.random.default_rng(5)
    stream.normal(size=(1600, 5))
    theta = stream.normal(size=(4, 5))
    good = _discrete_policy(np.hstack([-0.3 * theta, np.zeros((4, 1))]))
    uniform = _discrete_policy(np.zeros((4, 6)))
    valid, rest = log.take(np.arange(400)), log.take(np.arange(400, 1600))
    original = learning_evidence(good, uniform, valid, rest)
    copies, clusters = _replayed(valid, 4)
    naive = learning_evidence(good, uniform, copies, rest)
    clustered = learning_evidence(good, uniform, copies, rest, groups=clusters)
    assert (naive.n_clusters, clustered.n_clusters, clustered.n_validation) == (1600, 400, 1600)
    assert naive.std_error == pytest.approx(original.std_error / 2, rel=0.1)
    assert clustered.std_error == pytest.approx(original.std_error, rel=0.1)
    assert clustered.upper - clustered.difference > 1.8 * (naive.upper - naive.difference)


def test_clusters_cross_fit_the_loss_model_apart(make_log):
    """A cluster's predictions come from a model that never saw it: its losses cannot move them."""
    from poem.estimators._loss_model import fit_loss_model, group_folds
    from poem.learners._additive import fit_additive_loss_model
    from poem.learners.prepared import prepare_log

    folds = group_folds(np.repeat(np.arange(30), 4), 5, 0)
    assert np.all(folds.reshape(30, 4) == folds.reshape(30, 4)[:, :1])  # a cluster in one fold
    assert sorted(np.unique(folds)) == [0, 1, 2, 3, 4]
    legacy = group_folds(np.repeat(np.arange(30), 4), 5, np.random.RandomState(0))
    assert np.all(legacy.reshape(30, 4) == legacy.reshape(30, 4)[:, :1])  # fit_loss_model's seeds
    with pytest.raises(ValueError, match="at least 5 groups, got 3"):
        group_folds([0, 1, 2, 0, 1, 2], 5, 0)

    for family in ("discrete", "multilabel"):
        base = make_log(family, n=240, seed=6)
        log, clusters = _replayed(base.take(np.arange(60)), 4)
        moved = replace(log, losses=np.where(clusters == 7, log.loss_bounds[1], log.losses))
        if family == "discrete":
            before, after = (
                fit_loss_model(x, n_folds=5, random_state=0, groups=clusters).logged
                for x in (log, moved)
            )
        else:
            before, after = (
                fit_additive_loss_model(
                    (
                        part := prepare_log(
                            x, fit_intercept=True, standardize_features=True
                        ).partitions.items[0]
                    ).inputs,
                    part.actions,
                    part.scaled_losses,
                    folds=5,
                    groups=clusters,
                )[:, -1]
                for x in (log, moved)
            )
        assert np.array_equal(before[clusters == 7], after[clusters == 7])
        assert not np.allclose(before[clusters != 7], after[clusters != 7])


def test_bad_groups_are_named(make_log):
    log = make_log("discrete", n=40, seed=0)
    policy = _discrete_policy(np.zeros((4, 4)))
    with pytest.raises(ValueError, match=r"one label per validation row \(40\), got shape \(39,\)"):
        learning_evidence(policy, policy, log, groups=np.arange(39))
    with pytest.raises(ValueError, match="at least 2 groups, got 1"):
        learning_evidence(policy, policy, log, groups=np.zeros(40))
