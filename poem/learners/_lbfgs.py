"""Batch solver: scipy's L-BFGS-B on the exact CRM objective and gradient (POEM(B), paper §6).

The objective and gradient come from :func:`poem.learners.objective.crm_objective`; this
module only adapts the parameter array to scipy's flat vector.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import minimize

from poem.learners._adagrad import SolverResult
from poem.learners.objective import (
    CRMStatistics,
    crm_objective_from_statistics,
    crm_statistics,
)
from poem.policies._base import PolicyFamily

__all__ = ["lbfgs", "lbfgs_statistics"]


def lbfgs(
    family: PolicyFamily,
    inputs: Any,
    actions: np.ndarray,
    scaled_losses: np.ndarray,
    propensities: np.ndarray,
    *,
    clip: float,
    variance_penalty: float,
    l2_penalty: float = 0.0,
    max_iter: int = 200,
    tol: float = 1e-6,
    chunk_size: int | None = None,
    coef0: np.ndarray | None = None,
    loss_model: np.ndarray | None = None,
) -> SolverResult:
    r"""Minimise the CRM objective J(w) with L-BFGS-B from w₀ (default 0; Eq. 10/12).

    .. math::

        \hat w = \arg\min_w \; \bar u_w + \lambda \sqrt{\hat V(u_w)/n}
        + \mu \lVert w \rVert^2

    where ū_w is the clipped IPS risk on scaled losses, V̂ its sample variance, n the number
    of rows, λ the variance penalty and μ the L2 penalty.

    Parameters
    ----------
    family : PolicyFamily
        Policy family.
    inputs : prepared inputs
        ``family.inputs_from_log(log)``, i.e. the contexts xᵢ.
    actions : ndarray
        Logged actions yᵢ.
    scaled_losses : ndarray of shape (n_samples,)
        Scaled losses δ'ᵢ ∈ [−1, 0].
    propensities : ndarray of shape (n_samples,)
        Logging propensities pᵢ.
    clip : float
        Weight cap M (``np.inf`` for none).
    variance_penalty : float
        λ ≥ 0; 0 gives IPS(B).
    l2_penalty : float, default=0.0
        μ ≥ 0.
    max_iter : int, default=200
        Maximum number of L-BFGS iterations.
    tol : float, default=1e-6
        Passed as scipy's ``gtol`` (projected-gradient norm) and ``ftol`` (relative change).
    chunk_size : int or None, default=None
        Row chunk for the statistics (bounded memory; same result).
    coef0 : ndarray of shape ``family.coef_shape`` or None, default=None
        Starting point w₀ (None: w₀ = 0, the uniform policy).
    loss_model : ndarray of shape (n_samples, q + 1) or None, default=None
        Per-row additive loss model: the doubly robust objective
        (:func:`~poem.learners.objective.crm_statistics`); None: IPS.

    Returns
    -------
    SolverResult
        Final w, iterations, J(w), ‖∇J(w)‖, convergence flag and clipped-row count.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). JMLR 16, arXiv:1502.02362, Eq. (12), §6 (POEM(B)).
    """

    def statistics(w: np.ndarray) -> CRMStatistics:
        return crm_statistics(
            w,
            family,
            inputs,
            actions,
            scaled_losses,
            propensities,
            clip,
            chunk_size=chunk_size,
            loss_model=loss_model,
        )

    return lbfgs_statistics(
        statistics,
        np.zeros(family.coef_shape) if coef0 is None else np.asarray(coef0, dtype=np.float64),
        variance_penalty=variance_penalty,
        l2_penalty=l2_penalty,
        max_iter=max_iter,
        tol=tol,
    )


def lbfgs_statistics(
    statistics: Callable[[np.ndarray], CRMStatistics],
    coef0: np.ndarray,
    *,
    variance_penalty: float,
    l2_penalty: float = 0.0,
    max_iter: int = 200,
    tol: float = 1e-6,
) -> SolverResult:
    """:func:`lbfgs` on any source of the full-batch statistics (the map-reduce seam, DESIGN §8).

    Parameters
    ----------
    statistics : callable
        ``statistics(w)`` returns the :class:`~poem.learners.objective.CRMStatistics` of the
        whole training set at w — computed in memory, or as a sum of per-partition statistics
        (:meth:`poem.learners.prepared.PreparedTraining.statistics`); J(w) and ∇J(w) follow
        exactly (Eq. 10/12).
    coef0 : ndarray
        Starting point w₀; its shape is the parameters' shape.
    variance_penalty, l2_penalty, max_iter, tol
        As in :func:`lbfgs`.

    Returns
    -------
    SolverResult
        Final w, iterations, J(w), ‖∇J(w)‖, convergence flag and clipped-row count.
    """
    shape = np.shape(coef0)
    last: dict[str, Any] = {}

    def fun(flat: np.ndarray) -> tuple[float, np.ndarray]:
        w = flat.reshape(shape)
        stats = statistics(w)
        value, grad = crm_objective_from_statistics(stats, w, variance_penalty, l2_penalty)
        last.update(stats=stats, value=value, grad=grad)
        return value, grad.ravel()

    result = minimize(
        fun,
        np.ravel(coef0).astype(np.float64),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": int(max_iter), "gtol": tol, "ftol": tol},
    )
    w = result.x.reshape(shape)
    fun(result.x)  # statistics at the returned point (the last evaluation may be a trial)
    converged = bool(result.status == 0)
    return SolverResult(
        w,
        int(result.nit),
        float(last["value"]),
        float(np.linalg.norm(last["grad"])),
        converged,
        last["stats"].n_clipped,
    )
