"""The hybrid learner's loss: weighted cross entropy on the logged candidates (DESIGN §4.8)."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.special import expit

from poem.learners.objective import crm_objective_from_statistics, crm_statistics
from poem.policies.candidates import CandidateFamily

__all__ = ["REGULARIZERS", "WEIGHTINGS", "hybrid_objective"]

WEIGHTINGS = ("none", "inverse_propensity", "clipped_inverse_propensity", "hybrid")
REGULARIZERS = ("variance", "tanh_mse")


def hybrid_objective(
    coef: np.ndarray,
    family: CandidateFamily,
    inputs: Any,
    actions: np.ndarray,
    scaled_losses: np.ndarray,
    propensities: np.ndarray,
    *,
    weighting: str,
    clip: float,
    regularizer: str | None = None,
    regularizer_weight: float = 0.0,
    l2_penalty: float = 0.0,
    fixed_weights: np.ndarray | None = None,
) -> tuple[float, np.ndarray, int]:
    r"""Weighted cross entropy of the hybrid learner, its gradient and the clipped-row count.

    .. math::

        L(w) = \frac{1}{n}\sum_i \omega_i \ell_i + \lambda\,\mathrm{Reg} + \mu\lVert w\rVert^2,
        \quad \ell_i = -[y_i \log\sigma(s_i) + (1 - y_i)\log(1 - \sigma(s_i))],
        \quad \nabla \ell_i = (\sigma(s_i) - y_i)\, \psi_{i,y_i},
        \quad \nabla \omega_i = \omega_i \nabla \log \pi_w(y_i|x_i) \;(\text{hybrid}, r_i < M),

        \mathrm{Reg}_{var} = \sqrt{\hat V(u)/n},\; u_i = \delta'_i \min(M, r_i); \quad
        \mathrm{Reg}_{tanh} = \frac{1}{n}\sum_i \big(\tanh(1/\pi_w(y_i|x_i)) - \tanh(1/p_i)\big)^2

    where sᵢ = w·ψ_{i,yᵢ} is the logged candidate's score, σ the logistic function,
    yᵢ = −δ'ᵢ ∈ [0, 1], rᵢ = π_w(yᵢ|xᵢ)/pᵢ, ωᵢ the weighting, M the clip, λ the regularizer
    weight and μ the L2 penalty. The variance term is POEM's (:mod:`poem.learners.objective`).

    Parameters
    ----------
    coef, family, inputs, actions, scaled_losses, propensities
        w, the :class:`~poem.policies.CandidateFamily` and the rows (candidate vectors ψ_{i,c},
        logged candidate indexes yᵢ, δ'ᵢ, pᵢ), as :func:`~poem.learners.objective.crm_statistics`'s.
    weighting : {"none", "inverse_propensity", "clipped_inverse_propensity", "hybrid"}
        The weighting ωᵢ: 1, 1/pᵢ, min(M, 1/pᵢ) or min(M, rᵢ).
    clip : float
        M (``inf`` for none).
    regularizer : {"variance", "tanh_mse"} or None, default=None
        Reg.
    regularizer_weight : float, default=0.0
        λ ≥ 0.
    l2_penalty : float, default=0.0
        μ ≥ 0.
    fixed_weights : ndarray of shape (n_samples,) or None, default=None
        Hybrid only: use these ωᵢ as constants (no gradient through π_w; the paper's
        "Hybrid (no gradient for π_w)", solved by :class:`HybridLearner` as iterated reweighting).

    Returns
    -------
    value : float
        L(w).
    grad : ndarray of shape (n_features,)
        ∇L(w).
    n_clipped : int
        Rows whose weight reached M.

    References
    ----------
    Li & Joachims, A hybrid framework of counterfactual risk minimization and supervised
    learning on logged bandit feedback, Eqs. (8)–(10), (12)–(14).
    """
    n = actions.shape[0]
    idx = inputs.offsets[:-1] + actions
    F = inputs.features
    log_p, vjp = family.log_prob_and_vjp(coef, inputs, actions)
    s = np.asarray(F[idx] @ coef).reshape(-1)
    y = -scaled_losses  # 1 = best outcome (a click), 0 = worst
    ce = np.logaddexp(0.0, s) - y * s  # Eq. (8): −[y log σ(s) + (1 − y) log(1 − σ(s))]
    inverse = 1.0 / propensities
    r = np.exp(log_p) * inverse
    active = np.zeros(n, dtype=bool)
    n_clipped = 0
    if weighting == "none":
        omega = np.ones(n)
    elif weighting == "inverse_propensity":
        omega = inverse  # Eq. (9)
    elif weighting == "clipped_inverse_propensity":
        omega = np.minimum(clip, inverse)  # Eq. (10)
        n_clipped = int(np.sum(inverse >= clip))
    elif fixed_weights is not None:
        omega = np.asarray(fixed_weights, dtype=np.float64)
        n_clipped = int(np.sum(omega >= clip))
    else:
        omega = np.minimum(clip, r)  # Eq. (12)/(14)
        active = r < clip
        n_clipped = int(np.sum(r >= clip))
    value = float(np.dot(omega, ce) / n + l2_penalty * coef @ coef)
    c = np.zeros(F.shape[0])
    c[idx] = omega * (expit(s) - y) / n
    grad = np.asarray(F.T @ c).reshape(-1) + 2.0 * l2_penalty * coef
    v = np.where(active, ce * omega, 0.0) / n  # ∇ωᵢ = ωᵢ ∇log π_w when rᵢ < M
    if regularizer == "tanh_mse" and regularizer_weight:
        a = np.exp(-log_p)  # 1/π_w(yᵢ|xᵢ)
        diff = np.tanh(a) - np.tanh(inverse)
        value += regularizer_weight * float(np.mean(diff**2))
        # d tanh(1/π)/dw = (1 − tanh²(1/π)) · (−1/π) ∇log π
        v = v + regularizer_weight * 2.0 * diff * (1.0 - np.tanh(a) ** 2) * (-a) / n
    if np.any(v):
        grad = grad + vjp(v)
    if regularizer == "variance" and regularizer_weight:
        stats = crm_statistics(coef, family, inputs, actions, scaled_losses, propensities, clip)
        with_var = crm_objective_from_statistics(stats, coef, regularizer_weight, 0.0)
        without = crm_objective_from_statistics(stats, coef, 0.0, 0.0)
        value += with_var[0] - without[0]
        grad = grad + (with_var[1] - without[1])
    return value, grad, n_clipped
