"""IPS and SNIPS from per-partition sums equal the in-memory estimators."""

from __future__ import annotations

import numpy as np
import pytest

from poem.estimators.ips import ips, snips
from poem.estimators.partitioned import (
    ips_from_statistics,
    snips_from_statistics,
    weight_statistics,
)

BOUNDS = [0, 7, 7, 250, 251, 400]  # uneven partitions, one empty, one single row


def _data(n=400, seed=0):
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0.0, 1.0, n) * (rng.random(n) < 0.8)  # some zero weights
    losses = rng.integers(0, 2, n).astype(float)
    return losses, weights


@pytest.mark.parametrize("interval", ["t", "normal"])
def test_reduced_estimates_equal_in_memory(interval):
    losses, weights = _data()
    edges = [*BOUNDS, losses.size]
    stats = sum(
        weight_statistics(losses[a:b], weights[a:b])
        for a, b in zip(edges[:-1], edges[1:], strict=True)
    )
    assert stats.n == losses.size
    for reduced, full in (
        (ips_from_statistics(stats, interval=interval), ips(losses, weights, interval=interval)),
        (
            snips_from_statistics(stats, interval=interval),
            snips(losses, weights, interval=interval),
        ),
    ):
        got, want = reduced.to_dict(), full.to_dict()
        for key in ("estimator", "n", "method", "confidence_level", "clipped_fraction"):
            assert got[key] == want[key]
        for key in ("value", "std_error", "lower", "upper", "effective_sample_size"):
            assert got[key] == pytest.approx(want[key], rel=1e-10), key


def test_errors_name_the_counts():
    losses, weights = _data()
    with pytest.raises(ValueError, match=r"1 row\(s\); at least 2"):
        ips_from_statistics(weight_statistics(losses[:1], weights[:1]))
    with pytest.raises(ValueError, match=r"interval must be one of \['t', 'normal'\]"):
        snips_from_statistics(weight_statistics(losses, weights), interval="bootstrap")
    with pytest.raises(ValueError, match=r"weights are all 0"):
        snips_from_statistics(weight_statistics(losses, np.zeros_like(weights)))
    with pytest.raises(ValueError, match=r"weights"):
        weight_statistics(losses, -weights - 1.0)
