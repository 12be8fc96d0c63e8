import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from poem.estimators import (
    clip_weights,
    clipped_fraction,
    effective_sample_size,
    importance_weights,
)

# tiny_log propensities are [0.5, 0.25, 0.2, 0.5, 0.4]; a hand-chosen target puts these
# probabilities on the logged actions:
TARGET = np.array([0.25, 0.5, 0.4, 1.0, 0.2])
WEIGHTS = np.array([0.5, 2.0, 2.0, 2.0, 0.5])


def test_importance_weights_by_hand(tiny_log):
    np.testing.assert_allclose(importance_weights(TARGET, tiny_log.propensities), WEIGHTS)


def test_logging_policy_as_target_gives_unit_weights(tiny_log):
    np.testing.assert_array_equal(
        importance_weights(tiny_log.propensities, tiny_log.propensities), np.ones(5)
    )


def test_effective_sample_size_by_hand():
    # (Σr)² / Σr² = 7² / (0.25 + 4 + 4 + 4 + 0.25) = 49 / 12.5
    assert effective_sample_size(WEIGHTS) == pytest.approx(3.92)
    assert effective_sample_size(np.ones(7)) == pytest.approx(7.0)
    assert effective_sample_size([0.0, 0.0, 5.0]) == pytest.approx(1.0)
    assert effective_sample_size(np.zeros(4)) == 0.0


@given(
    arrays(
        np.float64, st.integers(1, 30), elements=st.one_of(st.just(0.0), st.floats(1e-200, 50.0))
    ),
    st.floats(0.01, 100.0),
)
def test_effective_sample_size_is_scale_free_and_between_1_and_n(weights, scale):
    ess = effective_sample_size(weights)
    if weights.sum() == 0:
        assert ess == 0.0
        return
    assert 1.0 - 1e-9 <= ess <= weights.size + 1e-9
    assert effective_sample_size(scale * weights) == pytest.approx(ess, rel=1e-9)


def test_clipping_and_clipped_fraction_by_hand():
    np.testing.assert_array_equal(clip_weights(WEIGHTS, 1.5), [0.5, 1.5, 1.5, 1.5, 0.5])
    assert clipped_fraction(WEIGHTS, 1.5) == pytest.approx(0.6)
    assert clipped_fraction(WEIGHTS, 2.0) == pytest.approx(
        0.6
    )  # rᵢ ≥ M counts, as in the CRM objective
    assert clipped_fraction(WEIGHTS, 2.5) == 0.0
    assert clipped_fraction(WEIGHTS, np.inf) == 0.0
    assert clipped_fraction(WEIGHTS, None) == 0.0
    np.testing.assert_array_equal(clip_weights(WEIGHTS, np.inf), WEIGHTS)


P = np.array([0.5, 0.25, 0.2, 0.5, 0.4])


@pytest.mark.parametrize(
    ("call", "exception", "message"),
    [
        (
            lambda: importance_weights(TARGET[:4], P),
            ValueError,
            r"target_probs has 4 rows but propensities has 5",
        ),
        (
            lambda: importance_weights(TARGET, [0.5, 0.0, 0.2, np.nan, 1.5]),
            ValueError,
            r"propensities: 3 of 5 values are outside \(0, 1\]; first positions: \[1, 3, 4\]",
        ),
        (
            lambda: importance_weights([0.2, 1.5, -0.1, 0.3, np.inf], P),
            ValueError,
            r"target_probs: 3 of 5 values are outside \[0, 1\]; first positions: \[1, 2, 4\]",
        ),
        (
            lambda: importance_weights(np.ones((5, 2)), P),
            ValueError,
            r"target_probs must be 1-dimensional",
        ),
        (lambda: importance_weights([], []), ValueError, r"target_probs is empty"),
        (lambda: importance_weights(["a"] * 5, P), TypeError, r"target_probs must be numeric"),
        (
            lambda: effective_sample_size([1.0, np.nan, np.inf]),
            ValueError,
            r"weights: 2 of 3 values are not finite \(NaN or inf\); first positions: \[1, 2\]",
        ),
        (
            lambda: effective_sample_size([1.0, -2.0]),
            ValueError,
            r"weights: 1 of 2 values are negative",
        ),
        (lambda: clipped_fraction(WEIGHTS, 0), ValueError, r"clip must be > 0, got 0"),
        (lambda: clipped_fraction(WEIGHTS, -1.5), ValueError, r"clip must be > 0, got -1.5"),
        (lambda: clipped_fraction(WEIGHTS, np.nan), ValueError, r"clip must be > 0, got nan"),
        (lambda: clip_weights(WEIGHTS, "10"), TypeError, r"clip must be a real number, got str"),
    ],
    ids=[
        "length",
        "propensity-range",
        "target-range",
        "2d",
        "empty",
        "non-numeric",
        "non-finite-weights",
        "negative-weights",
        "clip-zero",
        "clip-negative",
        "clip-nan",
        "clip-string",
    ],
)
def test_bad_arguments(call, exception, message):
    with pytest.raises(exception, match=message):
        call()
