"""Sample variance, standard errors, confidence intervals and the empirical-Bernstein bound.

Everything here acts on per-row terms (uᵢ = δᵢ rᵢ for IPS, their clipped or linearised
versions for the other estimators, dᵢ for a paired difference), so every estimator and the
gate share one implementation (DESIGN §4.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import special
from sklearn.utils import check_random_state

from poem.estimators.weights import _as_vector, _check_clip, _check_real, _check_values

__all__ = [
    "ALTERNATIVES",
    "INTERVAL_METHODS",
    "bootstrap_interval",
    "confidence_interval",
    "empirical_bernstein_bound",
    "sample_variance",
    "standard_error",
]

INTERVAL_METHODS = ("t", "normal", "bootstrap")
ALTERNATIVES = ("two-sided", "less")
_BOOTSTRAP_CHUNK = 2_000_000  # resampled entries held in memory at once


def _check_option(value: Any, name: str, options: Sequence[str]) -> str:
    """Exact membership test for option strings (no prefixes, no case folding)."""
    if not isinstance(value, str) or value not in options:
        raise ValueError(f"{name} must be one of {list(options)}, got {value!r}")
    return value


def _check_confidence_level(confidence_level: Any) -> float:
    """Validate 1 − γ ∈ (0, 1)."""
    _check_real(confidence_level, "confidence_level")
    if not 0.0 < confidence_level < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    return float(confidence_level)


def _finite_vector(values: Any, name: str) -> np.ndarray:
    v = _as_vector(values, name)
    if v.size < 2:
        raise ValueError(f"{name} has {v.size} row(s); at least 2 are needed for a sample variance")
    _check_values(~np.isfinite(v), name, "are not finite (NaN or inf)")
    return v


def sample_variance(values: Any) -> float:
    r"""Unbiased sample variance of per-row terms.

    .. math:: \hat V(u) = \frac{1}{n-1} \sum_{i=1}^n (u_i - \bar u)^2

    where uᵢ are the per-row terms, ū their mean and n their number.

    Parameters
    ----------
    values : array-like of shape (n_samples,)
        Per-row terms, i.e. uᵢ; at least two.

    Returns
    -------
    float
        The sample variance V̂(u).

    Raises
    ------
    ValueError
        If ``values`` has fewer than two entries or non-finite entries.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, §4.1 (definition of
    V̂ar(u_h) before Theorem 3).
    """
    return float(np.var(_finite_vector(values, "values"), ddof=1))


def standard_error(values: Any) -> float:
    r"""Compute the standard error of the mean of per-row terms.

    .. math:: \mathrm{se}(\bar u) = \sqrt{\hat V(u) / n}

    where V̂(u) is the :func:`sample_variance` of the n terms uᵢ.

    Parameters
    ----------
    values : array-like of shape (n_samples,)
        As for :func:`sample_variance`.

    Returns
    -------
    float
        The standard error.

    Raises
    ------
    ValueError
        As :func:`sample_variance`.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (10) (the term
    √(V̂ar(u_h)/n)).
    """
    u = _finite_vector(values, "values")
    return float(np.sqrt(np.var(u, ddof=1) / u.size))


def confidence_interval(
    value: float,
    std_error: float,
    n: int,
    confidence_level: float = 0.95,
    method: str = "t",
    *,
    alternative: str = "two-sided",
) -> tuple[float, float]:
    r"""Student-t or normal confidence interval around an asymptotically normal estimate.

    .. math::

        [\hat R - q \,\mathrm{se},\ \hat R + q \,\mathrm{se}], \quad
        q = F^{-1}(1 - \gamma/2) \text{ (two-sided)}, \quad
        (-\infty,\ \hat R + q' \,\mathrm{se}], \quad
        q' = F^{-1}(1 - \gamma) \text{ (one-sided)}

    where R̂ is the estimate, se its standard error, 1 − γ the confidence level and F the
    CDF of Student's t with n − 1 degrees of freedom (``method="t"``) or of the standard
    normal (``method="normal"``).

    Parameters
    ----------
    value : float
        The estimate, i.e. R̂.
    std_error : float
        Its standard error, ≥ 0, i.e. se.
    n : int
        Number of rows behind the estimate, ≥ 2, i.e. n.
    confidence_level : float, default=0.95
        Coverage probability in (0, 1), i.e. 1 − γ.
    method : {"t", "normal"}, default="t"
        Reference distribution F.
    alternative : {"two-sided", "less"}, default="two-sided"
        ``"less"`` gives the one-sided interval (−∞, R̂ + q se] used to show that a risk is
        *less* than a threshold (the gate, DESIGN §5).

    Returns
    -------
    lower, upper : float
        The interval ends.

    Raises
    ------
    ValueError
        If ``confidence_level`` is not in (0, 1), ``std_error`` is negative or not finite,
        ``n`` < 2, or ``method`` / ``alternative`` is not an exact option name.
    """
    level = _check_confidence_level(confidence_level)
    _check_option(method, "method", INTERVAL_METHODS[:2])
    _check_option(alternative, "alternative", ALTERNATIVES)
    if not np.isfinite(value):
        raise ValueError(f"value must be finite, got {value!r}")
    if not (np.isfinite(std_error) and std_error >= 0):
        raise ValueError(f"std_error must be finite and >= 0, got {std_error!r}")
    if int(n) < 2:
        raise ValueError(f"n must be >= 2, got {n!r}")
    tail = (1.0 - level) / 2.0 if alternative == "two-sided" else 1.0 - level
    # quantile F⁻¹(1 − tail): Student t with n − 1 degrees of freedom, or standard normal
    q = special.stdtrit(int(n) - 1, 1.0 - tail) if method == "t" else special.ndtri(1.0 - tail)
    upper = float(value + q * std_error)
    lower = float(value - q * std_error) if alternative == "two-sided" else -np.inf
    return lower, upper


def empirical_bernstein_bound(
    scaled_u: Any,
    clip: float,
    confidence_level: float = 0.95,
    *,
    loss_bounds: tuple[float, float] | None = None,
) -> float:
    r"""Empirical-Bernstein upper confidence bound on the risk of one fixed policy.

    .. math::

        R(\pi) \le \hat R^M + \sqrt{\frac{2 \hat V(u)\, t}{n}} + \frac{7 M t}{3(n-1)},
        \qquad t = \log(2/\gamma)

    where uᵢ = δ'ᵢ min(M, rᵢ) ∈ [−M, 0] are the clipped IPS terms of the scaled losses
    δ'ᵢ ∈ [−1, 0] (DESIGN §4.1), R̂^M = ū their mean, V̂(u) their
    :func:`sample_variance`, M the clip, n the number of rows and 1 − γ the confidence
    level. It is Maurer & Pontil's bound for sᵢ = 1 + uᵢ/M ∈ [0, 1] (the paper's Eq. (6))
    multiplied by M; it bounds the clipped risk R^M, hence R(π) ≤ R^M because δ' ≤ 0. It
    holds with probability ≥ 1 − γ for a policy fixed before seeing the log (not for one
    selected on it).

    Parameters
    ----------
    scaled_u : array-like of shape (n_samples,)
        Clipped IPS terms of the scaled losses, in [−M, 0], i.e. uᵢ; at least two.
    clip : float
        Weight cap used to build ``scaled_u``, > 0, i.e. M.
    confidence_level : float, default=0.95
        Probability that the bound holds, in (0, 1), i.e. 1 − γ.
    loss_bounds : tuple of float or None, default=None
        Declared loss bounds (δ_min, δ_max). When given, the bound B is returned in the
        original loss units as δ_max + (δ_max − δ_min) B (paper §4.3); otherwise in scaled
        units.

    Returns
    -------
    float
        The upper confidence bound on R(π).

    Raises
    ------
    ValueError
        If ``scaled_u`` has fewer than two entries, non-finite entries or entries outside
        [−M, 0]; if ``clip`` ≤ 0 or ``confidence_level`` is not in (0, 1).

    References
    ----------
    Maurer & Pontil (2009), Empirical Bernstein bounds and sample variance penalization,
    COLT, arXiv:0907.3740, Theorem 4.
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (6), Lemma 2 (Eq. (4))
    and §4.3 (loss scaling).
    """
    u = _finite_vector(scaled_u, "scaled_u")
    M = _check_clip(clip)
    gamma = 1.0 - _check_confidence_level(confidence_level)
    tol = 1e-12 * max(1.0, M)
    _check_values((u < -M - tol) | (u > tol), "scaled_u", f"are outside [-clip, 0] = [{-M:g}, 0]")
    n = u.size
    t = np.log(2.0 / gamma)
    variance = np.var(u, ddof=1)
    # Eq. (6), multiplied by M
    bound = float(u.mean() + np.sqrt(2.0 * variance * t / n) + 7.0 * M * t / (3.0 * (n - 1)))
    if loss_bounds is None:
        return bound
    lo, hi = (float(b) for b in loss_bounds)
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"loss_bounds must be finite with min < max, got {loss_bounds!r}")
    return hi + (hi - lo) * bound


def bootstrap_interval(
    statistic: Callable[..., np.ndarray],
    arrays: Sequence[Any],
    *,
    confidence_level: float = 0.95,
    n_resamples: int = 1000,
    random_state: Any = 0,
    alternative: str = "two-sided",
) -> tuple[float, float]:
    r"""Percentile bootstrap interval of a statistic of paired per-row arrays.

    .. math::

        [\hat\theta^*_{(\gamma/2)},\ \hat\theta^*_{(1-\gamma/2)}]
        \text{ (two-sided) or } (-\infty,\ \hat\theta^*_{(1-\gamma)}] \text{ (one-sided)}

    where θ̂*_(q) is the q-quantile of the statistic over B resamples of the rows drawn with
    replacement (rows of all ``arrays`` resampled together) and 1 − γ the confidence level.

    Parameters
    ----------
    statistic : callable
        Called as ``statistic(*resampled)`` where each resampled array has shape
        (n_chunk, n_samples); must return the statistic of every resample, shape (n_chunk,).
        Resamples where it is NaN (e.g. a ratio with zero denominator) are ignored.
    arrays : sequence of array-like of shape (n_samples,)
        Per-row data, e.g. ``(losses, weights)``, i.e. (δᵢ, rᵢ).
    confidence_level : float, default=0.95
        Coverage probability in (0, 1), i.e. 1 − γ.
    n_resamples : int, default=1000
        Number of bootstrap resamples B.
    random_state : int, RandomState instance or None, default=0
        Seed of the resampling.
    alternative : {"two-sided", "less"}, default="two-sided"
        ``"less"`` gives the one-sided interval (−∞, θ̂*_(1−γ)].

    Returns
    -------
    lower, upper : float
        The interval ends.

    Raises
    ------
    ValueError
        If the arrays differ in length or have fewer than two rows, ``n_resamples`` < 2,
        ``confidence_level`` is not in (0, 1), ``alternative`` is unknown, or every
        resample's statistic is NaN.

    References
    ----------
    Efron & Tibshirani (1993), An introduction to the bootstrap, Chapman & Hall, §13.3
    (percentile interval).
    """
    level = _check_confidence_level(confidence_level)
    _check_option(alternative, "alternative", ALTERNATIVES)
    integer = isinstance(n_resamples, (int, np.integer)) and not isinstance(n_resamples, bool)
    if not integer or n_resamples < 2:
        raise ValueError(f"n_resamples must be an integer >= 2, got {n_resamples!r}")
    data = [_finite_vector(a, f"arrays[{k}]") for k, a in enumerate(arrays)]
    if not data:
        raise ValueError("arrays must hold at least one array")
    n = data[0].size
    for k, a in enumerate(data[1:], start=1):
        if a.size != n:
            raise ValueError(f"arrays[{k}] has {a.size:,} rows but arrays[0] has {n:,}")
    rng = check_random_state(random_state)
    chunk = max(1, _BOOTSTRAP_CHUNK // n)
    replicates = []
    for start in range(0, n_resamples, chunk):
        idx = rng.randint(0, n, size=(min(chunk, n_resamples - start), n))
        replicates.append(np.asarray(statistic(*(a[idx] for a in data)), dtype=np.float64))
    theta = np.concatenate(replicates)
    if np.all(np.isnan(theta)):
        raise ValueError("the statistic is undefined (NaN) on every bootstrap resample")
    if alternative == "less":
        return -np.inf, float(np.nanquantile(theta, level))
    tail = (1.0 - level) / 2.0
    lower, upper = np.nanquantile(theta, [tail, 1.0 - tail])
    return float(lower), float(upper)
