"""Per-label importance weights against a known multilabel logger (issue 35)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poem.estimators.marginal import (
    check_logger,
    known_logger,
    logged_by,
    marginal_scores,
    marginal_weights,
)
from poem.learners._trials import rows_scores
from poem.learners.learning_evidence import evidence_model, paired_terms
from poem.learners.search import policy_scores
from poem.log_rows import LocalPartitions
from poem.policies.stochastic import StochasticPolicy
from poem.simulate import fit_logging_policy, supervised_to_bandit, true_expected_loss


@pytest.fixture(scope="module")
def logged():
    rng = np.random.default_rng(3)
    n, d, q = 3000, 5, 8
    X = rng.normal(size=(n, d))
    truth = (X @ rng.normal(size=(d, q)) + rng.normal(size=(n, q)) > 0).astype(int)
    h0 = fit_logging_policy(X, truth, family="multilabel", fraction=0.05, random_state=0)
    log = supervised_to_bandit(X, truth, h0, n_replays=1, random_state=0)
    return X, truth, h0, log


def test_marginal_scores_are_rows_scores_when_the_weights_are_pi_over_p():
    rng = np.random.default_rng(0)
    losses, p, pi = rng.uniform(0, 3, 500), rng.uniform(0.1, 1, 500), rng.uniform(0, 1, 500)
    for ours, theirs in zip(
        marginal_scores(losses, pi / p, (0.0, 3.0)),
        rows_scores(losses, pi, p, (0.0, 3.0)),
        strict=True,
    ):
        for key in ("value", "std_error", "lower", "upper", "effective_sample_size"):
            assert getattr(ours, key) == pytest.approx(getattr(theirs, key), rel=1e-12), key
    # a negative total weight leaves SNIPS undefined (NaN ranks last), IPS defined
    ips, snips = marginal_scores([1.0, 2.0], [-1.0, 0.5], (0.0, 3.0))
    assert ips.value == pytest.approx(3.0 + ((1 - 3) * -1 + (2 - 3) * 0.5) / 2)
    assert np.isnan(snips.value) and snips.effective_sample_size == 0.0
    with pytest.raises(ValueError, match="need >= 2 rows of finite weights"):
        marginal_scores([1.0, 2.0], [np.inf, 1.0], (0.0, 3.0))


def test_per_label_weights_have_mean_one_and_recover_the_risk(logged):
    X, truth, h0, log = logged
    target = h0.with_serving(temperature=0.5)
    base = check_logger(h0, log)
    m = marginal_weights(target, base, log)
    assert m.mean() == pytest.approx(1.0, abs=4 * m.std() / np.sqrt(m.size))
    ips, _ = marginal_scores(log.losses, m, log.loss_bounds)
    truth_risk = true_expected_loss(target, X, truth)
    assert abs(ips.value - truth_risk) < 3 * ips.std_error  # unbiased for the Hamming loss
    assert np.allclose(marginal_weights(h0, base, log), 1.0)  # the logger itself: mᵢ = 1


def test_the_logger_is_checked_on_every_row(logged):
    _, _, h0, log = logged
    assert logged_by(h0, log) and known_logger(h0, log, log) is h0
    sharper = h0.with_serving(temperature=0.5)
    assert not logged_by(sharper, log) and known_logger(sharper, log) is None
    with pytest.raises(ValueError, match=r"does not reproduce the propensity of \d+ of 3000 rows"):
        check_logger(sharper, log)
    off = np.asarray(log.propensities).copy()
    off[11] *= 1.0001
    assert not logged_by(h0, replace(log, propensities=off))
    assert known_logger(None, log) is None and known_logger(h0) is None


def test_policy_scores_keep_the_estimate_that_varies_less_in_memory_and_in_partitions(logged):
    _, _, h0, log = logged
    near = h0.with_serving(temperature=0.8)  # per-label weights vary less
    far = StochasticPolicy(h0.family, -3.0 * np.asarray(h0.coef))  # joint rᵢ ≈ 0 mostly
    policies = (near, far)
    joint = policy_scores(policies, log)
    ours = policy_scores(policies, log, logger=h0)
    base = check_logger(h0, log)
    for policy, (j_ips, j_sn), (o_ips, o_sn) in zip(policies, joint, ours, strict=True):
        m_ips, m_sn = marginal_scores(
            log.losses, marginal_weights(policy, base, log), log.loss_bounds
        )
        assert o_ips.std_error == pytest.approx(min(j_ips.std_error, m_ips.std_error))
        assert o_sn.std_error == pytest.approx(min(j_sn.std_error, m_sn.std_error))
    assert ours[0][1].std_error < joint[0][1].std_error  # near: the per-label estimate
    parts = LocalPartitions([log.take(np.arange(0, 1700)), log.take(np.arange(1700, 3000))])
    rows = [np.arange(1700), np.arange(1300)]
    split = policy_scores(policies, (parts, rows), logger=h0)
    for a, b in zip(ours, split, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.value == pytest.approx(y.value, rel=1e-10)
    with pytest.raises(ValueError, match="does not reproduce the propensity"):
        policy_scores(policies, (parts, rows), logger=near)


def test_paired_terms_use_the_weighting_with_the_smaller_standard_error(logged):
    _, _, h0, log = logged
    valid, train = log.take(np.arange(1000)), log.take(np.arange(1000, 3000))
    fit, candidate = h0.with_serving(temperature=0.7), h0.with_serving(temperature=0.9)
    joint_model = evidence_model(valid, train)
    model = evidence_model(valid, train, logger=h0)
    assert model.logger_marginals.shape == (1000, 8)
    joint_terms, gain = paired_terms(fit, candidate, valid, joint_model)
    terms, gain2 = paired_terms(fit, candidate, valid, model)
    np.testing.assert_allclose(gain, gain2)
    assert terms.std() < joint_terms.std()  # two re-temperings of the logger: per label
    with pytest.raises(ValueError, match="does not reproduce the propensity of 1000 of 1000"):
        evidence_model(valid, train, logger=fit)
