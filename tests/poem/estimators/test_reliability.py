"""Reliability flags of reported intervals (:mod:`poem.estimators.reliability`)."""

import numpy as np
import pytest

from poem.estimators import clipped_ips, effective_sample_size, ips, snips
from poem.estimators.reliability import interval_flags


def test_well_behaved_terms_raise_no_flag():
    rng = np.random.default_rng(0)
    weights = rng.uniform(0.5, 1.5, 2000)
    losses = rng.random(2000)
    assert interval_flags(losses * weights, weights) == ()
    assert ips(losses, weights).reliable and snips(losses, weights).flags == ()


def test_each_reason_names_its_counts():
    rng = np.random.default_rng(1)
    n = 2000
    heavy = np.where(rng.random(n) < 0.01, 80.0, 0.2)  # ESS ≈ 7 % of n
    ess = effective_sample_size(heavy)
    assert ess < 0.1 * n
    assert (
        f"weight tail: effective sample size {ess:,.1f} of 2,000 rows ({ess / n:.1%} < 10%)"
        in interval_flags(rng.random(n) * heavy, heavy)
    )
    rare = (rng.random(1000) < 0.01).astype(float)  # ~10 non-zero losses, skewness ≈ 10
    flags = interval_flags(rare, np.ones(1000))
    k = int(rare.sum())
    assert f"few non-zero terms (rare losses): {k:,} of 1,000 rows (< 300)" in flags
    assert any(f.startswith("skewed terms: |skewness|/sqrt(n) = 0.") for f in flags)
    clipped = clipped_ips(rng.random(n), heavy, 10.0)
    assert clipped.flags[-1] == (
        f"clipped: {clipped.clipped_fraction:.1%} of weights reach the clip, so the interval "
        "covers the clipped risk, not the risk"
    )


@pytest.mark.parametrize("n", [200, 100_000])
def test_flags_follow_the_sample_size_for_rare_losses(n):
    rng = np.random.default_rng(2)
    losses = (rng.random(n) < 0.01).astype(float)
    flagged = bool(ips(losses, np.ones(n)).flags)
    assert flagged == (n == 200)  # 2 vs 1,000 non-zero losses


def test_few_rows_carrying_the_variance_are_flagged_even_when_no_term_is_zero():
    rng = np.random.default_rng(3)
    losses = (rng.random(20_000) < 0.005).astype(float)  # ~100 losses among 20,000 rows
    estimate = snips(losses, rng.uniform(0.5, 1.5, 20_000))  # every linearised term ≠ 0
    assert any(f.startswith("few rows carry the variance") for f in estimate.flags)


def test_tiny_spread_does_not_divide_by_an_underflowed_square():
    # one term of 1e-80 among 1,000: m2 ≈ 1e-163 > 0 and m4 ≈ 1e-323 > 0 (subnormal), but
    # m2² underflows to 0 (seen on a validation log scoring a very sharp multilabel policy)
    terms = np.zeros(1000)
    terms[0] = 1e-80
    flags = interval_flags(terms, np.ones(1000))
    assert flags[0].startswith("few non-zero")
