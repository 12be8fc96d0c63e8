"""Propensity checks of a log checked one partition at a time (DESIGN §4.6, §8).

:func:`propensity_summary` reduces one partition's :class:`~poem.data.LoggedBandit` to a small
:class:`PropensitySummary` (a few kilobytes whatever the partition's size); summaries of the
partitions of one log add up with :func:`merge_summaries`, and :func:`summary_report` turns the
total into the same :class:`~poem.diagnostics.propensity.PropensityReport` that
:func:`~poem.diagnostics.propensity.propensity_report` gives on the whole log in memory.

What is exact and what is not:

- counts (rows, near-deterministic rows, actions / labels logged, rows with an inconsistent
  logging distribution), the minimum and the maximum propensity, and the moments of the
  weights are exact (moments merged with the pairwise update of Chan et al. / Pébay, so
  the mean, standard error, Kong's ESS and the skewness equal the in-memory values up to
  floating-point rounding, ~1e-12 relative);
- the propensity quantiles p01, p10, p50, p90 come from a mergeable sketch
  (:class:`LogHistogram`: counts in log-spaced bins [(1+ρ)^b, (1+ρ)^(b+1)), ρ = 2⁻¹⁰),
  so each is within relative error ρ of the in-memory ``numpy.quantile`` (the bin's geometric
  midpoint is within √(1+ρ) − 1 ≈ ρ/2 of any value in it; the other ρ/2 covers rounding of
  the bin index). The suggested clip M = p₉₀/p₁₀ is then within relative 2ρ ≈ 0.2 %;
- the clipped fraction (weights ≥ M) counts the weight sketch's bins at or above M, so it can
  differ from the in-memory value by the fraction of weights within relative 3ρ of M.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poem.data import LoggedBandit
from poem.diagnostics.propensity import (
    QUANTILE_NAMES,
    PropensityReport,
    PropensityThresholds,
    reference_probabilities,
    report_from_statistics,
    support_and_distribution,
)
from poem.estimators.reliability import flags_from_moments
from poem.estimators.weights import importance_weights

__all__ = [
    "SKETCH_RELATIVE_ERROR",
    "LogHistogram",
    "Moments",
    "PropensitySummary",
    "merge_summaries",
    "propensity_summary",
    "summary_report",
]

SKETCH_RELATIVE_ERROR = 2.0**-10  # ρ: relative width of a bin of LogHistogram
_LOG_BASE = float(np.log1p(SKETCH_RELATIVE_ERROR))
_QUANTILES = (0.01, 0.1, 0.5, 0.9)


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
        mid = np.exp((b + 0.5) * _LOG_BASE)
        return np.clip(mid, self.minimum, self.maximum)

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
        mids = np.exp((self.bins + 0.5) * _LOG_BASE)
        return int(self.counts[mids >= threshold].sum())


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
        return cls(
            w.size,
            mean,
            float(c2.sum()),
            float(np.sum(c2 * c)),
            int(np.count_nonzero(w)),
            float(c2 @ c2),
        )

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
        mean = self.mean + d * nb / n
        return Moments(n, mean, m2, m3, self.nonzero + other.nonzero, m4)

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


@dataclass(frozen=True)
class PropensitySummary:
    """Additive summary of one partition (or of several, merged) for the propensity checks.

    Attributes
    ----------
    family : str
        Policy family.
    n_actions : int
        Actions K (discrete) or labels q (multilabel); 0 for candidates.
    propensities : LogHistogram
        Sketch of the propensities pᵢ.
    near_deterministic : int
        Rows with p ≥ 1 − ε.
    uniform : Moments
        Moments of the uniform policy's weights u(yᵢ|xᵢ)/pᵢ.
    clip_weights : LogHistogram
        Sketch of the weights the clipping check uses (the target's, else the uniform's).
    target : Moments or None
        Moments of the target policy's weights (for its ESS).
    target_name : str or None
        Description of the target policy.
    action_counts : ndarray or None
        Rows per action (discrete) or per label switched on (multilabel).
    distribution_bad : tuple of int or None
        Rows whose logging distribution does not sum to 1, rows where it differs from p at
        the logged action, and rows with either problem.
    """

    family: str
    n_actions: int
    propensities: LogHistogram
    near_deterministic: int
    uniform: Moments
    clip_weights: LogHistogram
    target: Moments | None = None
    target_name: str | None = None
    action_counts: np.ndarray | None = field(default=None, repr=False)
    distribution_bad: tuple[int, int, int] | None = None

    @property
    def n_rows(self) -> int:
        """Rows summarised."""
        return self.uniform.n


def propensity_summary(
    log: LoggedBandit,
    *,
    target_policy: Any = None,
    thresholds: PropensityThresholds | None = None,
) -> PropensitySummary:
    """Summarise one partition for :func:`summary_report` (see the module docstring).

    Parameters
    ----------
    log : LoggedBandit
        The partition's kept rows.
    target_policy : StochasticPolicy or None, default=None
        As in :func:`~poem.diagnostics.propensity.propensity_report`.
    thresholds : PropensityThresholds or None, default=None
        Only ``near_deterministic_epsilon`` and ``distribution_tolerance`` are used here.

    Returns
    -------
    PropensitySummary
    """
    t = thresholds or PropensityThresholds()
    p = log.propensities
    uniform = importance_weights(reference_probabilities(log), p)
    target, name, clip_weights = None, None, uniform
    if target_policy is not None:
        clip_weights = importance_weights(target_policy.log_action_probability_on(log), p)
        target = Moments.of(clip_weights)
        name = f"{type(target_policy).__name__}({target_policy.family.__class__.__name__})"
    counts, bad = support_and_distribution(log, t.distribution_tolerance)
    return PropensitySummary(
        log.family,
        0 if log.family == "candidates" else int(log.n_actions),
        LogHistogram.of(p),
        int(np.sum(p >= 1.0 - t.near_deterministic_epsilon)),
        Moments.of(uniform),
        LogHistogram.of(clip_weights),
        target,
        name,
        counts,
        bad,
    )


def merge_summaries(summaries: Sequence[PropensitySummary]) -> PropensitySummary:
    """Add up the summaries of the partitions of one log.

    Raises
    ------
    ValueError
        When ``summaries`` is empty or mixes families or numbers of actions.
    """
    if not summaries:
        raise ValueError("merge_summaries needs at least one summary")
    total = summaries[0]
    for s in summaries[1:]:
        if (s.family, s.n_actions) != (total.family, total.n_actions):
            raise ValueError(
                f"partitions disagree: family {s.family!r} with {s.n_actions} actions vs "
                f"{total.family!r} with {total.n_actions}"
            )
        total = replace(
            total,
            propensities=total.propensities.merge(s.propensities),
            near_deterministic=total.near_deterministic + s.near_deterministic,
            uniform=total.uniform.merge(s.uniform),
            clip_weights=total.clip_weights.merge(s.clip_weights),
            target=None if total.target is None else total.target.merge(s.target),
            action_counts=None
            if total.action_counts is None
            else total.action_counts + s.action_counts,
            distribution_bad=None
            if total.distribution_bad is None
            else tuple(
                a + b for a, b in zip(total.distribution_bad, s.distribution_bad, strict=True)
            ),
        )
    return total


def summary_report(
    summary: PropensitySummary, *, thresholds: PropensityThresholds | None = None
) -> PropensityReport:
    """The :class:`~poem.diagnostics.propensity.PropensityReport` of a merged summary.

    The same checks, statuses and explanations as
    :func:`~poem.diagnostics.propensity.propensity_report` on the whole log (both call
    :func:`~poem.diagnostics.propensity.report_from_statistics`); quantiles, the suggested
    clip and the clipped fraction within the sketch's error (module docstring).
    """
    t = thresholds or PropensityThresholds()
    n, m = summary.n_rows, summary.uniform
    hist = summary.propensities
    inner = (float(v) for v in hist.quantile(_QUANTILES))
    quantiles = dict(zip(QUANTILE_NAMES, (hist.minimum, *inner, hist.maximum), strict=True))
    clip = quantiles["p90"] / quantiles["p10"]
    uniform = None
    if n >= 2:
        uniform = (
            m.standard_error,
            m.ess,
            flags_from_moments(m.n, m.ess, m.nonzero, m.skewness, kurtosis=m.kurtosis),
        )
    return report_from_statistics(
        t,
        n=n,
        family=summary.family,
        quantiles=quantiles,
        clip=clip,
        near_deterministic=summary.near_deterministic / n,
        uniform_mean=m.mean,
        uniform=uniform,
        support=summary.action_counts,
        distribution=summary.distribution_bad,
        target=summary.target_name,
        target_ess=None if summary.target is None else summary.target.ess,
        clipped=summary.clip_weights.count_at_least(clip) / n,
    )
