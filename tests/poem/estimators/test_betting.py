"""The betting lower confidence bound (:mod:`poem.estimators.betting`)."""

import numpy as np
import pytest

from poem.estimators.betting import betting_lower_bound


def _capital(x, lower, m, alpha=0.05, scale=1.0, kappa=0.5):
    """maxₜ Kₜ(m) written out row by row (independent of the vectorised code)."""
    n, log_k, best = len(x), 0.0, 0.0
    mean_sum, squares = 0.0, 0.0
    for i, xi in enumerate(x):
        variance = (scale**2 + squares) / (i + 1)
        bet = np.sqrt(2 * np.log(1 / alpha) / (n * variance))
        if m > lower:
            bet = min(bet, kappa / (m - lower))
        log_k += np.log1p(bet * (xi - m))
        best = max(best, log_k)
        mean_sum += xi
        squares += (xi - mean_sum / (i + 2)) ** 2
    return np.exp(best)


def test_bound_is_where_the_capital_reaches_one_over_alpha():
    x = np.array([-0.5, 0.0, 0.5, 0.75, 0.0])
    bound = betting_lower_bound(x, -1.0)
    assert bound == pytest.approx(-0.5904, abs=1e-4)
    assert _capital(x, -1.0, bound) >= 20.0 * (1 - 1e-9)
    assert _capital(x, -1.0, bound + 1e-3) < 20.0
    assert betting_lower_bound(x, -1.0, 0.5) > bound  # a lower level gives a higher bound


def test_vectorised_equals_one_at_a_time_and_mixture_of_copies_equals_one():
    rng = np.random.default_rng(1)
    x = rng.exponential(size=(4, 300)) - 0.8
    together = betting_lower_bound(x, -0.8)
    assert together.shape == (4,)
    for row, value in zip(x, together, strict=True):
        assert betting_lower_bound(row, -0.8) == pytest.approx(value)
    mixed = betting_lower_bound(np.stack([x, x]), np.full((2, 4, 300), -0.8), mixture=True)
    np.testing.assert_allclose(mixed, together, rtol=1e-6, atol=1e-9)


def test_a_larger_bet_cap_is_where_its_capital_reaches_one_over_alpha():
    # rare drops to half the lower bound: the cap κ/(m − L) binds, a cap near 1 bets more
    # and bounds higher (0.1108 vs 0.0876; with drops *at* L it would bound lower)
    x = np.where(np.arange(400) % 50 == 0, -2.0, 0.2)
    half = betting_lower_bound(x, -4.0)
    near_one = betting_lower_bound(x, -4.0, max_bet_fraction=0.99)
    assert near_one > half
    assert _capital(x, -4.0, near_one, kappa=0.99) >= 20.0 * (1 - 1e-9)
    assert _capital(x, -4.0, near_one + 1e-3, kappa=0.99) < 20.0
    # one strategy per cap: a mixture of one equals the single process
    single = betting_lower_bound(x[None], -4.0, mixture=True, max_bet_fraction=[0.99])
    assert single == pytest.approx(near_one)


@pytest.mark.parametrize(("n", "kappa"), [(20, 0.5), (200, 0.5), (200, 0.99)])
def test_coverage_for_nonnegative_heavy_tailed_terms(n, kappa):
    # lognormal(0, 1.5): mean e^1.125 = 3.08, skewness 33
    rng = np.random.default_rng(2)
    x = rng.lognormal(0.0, 1.5, size=(1000, n))
    bound = betting_lower_bound(x, 0.0, max_bet_fraction=kappa)
    miss = np.mean(bound > np.exp(1.5**2 / 2))
    assert miss <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / 1000)
    assert np.all(bound >= 0.0) and np.mean(bound) > 0.4  # valid, not trivial


def test_randomized_threshold_is_valid_and_only_adds_rejections():
    rng = np.random.default_rng(7)
    x = rng.lognormal(0.0, 1.5, size=(1000, 200))
    u = 1.0 - rng.random(1000)
    plain = betting_lower_bound(x, 0.0)
    coin = betting_lower_bound(x, 0.0, randomization=u)
    assert np.all(coin >= plain - 1e-3)  # up to the root finder's 8 steps
    np.testing.assert_allclose(betting_lower_bound(x[:5], 0.0, randomization=1.0), plain[:5])
    truth = np.exp(1.5**2 / 2)
    limit = 0.05 + 2 * np.sqrt(0.05 * 0.95 / 1000)
    assert np.mean(coin > truth) <= limit
    assert np.mean(coin > truth) > np.mean(plain > truth)  # it spends more of α
    # the final capital at the bound reaches U/α (or the running maximum reached 1/α)
    i = int(np.argmax(coin - plain))
    assert coin[i] > plain[i] and _capital(x[i], 0.0, coin[i]) < 20.0


def test_no_evidence_gives_the_lower_bound_itself():
    assert betting_lower_bound(np.array([-1.0, -1.0, -1.0]), -1.0) == -1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"terms": [0.0, -2.0, -3.0]},
            r"terms: 2 of 3 values are below their lower bound; first positions: \[1, 2\]",
        ),
        ({"terms": [0.0, np.nan]}, r"terms and lower must be finite"),
        ({"confidence_level": 1.0}, r"confidence_level must be in \(0, 1\), got 1.0"),
        ({"scale": 0.0}, r"scale must be finite and > 0, got 0.0"),
        (
            {"max_bet_fraction": 1.0},
            r"max_bet_fraction must be a number or one per strategy, each in \(0, 1\), got 1.0",
        ),
        ({"randomization": 0.0}, r"randomization must be in \(0, 1\], got 0.0"),
        (
            {"max_bet_fraction": [0.5, 0.9]},
            r"max_bet_fraction has 2 values; one per strategy needs mixture=True and S strategies",
        ),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = {"terms": [0.0, 1.0], "lower": -1.0} | kwargs
    with pytest.raises(ValueError, match=message):
        betting_lower_bound(**arguments)


def test_the_root_search_finds_the_largest_rejected_mean_on_an_extreme_log():
    # issue 34, measured item 4: on logs with a few huge terms the 8 regula-falsi steps
    # stopped far below the root (here −0.25 where the capital rejects m = 0.43)
    from poem.estimators.betting import _log_capital, _plug_in_bets

    x = np.array(
        [-0.338, -0.162, -0.471, -0.162, -0.558, -0.457, -0.995, -0.163, -0.635, -0.199,
         358.294, -0.747, 953.87, -0.361, -0.889, -0.872, -0.383, -0.095, -0.343, -0.187]
    )  # fmt: skip
    bound = betting_lower_bound(x, -1.0, 0.95)
    grid = np.linspace(-1.0, 2.0, 3001)
    bets = np.broadcast_to(_plug_in_bets(x[None], 0.05, 1.0), (grid.size, x.size))
    running, _ = _log_capital(
        np.broadcast_to(x, bets.shape), np.full((grid.size, 1), -1.0), bets, grid, False, 0.5
    )
    rejected = grid[running >= np.log(20.0)]
    assert rejected.max() > 0.4  # the capital itself rejects every m up to 0.43
    se = x.std() / np.sqrt(x.size)
    assert rejected.max() - 1e-3 - 1e-4 * se <= bound <= rejected.max() + 1e-3  # tolerance, grid
