"""Per-row improvement terms of a challenger over the champion, and their valid lower bound.

The gate (DESIGN §5) promotes when a lower confidence bound on the improvement
R(champion) − R(challenger) is above the required margin. A t bound on paired terms is not
valid at finite n (their skew and heavy tails make it promote up to 25 % of the time at
α = 5 %), so this module builds terms Xᵢ that are *bounded below* by a known Lᵢ, and
:func:`poem.estimators.betting.betting_lower_bound` turns them into a bound valid at every n.

Every function takes arrays whose last axis is the rows, so the calibration benchmark runs
thousands of simulated logs through exactly the code the gate runs on one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poem.estimators.betting import betting_lower_bound

__all__ = ["GATE_ESTIMATORS", "improvement_lower_bound", "improvement_terms"]

GATE_ESTIMATORS = ("ips", "clipped_ips", "snips")
_PRIOR_ROWS = 1.0  # the SNIPS baselines start at δ_max with the weight of one pseudo-row
# the capital processes the bound averages, per option: (which terms, cap κ of the bets).
# Terms 0 are the option's own; terms 1 are the SNIPS-baseline terms for "snips" and the
# unclipped ips terms for "clipped_ips". Chosen on benchmarks/gate_calibration.py (every
# cell, 200 logs each): κ = 0.99 on the SNIPS-baseline terms lifts rare-loss power at
# n = 20,000 from 1.5 % to 18.5 % (logger champion) because their bets sit at the cap
# κ/(m − L) (the oracle bet is at 0.99/|L|); averaging them with the translated terms
# costs log 2 of evidence and brought it back to 7.5 %. The translated ips terms keep
# κ = 1/2: their cap binds only against a policy champion, where the range comes from
# the log and κ near 1 raised A/A promotions (7.5 % vs 5.5 % on 200 logs).
_STRATEGIES = {
    "ips": ((0, 0.5),),
    "clipped_ips": ((0, 0.5), (1, 0.5)),
    "snips": ((1, 0.99),),
}


def _predictable_snips(losses: np.ndarray, weights: np.ndarray, start: float) -> np.ndarray:
    """ĉᵢ = (s·δ_max + Σ_{j<i} δⱼrⱼ) / (s + Σ_{j<i} rⱼ): SNIPS on the rows before i."""
    num = np.cumsum(losses * weights, axis=-1) - losses * weights
    den = np.cumsum(weights, axis=-1) - weights
    return (_PRIOR_ROWS * start + num) / (_PRIOR_ROWS + den)


def improvement_terms(
    losses: Any,
    challenger_weights: Any,
    champion_weights: Any,
    *,
    estimator: str,
    loss_bounds: tuple[float, float],
    max_weight: float | None = None,
    clip: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    r"""Terms Xᵢ whose conditional mean is (at most) the improvement, and lower bounds Lᵢ.

    .. math::

        X_i = \big[c^h_i + (\delta_i - c^h_i)\, r^h_i\big]
              - \big[c^c_i + (\delta_i - c^c_i)\, \tilde r^c_i\big], \qquad
        L_i = \min_{\delta \in [a, b],\ \tilde r^c - r^h \in [D_{lo}, D_{hi}],\
              r^h \in [l_h, B_h]} X_i

    where δᵢ ∈ [a, b] is the logged loss, r^h_i and r^c_i the champion's and challenger's
    importance weights, and the baselines c are fixed before row i is seen:

    - ``"ips"``: c^c = c^h = b (translation by δ_max, DESIGN §4.1) and r̃^c = r^c, so
      Xᵢ = (b − δᵢ)(r^c_i − r^h_i) has mean R(champion) − R(challenger) exactly and
      Lᵢ = −(b − a)·max(0, −D_lo). With the logging policy as champion (r^h ≡ 1) D ≥ −1,
      so Xᵢ ≥ −(b − a) whatever the challenger's weights: no weight bound is assumed;
    - ``"clipped_ips"``: as ``"ips"`` with r̃^c = min(M, r^c). Because b − δᵢ ≥ 0, clipping
      only the challenger's weights can only lower Xᵢ: the mean is ≤ the improvement, so the
      bound stays valid (pessimistic, never optimistic). The champion is never clipped, which
      is what biased the old paired difference;
    - ``"snips"``: c^c_i and c^h_i are each policy's self-normalized estimate on the rows
      before i (starting at b). Any baseline fixed before row i keeps the conditional mean at
      R(champion) − R(challenger) (E[r] = 1); the SNIPS ones make (δ − c) r small where
      losses are rare, at the price of a range that depends on the weights. The ``"ips"``
      terms are returned beside them (leading axis of length 2, SNIPS second);
      :func:`improvement_lower_bound` bets on the SNIPS-baseline terms with κ = 0.99.

    Ranges: with ``max_weight=B``, D = r̃^c − r^h ∈ [−B, B] and r^h ∈ [0, B]; with
    ``max_weight=None`` they are the smallest and largest values on the log (the assumption
    is then that the log shows the extreme weights). When the champion is the logging policy
    (every r^h = 1), r^h ∈ [1, 1] and D_lo = −1 in both cases.

    Parameters
    ----------
    losses : array-like of shape (..., n_samples)
        Logged losses, i.e. δᵢ.
    challenger_weights : array-like of shape (..., n_samples)
        Challenger's importance weights, i.e. r^c_i.
    champion_weights : array-like of shape (..., n_samples)
        Champion's importance weights (all 1 for the logging policy), i.e. r^h_i.
    estimator : {"ips", "clipped_ips", "snips"}
        Which terms.
    loss_bounds : tuple of float
        (δ_min, δ_max) with δ_min < δ_max, i.e. (a, b).
    max_weight : float or None, default=None
        Bound on every importance weight the policies can have on this logging policy
        (e.g. 1 / its smallest propensity), ≥ 1, i.e. B; None: the ranges the log shows
        (per log along the leading axes).
    clip : float or None, default=None
        Cap M of the challenger's weights for ``"clipped_ips"``.

    Returns
    -------
    terms : ndarray of shape (..., n_samples), or (2, ..., n_samples) for ``"snips"``
        The Xᵢ.
    lower : ndarray broadcastable to ``terms``
        The Lᵢ.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (1) and §4.3
    (translation); The self-normalized estimator for counterfactual learning, NeurIPS 28
    (SNIPS as a control variate).
    Waudby-Smith & Ramdas (2024), JRSS-B 86(1), arXiv:2010.09686, §4 (predictable terms
    keep the capital process a martingale).
    """
    a, b = (float(v) for v in loss_bounds)
    d = np.asarray(losses, dtype=np.float64)
    rc = np.asarray(challenger_weights, dtype=np.float64)
    rh = np.asarray(champion_weights, dtype=np.float64)
    if estimator == "clipped_ips":
        rc = np.minimum(float(clip), rc)
    lo_d, hi_d, lo_h, hi_h = _ranges(rc, rh, max_weight)
    ips_terms = (b - d) * (rc - rh)  # (b − δᵢ)(r^c_i − r^h_i)
    ips_lower = -(b - a) * np.maximum(0.0, -lo_d)
    if estimator in ("ips", "clipped_ips"):
        return ips_terms, ips_lower * np.ones(d.shape[:-1] + (1,))
    cc = _predictable_snips(d, rc, b)
    ch = np.ones_like(d) * _predictable_snips(d, rh, b)
    # X = (c^h − c^c) + (c^c − δ) D + (c^c − c^h) r^h with D = r^c − r^h: bilinear in
    # (δ, D), so its minimum over the box is at a corner
    terms = (ch + (d - ch) * rh) - (cc + (d - cc) * rc)
    corner = np.minimum(
        np.minimum((cc - a) * lo_d, (cc - a) * hi_d), np.minimum((cc - b) * lo_d, (cc - b) * hi_d)
    )
    champ = np.minimum((cc - ch) * lo_h, (cc - ch) * hi_h)
    lower = (ch - cc) + corner + champ
    return np.stack([ips_terms, terms]), np.stack([ips_lower * np.ones_like(lower), lower])


def _ranges(rc: np.ndarray, rh: np.ndarray, max_weight: float | None):
    """[D_lo, D_hi] of D = r^c − r^h and [l_h, B_h] of r^h (see :func:`improvement_terms`)."""
    logger = bool(np.all(rh == 1.0))
    if max_weight is not None:
        bound = float(max_weight)
        if logger:
            return -1.0, bound - 1.0, 1.0, 1.0
        return -bound, bound, 0.0, bound
    diff = rc - rh
    hi_d = np.max(diff, axis=-1, keepdims=True)
    if logger:  # D = r^c − 1 ≥ −1 holds whatever the log shows
        return -1.0, hi_d, 1.0, 1.0
    lo_d = np.min(diff, axis=-1, keepdims=True)
    return lo_d, hi_d, 0.0, np.max(rh, axis=-1, keepdims=True)


def improvement_lower_bound(
    losses: Any,
    challenger_weights: Any,
    champion_weights: Any,
    *,
    estimator: str = "ips",
    loss_bounds: tuple[float, float],
    max_weight: float | None = None,
    clip: float | None = None,
    confidence_level: float = 0.95,
    randomization: Any = None,
) -> np.ndarray | float:
    r"""Lower confidence bound on R(champion) − R(challenger), valid at every sample size.

    .. math:: P\big(\hat I_{LB} > R(\text{champion}) - R(\text{challenger})\big) \le \alpha

    where Î_LB is :func:`poem.estimators.betting.betting_lower_bound` of the
    :func:`improvement_terms` and 1 − α the confidence level. Per option the bound bets on:
    ``"ips"`` the translated terms (κ = 1/2); ``"snips"`` the SNIPS-baseline terms with
    κ = 0.99 (rare losses put the best bet at the cap κ/(m − L)); ``"clipped_ips"`` the
    average of the capitals on the clipped and on the unclipped ips terms (κ = 1/2 each).
    Each capital is a nonnegative supermartingale at the true improvement μ (the clipped
    terms have conditional mean ≤ μ and the bets are ≥ 0), so their average is one too and
    Ville's inequality keeps the level (WSR 2024, Eq. (12) and §5); the price of averaging
    S capitals is at most log S of evidence. Assumptions: rows are
    independent draws from the logging policy, the propensities are correct, losses lie in
    ``loss_bounds`` and — except for ``"ips"``/``"clipped_ips"`` with the logging policy
    as champion — the weights stay within ``max_weight`` (by default: within the ranges
    the log shows, see :func:`improvement_terms`).

    Parameters
    ----------
    losses, challenger_weights, champion_weights : array-like of shape (..., n_samples)
        δᵢ, r^c_i and r^h_i, as for :func:`improvement_terms`.
    estimator : {"ips", "clipped_ips", "snips"}, default="ips"
        Which terms (see :func:`improvement_terms`).
    loss_bounds : tuple of float
        (δ_min, δ_max), i.e. (a, b).
    max_weight : float or None, default=None
        Bound on every importance weight, i.e. B (see :func:`improvement_terms`).
    clip : float or None, default=None
        Challenger weight cap M for ``"clipped_ips"``.
    confidence_level : float, default=0.95
        Probability that the bound holds, in (0, 1), i.e. 1 − α.
    randomization : float or array-like of shape (...), optional
        A fresh U ~ Uniform(0, 1] per decision for the randomized Ville threshold (see
        :func:`~poem.estimators.betting.betting_lower_bound`); None: deterministic.

    Returns
    -------
    float or ndarray of shape (...)
        The lower bound Î_LB in loss units.

    References
    ----------
    Waudby-Smith & Ramdas (2024), Estimating means of bounded random variables by betting,
    JRSS-B 86(1), arXiv:2010.09686.
    """
    terms, lower = improvement_terms(
        losses,
        challenger_weights,
        champion_weights,
        estimator=estimator,
        loss_bounds=loss_bounds,
        max_weight=max_weight,
        clip=clip,
    )
    a, b = loss_bounds
    scale = float(b - a) if b > a else 1.0
    if estimator != "snips":
        terms, lower = terms[None], lower[None]
    if estimator == "clipped_ips":  # term 1: the unclipped ips terms (exact mean)
        exact, exact_lower = improvement_terms(
            losses,
            challenger_weights,
            champion_weights,
            estimator="ips",
            loss_bounds=loss_bounds,
            max_weight=max_weight,
        )
        terms = np.concatenate([terms, exact[None]])
        lower = np.concatenate([lower, np.broadcast_to(exact_lower, lower.shape[1:])[None]])
    strategies = _STRATEGIES[estimator]
    which = [i for i, _ in strategies]
    return betting_lower_bound(
        terms[which],
        lower[which],
        confidence_level,
        scale=scale,
        mixture=True,
        max_bet_fraction=[kappa for _, kappa in strategies],
        randomization=randomization,
    )
