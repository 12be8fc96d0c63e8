"""Criteo test-bed metric (IPS×10⁴ over n⁺ + 10n⁻) and the clipping sweep."""

from __future__ import annotations

import numpy as np
import pytest

from poem.estimators import clipping_sweep, criteo_ips

CLICKS = np.array([1.0, 0.0, 0.0, 1.0, 0.0])
WEIGHTS = np.array([2.0, 1.0, 4.0, 0.5, 1.0])


def test_metric_by_hand():
    est = criteo_ips(CLICKS, WEIGHTS)
    # Σ cᵢ rᵢ = 2.5; n⁺ + 10 n⁻ = 2 + 30 = 32
    assert est.value == pytest.approx(1e4 * 2.5 / 32)
    terms = CLICKS * WEIGHTS
    half = 1e4 * 2.58 * np.sqrt(5) * terms.std() / 32
    assert (est.lower, est.upper) == pytest.approx((est.value - half, est.value + half))
    assert est.std_error == pytest.approx(half / 2.58)
    assert (est.estimator, est.confidence_level, est.method, est.clipped_fraction) == (
        "criteo_ips",
        0.99,
        "normal",
        0.0,
    )


def test_clipping_caps_weights_and_reports_the_fraction():
    est = criteo_ips(CLICKS, WEIGHTS, clip=1.0)
    assert est.value == pytest.approx(1e4 * 1.5 / 32)
    assert est.clipped_fraction == pytest.approx(4 / 5)  # weights ≥ 1


@pytest.mark.parametrize(
    ("clicks", "weights", "message"),
    [
        ([1, 2, 0], [1, 1, 1], r"clicks: 1 of 3 values are not 0 or 1"),
        ([1, 0], [1, 1, 1], r"clicks has 2 rows but weights has 3"),
        ([1, 0], [1, -1], r"weights: 1 of 2 values are negative"),
    ],
)
def test_bad_inputs(clicks, weights, message):
    with pytest.raises(ValueError, match=message):
        criteo_ips(clicks, weights)


def test_clipping_sweep():
    p = np.array([0.5, 0.1, 0.02, 0.25, 1.0])  # 1/p = 2, 10, 50, 4, 1
    sweep = clipping_sweep(
        CLICKS, p, {10.0: p * 2 / 2, 1.0: np.full(5, 0.5), np.inf: np.ones(5) * 0.2}
    )
    assert sweep.clips == (1.0, 10.0, np.inf)
    assert sweep.clipped_fraction == pytest.approx((1.0, 0.4, 0.0))
    assert sweep.estimates[1].value == pytest.approx(1e4 * 2 / 32)  # target = logger: weights 1
    rows = sweep.to_dict()["rows"]
    assert rows[0]["ips"] == pytest.approx(1e4 * (1 + 2) / 32) and "| M |" in sweep.to_markdown()
