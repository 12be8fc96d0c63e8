r"""Cross-fitted additive loss model of a multilabel log, for the doubly robust CRM objective.

The Hamming loss of a label vector is a sum over labels, so its conditional mean is *linear
in the action* given the context:

.. math::

    E[\delta \mid x, y] = \sum_l \big[ y_l (1 - 2\eta_l(x)) + \eta_l(x) \big]
    = c(x) + \sum_l y_l\, g_l(x), \qquad \eta_l(x) = P(y^*_l = 1 \mid x),

and so is every loss that adds a per-label term. The model c(x) = b·x, g_l(x) = a_l·x is one
ridge regression of δ' on [y ⊗ x, x], and gives a policy's expected modelled loss in closed
form, E_{y∼π}[δ̂(x, y)] = c(x) + Σ_l σ_l(x) g_l(x). Row i's (g, c) come from a model fitted
on the other fold(s) (cross-fitting, Chernozhukov et al. 2018), so the residual of the doubly
robust objective (:mod:`poem.learners.objective`) is independent of its own model.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import LinearOperator, lsqr

from poem._blas import single_blas_thread
from poem.estimators._loss_model import group_folds

__all__ = ["fit_additive_loss_model"]

_TOL = 1e-4  # lsqr's relative tolerance: the model only has to be a useful control variate
_MAX_ITER = 20  # LSQR iterations (early stopping regularizes as the ridge does)


def _design(X: Any, Y: np.ndarray) -> LinearOperator:
    """The design [y ⊗ x, x] as an operator: Zβ = Σ_l y_l (x·a_l) + x·b, never materialised.

    β is (a_1, …, a_q, b) flattened; Zβ and Zᵀv each cost one product with X.
    """
    n, q = Y.shape
    d = X.shape[1]

    def matvec(beta):
        coef = np.asarray(beta).reshape(q + 1, d)
        S = np.asarray(X @ coef.T)  # (n, q + 1)
        return np.sum(Y * S[:, :q], axis=1) + S[:, q]

    def rmatvec(v):
        v = np.asarray(v).ravel()
        V = np.concatenate([Y * v[:, None], v[:, None]], axis=1)  # (n, q + 1)
        return np.asarray(X.T @ V).T.ravel()

    return LinearOperator((n, (q + 1) * d), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)


def fit_additive_loss_model(
    inputs: Any,
    actions: np.ndarray,
    scaled_losses: np.ndarray,
    *,
    folds: int = 2,
    ridge: float = 1.0,
    random_state: int = 0,
    max_iter: int = _MAX_ITER,
    groups: Any = None,
) -> np.ndarray:
    r"""Cross-fitted per-row (g₁..g_q, c) of the loss model δ̂(x, y) = c(x) + Σ_l y_l g_l(x).

    .. math:: \min_{a, b} \sum_{i \notin F_k} \big(\delta'_i - b \cdot x_i
              - \textstyle\sum_l y_{il}\, a_l \cdot x_i\big)^2
              + \rho \big(\lVert a \rVert^2 + \lVert b \rVert^2\big)

    for each fold F_k (LSQR with damping √ρ), then (g, c) of the rows in F_k from that fit.

    Parameters
    ----------
    inputs : ndarray or sparse matrix of shape (n_samples, n_inputs)
        Prepared contexts xᵢ (intercept column included).
    actions : ndarray of shape (n_samples, q)
        Logged label vectors yᵢ ∈ {0, 1}^q.
    scaled_losses : ndarray of shape (n_samples,)
        Scaled losses δ'ᵢ ∈ [−1, 0].
    folds : int, default=2
        Number of cross-fitting folds (1: fit and predict on all rows).
    ridge : float, default=1.0
        Ridge penalty ρ > 0.
    random_state : int, default=0
        Seed of the fold assignment.
    max_iter : int, default=20
        LSQR iterations per fold.
    groups : array-like of shape (n_samples,) or None, default=None
        Cluster label of each row; the rows of one cluster share a fold
        (:func:`poem.estimators._loss_model.group_folds`). None: rows are assigned one by one.

    Returns
    -------
    ndarray of shape (n_samples, q + 1)
        Columns 0..q−1 are gᵢ, the last column cᵢ.

    Raises
    ------
    ValueError
        When ``folds`` < 1 or exceeds the number of rows, or ``ridge`` ≤ 0.
    """
    Y = np.asarray(actions, dtype=np.float64)
    n, q = Y.shape
    if not 1 <= int(folds) <= n:
        raise ValueError(f"folds must be in [1, n_samples={n}], got {folds!r}")
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0, got {ridge!r}")
    X = sp.csr_matrix(inputs) if sp.issparse(inputs) else np.asarray(inputs, dtype=np.float64)
    y = np.asarray(scaled_losses, dtype=np.float64)
    out = np.zeros((n, q + 1))
    fold = (
        np.random.default_rng(random_state).permutation(n) % int(folds)
        if groups is None or folds == 1
        else group_folds(groups, int(folds), random_state)
    )
    with single_blas_thread():  # thin products: threads only cost (poem._blas)
        for k in range(int(folds)):
            _fit_fold(X, Y, y, fold == k, folds > 1, ridge, max_iter, out)
    return out


def _fit_fold(X, Y, y, test, cross, ridge, max_iter, out) -> None:
    """Fit on the rows outside ``test`` (all rows when not ``cross``), predict ``test``."""
    train = ~test if cross else test
    Z = _design(X[train], Y[train])
    beta = lsqr(Z, y[train], damp=np.sqrt(ridge), atol=_TOL, btol=_TOL, iter_lim=max_iter)[0]
    coef = beta.reshape(Y.shape[1] + 1, X.shape[1])  # rows a_1..a_q, then b
    out[test] = np.asarray(X[test] @ coef.T)
