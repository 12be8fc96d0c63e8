"""Terms with the policies' total variation: power against a policy champion (issue 20)."""

import numpy as np
import pytest

from poem.estimators.compare import compare_policies
from poem.estimators.gate_options import total_variation_terms
from poem.estimators.improvement import improvement_lower_bound

K, CONTEXTS = 5, 200


def _softmax(z):
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _population(better):
    """Near-uniform logger, a trained-like champion, a challenger ``better`` in risk."""
    rng = np.random.default_rng(3)
    score = rng.normal(size=(CONTEXTS, K)) * 2.0
    mu = 1.0 / (1.0 + np.exp(-score))
    logger = _softmax(0.7 * rng.normal(size=(CONTEXTS, K)))
    champion = _softmax(-0.6 * score)
    good, bad = _softmax(-0.6 * score - 0.4 * score), _softmax(-0.6 * score + 0.4 * score)

    def risk(policy):
        return float(np.mean(np.sum(policy * mu, axis=1)))

    target = (1.0 - better) * risk(champion)
    t = (risk(bad) - target) / (risk(bad) - risk(good))
    return mu, logger, champion, t * good + (1.0 - t) * bad, risk


def _logs(mu, logger, champion, challenger, reps, n, seed):
    rng = np.random.default_rng(seed)
    ctx = rng.integers(0, CONTEXTS, size=(reps, n))
    cdf = np.cumsum(logger, axis=1)[ctx]
    actions = np.minimum((cdf < rng.random((reps, n, 1))).sum(axis=2), K - 1)
    losses = (rng.random((reps, n)) < mu[ctx, actions]).astype(float)
    p = logger[ctx, actions]
    tv = 0.5 * np.abs(challenger - champion).sum(axis=1)[ctx]
    return losses, challenger[ctx, actions] / p, champion[ctx, actions] / p, tv, p


def test_the_terms_have_the_improvement_as_mean_and_their_lower_bound():
    mu, logger, champion, challenger, risk = _population(0.05)
    tv = 0.5 * np.abs(challenger - champion).sum(axis=1)
    mean = 0.0
    for loss, chance in ((0.0, 1.0 - mu), (1.0, mu)):  # exact expectation over (y, δ) per x
        d = np.full(mu.shape, loss)
        terms, lower = total_variation_terms(
            d, challenger / logger, champion / logger, (0.0, 1.0), tv[:, None]
        )
        assert np.all(terms >= -tv[:, None] - 1e-12) and np.all(lower >= -1.0)
        mean += np.sum(logger * chance * terms) / CONTEXTS
    assert mean == pytest.approx(risk(champion) - risk(challenger), abs=1e-12)


def test_a_better_challenger_beats_a_policy_champion_without_a_weight_bound():
    # the paired terms need the declared B = 1/min propensity: bets capped at 1/B never
    # reached 1/α (0 % power here); the total-variation terms need no B
    mu, logger, champion, challenger, _ = _population(0.05)
    losses, rc, rh, tv, _ = _logs(mu, logger, champion, challenger, 1, 3000, 0)
    bound = 1.0 / logger.min()
    kw = dict(loss_bounds=(0.0, 1.0), min_ess=0.0, loss_baseline=1.0, confidence_level=0.96)
    old = compare_policies(losses[0], rc[0], rh[0], max_weight=bound, **kw)
    new = compare_policies(losses[0], rc[0], rh[0], total_variation=tv[0], **kw)
    assert not old.promote and new.promote
    assert new.upper_bound < 0 < old.upper_bound
    with pytest.raises(ValueError, match=r"total_variation: 1 of 3,000 values are outside"):
        compare_policies(losses[0], rc[0], rh[0], total_variation=tv[0] + (np.arange(3000) == 7))


@pytest.mark.parametrize("estimator", ["ips", "snips"])
def test_equal_risk_challengers_are_promoted_at_most_alpha(estimator):
    mu, logger, champion, challenger, _ = _population(0.0)
    reps, n = 400, 1000
    losses, rc, rh, tv, _ = _logs(mu, logger, champion, challenger, reps, n, 1)
    lcb = improvement_lower_bound(
        losses,
        rc,
        rh,
        estimator=estimator,
        loss_bounds=(0.0, 1.0),
        max_weight=1.0 / logger.min(),
        total_variation=tv,
        order_seed=2,
    )
    assert np.mean(lcb > 0) <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps)  # ≤ 7.2 %
