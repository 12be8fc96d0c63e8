"""The Criteo test-bed metric (IPS×10⁴ over n⁺ + 10n⁻) and the clipping-sweep report.

The test-bed kept every clicked impression but only 10% of the others, so each negative counts
ten times in the denominator (Lefortier et al. 2016, arXiv:1612.00367; Li & Joachims, hybrid
CRM + supervised learning, Eq. (16)/(18); DESIGN §4.8). Clicks are rewards here (higher is
better), as in the test-bed's ``scorer.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from poem.estimators.ips import Estimate
from poem.estimators.weights import (
    _as_vector,
    _check_values,
    _check_weights,
    clip_weights,
    clipped_fraction,
    effective_sample_size,
    importance_weights,
)

__all__ = ["CRITEO_SCALE", "CRITEO_Z", "ClippingSweep", "clipping_sweep", "criteo_ips"]

CRITEO_SCALE = 1e4
CRITEO_Z = 2.58  # the test-bed's 99% normal quantile
NEGATIVE_WEIGHT = 10.0


def criteo_ips(clicks: Any, weights: Any, *, clip: float | None = None) -> Estimate:
    r"""Criteo test-bed IPS (×10⁴) of a policy, with the test-bed's 99% interval.

    .. math::

        \mathrm{IPS} = \frac{10^4}{n^+ + 10 n^-} \sum_{i=1}^n c_i \bar r_i, \qquad
        h = \frac{2.58 \sqrt{n}}{n^+ + 10 n^-}\, 10^4\, \mathrm{std}(c_i \bar r_i)

    where cᵢ ∈ {0, 1} is the click, r̄ᵢ = min(M, rᵢ) the (optionally clipped) importance weight
    of the logged candidate, n⁺ and n⁻ the numbers of clicked and non-clicked impressions, n
    their sum, std the population standard deviation (as ``scorer.py``) and h the half-width
    the papers report as "IPS Std"; the interval is [IPS − h, IPS + h].

    Parameters
    ----------
    clicks : array-like of shape (n_samples,)
        Clicks, 0 or 1, i.e. cᵢ.
    weights : array-like of shape (n_samples,)
        Importance weights π(yᵢ|xᵢ)/pᵢ, i.e. rᵢ.
    clip : float or None, default=None
        Weight cap M (None: no clipping).

    Returns
    -------
    Estimate
        ``estimator="criteo_ips"``, value IPS×10⁴, ``std_error`` = h/2.58, interval
        [IPS − h, IPS + h], ``confidence_level=0.99``, ``method="normal"``.

    Raises
    ------
    ValueError
        If clicks are not 0/1, lengths differ, weights are negative/non-finite or clip ≤ 0.

    References
    ----------
    Li & Joachims, A hybrid framework of counterfactual risk minimization and supervised
    learning on logged bandit feedback, Eqs. (16) and (18).
    Lefortier, Swaminathan, Gu, Joachims & de Rijke (2016), Large-scale validation of
    counterfactual learning methods: a test-bed, arXiv:1612.00367.
    """
    c = _as_vector(clicks, "clicks")
    w = _check_weights(weights)
    if c.size != w.size:
        raise ValueError(f"clicks has {c.size:,} rows but weights has {w.size:,}")
    _check_values(~((c == 0) | (c == 1)), "clicks", "are not 0 or 1")
    fraction = clipped_fraction(w, clip)
    if clip is not None:
        w = clip_weights(w, clip)
    n = c.size
    n_pos = float(c.sum())
    denominator = n_pos + NEGATIVE_WEIGHT * (n - n_pos)
    terms = c * w
    value = CRITEO_SCALE * terms.sum() / denominator  # Eq. (16)
    half_width = CRITEO_SCALE * CRITEO_Z * np.sqrt(n) * terms.std() / denominator  # Eq. (18)
    se, ess = float(half_width / CRITEO_Z), effective_sample_size(w)
    lower, upper = float(value - half_width), float(value + half_width)
    return Estimate("criteo_ips", float(value), se, lower, upper, n, 0.99, ess, fraction, "normal")


@dataclass(frozen=True)
class ClippingSweep:
    """IPS×10⁴ and the fraction of clipped inverse propensities for a range of clips M.

    Attributes
    ----------
    clips : tuple of float
        The clips M.
    clipped_fraction : tuple of float
        Fraction of training rows with 1/pᵢ ≥ M (the hybrid paper's Fig. 3).
    estimates : tuple of Estimate
        :func:`criteo_ips` of the policy learned with clip M (Figs. 4 and 5).
    """

    clips: tuple[float, ...]
    clipped_fraction: tuple[float, ...]
    estimates: tuple[Estimate, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable rows: clip, clipped_fraction, ips, ips_std (half-width)."""
        return {
            "rows": [
                {"clip": m, "clipped_fraction": f, "ips": e.value, "ips_std": e.upper - e.value}
                for m, f, e in zip(self.clips, self.clipped_fraction, self.estimates, strict=True)
            ]
        }

    def to_markdown(self) -> str:
        """Render the sweep as a markdown table."""
        lines = ["| M | fraction clipped | IPS×10⁴ | IPS std×10⁴ |", "|---:|---:|---:|---:|"]
        lines += [
            f"| {r['clip']:g} | {r['clipped_fraction']:.3f} | {r['ips']:.2f} | {r['ips_std']:.2f} |"
            for r in self.to_dict()["rows"]
        ]
        return "\n".join(lines)


def clipping_sweep(
    clicks: Any,
    propensities: Any,
    target_probs_by_clip: Mapping[float, Any],
    *,
    train_propensities: Any = None,
) -> ClippingSweep:
    r"""Criteo IPS of the policies learned with each clip M, beside the fraction clipped.

    .. math:: f_M = \frac{1}{n_{train}} \sum_j [1/p_j \ge M]

    where pⱼ are the training propensities and M the clip; each policy's IPS is
    :func:`criteo_ips` with rᵢ = π_M(yᵢ|xᵢ)/pᵢ on the evaluation log.

    Parameters
    ----------
    clicks : array-like of shape (n_samples,)
        Evaluation clicks cᵢ ∈ {0, 1}.
    propensities : array-like of shape (n_samples,)
        Evaluation propensities pᵢ.
    target_probs_by_clip : mapping of float to array-like of shape (n_samples,)
        For each clip M, the learned policy's probability of the logged candidates, i.e. π_M(yᵢ|xᵢ).
    train_propensities : array-like or None, default=None
        Propensities whose inverses are clipped during training (default: ``propensities``).

    Returns
    -------
    ClippingSweep
        One entry per clip, in increasing M.

    Raises
    ------
    ValueError
        If a clip is ≤ 0 or any array is invalid.
    """
    p_train = _as_vector(
        propensities if train_propensities is None else train_propensities, "train_propensities"
    )
    inverse = importance_weights(np.ones_like(p_train), p_train)
    clips = sorted(float(m) for m in target_probs_by_clip)
    fractions = tuple(clipped_fraction(inverse, m) for m in clips)
    estimates = tuple(
        criteo_ips(clicks, importance_weights(target_probs_by_clip[m], propensities)) for m in clips
    )
    return ClippingSweep(tuple(clips), fractions, estimates)
