r"""IPS and SNIPS with t/normal intervals from additive per-partition sums (DESIGN §4.2, §8).

Both estimates and their standard errors depend on the rows only through a few sums of the
losses δᵢ and the importance weights rᵢ (:class:`WeightStatistics`):

.. math::

    \hat R_{IPS} = \frac{\sum_i r_i \delta_i}{n}, \quad
    \hat V(u) = \frac{\sum_i u_i^2 - n \bar u^2}{n - 1}, \; u_i = r_i \delta_i, \qquad
    \hat R_{SN} = \frac{\sum_i r_i \delta_i}{\sum_i r_i}, \quad
    \sum_i e_i^2 = \frac{\sum_i r_i^2 \delta_i^2 - 2 \hat R_{SN} \sum_i r_i^2 \delta_i
    + \hat R_{SN}^2 \sum_i r_i^2}{\bar r^2}

where eᵢ = rᵢ(δᵢ − R̂_SN)/r̄ are SNIPS's delta-method terms (Σeᵢ = 0), r̄ the mean weight and
n the number of rows. So a log held in partitions is evaluated by one map
(:func:`weight_statistics` per partition) and one reduce (``sum``), and
:func:`ips_from_statistics` / :func:`snips_from_statistics` give the in-memory
:func:`~poem.estimators.ips.ips` and :func:`~poem.estimators.ips.snips` estimates (same
value, standard error, interval and ESS up to round-off). Bootstrap intervals need the rows
and are not available here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from poem._blas import single_blas_thread
from poem.estimators.bounds import _check_confidence_level, _check_option, confidence_interval
from poem.estimators.ips import Estimate
from poem.estimators.weights import _check_losses, _check_weights

__all__ = ["WeightStatistics", "ips_from_statistics", "snips_from_statistics", "weight_statistics"]

_METHODS = ("t", "normal")


@dataclass(frozen=True)
class WeightStatistics:
    """Additive sums of losses δᵢ and importance weights rᵢ over a set of rows.

    Attributes
    ----------
    n : int
        Rows.
    sum_w, sum_w2 : float
        Σrᵢ, Σrᵢ².
    sum_u, sum_u2 : float
        Σrᵢδᵢ, Σrᵢ²δᵢ².
    sum_w2_loss : float
        Σrᵢ²δᵢ.
    """

    n: int
    sum_w: float
    sum_w2: float
    sum_u: float
    sum_u2: float
    sum_w2_loss: float

    def __add__(self, other: WeightStatistics) -> WeightStatistics:
        return WeightStatistics(
            self.n + other.n,
            self.sum_w + other.sum_w,
            self.sum_w2 + other.sum_w2,
            self.sum_u + other.sum_u,
            self.sum_u2 + other.sum_u2,
            self.sum_w2_loss + other.sum_w2_loss,
        )

    def __radd__(self, other: Any) -> WeightStatistics:
        if other == 0:  # support sum()
            return self
        return self.__add__(other)

    @property
    def effective_sample_size(self) -> float:
        """Kong's ESS (Σrᵢ)²/Σrᵢ² (0 when every weight is 0)."""
        return 0.0 if self.sum_w2 == 0 else self.sum_w**2 / self.sum_w2


def weight_statistics(losses: Any, weights: Any) -> WeightStatistics:
    """The map: :class:`WeightStatistics` of one partition (one pass over its rows).

    Parameters
    ----------
    losses : array-like of shape (n_samples,)
        Logged losses δᵢ.
    weights : array-like of shape (n_samples,)
        Importance weights rᵢ ≥ 0.

    Returns
    -------
    WeightStatistics
        Zero sums with n = 0 for an empty partition.

    Raises
    ------
    ValueError
        As :func:`~poem.estimators.ips.ips` (non-finite or negative weights, losses of the
        wrong length or non-finite), naming the counts.
    """
    w = np.asarray(weights, dtype=np.float64)
    d = np.asarray(losses, dtype=np.float64)
    if w.size == 0 and d.size == 0:  # an empty partition adds nothing
        return WeightStatistics(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    if w.ndim != 1 or d.shape != w.shape:
        _check_losses(d, _check_weights(w).size)  # raises, naming the shapes
    u = d * w
    with single_blas_thread():  # dot products: threads only cost (poem._blas)
        sums = (float(w.sum()), float(w @ w), float(u.sum()), float(u @ u), float(u @ w))
    if not np.all(np.isfinite(sums)) or w.min() < 0:
        # a non-finite δ or r makes a sum non-finite: the full checks name counts and rows
        _check_losses(d, _check_weights(w).size)
    return WeightStatistics(int(w.size), *sums)


def _check(stats: WeightStatistics, confidence_level: float, interval: str) -> float:
    if stats.n < 2:
        raise ValueError(f"losses has {stats.n} row(s); at least 2 are needed for a standard error")
    _check_option(interval, "interval", _METHODS)
    return _check_confidence_level(confidence_level)


def ips_from_statistics(
    stats: WeightStatistics, *, confidence_level: float = 0.95, interval: str = "t"
) -> Estimate:
    """:func:`~poem.estimators.ips.ips` from reduced sums (Eq. 1; t or normal interval).

    Raises
    ------
    ValueError
        Fewer than 2 rows, or an interval method other than ``"t"`` / ``"normal"``.
    """
    level = _check(stats, confidence_level, interval)
    n = stats.n
    value = stats.sum_u / n
    variance = max(0.0, (stats.sum_u2 - n * value**2) / (n - 1))
    se = float(np.sqrt(variance / n))
    lower, upper = confidence_interval(value, se, n, level, interval)
    ess = stats.effective_sample_size
    return Estimate("ips", value, se, lower, upper, n, level, ess, 0.0, interval)


def snips_from_statistics(
    stats: WeightStatistics, *, confidence_level: float = 0.95, interval: str = "t"
) -> Estimate:
    """:func:`~poem.estimators.ips.snips` from reduced sums (delta-method interval).

    Raises
    ------
    ValueError
        As :func:`ips_from_statistics`, and if every weight is 0 (SNIPS undefined).
    """
    level = _check(stats, confidence_level, interval)
    n = stats.n
    if stats.sum_w == 0.0:
        raise ValueError(
            "weights are all 0: the target policy puts no probability on any logged action, "
            "so SNIPS is undefined"
        )
    value = stats.sum_u / stats.sum_w
    mean_w = stats.sum_w / n
    sum_e2 = (stats.sum_u2 - 2.0 * value * stats.sum_w2_loss + value**2 * stats.sum_w2) / mean_w**2
    se = float(np.sqrt(max(0.0, sum_e2) / (n - 1) / n))  # Σeᵢ = 0: V̂(e) = Σeᵢ²/(n − 1)
    lower, upper = confidence_interval(value, se, n, level, interval)
    ess = stats.effective_sample_size
    return Estimate("snips", value, se, lower, upper, n, level, ess, 0.0, interval)
