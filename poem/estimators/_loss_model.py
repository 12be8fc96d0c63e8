"""Cross-fitted loss model δ̂(x, a) for the direct method and doubly robust estimators.

Any scikit-learn estimator, fitted by K-fold cross-fitting on the logged (row, action) pairs
and used to predict every action of every row (re-exported by :mod:`poem.estimators.dr`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone, is_classifier
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold

__all__ = ["LossPredictions", "fit_loss_model", "loss_model_features"]


def loss_model_features(log: Any) -> tuple[Any, np.ndarray]:
    """Feature rows of every (row, action) pair for the loss model, stacked row after row.

    Discrete family: the row for (i, a) is [xᵢ ⊗ e_a, e_a] (a separate linear model per
    action), K rows per decision. Candidate-set family: the candidate vectors ψ_{i,c}.

    Parameters
    ----------
    log : LoggedBandit
        Discrete or candidate-set log.

    Returns
    -------
    features : sparse matrix of shape (n_pairs, n_model_features)
        Stacked (row, action) features.
    offsets : ndarray of shape (n_samples + 1,)
        Row i owns feature rows ``offsets[i]:offsets[i+1]``.

    Raises
    ------
    ValueError
        For the multilabel family.
    """
    if log.family == "candidates":
        return sp.csr_matrix(log.candidates.features), np.asarray(log.candidates.offsets)
    if log.family != "discrete":
        raise ValueError(
            f"DM/DR support the 'discrete' and 'candidates' families, got {log.family!r}"
        )
    X = sp.csr_matrix(log.contexts)
    n, d = X.shape
    K = int(log.n_actions)
    action = np.tile(np.arange(K), n)
    Xr = X[np.repeat(np.arange(n), K)].tocoo()
    kron = sp.csr_matrix((Xr.data, (Xr.row, action[Xr.row] * d + Xr.col)), shape=(n * K, d * K))
    onehot = sp.csr_matrix((np.ones(n * K), (np.arange(n * K), action)), shape=(n * K, K))
    return sp.hstack([kron, onehot], format="csr"), np.arange(n + 1, dtype=np.int64) * K


@dataclass(frozen=True, eq=False)
class LossPredictions:
    """Cross-fitted loss-model predictions δ̂(xᵢ, a) for every action of every row.

    Attributes
    ----------
    values : ndarray of shape (n_pairs,)
        δ̂ in loss units, stacked row after row (discrete: K per row, in action order).
    offsets : ndarray of shape (n_samples + 1,)
        Row i owns ``values[offsets[i]:offsets[i+1]]``.
    logged : ndarray of shape (n_samples,)
        δ̂(xᵢ, yᵢ) for the logged actions.
    n_folds : int
        Number of cross-fitting folds.
    """

    values: np.ndarray
    offsets: np.ndarray
    logged: np.ndarray
    n_folds: int

    def expected_loss(self, target_probs: Any) -> np.ndarray:
        """v̂ᵢ = Σ_a π(a|xᵢ) δ̂(xᵢ, a) for a target distribution in the same layout.

        Parameters
        ----------
        target_probs : array-like of shape (n_pairs,) or (n_samples, K)
            π(a|xᵢ) of every (row, action) pair.

        Returns
        -------
        ndarray of shape (n_samples,)
            The model-expected loss of each row.
        """
        p = np.asarray(target_probs, dtype=np.float64).reshape(-1)
        if p.size != self.values.size:
            raise ValueError(
                f"target_probs has {p.size:,} entries but the predictions have {self.values.size:,}"
            )
        return np.add.reduceat(p * self.values, self.offsets[:-1])


def cluster_codes(groups: Any) -> np.ndarray:
    """Dense cluster codes 0..G−1 of the rows' labels (equal labels, one code)."""
    return np.unique(np.asarray(groups), return_inverse=True)[1].ravel()


def row_cluster_codes(n_rows: int, groups: Any, rows: str = "validation row") -> np.ndarray:
    """:func:`cluster_codes` of ``groups``, one label per row (None: every row its own cluster).

    ValueError when ``groups`` does not label each of the ``n_rows`` rows (``rows`` names them).
    """
    if groups is None:
        return np.arange(int(n_rows))
    labels = np.asarray(groups)
    if labels.shape != (int(n_rows),):
        raise ValueError(f"groups must have one label per {rows} ({n_rows}), got {labels.shape}")
    return cluster_codes(labels)


def group_folds(groups: Any, n_folds: int, random_state: Any) -> np.ndarray:
    """Fold of each row with every cluster in one fold: ``permutation(G)[cluster] % n_folds``.

    Rows with one label of ``groups`` (replays of a context, a user's sessions) are one
    cluster; cross-fitting by cluster keeps a row's prediction from a model that saw its
    cluster. ``random_state``: an int, None, a ``Generator`` or a ``RandomState``. ValueError
    when there are fewer clusters than folds.
    """
    codes = cluster_codes(groups)
    g = int(codes.max(initial=-1)) + 1
    if g < n_folds:
        raise ValueError(f"cross-fitting by group needs at least {n_folds} groups, got {g}")
    rng = (
        random_state
        if isinstance(random_state, np.random.RandomState)
        else np.random.default_rng(random_state)
    )
    return rng.permutation(g)[codes] % n_folds


def fit_loss_model(
    log: Any,
    *,
    loss_model: Any = None,
    n_folds: int = 5,
    random_state: Any = None,
    groups: Any = None,
) -> LossPredictions:
    r"""Fit a loss model δ̂(x, a) by K-fold cross-fitting and predict every (row, action) pair.

    .. math::

        \hat\delta(x_i, a) = \delta_{min} + (\delta_{max} - \delta_{min})\, f_{-k(i)}(\phi(x_i, a))

    where f_{−k} is the model fitted on the logged pairs of every fold but k(i) ∋ i, with
    target (δ − δ_min)/(δ_max − δ_min) ∈ [0, 1]; φ from :func:`loss_model_features`. A
    classifier's ``predict_proba[:, 1]`` is used (losses must then equal one of the bounds),
    a regressor's ``predict`` otherwise; predictions are not clipped.

    Parameters
    ----------
    log : LoggedBandit
        Discrete or candidate-set log.
    loss_model : scikit-learn estimator or None, default=None
        Cloned for every fold. None: ``LogisticRegression(C=1.0)`` when every loss equals a
        bound (e.g. clicks), else ``Ridge(alpha=1.0)``.
    n_folds : int, default=5
        Number of cross-fitting folds K ≥ 2.
    random_state : int, RandomState instance or None, default=None
        Seed of the fold assignment.
    groups : array-like of shape (n_rows,) or None, default=None
        Cluster label of each row: the rows of one cluster share a fold (:func:`group_folds`).

    Returns
    -------
    LossPredictions
        Out-of-fold predictions in loss units.

    Raises
    ------
    ValueError
        If ``n_folds`` < 2 or > n, a classifier is given for non-binary losses, a fold's
        training rows hold a single loss value for a classifier, or the family is multilabel.

    References
    ----------
    Chernozhukov et al. (2018), Double/debiased machine learning for treatment and structural
    parameters, Econometrics Journal 21(1), arXiv:1608.00060, Definition 3.1 (cross-fitting).
    """
    if (
        isinstance(n_folds, bool)
        or not isinstance(n_folds, (int, np.integer))
        or not 2 <= n_folds <= log.n_rows
    ):
        raise ValueError(f"n_folds must be an integer in [2, n_rows={log.n_rows}], got {n_folds!r}")
    features, offsets = loss_model_features(log)
    lo, hi = log.loss_bounds
    target = (np.asarray(log.losses) - lo) / (hi - lo)
    binary = bool(np.all((target == 0) | (target == 1)))
    model = loss_model
    if model is None:
        model = LogisticRegression(C=1.0, max_iter=1000) if binary else Ridge(alpha=1.0)
    classifier = is_classifier(model)
    if classifier and not binary:
        raise ValueError(
            "a classifier loss model needs every loss equal to a loss bound; use a regressor"
        )
    sizes = np.diff(offsets)
    logged_idx = offsets[:-1] + np.asarray(log.actions, dtype=np.int64)
    predictions = np.empty(features.shape[0])
    if groups is None:
        folds = KFold(n_splits=int(n_folds), shuffle=True, random_state=random_state)
        splits = folds.split(np.arange(log.n_rows))
    else:
        fold = group_folds(groups, int(n_folds), random_state)
        splits = ((np.flatnonzero(fold != k), np.flatnonzero(fold == k)) for k in range(n_folds))
    for k, (train, test) in enumerate(splits):
        y = target[train].astype(int) if classifier else target[train]
        if classifier and np.unique(y).size < 2:
            raise ValueError(
                f"fold {k}: the {train.size:,} training rows all have loss "
                f"{lo + (hi - lo) * y[0]:g}; "
                "a classifier needs both values (use fewer folds or a regressor)"
            )
        fitted = clone(model).fit(features[logged_idx[train]], y)
        ends = np.cumsum(sizes[test])  # every (row, action) pair of the test rows
        pairs = np.repeat(offsets[test] - (ends - sizes[test]), sizes[test]) + np.arange(ends[-1])
        X_test = features[pairs]
        predictions[pairs] = (
            fitted.predict_proba(X_test)[:, 1] if classifier else fitted.predict(X_test)
        )
    values = lo + (hi - lo) * predictions
    return LossPredictions(values, offsets, values[logged_idx], int(n_folds))
