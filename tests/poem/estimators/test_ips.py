import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from poem.estimators import Estimate, clipped_ips, evaluate_policy, importance_weights, ips, snips
from poem.policies import StochasticPolicy, make_family

# tiny_log: losses δ = [0, 1, 0.5, 0.25, 1], propensities p = [0.5, 0.25, 0.2, 0.5, 0.4].
# Hand-chosen target probabilities of the logged actions → weights r = π/p:
TARGET = np.array([0.25, 0.5, 0.4, 1.0, 0.2])
WEIGHTS = np.array([0.5, 2.0, 2.0, 2.0, 0.5])
T_975_4 = 2.7764451051977987  # Student t quantile, 4 degrees of freedom
Z_975 = 1.959963984540054


def test_ips_by_hand(tiny_log):
    est = ips(tiny_log.losses, importance_weights(TARGET, tiny_log.propensities))
    # u = δ r = [0, 2, 1, 0.5, 0.5]: mean 0.8; Σ(u − ū)² = 0.64 + 1.44 + 0.04 + 0.09 + 0.09 = 2.3
    se = np.sqrt(2.3 / 4 / 5)
    assert est.estimator == "ips" and est.method == "t" and est.n == 5
    assert est.value == pytest.approx(0.8)
    assert est.std_error == pytest.approx(se)
    assert (est.lower, est.upper) == pytest.approx((0.8 - T_975_4 * se, 0.8 + T_975_4 * se))
    assert est.effective_sample_size == pytest.approx(49 / 12.5)
    assert est.clipped_fraction == 0.0 and est.confidence_level == 0.95
    normal = ips(tiny_log.losses, WEIGHTS, interval="normal", confidence_level=0.95)
    assert normal.upper == pytest.approx(0.8 + Z_975 * se)


def test_clipped_ips_by_hand(tiny_log):
    est = clipped_ips(tiny_log.losses, WEIGHTS, 1.5)
    # min(1.5, r) = [0.5, 1.5, 1.5, 1.5, 0.5]; u = [0, 1.5, 0.75, 0.375, 0.5]
    u = np.array([0.0, 1.5, 0.75, 0.375, 0.5])
    assert est.estimator == "clipped_ips"
    assert est.value == pytest.approx(3.125 / 5)
    assert est.std_error == pytest.approx(np.std(u, ddof=1) / np.sqrt(5))
    assert est.clipped_fraction == pytest.approx(0.6)
    assert est.effective_sample_size == pytest.approx(5.5**2 / 7.25)  # ESS of the clipped weights
    assert clipped_ips(tiny_log.losses, WEIGHTS, 1e6).value == pytest.approx(0.8)


def test_snips_by_hand(tiny_log):
    est = snips(tiny_log.losses, WEIGHTS)
    # Σδr / Σr = 4 / 7; delta method: eᵢ = rᵢ(δᵢ − 4/7)/(7/5), Σeᵢ² = (25/49)(127/98)
    sum_e2 = 25 / 49 * 127 / 98
    assert est.estimator == "snips"
    assert est.value == pytest.approx(4 / 7)
    assert est.std_error == pytest.approx(np.sqrt(sum_e2 / 4 / 5))
    assert est.upper - est.value == pytest.approx(T_975_4 * est.std_error)


def test_target_equal_to_logging_policy_gives_mean_loss(tiny_log):
    weights = importance_weights(tiny_log.propensities, tiny_log.propensities)
    np.testing.assert_array_equal(weights, 1.0)
    mean, se = np.mean(tiny_log.losses), np.std(tiny_log.losses, ddof=1) / np.sqrt(5)
    for est in (
        ips(tiny_log.losses, weights),
        snips(tiny_log.losses, weights),
        clipped_ips(tiny_log.losses, weights, 1.0),
    ):
        assert est.value == pytest.approx(0.55) == mean
        assert est.std_error == pytest.approx(se)
        assert est.effective_sample_size == pytest.approx(5.0)


class _LoggingPolicy:
    """Stands in for the logging policy: serves exactly the logged propensities."""

    def log_action_probability_on(self, log):
        return log.propensities


def test_evaluate_policy_by_hand(tiny_log):
    uniform = StochasticPolicy.uniform(make_family("discrete", 2, 3))
    # π = 1/3 everywhere: r = [2/3, 4/3, 5/3, 2/3, 5/6]; δr = [0, 4/3, 5/6, 1/6, 5/6] → mean 19/30
    est = evaluate_policy(uniform, tiny_log, loss_baseline=0.0)  # plain Eq. (1)
    assert est.value == pytest.approx(19 / 30)
    by_hand = ips(tiny_log.losses, np.array([2, 4, 5, 2, 2.5]) / 3)
    assert (est.std_error, est.upper) == pytest.approx((by_hand.std_error, by_hand.upper))
    assert evaluate_policy(uniform, tiny_log, estimator="snips").value == pytest.approx(
        (19 / 6) / (15.5 / 3)
    )
    clipped = evaluate_policy(
        uniform, tiny_log, estimator="clipped_ips", clip=1.0, loss_baseline=0.0
    )
    assert clipped.value == pytest.approx((0 + 1 + 0.5 + 0.25 * 2 / 3 + 5 / 6) / 5)
    assert clipped.clipped_fraction == pytest.approx(0.4)
    assert evaluate_policy(_LoggingPolicy(), tiny_log).value == pytest.approx(0.55)


def test_bootstrap_interval_is_seeded(tiny_log):
    a = ips(tiny_log.losses, WEIGHTS, interval="bootstrap", random_state=3)
    b = ips(tiny_log.losses, WEIGHTS, interval="bootstrap", random_state=3)
    assert a == b and a.method == "bootstrap"
    assert 0.0 <= a.lower < 0.8 < a.upper <= 2.0  # u ∈ [0, 2]: resampled means stay there


def test_estimate_to_dict_is_plain():
    est = ips(np.array([0.0, 1.0, 1.0]), np.array([1.0, 2.0, 0.5]))
    d = est.to_dict()
    assert set(d) == {
        "estimator",
        "value",
        "std_error",
        "lower",
        "upper",
        "n",
        "confidence_level",
        "effective_sample_size",
        "clipped_fraction",
        "method",
        "flags",
    }
    assert d["flags"] == [
        "small sample: effective sample size 2.3 < 1,000",
        "few non-zero terms (rare losses): 2 of 3 rows (< 300)",
        "skewed terms: |skewness|/sqrt(n) = 0.30 > 0.25",
    ]
    assert type(d["n"]) is int and type(d["value"]) is float
    assert Estimate(**d) == est
    assert "ips = 0.8333" in str(est)


losses_and_weights = st.integers(2, 40).flatmap(
    lambda n: st.tuples(
        arrays(np.float64, n, elements=st.floats(-5.0, 5.0)),
        arrays(np.float64, n, elements=st.floats(0.0, 100.0)),
    )
)


@settings(max_examples=50)
@given(losses_and_weights)
def test_snips_stays_within_loss_range(data):
    losses, weights = data
    if weights.sum() == 0:
        return
    value = snips(losses, weights).value
    assert losses.min() - 1e-9 <= value <= losses.max() + 1e-9


@settings(max_examples=50)
@given(losses_and_weights, st.floats(0.01, 50.0), st.floats(0.01, 50.0))
def test_clipped_ips_is_monotone_in_clip_for_nonnegative_losses(data, clip_a, clip_b):
    losses, weights = np.abs(data[0]), data[1]
    small, large = sorted((clip_a, clip_b))
    assert (
        clipped_ips(losses, weights, small).value
        <= clipped_ips(losses, weights, large).value + 1e-12
    )
    assert clipped_ips(losses, weights, large).value <= ips(losses, weights).value + 1e-12


def test_ips_is_unbiased_and_its_t_interval_covers(simulation):
    target = simulation.softmax_policy(2.0)
    truth = simulation.risk(target)
    actions, losses, propensities = simulation.draw(200, seed=1)
    estimates = [
        ips(losses[r], simulation.weights(target, actions[r], propensities[r])) for r in range(200)
    ]
    values = np.array([e.value for e in estimates])
    mc_se = values.std(ddof=1) / np.sqrt(values.size)
    assert abs(values.mean() - truth) < 3 * mc_se
    # the test can fail: ignoring the weights is biased by far more than 3 standard errors
    assert abs(losses.mean() - truth) > 10 * mc_se
    coverage = np.mean([e.lower <= truth <= e.upper for e in estimates])
    assert coverage >= 0.90
    snips_coverage = np.mean(
        [
            (e := snips(losses[r], simulation.weights(target, actions[r], propensities[r]))).lower
            <= truth
            <= e.upper
            for r in range(200)
        ]
    )
    assert snips_coverage >= 0.90


@pytest.mark.parametrize(
    ("call", "exception", "message"),
    [
        (
            lambda: ips([0.0, 1.0, 0.5, 0.25], WEIGHTS),
            ValueError,
            r"losses has 4 rows but weights has 5",
        ),
        (
            lambda: ips([0.0, 1.0, np.nan, 0.25, 1.0], WEIGHTS),
            ValueError,
            r"losses: 1 of 5 values are not finite \(NaN or inf\); first positions: \[2\]",
        ),
        (
            lambda: ips([0.0, 1.0, 0.5, 0.25, 1.0], [1.0, np.inf, 1.0, np.nan, 1.0]),
            ValueError,
            r"weights: 2 of 5 values are not finite \(NaN or inf\); first positions: \[1, 3\]",
        ),
        (
            lambda: snips([0.0, 1.0, 0.5, 0.25, 1.0], [1.0, -1.0, 1.0, 1.0, 1.0]),
            ValueError,
            r"weights: 1 of 5 values are negative",
        ),
        (lambda: ips([1.0], [1.0]), ValueError, r"losses has 1 row\(s\); at least 2 are needed"),
        (
            lambda: snips([1.0, 0.0], [0.0, 0.0]),
            ValueError,
            r"weights are all 0.*SNIPS is undefined",
        ),
        (lambda: clipped_ips([0.0, 1.0], [1.0, 2.0], 0), ValueError, r"clip must be > 0, got 0"),
        (
            lambda: clipped_ips([0.0, 1.0], [1.0, 2.0], -3.0),
            ValueError,
            r"clip must be > 0, got -3.0",
        ),
        (
            lambda: ips([0.0, 1.0], [1.0, 2.0], confidence_level=1.0),
            ValueError,
            r"confidence_level must be in \(0, 1\), got 1.0",
        ),
        (
            lambda: snips([0.0, 1.0], [1.0, 2.0], confidence_level=0),
            ValueError,
            r"confidence_level must be in \(0, 1\), got 0",
        ),
        (
            lambda: ips([0.0, 1.0], [1.0, 2.0], confidence_level=95),
            ValueError,
            r"confidence_level must be in \(0, 1\), got 95",
        ),
        (
            lambda: ips([0.0, 1.0], [1.0, 2.0], confidence_level="0.95"),
            TypeError,
            r"confidence_level must be a real number, got str",
        ),
        (
            lambda: ips([0.0, 1.0], [1.0, 2.0], interval="boot"),
            ValueError,
            r"interval must be one of \['t', 'normal', 'bootstrap'\], got 'boot'",
        ),
        (
            lambda: ips([0.0, 1.0], [1.0, 2.0], interval="T"),
            ValueError,
            r"interval must be one of .*, got 'T'",
        ),
        (
            lambda: ips([0.0, 1.0], [1.0, 2.0], interval="student-t"),
            ValueError,
            r"interval must be one of",
        ),
    ],
    ids=[
        "length",
        "nan-loss",
        "non-finite-weights",
        "negative-weight",
        "one-row",
        "all-zero-weights",
        "clip-zero",
        "clip-negative",
        "level-1",
        "level-0",
        "level-percent",
        "level-string",
        "interval-prefix",
        "interval-case",
        "interval-unknown",
    ],
)
def test_bad_arguments(call, exception, message):
    with pytest.raises(exception, match=message):
        call()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"estimator": "ip"},
            r"estimator must be one of \['ips', 'clipped_ips', 'snips'\], got 'ip'",
        ),
        ({"estimator": "IPS"}, r"estimator must be one of .*, got 'IPS'"),
        ({"estimator": "clipped"}, r"estimator must be one of .*, got 'clipped'"),
        ({"estimator": "clipped_ips"}, r"clip is required when estimator='clipped_ips'"),
        (
            {"estimator": "snips", "clip": 10.0},
            r"clip is only used by estimator='clipped_ips', got clip=10.0",
        ),
        ({"estimator": "clipped_ips", "clip": 0.0}, r"clip must be > 0, got 0.0"),
    ],
    ids=[
        "estimator-prefix",
        "estimator-case",
        "estimator-unknown",
        "clip-missing",
        "clip-unused",
        "clip-zero",
    ],
)
def test_evaluate_policy_bad_arguments(tiny_log, kwargs, message):
    uniform = StochasticPolicy.uniform(make_family("discrete", 2, 3))
    with pytest.raises(ValueError, match=message):
        evaluate_policy(uniform, tiny_log, **kwargs)


def test_evaluate_policy_translates_by_the_loss_maximum(tiny_log):
    from poem.estimators import evaluate_policy
    from poem.policies import StochasticPolicy, family_from_log

    family = family_from_log(tiny_log)
    uniform = StochasticPolicy.uniform(family)
    r = (1 / 3) / tiny_log.propensities
    translated = evaluate_policy(uniform, tiny_log)
    assert translated.value == pytest.approx(1.0 + np.mean((tiny_log.losses - 1.0) * r))
    plain = evaluate_policy(uniform, tiny_log, loss_baseline=0.0)
    assert plain.value == pytest.approx(np.mean(tiny_log.losses * r))
    assert translated.std_error == pytest.approx(
        plain.std_error * np.std((tiny_log.losses - 1) * r) / np.std(tiny_log.losses * r)
    )
    snips = [
        evaluate_policy(uniform, tiny_log, estimator="snips", loss_baseline=c).value
        for c in ("max", 0.0)
    ]
    assert snips[0] == pytest.approx(snips[1])
    with pytest.raises(ValueError, match="loss_baseline must be 'max' or a number, got 'min'"):
        evaluate_policy(uniform, tiny_log, loss_baseline="min")
