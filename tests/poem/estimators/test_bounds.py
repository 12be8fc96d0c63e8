import numpy as np
import pytest

from poem.estimators import (
    bootstrap_interval,
    confidence_interval,
    empirical_bernstein_bound,
    sample_variance,
    standard_error,
)
from poem.estimators import bounds as bounds_module

U = np.array([0.0, 2.0, 1.0, 0.5, 0.5])  # IPS terms of tiny_log under the hand-chosen target
T_975_4 = 2.7764451051977987
T_95_4 = 2.1318467863266495
Z_975 = 1.959963984540054


def test_sample_variance_and_standard_error_by_hand():
    # ū = 0.8; Σ(u − ū)² = 0.64 + 1.44 + 0.04 + 0.09 + 0.09 = 2.3
    assert sample_variance(U) == pytest.approx(2.3 / 4)
    assert standard_error(U) == pytest.approx(np.sqrt(2.3 / 4 / 5))
    assert sample_variance([3.0, 3.0]) == 0.0


def test_confidence_interval_by_hand():
    assert confidence_interval(0.8, 0.5, 5) == pytest.approx(
        (0.8 - T_975_4 * 0.5, 0.8 + T_975_4 * 0.5)
    )
    assert confidence_interval(0.8, 0.5, 5, 0.95, "normal") == pytest.approx(
        (0.8 - Z_975 * 0.5, 0.8 + Z_975 * 0.5)
    )
    lower, upper = confidence_interval(0.8, 0.5, 5, 0.95, "t", alternative="less")
    assert lower == -np.inf and upper == pytest.approx(0.8 + T_95_4 * 0.5)
    assert confidence_interval(0.8, 0.0, 5) == (0.8, 0.8)
    narrow, wide = confidence_interval(0.0, 1.0, 5, 0.8), confidence_interval(0.0, 1.0, 5, 0.99)
    assert wide[1] > narrow[1] > 0


def _tiny_scaled_u(tiny_log):
    weights = np.array([0.5, 2.0, 2.0, 2.0, 0.5])
    return tiny_log.scaled_losses() * np.minimum(2.0, weights)


def test_empirical_bernstein_bound_by_hand(tiny_log):
    u = _tiny_scaled_u(tiny_log)
    np.testing.assert_allclose(u, [-0.5, 0.0, -1.0, -1.5, 0.0])  # δ' = δ − 1; M = 2
    # ū = −0.6; Σ(u − ū)² = 0.01 + 0.36 + 0.16 + 0.81 + 0.36 = 1.7 → V̂ = 0.425; t = log(2/0.05)
    t = np.log(40.0)
    expected = -0.6 + np.sqrt(2 * 0.425 * t / 5) + 7 * 2 * t / (3 * 4)
    assert empirical_bernstein_bound(u, 2.0, 0.95) == pytest.approx(expected)
    # original units: δ_max + (δ_max − δ_min) B
    assert empirical_bernstein_bound(u, 2.0, 0.95, loss_bounds=(0.0, 1.0)) == pytest.approx(
        1.0 + expected
    )
    assert empirical_bernstein_bound(u, 2.0, 0.99) > empirical_bernstein_bound(u, 2.0, 0.95)


def test_empirical_bernstein_bound_holds_by_simulation(simulation):
    target, clip = simulation.softmax_policy(2.0), 10.0
    # true clipped risk in scaled units:
    # R^M = (1/n) Σᵢ Σₐ π₀(a|xᵢ) (E[δ|xᵢ,a] − 1) min(M, π(a|xᵢ)/π₀(a|xᵢ))
    P = simulation.logging_probs
    true_clipped = np.mean(
        np.sum(P * (simulation.expected_loss - 1.0) * np.minimum(clip, target / P), axis=1)
    )
    true_risk = simulation.risk(target)
    actions, losses, propensities = simulation.draw(200, seed=2)
    weights = simulation.weights(target, actions, propensities)
    u = (losses - 1.0) * np.minimum(clip, weights)
    scaled = np.array([empirical_bernstein_bound(u[r], clip, 0.95) for r in range(200)])
    original = np.array(
        [empirical_bernstein_bound(u[r], clip, 0.95, loss_bounds=(0.0, 1.0)) for r in range(200)]
    )
    assert np.mean(scaled >= true_clipped) >= 0.95
    assert np.mean(original >= true_risk) >= 0.95
    assert np.all(scaled > u.mean(axis=1))
    assert true_risk <= 1.0 + true_clipped + 1e-12  # δ' ≤ 0 makes the clipped risk conservative


def test_bootstrap_interval_is_seeded_and_percentile():
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)

    def mean(a):
        return a.mean(axis=-1)

    a = bootstrap_interval(mean, (x,), random_state=1)
    assert a == bootstrap_interval(mean, (x,), random_state=1)
    assert a != bootstrap_interval(mean, (x,), random_state=2)
    t_lower, t_upper = confidence_interval(x.mean(), standard_error(x), x.size)
    assert a == pytest.approx((t_lower, t_upper), abs=0.02)
    lower, upper = bootstrap_interval(mean, (x,), random_state=1, alternative="less")
    assert lower == -np.inf and x.mean() < upper < a[1]
    assert bootstrap_interval(mean, ([2.0, 2.0, 2.0],)) == (2.0, 2.0)


def test_bootstrap_resamples_rows_jointly_and_in_chunks(monkeypatch):
    losses, weights = np.array([0.0, 1.0, 0.5, 0.25, 1.0]), np.array([0.5, 2.0, 2.0, 2.0, 0.5])

    def ratio(d, w):
        return (d * w).sum(-1) / w.sum(-1)

    whole = bootstrap_interval(ratio, (losses, weights), n_resamples=50, random_state=0)
    monkeypatch.setattr(bounds_module, "_BOOTSTRAP_CHUNK", 15)  # 3 resamples per chunk
    assert bootstrap_interval(ratio, (losses, weights), n_resamples=50, random_state=0) == whole
    assert losses.min() <= whole[0] <= whole[1] <= losses.max()


@pytest.mark.parametrize(
    ("call", "exception", "message"),
    [
        (
            lambda: sample_variance([1.0]),
            ValueError,
            r"values has 1 row\(s\); at least 2 are needed",
        ),
        (
            lambda: standard_error([1.0, np.nan, np.inf]),
            ValueError,
            r"values: 2 of 3 values are not finite \(NaN or inf\); first positions: \[1, 2\]",
        ),
        (
            lambda: confidence_interval(0.0, 1.0, 5, 1.5),
            ValueError,
            r"confidence_level must be in \(0, 1\), got 1.5",
        ),
        (
            lambda: confidence_interval(0.0, 1.0, 5, -0.1),
            ValueError,
            r"confidence_level must be in \(0, 1\), got -0.1",
        ),
        (
            lambda: confidence_interval(0.0, 1.0, 5, 0.95, "bootstrap"),
            ValueError,
            r"method must be one of \['t', 'normal'\], got 'bootstrap'",
        ),
        (
            lambda: confidence_interval(0.0, 1.0, 5, 0.95, "norm"),
            ValueError,
            r"method must be one of .*, got 'norm'",
        ),
        (
            lambda: confidence_interval(0.0, 1.0, 5, alternative="upper"),
            ValueError,
            r"alternative must be one of \['two-sided', 'less'\], got 'upper'",
        ),
        (
            lambda: confidence_interval(0.0, -1.0, 5),
            ValueError,
            r"std_error must be finite and >= 0, got -1.0",
        ),
        (lambda: confidence_interval(0.0, 1.0, 1), ValueError, r"n must be >= 2, got 1"),
        (
            lambda: empirical_bernstein_bound([-0.5, 0.2, -3.0, 0.0], 2.0),
            ValueError,
            r"scaled_u: 2 of 4 values are outside \[-clip, 0\] = \[-2, 0\]; "
            r"first positions: \[1, 2\]",
        ),
        (
            lambda: empirical_bernstein_bound([-0.5, -0.2], 0.0),
            ValueError,
            r"clip must be > 0, got 0.0",
        ),
        (
            lambda: empirical_bernstein_bound([-0.5, -0.2], 1.0, 1.0),
            ValueError,
            r"confidence_level must be in \(0, 1\), got 1.0",
        ),
        (
            lambda: empirical_bernstein_bound([-0.5, -0.2], 1.0, loss_bounds=(1.0, 0.0)),
            ValueError,
            r"loss_bounds must be finite with min < max",
        ),
        (
            lambda: bootstrap_interval(np.mean, ([1.0, 2.0],), n_resamples=1),
            ValueError,
            r"n_resamples must be an integer >= 2, got 1",
        ),
        (
            lambda: bootstrap_interval(np.mean, ([1.0, 2.0], [1.0, 2.0, 3.0])),
            ValueError,
            r"arrays\[1\] has 3 rows but arrays\[0\] has 2",
        ),
        (
            lambda: bootstrap_interval(lambda a: np.full(a.shape[0], np.nan), ([1.0, 2.0],)),
            ValueError,
            r"undefined \(NaN\) on every bootstrap resample",
        ),
    ],
    ids=[
        "variance-one-row",
        "se-non-finite",
        "level-above-1",
        "level-negative",
        "method-bootstrap",
        "method-prefix",
        "alternative-unknown",
        "negative-se",
        "n-one",
        "u-outside",
        "clip-zero",
        "eb-level",
        "loss-bounds",
        "resamples",
        "bootstrap-lengths",
        "bootstrap-all-nan",
    ],
)
def test_bad_arguments(call, exception, message):
    with pytest.raises(exception, match=message):
        call()
