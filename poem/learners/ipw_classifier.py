r"""The convex reduction: a classifier fitted to the logged actions, weighted by the IPW reward.

For a discrete log with losses δᵢ ∈ [δ_min, δ_max], the reward rᵢ = (δ_max − δᵢ)/(δ_max − δ_min)
∈ [0, 1] and propensities pᵢ, the IPW estimate of a deterministic policy's reward is
(1/n) Σᵢ rᵢ 1[π(xᵢ) = aᵢ]/pᵢ, so maximising it is a weighted classification of the logged
actions aᵢ with weights rᵢ/pᵢ (Zadrozny 2003; Beygelzimer & Langford 2009; OBP's
``IPWLearner``). Replacing the 0/1 loss by the multinomial logistic loss gives the convex
problem

.. math:: \min_w \; \sum_i \frac{r_i}{p_i}\,\big(-\log \pi_w(a_i|x_i)\big)
          + \frac{1}{2C}\,\lVert w\rVert^2,

whose solution is a softmax policy π_w of the same family as POEM's (DESIGN §4), so it is
served, re-tempered and gated like any fit. Rows with reward 0 carry no weight; a class no
weighted row holds gets one pseudo-example with an all-zero context (a small probability).
Features are standardized inside the fit and the coefficients returned in raw units.

Discrete logs only: a multilabel log records the joint propensity of the label vector, not
the per-label propensities the per-label reduction needs.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.linear_model import LogisticRegression

from poem.data import LoggedBandit
from poem.policies import StochasticPolicy, make_family

__all__ = ["IPWClassifier", "fit_ipw_classifier", "ipw_weights"]


def ipw_weights(log: LoggedBandit) -> np.ndarray:
    """rᵢ/pᵢ with rᵢ = (δ_max − δᵢ)/(δ_max − δ_min), scaled to mean 1 over the rows."""
    lo, hi = (float(v) for v in log.loss_bounds)
    if not hi > lo:
        raise ValueError(f"loss_bounds must have δ_max > δ_min, got {log.loss_bounds!r}")
    reward = (hi - np.asarray(log.losses, dtype=np.float64)) / (hi - lo)
    weights = reward / np.asarray(log.propensities, dtype=np.float64)
    total = float(weights.sum())
    if not total > 0:
        raise ValueError(
            f"every one of the {log.n_rows} rows has the worst loss {hi}: the IPW reward is 0 "
            "everywhere, nothing to fit"
        )
    return weights * (weights.size / total)


def fit_ipw_classifier(
    log: LoggedBandit,
    *,
    C: float = 1.0,
    fit_intercept: bool = True,
    max_iter: int = 1000,
    temperature: float = 1.0,
    exploration_floor: float = 0.0,
) -> StochasticPolicy:
    """Fit the IPW-weighted multinomial logistic regression of the logged actions.

    Parameters
    ----------
    log : LoggedBandit
        A discrete log (contexts, actions, losses, propensities).
    C : float, default=1.0
        Inverse L2 strength (scikit-learn's ``C``) on standardized features, with the weights
        scaled to mean 1.
    fit_intercept : bool, default=True
        An intercept per action (the last coefficient column).
    max_iter : int, default=1000
        L-BFGS iterations of scikit-learn's solver.
    temperature, exploration_floor : float
        Serving settings of the returned policy (α and ε).

    Returns
    -------
    StochasticPolicy
        Coefficients of shape (n_actions, n_features [+1]) in raw feature units; metadata
        ``learner = "ipw_classifier"`` and ``C``.

    Raises
    ------
    ValueError
        If the log is not discrete, ``C`` is not > 0, or every reward is 0.
    """
    if log.family != "discrete":
        raise ValueError(
            f"fit_ipw_classifier needs a discrete log, got a {log.family!r} one (a multilabel log "
            "has no per-label propensities)"
        )
    if not (isinstance(C, int | float) and np.isfinite(C) and C > 0):
        raise ValueError(f"C must be a finite number > 0, got {C!r}")
    weights = ipw_weights(log)
    X = log.contexts
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale == 0] = 1.0
    if not fit_intercept:  # no intercept to absorb a centering: scale only
        mean = np.zeros_like(mean)
    Z = (X - mean) / scale
    y = np.asarray(log.actions, dtype=int)
    k = int(log.n_actions)
    keep = weights > 0
    Z, y, weights = Z[keep], y[keep], weights[keep]
    absent = [a for a in range(k) if not np.any(y == a)]
    if absent:  # one pseudo-example each at the mean context, weight 1
        Z = np.vstack([Z, np.zeros((len(absent), Z.shape[1]))])
        y = np.concatenate([y, absent])
        weights = np.concatenate([weights, np.ones(len(absent))])
    model = LogisticRegression(C=float(C), fit_intercept=fit_intercept, max_iter=max_iter)
    model.fit(Z, y, sample_weight=weights)
    coef = np.zeros((k, X.shape[1]))
    intercept = np.zeros(k)
    rows = model.classes_.astype(int)
    if len(rows) == 2:  # scikit-learn keeps one row w for two classes: softmax([0, w·z])
        coef[rows[1]] = model.coef_[0]
        intercept[rows[1]] = model.intercept_[0] if fit_intercept else 0.0
    else:
        coef[rows] = model.coef_
        intercept[rows] = model.intercept_ if fit_intercept else 0.0
    raw = coef / scale  # w·(x − μ)/s = (w/s)·x − (w/s)·μ
    bias = intercept - raw @ mean
    weights_out = np.hstack([raw, bias[:, None]]) if fit_intercept else raw
    family = make_family("discrete", X.shape[1], k, fit_intercept)
    return StochasticPolicy(
        family,
        weights_out,
        temperature=float(temperature),
        exploration_floor=float(exploration_floor),
        metadata={"learner": "ipw_classifier", "C": float(C)},
    )


class IPWClassifier(BaseEstimator):
    """:func:`fit_ipw_classifier` as an estimator the search runs like POEM (``policy_``).

    Parameters are :func:`fit_ipw_classifier`'s. After :meth:`fit`: ``policy_``, and the
    diagnostics :func:`~poem.learners.search.run_trial` records (``objective_``: the weighted
    mean log loss of the logged actions; ``n_iter_``; ``converged_``; no clip, no variance
    penalty).
    """

    def __init__(
        self,
        C: float = 1.0,
        fit_intercept: bool = True,
        max_iter: int = 1000,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> None:
        self.C = C
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.temperature = temperature
        self.exploration_floor = exploration_floor

    def fit(self, log: LoggedBandit) -> IPWClassifier:
        """Fit on a discrete log; returns self."""
        self.policy_ = fit_ipw_classifier(
            log,
            C=self.C,
            fit_intercept=self.fit_intercept,
            max_iter=self.max_iter,
            temperature=self.temperature,
            exploration_floor=self.exploration_floor,
        )
        weights = ipw_weights(log)
        logp = self.policy_.with_serving(temperature=1.0, exploration_floor=0.0)
        p = logp.action_probability(log.contexts, log.actions)
        self.objective_ = float(np.mean(weights * -np.log(np.maximum(p, 1e-300))))
        self.n_iter_, self.converged_ = 0, True
        self.clipped_fraction_, self.clip_, self.variance_penalty_ = 0.0, float("inf"), 0.0
        return self
