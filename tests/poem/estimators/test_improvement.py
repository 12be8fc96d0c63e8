"""Improvement terms and the gate's bound (:mod:`poem.estimators.improvement`)."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.special import stdtrit

from poem.estimators import compare_policies
from poem.estimators.betting import betting_lower_bound
from poem.estimators.improvement import (
    GATE_ESTIMATORS,
    improvement_lower_bound,
    improvement_terms,
)

# one context, K = 3 actions: logger π₀, Bernoulli losses with means μ
LOGGER = np.array([0.9, 0.09, 0.01])
MU = np.array([0.3, 0.2, 0.1])


def _exact_first_term_mean(estimator, challenger, champion, clip=None):
    """E[X₁] by enumerating (action, loss): the first row's baseline is δ_max."""
    total = 0.0
    for a, loss in itertools.product(range(3), (0.0, 1.0)):
        prob = LOGGER[a] * (MU[a] if loss else 1 - MU[a])
        rc = np.array([challenger[a] / LOGGER[a]])
        rh = np.array([champion[a] / LOGGER[a]])
        terms, _ = improvement_terms(
            np.array([loss]), rc, rh, estimator=estimator, loss_bounds=(0.0, 1.0), clip=clip
        )
        total += prob * np.atleast_2d(terms)[-1, 0]  # snips: its own strategy (row 1)
    return total


@pytest.mark.parametrize("estimator", ["ips", "snips"])
@pytest.mark.parametrize("champion", [LOGGER, np.array([0.2, 0.5, 0.3])])
def test_terms_have_the_improvement_as_mean(estimator, champion):
    challenger = np.array([0.1, 0.3, 0.6])
    improvement = champion @ MU - challenger @ MU
    assert _exact_first_term_mean(estimator, challenger, champion) == pytest.approx(improvement)


def test_clipping_the_challenger_only_lowers_the_mean():
    challenger = np.array([0.1, 0.3, 0.6])  # weights 0.11, 3.3, 60
    improvement = LOGGER @ MU - challenger @ MU
    clipped = _exact_first_term_mean("clipped_ips", challenger, LOGGER, clip=10.0)
    # row 3 loses (1 − 0.1)·(60 − 10)·0.01 = 0.45 of its mean, never gains
    assert clipped == pytest.approx(improvement - 0.9 * 50 * 0.01)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(2, 25).flatmap(
        lambda n: st.tuples(
            arrays(np.float64, n, elements=st.floats(0.0, 1.0)),
            arrays(np.float64, n, elements=st.floats(0.0, 1e4)),
            arrays(np.float64, n, elements=st.floats(0.0, 1e4)),
        )
    ),
    st.sampled_from(GATE_ESTIMATORS),
    st.booleans(),
)
def test_terms_never_fall_below_their_lower_bound(data, estimator, logger):
    losses, rc, rh = data
    rh = np.ones_like(rh) if logger else rh
    for bound in (None, max(1.0, rc.max(), rh.max())):
        terms, lower = improvement_terms(
            losses, rc, rh, estimator=estimator, loss_bounds=(0.0, 1.0), max_weight=bound, clip=5.0
        )
        assert np.all(terms >= lower - 1e-9 * (1 + np.abs(lower)))


def _draw(rng, reps, n):
    actions = (rng.random((reps, n, 1)) > np.cumsum(LOGGER)).sum(axis=2)
    losses = (rng.random((reps, n)) < MU[actions]).astype(float)
    return actions, losses


@pytest.mark.parametrize("estimator", GATE_ESTIMATORS)
@pytest.mark.parametrize("champion", ["logger", "policy"])
def test_a_a_false_promotion_at_n_50_with_heavy_weights(estimator, champion):
    # the challenger puts 60 % on an action logged 1 % of the time (weight 60); its true risk
    # equals the champion's (A/A with a different policy): promotions must stay ≤ α.
    reps, n = 2000, 50
    champ = LOGGER if champion == "logger" else np.array([0.3, 0.2, 0.5])
    target = champ @ MU
    # challenger = t·(0.1, 0.3, 0.6) + (1 − t)·(0.4, 0.6, 0.0) with risk equal to the champion's
    base_a, base_b = np.array([0.1, 0.3, 0.6]), np.array([0.9, 0.1, 0.0])
    t = (base_b @ MU - target) / (base_b @ MU - base_a @ MU)
    challenger = t * base_a + (1 - t) * base_b
    assert challenger @ MU == pytest.approx(target) and 0 <= t <= 1
    actions, losses = _draw(np.random.default_rng(3), reps, n)
    rc, rh = challenger[actions] / LOGGER[actions], champ[actions] / LOGGER[actions]
    lcb = improvement_lower_bound(
        losses, rc, rh, estimator=estimator, loss_bounds=(0.0, 1.0), clip=20.0
    )
    limit = 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps)
    assert np.mean(lcb > 0) <= limit
    # the old rule, a one-sided t bound on the same terms, promotes 11 % of these logs
    x = (1.0 - losses) * (rc - rh)
    t_bound = x.mean(1) - stdtrit(n - 1, 0.95) * x.std(1, ddof=1) / np.sqrt(n)
    assert np.mean(t_bound > 0) > 0.09


@pytest.mark.parametrize("estimator", GATE_ESTIMATORS)
def test_randomized_decision_keeps_the_level_at_n_50_with_heavy_weights(estimator):
    # the A/A design above against the logger, with a fresh coin U per log: the randomized
    # Ville threshold promotes more logs than the running maximum alone, and still ≤ α
    reps, n = 2000, 50
    base_a, base_b = np.array([0.1, 0.3, 0.6]), np.array([0.9, 0.1, 0.0])
    t = (base_b @ MU - LOGGER @ MU) / (base_b @ MU - base_a @ MU)
    challenger = t * base_a + (1 - t) * base_b
    rng = np.random.default_rng(7)
    actions, losses = _draw(rng, reps, n)
    rc, rh = challenger[actions] / LOGGER[actions], np.ones((reps, n))
    kwargs = {"estimator": estimator, "loss_bounds": (0.0, 1.0), "clip": 20.0}
    plain = improvement_lower_bound(losses, rc, rh, **kwargs)
    coin = improvement_lower_bound(losses, rc, rh, randomization=1.0 - rng.random(reps), **kwargs)
    assert np.all(coin >= plain - 1e-12)
    limit = 0.05 + 2 * np.sqrt(0.05 * 0.95 / reps)
    assert np.mean(plain > 0) <= np.mean(coin > 0) <= limit


def test_adversarial_log_with_one_weight_of_ten_thousand():
    rng = np.random.default_rng(4)
    losses = rng.random(50)
    ones = np.ones(50)
    # the challenger's one huge weight sits on the worst possible loss: it proves nothing
    challenger = np.full(50, 0.5)
    challenger[17], losses[17] = 1e4, 1.0
    # a policy champion with one weight of 1e4 (and a challenger that is a copy elsewhere)
    champion = np.full(50, 0.9)
    champion[30] = 1e4
    for estimator in GATE_ESTIMATORS:
        clip = 100.0 if estimator == "clipped_ips" else None
        kwargs = {"estimator": estimator, "clip": clip, "min_ess": 0.0, "loss_bounds": (0.0, 1.0)}
        assert not compare_policies(losses, challenger, ones, **kwargs).promote
        result = compare_policies(losses, np.full(50, 0.9), champion, **kwargs)
        assert not result.promote and result.upper_bound > 0
        # nor with the smallest coin: these logs' capitals end below 1
        for w_c, w_h in ((challenger, ones), (np.full(50, 0.9), champion)):
            assert not compare_policies(losses, w_c, w_h, randomization=1e-12, **kwargs).promote
    # with the default ESS guard even a lucky huge weight on a zero loss is not enough
    challenger[17], losses[17] = 1e4, 0.0
    lucky = compare_policies(losses, challenger, ones, loss_bounds=(0.0, 1.0))
    assert not lucky.promote
    assert lucky.reasons[1].startswith("failed: effective sample size: the challenger's is 1.0")


def test_clipped_ips_keeps_the_power_of_the_unclipped_terms():
    # a clip far below the weights makes the clipped terms say nothing; the bound also bets
    # on the unclipped ips terms, so a clearly better challenger is still promoted
    rng = np.random.default_rng(5)
    challenger = np.array([0.1, 0.3, 0.6])
    actions, losses = _draw(rng, 1, 20_000)
    rc, rh = challenger[actions] / LOGGER[actions], np.ones((1, 20_000))
    kwargs = {"loss_bounds": (0.0, 1.0), "confidence_level": 0.95}
    exact = improvement_lower_bound(losses, rc, rh, estimator="ips", **kwargs)
    clipped = improvement_lower_bound(losses, rc, rh, estimator="clipped_ips", clip=1.0, **kwargs)
    alone = improvement_lower_bound(
        np.minimum(1.0, rc), np.ones_like(rc), rh, estimator="ips", **kwargs
    )
    improvement = LOGGER @ MU - challenger @ MU  # 0.229
    assert alone[0] < 0.0 < clipped[0] <= exact[0] < improvement
    assert clipped[0] > exact[0] - 0.02  # the price of averaging two capitals (log 2)


def test_snips_bets_near_the_cap_where_losses_are_rare():
    # 1 % losses: the SNIPS-baseline terms' bets sit at κ/(m − L); κ = 0.99 gives a
    # higher bound than the previous mixture with the translated terms at κ = 1/2
    rng = np.random.default_rng(6)
    n = 20_000
    actions = (rng.random((n, 1)) > np.cumsum(LOGGER)).sum(axis=1)
    losses = (rng.random(n) < np.array([0.012, 0.006, 0.003])[actions]).astype(float)
    challenger = np.array([0.5, 0.3, 0.2])
    rc, rh = challenger[actions] / LOGGER[actions], np.ones(n)
    terms, lower = improvement_terms(losses, rc, rh, estimator="snips", loss_bounds=(0.0, 1.0))
    bound = improvement_lower_bound(losses, rc, rh, estimator="snips", loss_bounds=(0.0, 1.0))
    half = betting_lower_bound(terms, lower, 0.95, mixture=True, max_bet_fraction=[0.5, 0.5])
    assert bound == pytest.approx(
        betting_lower_bound(terms[1:], lower[1:], 0.95, mixture=True, max_bet_fraction=[0.99])
    )
    assert bound > half
