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
bound on them (:func:`poem.estimators.betting.betting_lower_bound`) keeps its level. Row
i's lower bound Lᵢ is the minimum over the actions and the two loss bounds of its (linear in
δ) term at xᵢ: fixed given the contexts, as the bound needs (it is shuffled with the terms).

All functions are for the discrete family: per-row distributions over K actions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import norm

from poem.estimators.gate_options import Capital

__all__ = ["EstimatedTerms", "estimated_dr_terms", "estimated_translated_terms", "propensity_error"]

_MAX_BET_FRACTION = 0.5


@dataclass(frozen=True)
class EstimatedTerms:
    """The doubly robust terms with the propensity-error margin, and their parts.

    Attributes
    ----------
    capital : Capital
        Terms Xᵢ (margin subtracted), their per-row lower bounds Lᵢ (functions of xᵢ only) and
        the bet cap κ = ½.
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
        \qquad L_i = \min\big(0, \min_{a,\, \delta \in \{a_0, b\}}
              X_i\big|_{y_i = a,\ \delta_i = \delta}\big)

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
    # Lᵢ: row i's own worst case over its action and loss, a function of xᵢ only (fixed given
    # the contexts, as the bound needs); one L for the window (the minimum over all rows)
    # capped every bet at κ/(m − minᵢ Lᵢ), which one row with a tiny p̂ made ~0: no power
    lower = np.min(corners, axis=1, initial=0.0)
    capital = Capital(dr - margin, lower, _MAX_BET_FRACTION)
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
    weights (tiny estimated propensities) cannot make these terms very negative. The gate
    (:func:`poem.gate_estimated.estimated_gate_decision`) no longer bets on them: their bias
    is first order in the propensity error (Σ_a π_c(b − μ)(π₀/p̂ − 1), no loss model to
    cancel it), and with per-row lower bounds the DR terms alone had the power.

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


def propensity_error(
    predicted: Any,
    observed: Any,
    n_bins: int = 5,
    noise_level: float | None = 0.05,
    keys: Any = None,
) -> float:
    r"""η̂: the held-out relative calibration error of a propensity model beyond its noise.

    .. math::

        \hat\eta = \max_{a,\, b} \frac{\big(|\bar o_{ab} - \bar p_{ab}| - z\, s_{ab}\big)_+}
                              {\bar p_{ab}}, \qquad
        s_{ab} = \frac{\sqrt{\sum_{i \in (a, b)} \hat p_i (1 - \hat p_i)}}{n_{ab}}, \qquad
        z = \Phi^{-1}\Big(1 - \frac{\beta}{2 K B (1 + J)}\Big)

    For every action a and every ordering (p̂(a|xᵢ) itself, then each of the J ``keys``
    k(xᵢ, a)), the held-out rows are sorted into B = ``n_bins`` bins of equal counts; p̄_ab
    is a bin's mean prediction, ō_ab the frequency with which its rows logged a, n_ab its rows
    and s_ab the standard error ō_ab would have if the model were calibrated in the bin (the
    rows are independent given their contexts). The excess |ō − p̄| − z s over the bins'
    sampling noise (z: Bonferroni over the K·B·(1 + J) bins at β = ``noise_level``, normal
    approximation) is the miscalibration the held-out rows *demonstrate*; relative to p̄ it
    estimates how far π₀/p̂ is from 1 where the model is wrong. Per action, not pooled over
    actions: a model wrong for one action at some contexts shows in that action's bins.
    Bins by p̂ alone cannot see a model that is wrong *along* its own level sets (a model
    that ignores x is calibrated in every such bin); bins by a key such as the gate's weight
    |Δ(a|x)|/p̂(a|x) check the model where the terms lean on it (balance on the functions
    that matter, as in Imai & Ratkovic 2014, J. R. Stat. Soc. B 76(1), covariate balancing
    propensity score).

    What it is: a calibrated model (E[ō_ab] = p̄_ab in every bin) gets η̂ = 0 with
    probability about 1 − β; a miscalibration larger than its noise gets its size less
    z s.e. What it is **not**: an upper bound on sup |π₀/p̂ − 1| over contexts (a model can
    be wrong inside a bin, and the noise subtracted can hide a small true error); the gate's
    guarantee is conditional on that bound (:mod:`poem.gate_estimated`). The worst bin's raw
    error (``noise_level=None``) was the gate's η before: mostly the bins' sampling noise
    (0.14–0.47 on the benchmark's well-specified model), which took all the gate's power.

    Parameters
    ----------
    predicted : array-like of shape (n_rows, K)
        Held-out p̂(a|xᵢ) (models that did not see these rows: out-of-fold predictions).
    observed : array-like of shape (n_rows,)
        The rows' logged actions yᵢ in 0..K−1.
    n_bins : int, default=5
        Bins per action, ≥ 1.
    noise_level : float or None, default=0.05
        β in (0, 1): the chance that a calibrated model gets η̂ > 0; None subtracts no noise
        (z = 0, the raw worst-bin error).
    keys : array-like of shape (n_rows, K), a sequence of them, or None
        Further orderings of the rows, per action (e.g. the gate's weights at the rows).

    Returns
    -------
    float
        η̂ ≥ 0.

    Raises
    ------
    ValueError
        One line when the shapes disagree (``predicted``, ``observed``, a key), an action is
        outside 0..K−1, ``n_bins`` < 1 or ``noise_level`` is outside (0, 1).
    """
    P = np.asarray(predicted, dtype=np.float64)
    y = np.asarray(observed, dtype=np.int64)
    if P.ndim != 2 or y.shape != (P.shape[0],):
        raise ValueError(
            f"propensity_error: predicted has shape {P.shape} and observed {y.shape}; expected "
            "(n_rows, K) and (n_rows,)"
        )
    K = P.shape[1]
    if np.any((y < 0) | (y >= K)):
        raise ValueError(
            f"propensity_error: {int(np.sum((y < 0) | (y >= K)))} observed actions are outside "
            f"0..{K - 1}"
        )
    if int(n_bins) < 1:
        raise ValueError(f"propensity_error: n_bins must be >= 1, got {n_bins!r}")
    if noise_level is not None and not 0.0 < float(noise_level) < 1.0:
        raise ValueError(
            f"propensity_error: noise_level must be in (0, 1) or None, got {noise_level!r}"
        )
    if keys is None:
        keys = []
    elif np.ndim(keys) == 2:
        keys = [keys]
    orderings = [P] + [np.asarray(k, dtype=np.float64) for k in keys]
    for j, key in enumerate(orderings[1:]):
        if key.shape != P.shape:
            raise ValueError(
                f"propensity_error: key {j} has shape {key.shape}, expected {P.shape} (as "
                "predicted)"
            )
    n_all = K * int(n_bins) * len(orderings)
    z = 0.0 if noise_level is None else float(norm.ppf(1 - noise_level / (2 * n_all)))
    worst = 0.0
    for a, key in ((a, key) for key in orderings for a in range(K)):
        p, o = P[:, a], (y == a).astype(np.float64)
        order = np.argsort(key[:, a], kind="stable")
        for c in np.array_split(order, int(n_bins)):
            if not c.size:
                continue
            mean = float(p[c].mean())
            se = float(np.sqrt(np.sum(p[c] * (1 - p[c])))) / c.size
            excess = max(abs(float(o[c].mean()) - mean) - z * se, 0.0)
            worst = max(worst, excess / mean if mean > 0 else (np.inf if excess > 0 else 0.0))
    return float(worst)
