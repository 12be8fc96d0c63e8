"""Mergeable statistics of values seen one partition at a time (DESIGN §8).

Each statistic is computed on a partition with ``of`` and added to another with ``merge``; the
merged statistic does not depend on how the values were partitioned: :class:`Moments` up to
floating-point rounding (~1e-12 relative), :class:`LogHistogram`'s quantiles within relative
error ρ = 2⁻¹⁰ of ``numpy.quantile``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["SKETCH_RELATIVE_ERROR", "LogHistogram", "Moments"]

SKETCH_RELATIVE_ERROR = 2.0**-10  # ρ: relative width of a bin of LogHistogram
_LOG_BASE = float(np.log1p(SKETCH_RELATIVE_ERROR))


@dataclass(frozen=True)
class LogHistogram:
    """Mergeable quantile sketch of positive values: counts in log-spaced bins.

    A value v > 0 falls in bin b = ⌊ln v / ln(1+ρ)⌋; only non-empty bins are stored (sorted),
    so the size is at most the number of distinct bins (≈ 7,100 per decade of spread at
    ρ = 2⁻¹⁰). Minimum and maximum are exact.

    Attributes
    ----------
    bins : ndarray of int64
        Sorted non-empty bin indices.
    counts : ndarray of int64
        Values per bin.
    minimum, maximum : float
        Exact extremes (``inf`` / ``-inf`` when empty).
    """

    bins: np.ndarray
    counts: np.ndarray
    minimum: float = np.inf
    maximum: float = -np.inf

    @classmethod
    def of(cls, values: np.ndarray) -> LogHistogram:
        """Sketch of the positive finite ``values``."""
        v = np.asarray(values, dtype=np.float64)
        if v.size == 0:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64))
        bins, counts = np.unique(
            np.floor(np.log(v) / _LOG_BASE).astype(np.int64), return_counts=True
        )
        return cls(bins, counts.astype(np.int64), float(v.min()), float(v.max()))

    @property
    def n(self) -> int:
        """Number of values."""
        return int(self.counts.sum())

    def merge(self, other: LogHistogram) -> LogHistogram:
        """Sketch of both sets of values."""
        bins, inverse = np.unique(np.concatenate([self.bins, other.bins]), return_inverse=True)
        counts = np.bincount(
            inverse, weights=np.concatenate([self.counts, other.counts]), minlength=bins.size
        ).astype(np.int64)
        return LogHistogram(
            bins, counts, min(self.minimum, other.minimum), max(self.maximum, other.maximum)
        )

    def _order_statistic(self, rank: np.ndarray) -> np.ndarray:
        """Approximate k-th smallest values (0-based ``rank``): their bins' geometric middles."""
        b = self.bins[np.searchsorted(np.cumsum(self.counts), rank, side="right")]
        return np.clip(np.exp((b + 0.5) * _LOG_BASE), self.minimum, self.maximum)

    def quantile(self, q: Any) -> np.ndarray:
        """``numpy.quantile`` (linear interpolation) of the values, within relative error ρ."""
        q = np.atleast_1d(np.asarray(q, dtype=np.float64))
        h = (self.n - 1) * q
        lo, hi = np.floor(h).astype(np.int64), np.ceil(h).astype(np.int64)
        a, b = self._order_statistic(lo), self._order_statistic(hi)
        out = a + (h - lo) * (b - a)
        out[q == 0.0] = self.minimum
        out[q == 1.0] = self.maximum
        return out

    def count_at_least(self, threshold: float) -> int:
        """Values whose bin's middle is ≥ ``threshold`` (exact up to the bin holding it)."""
        return int(self.counts[np.exp((self.bins + 0.5) * _LOG_BASE) >= threshold].sum())


@dataclass(frozen=True)
class Moments:
    """Count, mean and central sums Mₖ = Σ(w − w̄)ᵏ, k = 2, 3, 4, of values, mergeable.

    Also Σw² (for Kong's ESS) and the number of non-zero values.
    """

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    m3: float = 0.0
    nonzero: int = 0
    m4: float = 0.0

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        """Moments of ``values``."""
        w = np.asarray(values, dtype=np.float64)
        if w.size == 0:
            return cls()
        mean = float(w.mean())
        c = w - mean
        c2 = c * c
        m2, m3, m4 = float(c2.sum()), float(np.sum(c2 * c)), float(c2 @ c2)
        return cls(w.size, mean, m2, m3, int(np.count_nonzero(w)), m4)

    def merge(self, other: Moments) -> Moments:
        r"""Pairwise update of the central sums (Pébay 2008, Eq. 2.1 and 2.2).

        .. math::

            M_2 = M_{2,a} + M_{2,b} + \delta^2 \frac{n_a n_b}{n},\quad
            M_3 = M_{3,a} + M_{3,b} + \delta^3 \frac{n_a n_b (n_a - n_b)}{n^2}
                  + 3\delta \frac{n_a M_{2,b} - n_b M_{2,a}}{n},

            M_4 = M_{4,a} + M_{4,b} + \delta^4 \frac{n_a n_b (n_a^2 - n_a n_b + n_b^2)}{n^3}
                  + 6\delta^2 \frac{n_a^2 M_{2,b} + n_b^2 M_{2,a}}{n^2}
                  + 4\delta \frac{n_a M_{3,b} - n_b M_{3,a}}{n}

        where δ = w̄_b − w̄_a and n = n_a + n_b.
        """
        if other.n == 0:
            return self
        if self.n == 0:
            return other
        na, nb = self.n, other.n
        n = na + nb
        d = other.mean - self.mean
        m2 = self.m2 + other.m2 + d * d * na * nb / n
        m3 = (
            self.m3
            + other.m3
            + d**3 * na * nb * (na - nb) / n**2
            + 3.0 * d * (na * other.m2 - nb * self.m2) / n
        )
        m4 = (
            self.m4
            + other.m4
            + d**4 * na * nb * (na * na - na * nb + nb * nb) / n**3
            + 6.0 * d * d * (na * na * other.m2 + nb * nb * self.m2) / n**2
            + 4.0 * d * (na * other.m3 - nb * self.m3) / n
        )
        return Moments(n, self.mean + d * nb / n, m2, m3, self.nonzero + other.nonzero, m4)

    @property
    def sum(self) -> float:
        """Σw."""
        return self.mean * self.n

    @property
    def ess(self) -> float:
        r"""Kong's effective sample size (Σw)² / Σw² (0 when every value is 0)."""
        sq = self.m2 + self.n * self.mean**2
        return float(self.sum**2 / sq) if sq > 0 else 0.0

    @property
    def standard_error(self) -> float:
        """√(V̂/n) with the unbiased sample variance V̂ = M₂/(n − 1)."""
        return float(np.sqrt(self.m2 / (self.n - 1) / self.n))

    @property
    def kurtosis(self) -> float | None:
        """m₄ / m₂² with mₖ = Mₖ/n (None when the values are constant, as in ``interval_flags``)."""
        m2, m4 = self.m2 / self.n, self.m4 / self.n
        return m4 / m2**2 if m2**2 > 0 and m4 > 0 else None

    @property
    def skewness(self) -> float:
        """m₃ / m₂^{3/2} with mₖ = Mₖ/n (0 when the values are constant)."""
        spread = (self.m2 / self.n) ** 1.5
        return float(self.m3 / self.n / spread) if spread > 0 else 0.0
