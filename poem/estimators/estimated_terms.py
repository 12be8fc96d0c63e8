r"""Gate terms for logs whose propensities are estimated: doubly robust, with an error margin.

The gate's terms (:mod:`poem.estimators.gate_options`) need the logger's true propensities:
with an estimate p̂ in their place the importance weights are wrong by π₀/p̂ and nothing bounds
the error of the decision. Here the terms are doubly robust (Dudík, Langford & Li 2011) with
nuisance models fitted on rows that are not the test rows, and a margin for the propensity
model's error is subtracted from every term:

.. math::

    X_i = \textstyle\sum_a \Delta(a \mid x_i)\,\hat\mu(x_i, a)
          + \big(\delta_i - \hat\mu(x_i, y_i)\big)\,
            \frac{\Delta(y_i \mid x_i)}{\hat p(y_i \mid x_i)}
          \;-\; \eta\,\textstyle\sum_a |\Delta(a \mid x_i)|\, m(x_i, a)

with Δ = π_h − π_c (champion minus challenger) against a policy champion; against the
logging policy the champion's part is the logged loss itself (on-policy, exact), so
X_i = δ_i − [Σ_a π_c μ̂ + (δ_i − μ̂(y_i)) π_c(y_i)/p̂(y_i)] − η Σ_a π_c(a|x_i) m(x_i, a).
Here μ̂ ∈ [a, b] is the loss model, m(x, a) = max(μ̂(x, a) − a, b − μ̂(x, a)) ≥ |μ − μ̂| and
η the propensity model's relative error (:func:`propensity_error`).

Why the margin suffices (the algebra, per row given xᵢ): E[DR part | x] = Δ-risk(x) +
Σ_a Δ(a)(μ(a) − μ̂(a))(π₀(a)/p̂(a) − 1). If |π₀(a|x)/p̂(a|x) − 1| ≤ η for every action a at
every test context, the second sum is at most η Σ_a |Δ(a)| m(a) in absolute value, so
E[X_i | x_i] ≤ R_i(champion) − R_i(challenger): the terms are conservative and the betting
bound on them (:func:`poem.estimators.betting.betting_lower_bound`) keeps its level. The
lower bound L of the terms is the minimum over the window's contexts, actions and the two
loss bounds of the (linear in δ) term: fixed given the contexts, as the bound needs.

All functions are for the discrete family: per-row distributions over K actions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from poem.estimators.gate_options import Capital

__all__ = ["EstimatedTerms", "estimated_dr_terms", "estimated_translated_terms", "propensity_error"]

_MAX_BET_FRACTION = 0.5


@dataclass(frozen=True)
class EstimatedTerms:
    """The doubly robust terms with the propensity-error margin, and their parts.

    Attributes
    ----------
    capital : Capital
        Terms Xᵢ (margin subtracted), their lower bound L and the bet cap κ = ½.
    dr : ndarray of shape (n_samples,)
        The DR part alone (an estimate of R(champion) − R(challenger) per row).
    margin : ndarray of shape (n_samples,)
        η Σ_a |Δ(a|xᵢ)| m(xᵢ, a), subtracted from each term.
    challenger_dr, champion_dr : ndarray of shape (n_samples,)
        Each policy's DR risk terms (the champion's: the logged losses for the logger).
    """

    capital: Capital
    dr: np.ndarray
    margin: np.ndarray
    challenger_dr: np.ndarray
    champion_dr: np.ndarray


def estimated_dr_terms(
    losses: Any,
    actions: Any,
    challenger: Any,
    champion: Any,
    logger: Any,
    loss_model: Any,
    loss_bounds: tuple[float, float],
    propensity_error: float,
) -> EstimatedTerms:
    r"""The doubly robust gate terms on estimated propensities (module docstring).

    .. math::

        X_i = \sum_a \Delta_i(a)\hat\mu_i(a) + (\delta_i - \hat\mu_i(y_i))
              \frac{\Delta_i(y_i)}{\hat p_i(y_i)} - \eta \sum_a |\Delta_i(a)|\, m_i(a),
        \qquad L = \min_{i,\, a,\, \delta \in \{a_0, b\}} X_i\big|_{y_i = a,\ \delta_i = \delta}

    with Δᵢ = π_h(·|xᵢ) − π_c(·|xᵢ) (for the logging-policy champion the champion's part is
    δᵢ itself), μ̂ clipped to the loss bounds [a₀, b], m = max(μ̂ − a₀, b − μ̂), p̂ the
    propensity model and η its relative error.

    Parameters
    ----------
    losses : array-like of shape (n_samples,)
        δᵢ.
    actions : array-like of shape (n_samples,)
        Logged actions yᵢ in 0..K−1.
    challenger : array-like of shape (n_samples, K)
        π_c(a|xᵢ).
    champion : array-like of shape (n_samples, K) or None
        π_h(a|xᵢ); None: the logging policy.
    logger : array-like of shape (n_samples, K)
        p̂(a|xᵢ) of a propensity model fitted without the test rows, > 0.
    loss_model : array-like of shape (n_samples, K)
        μ̂(xᵢ, a) of a loss model fitted without the test rows (clipped to the bounds here).
    loss_bounds : tuple of float
        (a₀, b).
    propensity_error : float
        η ≥ 0.

    Returns
    -------
    EstimatedTerms

    Raises
    ------
    ValueError
        If shapes disagree, an estimated propensity is not in (0, 1] or η < 0.

    References
    ----------
    Dudík, Langford & Li (2011), Doubly robust policy evaluation and learning, ICML,
    arXiv:1103.4601, Eq. (2) and Theorem 1 (the bias is a product of the two models' errors).
    """
    a0, b = (float(v) for v in loss_bounds)
    d = np.asarray(losses, dtype=np.float64)
    y = np.asarray(actions, dtype=np.int64)
    pc = np.asarray(challenger, dtype=np.float64)
    ph = None if champion is None else np.asarray(champion, dtype=np.float64)
    p0 = np.asarray(logger, dtype=np.float64)
    mu = np.clip(np.asarray(loss_model, dtype=np.float64), a0, b)
    n = d.size
    for name, arr in (("challenger", pc), ("logger", p0), ("loss_model", mu), ("champion", ph)):
        if arr is not None and arr.shape != (n, pc.shape[1]):
            raise ValueError(f"{name} has shape {arr.shape}, expected ({n}, {pc.shape[1]})")
    if np.any((d < a0) | (d > b)):
        raise ValueError(f"losses: {int(np.sum((d < a0) | (d > b)))} are outside {a0:g}..{b:g}")
    if not np.all((p0 > 0) & (p0 <= 1)):
        raise ValueError(
            f"estimated propensities must be in (0, 1]: {int(np.sum(~((p0 > 0) & (p0 <= 1))))} "
            "are not"
        )
    eta = float(propensity_error)
    if not (np.isfinite(eta) and eta >= 0):
        raise ValueError(f"propensity_error must be finite and >= 0, got {propensity_error!r}")
    rows = np.arange(n)
    spread = np.maximum(mu - a0, b - mu)  # m(x, a) ≥ |μ − μ̂|
    chal_dr = np.sum(pc * mu, axis=1) + (d - mu[rows, y]) * pc[rows, y] / p0[rows, y]
    if ph is None:
        champ_dr = d.copy()
        margin = eta * np.sum(pc * spread, axis=1)
        # at y = a, δ: δ − Σπ_c μ̂ − (δ − μ̂(a)) π_c(a)/p̂(a), linear in δ
        direct = -np.sum(pc * mu, axis=1)[:, None]
        slope, offset = 1.0 - pc / p0, direct + mu * pc / p0
    else:
        champ_dr = np.sum(ph * mu, axis=1) + (d - mu[rows, y]) * ph[rows, y] / p0[rows, y]
        delta = ph - pc
        margin = eta * np.sum(np.abs(delta) * spread, axis=1)
        direct = np.sum(delta * mu, axis=1)[:, None]
        slope, offset = delta / p0, direct - mu * delta / p0
    dr = champ_dr - chal_dr
    corners = np.minimum(slope * a0, slope * b) + offset - margin[:, None]
    lower = min(float(np.min(corners, initial=0.0)), 0.0)  # fixed given the contexts
    capital = Capital(dr - margin, np.full((1,), lower), _MAX_BET_FRACTION)
    return EstimatedTerms(capital, dr, margin, chal_dr, champ_dr)


def estimated_translated_terms(
    losses: Any,
    actions: Any,
    challenger: Any,
    champion: Any,
    logger: Any,
    loss_bounds: tuple[float, float],
    propensity_error: float,
) -> Capital:
    r"""Translated IPS terms on estimated propensities, bounded below by about −(b − a).

    .. math::

        X_i = (b - \delta_i)(\hat r^c_i - 1) - \eta\,(b - a)
        \quad\text{(logger champion)}, \qquad
        X_i = (b - \delta_i)\hat r^c_i + (\delta_i - a)\hat r^h_i - (b - a)
              - \eta\,(b - a)\,(1 + \mathrm{TV}(x_i)) \quad\text{(policy champion)}

    with r̂ = π(yᵢ|xᵢ)/p̂(yᵢ|xᵢ). Given x, E[(b − δ) r̂^c] = Σ_a π_c(a)(b − μ(a)) π₀(a)/p̂(a),
    which differs from b − R_x(challenger) by at most η Σ_a π_c(a)(b − μ(a)) ≤ η(b − a) when
    |π₀/p̂ − 1| ≤ η; for the policy champion the two parts together differ by at most
    η Σ_a [π_c(a)(b − μ(a)) + π_h(a)(μ(a) − a)] ≤ η(b − a) Σ_a max(π_c, π_h)
    = η(b − a)(1 + TV(x)). Both products are ≥ 0, so X ≥ −(b − a)(1 + margin): large
    weights (tiny estimated propensities) cannot make these terms very negative, which keeps
    the bets (and the power) of the mixture where the DR terms' lower bound is far below 0.

    Parameters
    ----------
    losses, actions, challenger, champion, logger, loss_bounds, propensity_error
        As for :func:`estimated_dr_terms`.

    Returns
    -------
    Capital
        Terms, their lower bound (fixed given the contexts) and κ = ½.
    """
    a0, b = (float(v) for v in loss_bounds)
    d = np.asarray(losses, dtype=np.float64)
    y = np.asarray(actions, dtype=np.int64)
    pc, p0 = np.asarray(challenger, dtype=np.float64), np.asarray(logger, dtype=np.float64)
    rows = np.arange(d.size)
    eta, width = float(propensity_error), b - a0
    rc = pc[rows, y] / p0[rows, y]
    if champion is None:
        terms = (b - d) * (rc - 1.0) - eta * width
        return Capital(terms, np.full((1,), -width * (1.0 + eta)), _MAX_BET_FRACTION)
    ph = np.asarray(champion, dtype=np.float64)
    rh = ph[rows, y] / p0[rows, y]
    tv = 0.5 * np.abs(pc - ph).sum(axis=1)
    margin = eta * width * (1.0 + tv)
    terms = (b - d) * rc + (d - a0) * rh - width - margin
    lower = -width - float(np.max(margin, initial=0.0))
    return Capital(terms, np.full((1,), lower), _MAX_BET_FRACTION)


def propensity_error(predicted: Any, observed: Any, n_bins: int = 10) -> float:
    r"""η: the held-out relative calibration error of a propensity model, worst bin.

    .. math::

        \eta = \max_b \frac{|\bar o_b - \bar p_b|}{\bar p_b}

    over ``n_bins`` bins of equal counts of the held-out (row, action) pairs sorted by the
    predicted p̂(a|x), with p̄_b the mean prediction and ō_b the observed frequency of the
    action in bin b. It is the largest miscalibration of an average propensity relative to its
    size, measured on held-out rows: an estimate of the worst-case ratio error the margin of
    :func:`estimated_dr_terms` assumes, *not* a bound on it (a model can be wrong inside a
    bin, at some contexts, and the bins' sampling noise is not added).

    Parameters
    ----------
    predicted : array-like of shape (n_rows, K)
        Held-out p̂(a|xᵢ) (a model that did not see these rows).
    observed : array-like of shape (n_rows,)
        The rows' logged actions yᵢ.
    n_bins : int, default=10
        Number of bins.

    Returns
    -------
    float
        η ≥ 0.
    """
    P = np.asarray(predicted, dtype=np.float64)
    onehot = np.zeros_like(P)
    onehot[np.arange(P.shape[0]), np.asarray(observed, dtype=np.int64)] = 1.0
    p, o = P.ravel(), onehot.ravel()
    order = np.argsort(p, kind="stable")
    bins = [c for c in np.array_split(order, n_bins) if c.size]
    return float(max(abs(o[c].mean() - p[c].mean()) / p[c].mean() for c in bins))
