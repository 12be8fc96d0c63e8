"""Lower confidence bounds by betting: valid at every sample size, for variables bounded below.

The gate (DESIGN §5) must keep its false-promotion rate ≤ α at finite n, where t intervals
on skewed, heavy-tailed paired terms do not (README). Only a *lower* bound Lᵢ on each term is
needed (no upper bound, no variance assumption); see :func:`betting_lower_bound`.

All functions are vectorised over leading axes (many simulated logs at once); rows are the
last axis, in the order they were logged.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poem.estimators.bounds import _check_confidence_level

__all__ = ["betting_lower_bound"]

_MAX_BET_FRACTION = 0.5  # κ: a bet never risks more than half the capital (WSR 2024, §5.1)
_MAX_REFINE_STEPS = 80  # bracket refinement steps (each at least halves it every other step)


def _plug_in_bets(x: np.ndarray, alpha: float, scale: float) -> np.ndarray:
    """Predictable plug-in bets λ̃ᵢ = √(2 log(1/α) / (n σ̂²ᵢ₋₁)) (rows < i only)."""
    n = x.shape[-1]
    count = np.arange(1, n + 1, dtype=np.float64)
    mean = np.cumsum(x, axis=-1) / (count + 1.0)  # μ̂ᵢ = (0 + Σ_{j≤i} x_j)/(i + 1)
    squares = np.cumsum((x - mean) ** 2, axis=-1)
    # σ̂²ᵢ₋₁ = (s² + Σ_{j<i} (x_j − μ̂_j)²) / i, with prior s² = scale²
    previous = np.concatenate([np.zeros(x.shape[:-1] + (1,)), squares[..., :-1]], axis=-1)
    # s² may underflow: floor the variance at the smallest normal float
    variance = np.maximum((scale**2 + previous) / count, np.finfo(np.float64).tiny)
    return np.sqrt(2.0 * np.log(1.0 / alpha) / (n * variance))


def _log_capital(x, lower, bets, m, mixture, kappa):
    """(maxₜ log Kₜ(m), log Kₙ(m)), Kₜ(m) = Πᵢ≤ₜ (1 + λᵢ(m)(xᵢ − m)), λᵢ = min(λ̃ᵢ, κ/(m − Lᵢ)).

    With ``mixture`` axis 0 holds strategies and K is the average of their capitals.
    """
    gap = m[..., None] - lower
    cap = np.where(gap > 0, kappa / np.where(gap > 0, gap, 1.0), np.inf)
    t = x - m[..., None]
    t *= np.minimum(bets, cap)
    np.log1p(t, out=t)
    np.cumsum(t, axis=-1, out=t)
    if mixture:
        top = np.max(t, axis=0)
        t = top + np.log(np.mean(np.exp(t - top), axis=0))
    return np.max(t, axis=-1), t[..., -1]


def betting_lower_bound(
    terms: Any,
    lower: Any,
    confidence_level: float = 0.95,
    *,
    scale: float = 1.0,
    mixture: bool = False,
    max_bet_fraction: Any = _MAX_BET_FRACTION,
    randomization: Any = None,
) -> np.ndarray | float:
    r"""One-sided lower confidence bound on the mean of terms bounded below, by betting.

    .. math::

        K_t(m) = \prod_{i \le t} \big(1 + \lambda_i(m)(X_i - m)\big), \quad
        \lambda_i(m) = \min\Big(\sqrt{\tfrac{2\log(1/\alpha)}{n\,\hat\sigma^2_{i-1}}},\
        \frac{\kappa}{m - L_i}\Big), \quad
        \hat\mu_{LB} = \sup\{m : \max_{t \le n} K_t(m) \ge 1/\alpha\}

    where Xᵢ are the terms (conditional mean μ given rows < i), Lᵢ ≤ Xᵢ their lower bounds
    (fixed, or computed from rows < i only), σ̂²ᵢ₋₁ the running variance of rows < i
    (prior s² = ``scale``²), κ the cap of the bets, n the number of rows and 1 − α the
    confidence level. Each factor is ≥ 1 − κ > 0 with conditional mean 1 at m = μ, so K(μ)
    is a nonnegative martingale and, by Ville's inequality, P(μ̂_LB > μ) ≤ α at every n.
    Each factor is non-increasing in m, so the rejected m form a half-line: the bound is
    found by an exponential search down from the mean, then Illinois regula-falsi steps on
    maxₜ log Kₜ, bisecting whenever a step did not halve the bracket, until the bracket is
    narrower than 10⁻⁴ standard errors (the returned m is always one whose capital reached
    1/α, so the bound errs low by at most that).

    Parameters
    ----------
    terms : array-like of shape (..., n_samples)
        Per-row terms in logged order, i.e. Xᵢ; leading axes are independent problems.
    lower : float or array-like broadcastable to ``terms``
        Lower bounds with Xᵢ ≥ Lᵢ, known before row i is seen, i.e. Lᵢ.
    confidence_level : float, default=0.95
        Probability that the bound holds, in (0, 1), i.e. 1 − α.
    scale : float, default=1.0
        Prior standard deviation s of the terms (only shapes the first bets), > 0.
    mixture : bool, default=False
        If True, axis 0 of ``terms`` and ``lower`` indexes S strategies: different terms
        with the same conditional mean μ. Their capitals are averaged, K = (1/S) Σₛ K⁽ˢ⁾,
        again a nonnegative martingale at μ (the price is log S in the threshold).
    max_bet_fraction : float or array-like of shape (S,), default=0.5
        The cap κ in (0, 1) of the bets; with ``mixture`` one per strategy. κ near 1 bets
        more when the cap binds (terms bounded far below their spread, e.g. rare losses).
    randomization : float or array-like of shape (...), optional
        U ~ Uniform(0, 1], fresh and independent of the data (one per problem). Then m is
        also rejected when the final capital Kₙ(m) ≥ max(U, α)/α; the randomized Ville
        inequality P(maxₜ Kₜ ≥ 1/α or Kₙ ≥ U/α) ≤ α keeps the level.

    Returns
    -------
    float or ndarray of shape (...)
        The lower bound μ̂_LB (min Lᵢ when the data give no evidence above it).

    Raises
    ------
    ValueError
        If a term is non-finite or below its lower bound, the level is not in (0, 1),
        ``scale`` is not positive, a ``max_bet_fraction`` is not in (0, 1) or there is not
        one per strategy, or a ``randomization`` is not in (0, 1].

    References
    ----------
    Waudby-Smith & Ramdas (2024), Estimating means of bounded random variables by betting,
    JRSS-B 86(1), arXiv:2010.09686, §4 (capital process, Eq. (12)), §5.1 (predictable
    plug-in bets, Eq. (26), with t log(1 + t) replaced by n for a fixed sample size) and
    Appendix on one-sided bounds for variables bounded on one side.
    Ville (1939), Étude critique de la notion de collectif (maximal inequality).
    Ramdas & Manole (2023), Randomized and exchangeable improvements of Markov's,
    Chebyshev's and Chernoff's inequalities, arXiv:2304.02611, §4 (randomized Ville).
    """
    x = np.asarray(terms, dtype=np.float64)
    alpha = 1.0 - _check_confidence_level(confidence_level)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0, got {scale!r}")
    kappa = np.asarray(max_bet_fraction, dtype=np.float64)
    if not (np.all(kappa > 0) and np.all(kappa < 1)) or kappa.ndim > 1:
        raise ValueError(
            f"max_bet_fraction must be a number or one per strategy, each in (0, 1), "
            f"got {max_bet_fraction!r}"
        )
    if kappa.ndim == 1:
        if not mixture or kappa.size != x.shape[0]:
            raise ValueError(
                f"max_bet_fraction has {kappa.size} values; one per strategy needs "
                f"mixture=True and {x.shape[0] if mixture else 'S'} strategies"
            )
        kappa = kappa.reshape((-1,) + (1,) * (x.ndim - 1))
    low = np.asarray(lower, dtype=np.float64)
    if low.ndim == x.ndim - 1:
        low = low[..., None]  # one bound per problem
    np.broadcast_shapes(low.shape, x.shape)
    if x.shape[-1] < 1 or not np.all(np.isfinite(x)) or not np.all(np.isfinite(low)):
        raise ValueError("terms and lower must be finite with at least one row")
    below = x < low - 1e-9 * np.maximum(1.0, np.abs(low))
    if np.any(below):
        raise ValueError(
            f"terms: {int(below.sum()):,} of {x.size:,} values are below their lower bound; "
            f"first positions: {np.flatnonzero(below.reshape(-1))[:5].tolist()}"
        )
    bets = _plug_in_bets(x, alpha, scale)
    threshold = np.log(1.0 / alpha)
    final = np.inf  # no randomization: only the running maximum decides
    if randomization is not None:
        u = np.asarray(randomization, dtype=np.float64)
        if not (np.all(u > 0) and np.all(u <= 1)):
            raise ValueError(f"randomization must be in (0, 1], got {randomization!r}")
        final = np.log(np.maximum(u, alpha) / alpha) + 1e-12  # U ≤ α: never m = max x

    def excess(m: np.ndarray) -> np.ndarray:  # ≥ 0 iff m is rejected
        running, last = _log_capital(x, low, bets, m, mixture, kappa)
        return np.maximum(running - threshold, last - final)

    floor = np.min(np.broadcast_to(low, x.shape), axis=-1)
    center = np.mean(x, axis=-1)
    step = np.std(x, axis=-1) / np.sqrt(x.shape[-1])
    top = np.max(x, axis=-1)
    if mixture:
        floor, center, step, top = floor.min(0), center.max(0), step.min(0), top.max(0)
    # bracket [lo, hi]: excess(lo) ≥ 0 > excess(hi) (Kₙ(max x) ≤ 1), or lo = floor
    center = np.maximum(center, floor)
    step = 2.5 * step + 1e-12 * (1.0 + np.abs(center))
    tol = 1e-4 * step / 2.5  # the refined bracket's width: 10⁻⁴ standard errors
    f_center = excess(center)
    above = f_center >= 0
    lo, f_lo = np.where(above, center, floor), np.where(above, f_center, -np.inf)
    hi = np.where(above, np.maximum(top, center), center)
    f_hi = np.where(above, excess(hi) if np.any(above) else f_center, f_center)
    open_ = ~above
    while np.any(open_):  # exponential search down from the mean: m = x̄ − 2.5·2ᵏ se
        candidate = np.maximum(center - step, floor)
        f = excess(candidate)
        hit = f >= 0
        lo, f_lo = np.where(open_ & hit, candidate, lo), np.where(open_ & hit, f, f_lo)
        hi, f_hi = np.where(open_ & ~hit, candidate, hi), np.where(open_ & ~hit, f, f_hi)
        open_ &= ~hit & (candidate > floor)
        step = 2.0 * step
    evidence = f_lo >= 0  # False only where even the floor is not rejected
    # refine: Illinois regula falsi, with a bisection whenever a step did not halve the
    # bracket, until it is narrower than 10⁻⁴ of the terms' standard error (lo always rejected)
    side = np.zeros(lo.shape)
    width = hi - lo
    bisect = np.zeros(lo.shape, dtype=bool)
    for _ in range(_MAX_REFINE_STEPS):
        open_ = evidence & (hi - lo > tol)
        if not np.any(open_):
            break
        m = hi - f_hi * (hi - lo) / (f_hi - f_lo)
        inside = np.isfinite(m) & (m > lo) & (m < hi) & ~bisect
        m = np.where(inside, m, 0.5 * (lo + hi))
        f = excess(m)
        hit = (f >= 0) & open_
        miss = ~hit & open_
        lo, f_lo = np.where(hit, m, lo), np.where(hit, f, f_lo)
        hi, f_hi = np.where(miss, m, hi), np.where(miss, f, f_hi)
        f_hi = np.where(hit & (side > 0), 0.5 * f_hi, f_hi)
        f_lo = np.where(miss & (side < 0), 0.5 * f_lo, f_lo)
        side = np.where(hit, 1.0, np.where(miss, -1.0, side))
        bisect = (hi - lo) > 0.5 * width  # this step did not halve the bracket: bisect next
        width = hi - lo
    return float(lo) if lo.ndim == 0 else lo
