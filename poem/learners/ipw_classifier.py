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

**Multilabel, per label.** A multilabel log records the joint propensity pᵢ of the label
vector yᵢ only. The factorized policy's log-likelihood decomposes,
log π(y|x) = Σ_l log π_l(y_l|x) (DESIGN §4.7), so the weighted likelihood
Σᵢ ωᵢ log π(yᵢ|xᵢ) with the shared row weight ωᵢ = rᵢ/pᵢ is q independent weighted logistic
regressions, one per label l, of the logged bits y_il on xᵢ (rᵢ = (q − δᵢ)/q for the Hamming
loss δᵢ ∈ [0, q]):

.. math:: \min_{w_l} \; \sum_i \omega_i\,\big(-\log \pi_{w_l}(y_{il}|x_i)\big)
          + \frac{1}{2C}\,\lVert w_l\rVert^2, \qquad l = 1, \dots, q.

A label whose weighted bits are constant gets no coefficients and the intercept of its
smoothed weighted mean.

**Clip.** The joint propensities of a multilabel log span orders of magnitude, so ωᵢ is
dominated by a few rows. ``clip`` (POEM's rule, :func:`~poem.learners.poem.resolve_clip`)
floors the propensities at p₍₉₀₎/M, i.e. ωᵢ = rᵢ / max(pᵢ, p₍₉₀₎/M): with ``"p90/p10"`` the
floor is p₍₁₀₎, and no row weighs more than M times a typical row of the same reward.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator
from sklearn.linear_model import LogisticRegression

from poem.data import LoggedBandit
from poem.learners.poem import resolve_clip
from poem.policies import StochasticPolicy, make_family

__all__ = ["FAMILIES", "IPWClassifier", "fit_ipw_classifier", "ipw_weights"]

FAMILIES = ("discrete", "multilabel")  # the log families the reduction fits


def ipw_weights(log: LoggedBandit, clip: float | str | None = None) -> np.ndarray:
    """rᵢ/max(pᵢ, p₍₉₀₎/M) with rᵢ = (δ_max − δᵢ)/(δ_max − δ_min), scaled to mean 1.

    ``clip`` is M (:func:`~poem.learners.poem.resolve_clip`; None: no floor, rᵢ/pᵢ).
    """
    lo, hi = (float(v) for v in log.loss_bounds)
    if not hi > lo:
        raise ValueError(f"loss_bounds must have δ_max > δ_min, got {log.loss_bounds!r}")
    reward = (hi - np.asarray(log.losses, dtype=np.float64)) / (hi - lo)
    propensities = np.asarray(log.propensities, dtype=np.float64)
    m = resolve_clip(clip, propensities)
    if np.isfinite(m):
        propensities = np.maximum(propensities, np.percentile(propensities, 90) / m)
    weights = reward / propensities
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
    clip: float | str | None = None,
) -> StochasticPolicy:
    """Fit the IPW-weighted logistic regression of the logged actions (or labels, per label).

    Parameters
    ----------
    log : LoggedBandit
        A discrete or multilabel log (contexts, actions, losses, propensities).
    C : float, default=1.0
        Inverse L2 strength (scikit-learn's ``C``) on standardized features, with the weights
        scaled to mean 1.
    fit_intercept : bool, default=True
        An intercept per action (the last coefficient column).
    max_iter : int, default=1000
        L-BFGS iterations of scikit-learn's solver.
    temperature, exploration_floor : float
        Serving settings of the returned policy (α and ε).
    clip : {"p90/p10", "max/min"}, float or None, default=None
        M of the propensity floor p₍₉₀₎/M of the weights (module docstring; None: none).

    Returns
    -------
    StochasticPolicy
        Coefficients of shape (n_actions or q labels, n_features [+1]) in raw feature units;
        metadata ``learner = "ipw_classifier"`` and ``C``.

    Raises
    ------
    ValueError
        If the log is neither discrete nor multilabel, ``C`` is not > 0, or every reward is 0.
    """
    if log.family not in FAMILIES:
        raise ValueError(
            f"fit_ipw_classifier needs a discrete or multilabel log, got a {log.family!r} one; "
            "drop ipw_classifier from search.candidates"
        )
    check_C(C)
    weights = ipw_weights(log, clip)
    X = log.contexts
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    mean, scale = X.mean(axis=0), X.std(axis=0)
    scale[scale == 0] = 1.0
    if not fit_intercept:  # no intercept to absorb a centering: scale only
        mean = np.zeros_like(mean)
    Z = (X - mean) / scale
    if log.family == "multilabel":
        coef, intercept = _per_label(
            Z, np.asarray(log.actions), weights, C, fit_intercept, max_iter
        )
        return _policy(
            log, coef, intercept, mean, scale, fit_intercept, temperature, exploration_floor, C
        )
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
    return _policy(
        log, coef, intercept, mean, scale, fit_intercept, temperature, exploration_floor, C
    )


def check_C(C: object) -> None:
    """Raise ValueError unless ``C`` is a finite number > 0."""
    if isinstance(C, bool) or not (isinstance(C, int | float) and np.isfinite(C) and C > 0):
        raise ValueError(f"C must be a finite number > 0, got {C!r}")


def _per_label(Z, Y, weights, C, fit_intercept, max_iter) -> tuple[np.ndarray, np.ndarray]:
    """One weighted logistic regression per label bit (module docstring); (q, d) and (q,)."""
    Y = Y.toarray() if sp.issparse(Y) else np.asarray(Y)
    Y = (Y > 0).astype(int)
    keep = weights > 0
    Z, Y, weights = Z[keep], Y[keep], weights[keep]
    q = Y.shape[1]
    coef, intercept = np.zeros((q, Z.shape[1])), np.zeros(q)
    total = float(weights.sum())
    for label in range(q):
        y = Y[:, label]
        ones = float(weights[y == 1].sum())
        if ones == 0.0 or ones == total:  # constant weighted bits: the smoothed weighted mean
            share = (ones + 0.5) / (total + 1.0)
            intercept[label] = np.log(share / (1.0 - share)) if fit_intercept else 0.0
            continue
        model = LogisticRegression(C=float(C), fit_intercept=fit_intercept, max_iter=max_iter)
        model.fit(Z, y, sample_weight=weights)
        coef[label] = model.coef_[0]
        intercept[label] = model.intercept_[0] if fit_intercept else 0.0
    return coef, intercept


def _policy(log, coef, intercept, mean, scale, fit_intercept, temperature, floor, C):
    """The fit in raw feature units as a policy of the log's family."""
    raw = coef / scale  # w·(x − μ)/s = (w/s)·x − (w/s)·μ
    bias = intercept - raw @ mean
    weights_out = np.hstack([raw, bias[:, None]]) if fit_intercept else raw
    family = make_family(log.family, raw.shape[1], raw.shape[0], fit_intercept)
    return StochasticPolicy(
        family,
        weights_out,
        temperature=float(temperature),
        exploration_floor=float(floor),
        metadata={"learner": "ipw_classifier", "C": float(C)},
    )


class IPWClassifier(BaseEstimator):
    """:func:`fit_ipw_classifier` as an estimator the search runs like POEM (``policy_``).

    Parameters are :func:`fit_ipw_classifier`'s. After :meth:`fit`: ``policy_``, and the
    diagnostics :func:`~poem.learners.search.run_trial` records (``objective_``: the weighted
    mean log loss of the logged actions; ``n_iter_``; ``converged_``; no clip, no variance
    penalty).
    """

    families = FAMILIES  # the log families it fits (the pipeline's config check)

    def __init__(
        self,
        C: float = 1.0,
        fit_intercept: bool = True,
        max_iter: int = 1000,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
        clip: float | str | None = None,
    ) -> None:
        self.C = C
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.temperature = temperature
        self.exploration_floor = exploration_floor
        self.clip = clip

    def validate_params(self) -> IPWClassifier:
        """Check the hyperparameters without data (the pipeline's config check); return self.

        Raises
        ------
        ValueError, TypeError
            For a bad ``C``, ``max_iter``, ``temperature``, ``exploration_floor`` or ``clip``.
        """
        check_C(self.C)
        if isinstance(self.max_iter, bool) or not (
            isinstance(self.max_iter, int) and self.max_iter >= 1
        ):
            raise ValueError(f"max_iter must be an integer >= 1, got {self.max_iter!r}")
        if not isinstance(self.fit_intercept, bool):
            raise TypeError(f"fit_intercept must be true or false, got {self.fit_intercept!r}")
        t, e = self.temperature, self.exploration_floor
        if isinstance(t, bool) or not (isinstance(t, int | float) and np.isfinite(t) and t > 0):
            raise ValueError(f"temperature must be a finite number > 0, got {t!r}")
        if isinstance(e, bool) or not (isinstance(e, int | float) and 0.0 <= e < 0.5):
            raise ValueError(f"exploration_floor must be in [0, 0.5), got {e!r}")
        resolve_clip(self.clip, np.ones(1))
        return self

    def fit(self, log: LoggedBandit) -> IPWClassifier:
        """Fit on a discrete or multilabel log; returns self."""
        self.validate_params()
        self.policy_ = fit_ipw_classifier(
            log,
            C=self.C,
            fit_intercept=self.fit_intercept,
            max_iter=self.max_iter,
            temperature=self.temperature,
            exploration_floor=self.exploration_floor,
            clip=self.clip,
        )
        weights = ipw_weights(log, self.clip)
        logp = self.policy_.with_serving(temperature=1.0, exploration_floor=0.0)
        p = logp.action_probability(log.contexts, log.actions)
        self.objective_ = float(np.mean(weights * -np.log(np.maximum(p, 1e-300))))
        self.n_iter_, self.converged_ = 0, True
        self.clip_ = resolve_clip(self.clip, np.asarray(log.propensities, dtype=np.float64))
        self.clipped_fraction_, self.variance_penalty_ = 0.0, 0.0
        return self
