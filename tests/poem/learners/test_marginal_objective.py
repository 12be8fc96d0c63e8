"""POEM's doubly robust objective with per-label (marginal) importance weights (issue 35).

Its gradient and chunked statistics are checked beside the joint objective's
(``tests/poem/learners/test_doubly_robust.py``, ``per-label``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from poem.learners import POEM
from poem.learners.objective import (
    crm_statistics,
)
from poem.policies.stochastic import StochasticPolicy
from poem.simulate import fit_logging_policy, supervised_to_bandit, true_expected_loss


def _hamming_log(seed: int, n: int = 4000, d: int = 5, q: int = 14):
    """A Hamming-loss log of a factorized logger h0, with h0 and a different target policy."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    truth = (X @ rng.normal(size=(d, q)) + rng.normal(scale=0.5, size=(n, q)) > 0).astype(int)
    h0 = fit_logging_policy(X, truth, family="multilabel", fraction=0.05, random_state=seed)
    log = supervised_to_bandit(X, truth, h0, n_replays=1, random_state=seed)
    target = StochasticPolicy(h0.family, 2.0 * np.asarray(h0.coef))  # h0 sharpened, α = 1/2
    return X, truth, h0, log, target


def test_marginal_risk_is_unbiased_for_the_hamming_loss_and_has_less_variance_than_joint():
    """Mean of uᵢ (δ' units) over 20 logs ≈ the target's true risk (q = 14), with less spread."""
    marginal, joint = [], []
    for seed in range(20):
        X, truth, h0, log, target = _hamming_log(seed)
        family = h0.family
        inputs = family.prepare(X)
        q = truth.shape[1]
        scaled = -(q - np.asarray(log.losses)) / q  # δ' = δ/q − 1 ∈ [−1, 0]
        zero_model = np.zeros((log.n_rows, q + 1))  # no model: the weights alone
        marginals = h0.predict_proba(X)
        true_risk = true_expected_loss(target, X, truth) / q - 1.0
        for out, model in (
            (marginal, np.concatenate([zero_model, marginals], 1)),
            (joint, zero_model),
        ):
            stats = crm_statistics(
                np.asarray(target.coef), family, inputs, log.actions, scaled,
                np.asarray(log.propensities), np.inf, loss_model=model,
            )  # fmt: skip
            out.append(stats.mean - true_risk)
    marginal, joint = np.array(marginal), np.array(joint)
    se = marginal.std(ddof=1) / np.sqrt(marginal.size)
    assert abs(marginal.mean()) < 3 * se + 1e-3  # unbiased
    assert marginal.std() < 0.9 * joint.std()  # per-label weights: less variance (0.0100 vs 0.0128)


def test_poem_marginal_fits_better_than_the_logger_and_refuses_a_wrong_or_missing_logger():
    X, truth, h0, log, _ = _hamming_log(0, n=2000)
    params = dict(policy="multilabel", solver="lbfgs", objective="marginal", max_iter=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = POEM(logging_policy=h0, warm_start=h0, **params).fit(log)
    assert true_expected_loss(fit.policy_, X, truth) < true_expected_loss(h0, X, truth) - 0.1
    with pytest.raises(ValueError, match="objective='marginal' needs logging_policy"):
        POEM(**params).fit(log)
    other = h0.with_serving(temperature=0.5)  # not what logged the rows
    with pytest.raises(ValueError, match=r"does not reproduce the propensity of \d+ of 2000"):
        POEM(logging_policy=other, **params).fit(log)
    with pytest.raises(ValueError, match="objective must be one of"):
        POEM(objective="pseudo", policy="multilabel").fit(log)


def test_poem_marginal_needs_a_multilabel_log():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = rng.integers(0, 3, 300)
    h0 = fit_logging_policy(X, y, family="discrete", fraction=0.2, random_state=0)
    log = supervised_to_bandit(X, y, h0, n_replays=1, random_state=0)
    with pytest.raises(ValueError, match="objective='marginal' needs a family with an additive"):
        POEM(objective="marginal", logging_policy=h0).fit(log)
