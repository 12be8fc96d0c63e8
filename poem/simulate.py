"""Supervised → bandit conversion (Swaminathan & Joachims 2015, §6; DESIGN §9).

A supervised data set D* = {(xᵢ, y*ᵢ)} becomes logged bandit feedback: :func:`fit_logging_policy`
trains the logging policy h₀ on a fraction of D*, :func:`supervised_to_bandit` replays D*
through it, and :func:`true_expected_loss` scores any policy on the supervised test set in
closed form (the quantity the paper reports); :func:`map_loss` scores its MAP predictor.
"""

from __future__ import annotations

import hashlib
import warnings
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import logit
from sklearn.linear_model import LogisticRegression
from sklearn.utils import check_random_state

from poem.data import LoggedBandit
from poem.datasets import SupervisedDataset
from poem.policies import StochasticPolicy, expected_hamming_loss, make_family

__all__ = [
    "fit_logging_policy",
    "fit_rows",
    "map_loss",
    "supervised_loss",
    "supervised_to_bandit",
    "true_expected_loss",
]

_FAMILIES = ("discrete", "multilabel")
_LOGREG = {"C": 1.0, "max_iter": 1000}  # scikit-learn defaults, more iterations to converge


def fit_logging_policy(
    X: Any,
    Y: Any = None,
    *,
    family: str | None = None,
    fraction: float = 0.05,
    temperature: float = 1.0,
    fit_intercept: bool = True,
    random_state: Any = None,
) -> StochasticPolicy:
    r"""Train the logging policy h₀ on a random fraction of the supervised training set.

    .. math:: h_0(y|x) = \prod_{l=1}^{q} \sigma(w_{0,l} \cdot x / \tau)^{y_l}
              (1 - \sigma(w_{0,l} \cdot x / \tau))^{1 - y_l}
              \quad\text{or}\quad
              h_0(k|x) = \frac{\exp(w_{0,k} \cdot x / \tau)}
                              {\sum_{k'} \exp(w_{0,k'} \cdot x / \tau)}

    where w₀ are the coefficients (and intercepts) of scikit-learn ``LogisticRegression``
    (C = 1, L2) fitted on ⌈f·n⌉ rows drawn without replacement, q is the number of labels,
    K the number of classes and τ the temperature. The paper's temperature multiplier
    w₀ ↦ α·w₀ (§6, Fig. 3) is τ = 1/α: τ < 1 gives a more deterministic logger.

    Rare labels and classes are smoothed, and one ``UserWarning`` names them (also listed in
    ``metadata``): a label constant in the subsample (k = 0 or k = m positives of m rows)
    gets w_l = 0 and the Laplace-smoothed intercept logit((k + ½)/(m + 1)) (σ_l = ½ without
    an intercept); a class absent from it gets one pseudo-example with x = 0, so it keeps a
    small probability.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features), or SupervisedDataset
        Supervised training contexts xᵢ; a :class:`~poem.datasets.SupervisedDataset` stands for
        its training part, family and label count (otherwise K = largest class index + 1).
    Y : array-like of shape (n_samples,) or (n_samples, n_labels), default=None
        True labels y*ᵢ: class indices (discrete) or 0/1 vectors (multilabel). Required
        unless ``X`` is a data set.
    family : {"discrete", "multilabel"} or None, default=None
        Policy family; required unless ``X`` is a data set.
    fraction : float, default=0.05
        Fraction f ∈ (0, 1] of the rows h₀ is trained on (paper: 5%).
    temperature : float, default=1.0
        Serving temperature τ > 0 of h₀.
    fit_intercept : bool, default=True
        Whether h₀ has an intercept per label/class (stored as the last coefficient column).
        Use False for the paper's regime φ(x, y) = x ⊗ y.
    random_state : int, RandomState instance or None, default=None
        Seed of the subsample.

    Returns
    -------
    StochasticPolicy
        h₀ with ``metadata`` recording the fit (fraction, rows used, pseudo-examples, version).

    Raises
    ------
    ValueError
        If the family is unknown, labels have the wrong shape or values, ``fraction`` or
        ``temperature`` is out of range, or the subsample has fewer than 2 rows.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). Batch learning from logged bandit feedback through
    counterfactual risk minimization. JMLR 16. arXiv:1502.02362, §6.
    """
    n_labels = None
    if isinstance(X, SupervisedDataset):
        if family is not None and family != X.family:
            raise ValueError(f"family={family!r} differs from the data set's family {X.family!r}")
        X, Y, family, n_labels = X.X_train, X.Y_train, X.family, X.n_labels
    if family not in _FAMILIES:
        raise ValueError(f"family must be one of {_FAMILIES}, got {family!r}")
    if Y is None:
        raise ValueError("Y (the supervised labels) is required when X is not a SupervisedDataset")
    if not (isinstance(fraction, int | float) and 0.0 < fraction <= 1.0):
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    if not (isinstance(temperature, int | float) and np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    X = _as_contexts(X)
    n = X.shape[0]
    n_actions = _n_actions(Y, family) if n_labels is None else int(n_labels)
    Y = _check_labels(Y, family, n, n_actions)
    rows = fit_rows(n, fraction, random_state)
    m = rows.size
    X_fit = X[rows]
    if family == "multilabel":
        coef, pseudo = _fit_per_label(X_fit, Y[rows], fit_intercept)
        pseudo_key, kind = "constant_labels", "label(s) constant"
        remedy = "they get w = 0 and the Laplace-smoothed rate (k + 1/2)/(m + 1)"
    else:
        coef, pseudo = _fit_multinomial(X_fit, Y[rows], n_actions, fit_intercept)
        pseudo_key, kind = "absent_classes", "class(es) absent"
        remedy = "they get one pseudo-example each (a small smoothed probability)"
    if pseudo:
        message = f"h0: {len(pseudo)} {kind} in the {m} sampled rows: {pseudo}; {remedy}"
        warnings.warn(message, UserWarning, stacklevel=2)
    policy_family = make_family(family, X.shape[1], n_actions, fit_intercept)
    metadata = {
        "role": "logging_policy",
        "learner": "sklearn.linear_model.LogisticRegression",
        "C": _LOGREG["C"],
        "fraction": float(fraction),
        "n_fit_rows": m,
        "seed": random_state if isinstance(random_state, int) else None,
        pseudo_key: pseudo,
        "version": "h0-" + _digest(coef, temperature),
    }
    return StochasticPolicy(policy_family, coef, temperature=float(temperature), metadata=metadata)


def fit_rows(n: int, fraction: float, random_state: Any = None) -> np.ndarray:
    """Sorted rows of ``n`` supervised rows :func:`fit_logging_policy` fits h₀ on (seeded).

    Raises ValueError when ``fraction`` of ``n`` gives fewer than 2 rows.
    """
    m = int(np.ceil(fraction * n))
    if m < 2:
        raise ValueError(f"fraction={fraction} of {n} rows gives {m} row(s); h0 needs at least 2")
    return np.sort(check_random_state(random_state).choice(n, size=m, replace=False))


def supervised_to_bandit(
    X: Any,
    Y: Any,
    logging_policy: StochasticPolicy,
    *,
    n_replays: int = 4,
    random_state: Any = None,
    start_time: Any = None,
    event_id_prefix: str = "e",
    feature_names: Any = None,
    order: str = "pass",
) -> LoggedBandit:
    r"""Simulate logged bandit feedback by replaying supervised data through h₀ (paper §6).

    .. math:: y_{(r,i)} \sim h_0(\cdot|x_i), \quad
              \delta_{(r,i)} = \Delta(y^*_i, y_{(r,i)}), \quad
              p_{(r,i)} = h_0(y_{(r,i)}|x_i), \qquad r = 1..R

    where R is the replay count, y*ᵢ the true label(s) and Δ the Hamming loss
    Σ_l |y*_l − y_l| ∈ [0, q] (multilabel) or the 0/1 loss [y ≠ y*] ∈ [0, 1] (discrete).

    With ``order="pass"`` (the paper's R passes) row k = r·n + i of the log is replay r of
    supervised row i; with ``order="context"`` row k = i·R + r, so each context's replays are
    adjacent and a time split (``start_time``) separates contexts rather than passes — a gate
    on the last rows then sees contexts the training rows never held, as in production.

    Parameters
    ----------
    X : array-like or sparse matrix of shape (n_samples, n_features)
        Supervised contexts xᵢ.
    Y : array-like of shape (n_samples,) or (n_samples, n_labels)
        True labels y*ᵢ (class indices or 0/1 vectors).
    logging_policy : StochasticPolicy
        h₀ (its temperature and exploration floor apply), e.g. from :func:`fit_logging_policy`.
    n_replays : int, default=4
        Number of passes R through the data (paper: 4).
    random_state : int, RandomState, Generator or None, default=None
        Seed of the sampled actions.
    start_time : str, datetime or numpy.datetime64 or None, default=None
        Timestamp of the first row; row k is stamped ``start_time + k`` seconds. No
        timestamps when None.
    event_id_prefix : str, default="e"
        Event ids are ``f"{event_id_prefix}{k}"``, unique within the log.
    feature_names : sequence of str or None, default=None
        Feature names stored in the log.
    order : {"pass", "context"}, default="pass"
        Row order: pass after pass, or the replays of each context together.

    Returns
    -------
    LoggedBandit
        n·R rows of (xᵢ, yᵢ, δᵢ, pᵢ) with loss bounds (0, q) or (0, 1), event ids, timestamps
        when requested, ``logging_model_version`` = h₀'s version and, for the discrete family,
        the full logging distribution.

    Raises
    ------
    ValueError
        If the policy family is not discrete or multilabel, labels do not match it,
        ``n_replays`` < 1 or ``order`` is unknown.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015), arXiv:1502.02362, §6 (four replays, Hamming loss).
    """
    family = logging_policy.family
    if family.name not in _FAMILIES:
        raise ValueError(
            f"supervised_to_bandit supports the families {_FAMILIES}, got {family.name!r}"
        )
    if not isinstance(n_replays, int | np.integer) or n_replays < 1:
        raise ValueError(f"n_replays must be an integer >= 1, got {n_replays!r}")
    if order not in ("pass", "context"):
        raise ValueError(f"order must be 'pass' or 'context', got {order!r}")
    X = _as_contexts(X)
    n = X.shape[0]
    Y = _check_labels(Y, family.name, n, family.n_actions)
    rows = (np.tile if order == "pass" else np.repeat)(np.arange(n), int(n_replays))
    contexts, truth = X[rows], Y[rows]
    actions, propensities = logging_policy.sample(contexts, random_state)
    losses = supervised_loss(actions, truth, family.name)
    n_log = rows.size
    timestamps = None
    if start_time is not None:
        timestamps = np.datetime64(start_time, "ns") + np.arange(n_log) * np.timedelta64(1, "s")
    version = logging_policy.metadata.get("version") or "h0-" + _digest(
        logging_policy.coef, logging_policy.temperature
    )
    return LoggedBandit(
        contexts=contexts,
        actions=actions,
        losses=losses,
        propensities=propensities,
        loss_bounds=(0.0, 1.0 if family.name == "discrete" else float(family.n_actions)),
        family=family.name,
        n_actions=family.n_actions,
        timestamps=timestamps,
        event_ids=np.array([f"{event_id_prefix}{k}" for k in range(n_log)]),
        logging_model_version=str(version),
        logging_distribution=logging_policy.predict_proba(contexts)
        if family.name == "discrete"
        else None,
        feature_names=None if feature_names is None else tuple(feature_names),
    )


def true_expected_loss(policy: StochasticPolicy, X: Any, Y: Any) -> float:
    r"""Closed-form expected loss of a stochastic policy on supervised data (paper §6).

    .. math:: R(h) = \frac{1}{n} \sum_{i=1}^{n} E_{y \sim h(x_i)} \Delta(y^*_i, y)
              = \frac{1}{n} \sum_i \sum_l
                \big[y^*_{il}(1 - \sigma_{il}) + (1 - y^*_{il})\sigma_{il}\big]
              \;\text{or}\; \frac{1}{n} \sum_i \big(1 - h(y^*_i|x_i)\big)

    where σ_{il} is the policy's served probability of label l on row i (multilabel, Hamming
    loss) and h(y*ᵢ|xᵢ) its served probability of the true class (discrete, 0/1 loss).

    Parameters
    ----------
    policy : StochasticPolicy
        The policy h (its temperature and exploration floor apply).
    X, Y
        Contexts xᵢ and true labels y*ᵢ, as for :func:`supervised_to_bandit`.

    Returns
    -------
    float
        R(h), the mean expected loss per row.

    Raises
    ------
    ValueError
        If the labels do not match the policy family.
    """
    X = _as_contexts(X)
    family = policy.family
    Y = _check_labels(Y, family.name, X.shape[0], family.n_actions)
    P = policy.predict_proba(X)
    if family.name == "multilabel":
        return float(np.mean(expected_hamming_loss(P, Y)))
    return float(np.mean(1.0 - P[np.arange(Y.shape[0]), Y]))


def map_loss(policy: StochasticPolicy, X: Any, Y: Any) -> float:
    r"""Mean loss of the policy's MAP predictor ŷᵢ = argmax_y h(y|xᵢ) (paper Eq. 11).

    .. math:: \frac{1}{n} \sum_{i=1}^{n} \Delta(y^*_i, \hat y_i)

    where Δ is the Hamming loss (multilabel) or the 0/1 loss (discrete).

    Parameters
    ----------
    policy, X, Y
        As for :func:`true_expected_loss`.

    Returns
    -------
    float
        The mean loss of the deterministic MAP predictions.

    Raises
    ------
    ValueError
        If the labels do not match the policy family.
    """
    X = _as_contexts(X)
    family = policy.family
    Y = _check_labels(Y, family.name, X.shape[0], family.n_actions)
    return float(np.mean(supervised_loss(policy.predict(X), Y, family.name)))


# -- private ------------------------------------------------------------------------------------
def _as_contexts(X: Any) -> Any:
    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64)
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-dimensional (n_samples, n_features), got shape {X.shape}")
    return X


def _n_actions(Y: Any, family: str) -> int:
    Y = np.asarray(Y)
    if family == "multilabel":
        if Y.ndim != 2:
            raise ValueError(f"multilabel Y must have shape (n_samples, n_labels), got {Y.shape}")
        return int(Y.shape[1])
    if Y.ndim != 1 or Y.dtype.kind not in "iu" or Y.size == 0:
        raise ValueError(
            f"discrete Y must be a non-empty 1-d array of class indices, got shape {Y.shape}, "
            f"dtype {Y.dtype}"
        )
    n_classes = int(Y.max()) + 1
    if n_classes < 2:
        raise ValueError(f"discrete Y must hold at least 2 classes, got {n_classes}")
    return n_classes


def _check_labels(Y: Any, family: str, n_rows: int, n_actions: int | None) -> np.ndarray:
    """Return Y as int64, checking its shape against X and the family (class range, 0/1)."""
    Y = np.asarray(Y)
    if Y.shape[:1] != (n_rows,):
        raise ValueError(f"Y has {Y.shape[0] if Y.ndim else 0} rows but X has {n_rows}")
    if Y.dtype.kind not in "biuf":
        raise ValueError(f"Y must be numeric, got dtype {Y.dtype}")
    if family == "multilabel":
        if Y.ndim != 2 or Y.shape[1] != n_actions:
            raise ValueError(f"multilabel Y must have shape ({n_rows}, {n_actions}), got {Y.shape}")
        bad, what = np.any((Y != 0) & (Y != 1), axis=1), "have entries other than 0/1"
    elif Y.ndim != 1:
        raise ValueError(f"discrete Y must be 1-d class indices, got shape {Y.shape}")
    else:
        bad = (Y < 0) | (Y >= n_actions) | (Y != np.round(Y))
        what = f"are not class indices in 0..{n_actions - 1}"
    if bad.any():
        raise ValueError(
            f"Y: {int(bad.sum())} of {n_rows} rows {what}; "
            f"first rows: {np.flatnonzero(bad)[:5].tolist()}"
        )
    return Y.astype(np.int64)


def supervised_loss(actions: Any, truth: Any, family: str) -> np.ndarray:
    r"""Feedback of the supervised → bandit conversion (paper §6).

    .. math:: \Delta(y^*, y) = \sum_l |y^*_l - y_l| \;\text{(multilabel)}, \quad
              \Delta(y^*, y) = [y \ne y^*] \;\text{(discrete)}

    where y* is the true label (vector) and y the chosen action.

    Parameters
    ----------
    actions : array-like of shape (n_samples,) or (n_samples, n_labels)
        Chosen actions y.
    truth : array-like of the same shape
        True labels y*.
    family : {"discrete", "multilabel"}
        Action structure.

    Returns
    -------
    ndarray of shape (n_samples,)
        Hamming loss (multilabel) or 0/1 loss (discrete) per row.
    """
    if family == "multilabel":
        return expected_hamming_loss(actions, truth)
    return (np.asarray(actions) != truth).astype(np.float64)


def _fit_per_label(X: Any, Y: np.ndarray, fit_intercept: bool) -> tuple[np.ndarray, list[int]]:
    """One L2 logistic regression per label; rows (q, d [+1]) with the intercept last.

    Constant labels are smoothed as described in :func:`fit_logging_policy`.
    """
    n, q = Y.shape
    coef = np.zeros((q, X.shape[1] + int(fit_intercept)))
    constant: list[int] = []
    for label in range(q):
        y = Y[:, label]
        k = int(y.sum())
        if k in (0, n):
            constant.append(label)
            if fit_intercept:
                coef[label, -1] = float(logit((k + 0.5) / (n + 1.0)))
            continue
        model = LogisticRegression(fit_intercept=fit_intercept, **_LOGREG).fit(X, y)
        coef[label, : X.shape[1]] = model.coef_[0]
        if fit_intercept:
            coef[label, -1] = model.intercept_[0]
    return coef, constant


def _fit_multinomial(
    X: Any, y: np.ndarray, n_classes: int, fit_intercept: bool
) -> tuple[np.ndarray, list[int]]:
    """Multinomial logistic regression; rows (K, d [+1]) with the intercept last.

    Each class absent from ``y`` gets one pseudo-example with an all-zero context.
    """
    absent = [k for k in range(n_classes) if not np.any(y == k)]
    if absent:
        if sp.issparse(X):
            X = sp.vstack([X, sp.csr_matrix((len(absent), X.shape[1]))], format="csr")
        else:
            X = np.vstack([X, np.zeros((len(absent), X.shape[1]))])
        y = np.concatenate([y, np.asarray(absent, dtype=y.dtype)])
    model = LogisticRegression(fit_intercept=fit_intercept, **_LOGREG).fit(X, y)
    weights = np.hstack([model.coef_, model.intercept_[:, None]]) if fit_intercept else model.coef_
    if n_classes == 2:  # scikit-learn keeps one row w for two classes: softmax([0, w·x]) = σ(w·x)
        weights = np.vstack([np.zeros_like(weights), weights])
    return weights, absent


def _digest(coef: np.ndarray, temperature: float) -> str:
    digest = hashlib.sha256(np.ascontiguousarray(coef, dtype=np.float64).tobytes())
    digest.update(np.float64(temperature).tobytes())
    return digest.hexdigest()[:12]
