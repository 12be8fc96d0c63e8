"""Batch solver: scipy's L-BFGS-B on the exact CRM objective and gradient (POEM(B), paper §6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.optimize import minimize

from poem.learners._adagrad import SolverResult
from poem.learners.objective import CRMStatistics, crm_objective_from_statistics

__all__ = ["lbfgs", "lbfgs_statistics"]


def lbfgs(fun: Callable, x0: np.ndarray, max_iter: int, tol: float) -> Any:
    """Run scipy's L-BFGS-B on ``fun(x) -> (value, gradient)`` with ``gtol = ftol = tol``."""
    options = {"maxiter": int(max_iter), "gtol": tol, "ftol": tol}
    return minimize(fun, x0, jac=True, method="L-BFGS-B", options=options)


def lbfgs_statistics(
    statistics: Callable[[np.ndarray], CRMStatistics],
    coef0: np.ndarray,
    *,
    variance_penalty: float,
    l2_penalty: float = 0.0,
    l2_center: np.ndarray | None = None,
    max_iter: int = 200,
    tol: float = 1e-6,
) -> SolverResult:
    """Minimise the CRM objective J(w) of :mod:`poem.learners.objective` with L-BFGS-B from w₀.

    Parameters
    ----------
    statistics : callable
        ``statistics(w)`` returns the :class:`~poem.learners.objective.CRMStatistics` of the
        whole training set at w (e.g. :meth:`~poem.learners.prepared.PreparedTraining.statistics`),
        from which J(w) and ∇J(w) follow exactly.
    coef0 : ndarray
        Starting point w₀; its shape is the parameters' shape.
    variance_penalty : float
        λ ≥ 0; 0 gives IPS(B).
    l2_penalty : float, default=0.0
        μ ≥ 0.
    l2_center : ndarray or None, default=None
        Centre c of the L2 term μ‖w − c‖² (None: 0).
    max_iter : int, default=200
        Maximum number of L-BFGS iterations.
    tol : float, default=1e-6
        Passed as scipy's ``gtol`` (projected-gradient norm) and ``ftol`` (relative change).

    Returns
    -------
    SolverResult
        Final w, iterations, J(w), ‖∇J(w)‖, convergence flag and clipped-row count.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). JMLR 16, arXiv:1502.02362, Eq. (12), §6 (POEM(B)).
    """
    shape = np.shape(coef0)
    last: dict[str, Any] = {}

    def fun(flat: np.ndarray) -> tuple[float, np.ndarray]:
        w = flat.reshape(shape)
        stats = statistics(w)
        value, grad = crm_objective_from_statistics(
            stats, w, variance_penalty, l2_penalty, l2_center
        )
        last.update(stats=stats, value=value, grad=grad)
        return value, grad.ravel()

    result = lbfgs(fun, np.ravel(coef0).astype(np.float64), max_iter, tol)
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
