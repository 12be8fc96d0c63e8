"""Reliability flags of the t / normal / bootstrap intervals the library reports.

Those intervals rest on a normal approximation of a mean of per-row terms. With heavy-tailed
importance weights or rare non-zero losses they cover far less than their level (DESIGN
§4.2); an interval that may undercover says so, with the reason, which travels with the
:class:`~poem.estimators.ips.Estimate` into the gate report, MLflow and ``check``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poem.estimators.weights import effective_sample_size

__all__ = [
    "MAX_SKEWNESS_RATIO",
    "MIN_ESS",
    "MIN_ESS_FRACTION",
    "MIN_NONZERO_TERMS",
    "flags_from_moments",
    "interval_flags",
]

# thresholds chosen on the coverage benchmark (README); see interval_flags
MIN_ESS_FRACTION = 0.1  # Kong's ESS below this fraction of n: heavy-tailed weights
MIN_ESS = 1_000.0  # below this ESS: small sample
MIN_NONZERO_TERMS = 300  # fewer non-zero terms: rare losses
MAX_SKEWNESS_RATIO = 0.25  # |skewness| / √n above this: the normal approximation is off


def interval_flags(terms: Any, weights: Any, clipped_fraction: float = 0.0) -> tuple[str, ...]:
    r"""Reasons why a normal-approximation interval of a mean of terms may undercover.

    .. math::

        n_e = \frac{(\sum_i r_i)^2}{\sum_i r_i^2}, \quad
        k = \#\{i : u_i \ne 0\}, \quad
        \hat\gamma = \frac{m_3}{m_2^{3/2}}, \quad m_k = \frac1n \sum_i (u_i - \bar u)^k

    where uᵢ are the per-row terms whose mean is the estimate, rᵢ the importance weights,
    n_e Kong's effective sample size, k the number of non-zero terms, m_k the central moments
    and γ̂ the skewness.
    A flag is raised when n_e < 0.1 n (weight tail) or n_e < 1,000 (small sample), k < 300 or
    n m₂²/m₄ < 300 (few rows carry the variance: rare losses, also when the other terms are
    small but not zero, as SNIPS's linearised terms) or
    |γ̂|/√n > 0.25 (the leading Edgeworth term of the coverage error of a mean is
    proportional to γ/√n), and when any weight was clipped (the interval then covers the
    clipped risk, not the risk).

    Parameters
    ----------
    terms : array-like of shape (n_samples,)
        Per-row terms of the estimate, i.e. uᵢ.
    weights : array-like of shape (n_samples,)
        Importance weights behind them, i.e. rᵢ.
    clipped_fraction : float, default=0.0
        Fraction of weights at the clip M.

    Returns
    -------
    tuple of str
        One sentence per reason; empty when none applies.

    References
    ----------
    Hall (1992), The bootstrap and Edgeworth expansion, Springer, §2.4 (coverage error of
    the t interval, leading term ∝ skewness/√n).
    Kong (1992), Technical Report 348, University of Chicago (effective sample size).
    """
    u = np.asarray(terms, dtype=np.float64)
    centred = u - u.mean()
    m2 = float(np.mean(centred**2))
    spread = m2**1.5
    skewness = float(np.mean(centred**3)) / spread if spread > 0 else 0.0  # 0 on underflow too
    m4 = float(np.mean(centred**4))
    kurtosis = m4 / m2**2 if m2**2 > 0 and m4 > 0 else None  # m2² underflows for m2 < 1e-154
    ess, nonzero = effective_sample_size(weights), int(np.count_nonzero(u))
    return flags_from_moments(u.size, ess, nonzero, skewness, clipped_fraction, kurtosis=kurtosis)


def flags_from_moments(
    n: int,
    ess: float,
    nonzero: int,
    skewness: float,
    clipped_fraction: float = 0.0,
    *,
    kurtosis: float | None = None,
) -> tuple[str, ...]:
    r"""The flags of :func:`interval_flags` from summary numbers (partitioned logs, DESIGN §8).

    .. math::

        n_e < 0.1\,n \;\text{or}\; n_e < 1000, \quad k < 300, \quad n/\hat\kappa < 300,
        \quad |\hat\gamma| / \sqrt{n} > 0.25

    where n_e is Kong's effective sample size, k the number of non-zero terms, κ̂ = m₄/m₂²
    their kurtosis and γ̂ their skewness (0 for constant terms), as in :func:`interval_flags`.

    Parameters
    ----------
    n : int
        Number of terms.
    ess : float
        Kong's effective sample size of the weights, i.e. n_e.
    nonzero : int
        Number of non-zero terms, i.e. k.
    skewness : float
        Skewness of the terms, i.e. γ̂.
    clipped_fraction : float, default=0.0
        Fraction of weights at the clip M.
    kurtosis : float or None, default=None
        Kurtosis of the terms, i.e. κ̂ (None: that check is skipped).

    Returns
    -------
    tuple of str
        One sentence per reason; empty when none applies.
    """
    flags = []
    if ess < MIN_ESS_FRACTION * n:
        flags.append(
            f"weight tail: effective sample size {ess:,.1f} of {n:,} rows "
            f"({ess / n:.1%} < {MIN_ESS_FRACTION:.0%})"
        )
    elif ess < MIN_ESS:
        flags.append(f"small sample: effective sample size {ess:,.1f} < {MIN_ESS:,.0f}")
    if nonzero < MIN_NONZERO_TERMS:
        flags.append(
            f"few non-zero terms (rare losses): {nonzero:,} of {n:,} rows (< {MIN_NONZERO_TERMS})"
        )
    elif kurtosis is not None and n / kurtosis < MIN_NONZERO_TERMS:
        flags.append(
            f"few rows carry the variance (rare losses or a weight tail): n/kurtosis = "
            f"{n / kurtosis:,.1f} < {MIN_NONZERO_TERMS}"
        )
    ratio = abs(skewness) / np.sqrt(n)
    if ratio > MAX_SKEWNESS_RATIO:
        flags.append(f"skewed terms: |skewness|/sqrt(n) = {ratio:.2f} > {MAX_SKEWNESS_RATIO}")
    if clipped_fraction > 0:
        flags.append(
            f"clipped: {clipped_fraction:.1%} of weights reach the clip, so the interval "
            "covers the clipped risk, not the risk"
        )
    return tuple(flags)
