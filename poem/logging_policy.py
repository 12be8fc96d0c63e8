r"""Estimating the logging policy π₀ of a log that recorded no propensities.

Many systems log (x, y, δ) but not p = π₀(y|x): a rules engine, a ranker someone else runs, a
history export. :func:`estimate_propensities` fits π̂₀(a|x) on the log's own contexts and
actions and returns, for every row, a **cross-fitted** estimate: the model that scores row i
was fitted on the other folds only, so p̂ᵢ does not reuse yᵢ (Chernozhukov et al. 2018).

.. math::

    \hat p_i = \hat\pi_0^{(-k(i))}(y_i \mid x_i)

where k(i) is the fold of row i and π̂₀^{(−k)} the model fitted without fold k:

- discrete: multinomial logistic regression (default; its L2 strength chosen by held-out log
  loss inside each training fold) or calibrated gradient boosting over the K actions;
- multilabel: one model per label, in product form
  π̂₀(y|x) = Π_l σ̂_l(x)^{y_l} (1 − σ̂_l(x))^{1−y_l} (DESIGN §4.7);
- candidates: a conditional logit over each row's own candidates,
  π̂₀(c|i) = exp(θ·ψ_{i,c}) / Σ_{c'} exp(θ·ψ_{i,c'}), fitted by penalised maximum likelihood.

Every model probability is Laplace-smoothed, p̃ = (n_train·p + 1)/(n_train + K), so no
estimate is below 1/(n_train + K) and an action a training fold never saw gets exactly that;
the rule is part of the model and recorded in its provenance.

:class:`LoggerDiagnostics` says how far to trust the estimate: held-out log loss and Brier
score against the marginal action frequencies (is there anything to learn?), a reliability
table, the smallest estimates and the effective sample size they imply for the uniform
policy, actions the logger (nearly) never takes, and the fraction of rows on which the
logger looks deterministic. :func:`check_stochastic_logger` refuses a (nearly)
deterministic logger: without overlap nothing can be learnt off-policy.

What an estimate does **not** give: the unbiasedness of IPS, which holds for the true
propensities only. Estimators built on p̂ inherit the model's error; a doubly robust
estimate is consistent when either the propensity model or the loss model is right.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize
from sklearn.base import clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegressionCV
from sklearn.model_selection import KFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.tree import DecisionTreeClassifier
from sklearn.utils import check_random_state

from poem.data import FAMILIES, CandidateSets, LoggedBandit
from poem.exceptions import InvalidLogError, Violation
from poem.policies.candidates import segment_logsumexp

__all__ = [
    "MODELS",
    "EstimatedPropensities",
    "LoggerDiagnostics",
    "check_stochastic_logger",
    "estimate_log_propensities",
    "estimate_propensities",
]

MODELS = ("logistic", "boosting")
_N_BINS = 10
# inverse L2 strengths searched by inner 3-fold CV on held-out log loss; the smallest makes the
# model (nearly) the marginal action frequencies, so a context-free logger is not overfitted
_CS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
_MAX_PAIRS = 2_000_000  # (row, action) pairs kept for the reliability table


@dataclass(frozen=True)
class LoggerDiagnostics:
    """How far an estimated logging policy can be trusted (all figures held out).

    Attributes
    ----------
    family : str
        Policy family of the log.
    n_rows : int
        Rows n.
    n_actions : int or None
        Actions K (discrete) or labels q (multilabel); None for candidate sets.
    log_loss : float
        Mean of −log p̂ᵢ over the rows (cross-fitted).
    marginal_log_loss : float
        The same for the marginal action frequencies of the training folds (uniform within a
        row's candidates for candidate sets): what a model that ignores x achieves.
    brier : float
        Mean over rows of Σ_a (π̂₀(a|xᵢ) − 1[a = yᵢ])² (per label, averaged, for multilabel).
    marginal_brier : float
        The same for the marginal frequencies.
    propensity_quantiles : dict
        ``min``, ``p01``, ``p10``, ``p50`` of p̂.
    uniform_effective_sample_size : float or None
        ESS = (Σ wᵢ)² / Σ wᵢ² of the uniform policy's weights wᵢ = u(yᵢ|xᵢ)/p̂ᵢ.
    reliability : tuple of tuple
        Rows (mean predicted π̂₀(a|x), observed frequency of a, number of (row, action)
        pairs), one per bin of equal counts of predicted probabilities.
    near_deterministic_fraction : float
        Fraction of rows with p̂ᵢ ≥ 1 − ε (ε of :func:`estimate_propensities`).
    argmax_agreement : float or None
        Fraction of rows whose logged action is the most probable one of a held-out model:
        the propensity model's, or (discrete) a decision tree's, whichever agrees more (a
        rules engine of thresholds shows up in the tree); None for multilabel.
    rare_actions : tuple of tuple
        (action, largest π̂₀(action|xᵢ) over the rows, times logged) for the actions whose
        largest estimated probability is below ε or that were never logged (discrete).
    """

    family: str
    n_rows: int
    n_actions: int | None
    log_loss: float
    marginal_log_loss: float
    brier: float
    marginal_brier: float
    propensity_quantiles: dict
    uniform_effective_sample_size: float | None
    reliability: tuple
    near_deterministic_fraction: float
    argmax_agreement: float | None = None
    rare_actions: tuple = ()

    @property
    def log_loss_gain(self) -> float:
        """marginal_log_loss − log_loss: > 0 when the contexts tell something about y."""
        return self.marginal_log_loss - self.log_loss

    def metrics(self) -> dict[str, float]:
        """Flat ``propensity_model_*`` metrics (MLflow keys)."""
        out = {
            "propensity_model_log_loss": self.log_loss,
            "propensity_model_marginal_log_loss": self.marginal_log_loss,
            "propensity_model_brier": self.brier,
            "propensity_model_marginal_brier": self.marginal_brier,
            "propensity_model_near_deterministic_fraction": self.near_deterministic_fraction,
        }
        out.update({f"estimated_propensity_{k}": v for k, v in self.propensity_quantiles.items()})
        if self.uniform_effective_sample_size is not None:
            out["estimated_uniform_effective_sample_size"] = self.uniform_effective_sample_size
        return out

    def lines(self) -> list[str]:
        """A short human summary, one finding per line."""
        q = self.propensity_quantiles
        verdict = (
            "the contexts predict the logged action"
            if self.log_loss_gain > 0.01
            else ("the contexts add (almost) nothing: the logger looks context-free")
        )
        out = [
            f"held-out log loss {self.log_loss:.4f} vs {self.marginal_log_loss:.4f} for the "
            f"marginal frequencies ({verdict}); Brier {self.brier:.4f} vs "
            f"{self.marginal_brier:.4f}",
            f"estimated propensities: min {q['min']:.3g}, p01 {q['p01']:.3g}, "
            f"p10 {q['p10']:.3g}, median {q['p50']:.3g}",
            f"near-deterministic rows (p̂ ≥ 1 − ε): {self.near_deterministic_fraction:.1%}",
        ]
        if self.uniform_effective_sample_size is not None:
            out.append(
                f"uniform policy's effective sample size on these estimates: "
                f"{self.uniform_effective_sample_size:,.0f} of {self.n_rows:,}"
            )
        if self.rare_actions:
            shown = ", ".join(
                f"{a} (max p̂ {m:.2g}, logged {c})" for a, m, c in self.rare_actions[:5]
            )
            out.append(f"actions the logger (nearly) never takes: {shown}")
        return out


@dataclass(frozen=True)
class EstimatedPropensities:
    """Cross-fitted propensity estimates p̂ᵢ with their provenance and diagnostics.

    Attributes
    ----------
    propensities : ndarray of shape (n_samples,)
        p̂ᵢ = π̂₀^{(−k(i))}(yᵢ|xᵢ), in (0, 1].
    diagnostics : LoggerDiagnostics
        Held-out quality of the model.
    provenance : dict
        ``propensity_source: "estimated"``, ``model``, ``folds``, ``seed``, ``calibration``,
        ``unseen_action_rule``: what the log's metadata records.
    """

    propensities: np.ndarray
    diagnostics: LoggerDiagnostics
    provenance: dict = field(default_factory=dict)


def _model(model: str, calibration: str | None, random_state: int, sparse: bool = False) -> Any:
    if model == "logistic":
        # scikit-learn 1.9 warns unless the L2-only grid and the new attributes are explicit
        quiet = {"l1_ratios": (0.0,), "use_legacy_attributes": False}
        accepted = inspect.signature(LogisticRegressionCV).parameters
        base: Any = LogisticRegressionCV(
            Cs=_CS,
            cv=3,
            scoring="neg_log_loss",
            max_iter=1000,
            random_state=random_state,
            **{k: v for k, v in quiet.items() if k in accepted},
        )
        # standardized inputs: L-BFGS converges in a fraction of the iterations (raw pixel or
        # count features are badly scaled); sparse inputs are scaled without centring
        base = make_pipeline(StandardScaler(with_mean=not sparse), base)
    else:
        base = HistGradientBoostingClassifier(max_iter=100, random_state=random_state)
    if calibration is None:
        return base
    return CalibratedClassifierCV(base, method=calibration, cv=3)


def _dense_for(model: str, X: Any) -> Any:
    if model == "boosting" and sp.issparse(X):
        return X.toarray()
    return X


def _class_probabilities(est: Any, X: Any, y: np.ndarray, X_out: Any, n_classes: int) -> np.ndarray:
    """P[i, a] for rows X_out from a classifier fitted on (X, y), Laplace-smoothed.

    p̃(a|x) = (n·p(a|x) + 1) / (n + K) with n the training rows: every estimate is at least
    1/(n + K), and a class the training rows never saw gets exactly that.
    """
    seen = np.unique(y)
    P = np.zeros((X_out.shape[0], n_classes))
    if seen.size == 1:
        P[:, seen[0]] = 1.0
    else:
        with warnings.catch_warnings():  # rare actions are reported in the diagnostics
            warnings.filterwarnings("ignore", "The least populated class", UserWarning)
            fitted = clone(est).fit(X, y)
        P[:, fitted.classes_] = fitted.predict_proba(X_out)
    P = (y.size * P / P.sum(axis=1, keepdims=True) + 1.0) / (y.size + n_classes)
    return P


def _folds(n: int, n_folds: int, rng: np.random.RandomState) -> list[np.ndarray]:
    if not 2 <= n_folds <= n:
        raise ValueError(f"n_folds must be between 2 and the number of rows ({n}), got {n_folds}")
    kf = KFold(n_splits=n_folds, shuffle=True, random_state=rng.randint(2**31 - 1))
    return [test for _, test in kf.split(np.zeros(n))]


def _reliability(predicted: np.ndarray, observed: np.ndarray, rng: Any) -> tuple:
    if predicted.size > _MAX_PAIRS:
        keep = rng.choice(predicted.size, _MAX_PAIRS, replace=False)
        predicted, observed = predicted[keep], observed[keep]
    order = np.argsort(predicted, kind="stable")
    rows = []
    for chunk in np.array_split(order, _N_BINS):
        if chunk.size:
            rows.append(
                (float(predicted[chunk].mean()), float(observed[chunk].mean()), int(chunk.size))
            )
    return tuple(rows)


def _quantiles(p: np.ndarray) -> dict:
    return {
        "min": float(p.min()),
        "p01": float(np.quantile(p, 0.01)),
        "p10": float(np.quantile(p, 0.1)),
        "p50": float(np.quantile(p, 0.5)),
    }


def _ess(w: np.ndarray) -> float:
    return float(w.sum() ** 2 / np.sum(w**2))


def _discrete(X, y, n_actions, folds, est, epsilon, rng):
    n = y.size
    P = np.empty((n, n_actions))
    M = np.empty((n, n_actions))
    tree_hits = np.empty(n, dtype=bool)
    tree = DecisionTreeClassifier(min_samples_leaf=5, random_state=0)
    for test in folds:
        train = np.setdiff1d(np.arange(n), test)
        P[test] = _class_probabilities(est, X[train], y[train], X[test], n_actions)
        tree_hits[test] = clone(tree).fit(X[train], y[train]).predict(X[test]) == y[test]
        counts = np.bincount(y[train], minlength=n_actions) + 1.0
        M[test] = counts / counts.sum()
    rows = np.arange(n)
    p, m = P[rows, y], M[rows, y]
    onehot = np.zeros_like(P)
    onehot[rows, y] = 1.0
    counts = np.bincount(y, minlength=n_actions)
    largest = P.max(axis=0)
    rare = tuple(
        (int(a), float(largest[a]), int(counts[a]))
        for a in np.argsort(largest)
        if largest[a] < epsilon or counts[a] == 0
    )
    stats = {
        "brier": float(np.mean(np.sum((P - onehot) ** 2, axis=1))),
        "marginal_brier": float(np.mean(np.sum((M - onehot) ** 2, axis=1))),
        "reliability": _reliability(P.ravel(), onehot.ravel(), rng),
        "uniform_ess": _ess(1.0 / (n_actions * p)),
        "argmax": max(float(np.mean(P.argmax(axis=1) == y)), float(tree_hits.mean())),
        "rare": rare,
    }
    return p, m, stats


def _multilabel(X, Y, folds, est, rng):
    n, q = Y.shape
    S = np.empty((n, q))  # σ̂_l(xᵢ), cross-fitted
    F = np.empty((n, q))  # training-fold label frequencies (Laplace)
    for test in folds:
        train = np.setdiff1d(np.arange(n), test)
        for label in range(q):
            S[test, label] = _class_probabilities(est, X[train], Y[train, label], X[test], 2)[:, 1]
        F[test] = (Y[train].sum(axis=0) + 1.0) / (train.size + 2.0)

    def joint(prob: np.ndarray) -> np.ndarray:
        return np.exp(np.sum(np.log(np.where(Y == 1, prob, 1.0 - prob)), axis=1))

    stats = {
        "brier": float(np.mean((S - Y) ** 2)),
        "marginal_brier": float(np.mean((F - Y) ** 2)),
        "reliability": _reliability(S.ravel(), Y.ravel().astype(float), rng),
        "uniform_ess": None,
        "argmax": None,
        "rare": (),
    }
    return joint(S), joint(F), stats


def _conditional_logit(psi: Any, offsets: np.ndarray, logged: np.ndarray, l2: float) -> np.ndarray:
    """θ maximising Σᵢ log softmax_i(θ·ψ)[yᵢ] − (l2/2)‖θ‖² (L-BFGS)."""
    starts = offsets[:-1]
    sizes = np.diff(offsets)
    chosen = psi[starts + logged]

    def objective(theta):
        s = np.asarray(psi @ theta).ravel()
        lse = segment_logsumexp(s, offsets)
        prob = np.exp(s - np.repeat(lse, sizes))
        value = -(np.sum(s[starts + logged]) - np.sum(lse)) + 0.5 * l2 * theta @ theta
        grad = np.asarray(psi.T @ prob).ravel() - np.asarray(chosen.sum(axis=0)).ravel()
        return value, grad + l2 * theta

    res = minimize(objective, np.zeros(psi.shape[1]), jac=True, method="L-BFGS-B")
    return res.x


def _candidates(cands: CandidateSets, y, folds, rng):
    n = y.size
    sizes = cands.sizes
    p = np.empty(n)
    top = np.empty(n, dtype=bool)
    pair_pred, pair_obs, brier = [], [], np.empty(n)
    for test in folds:
        train = np.setdiff1d(np.arange(n), test)
        tr = cands.take(train)
        theta = _conditional_logit(tr.features, tr.offsets, y[train], l2=1.0)
        te = cands.take(test)
        s = np.asarray(te.features @ theta).ravel()
        prob = np.exp(s - np.repeat(segment_logsumexp(s, te.offsets), te.sizes))
        hit = np.zeros_like(prob)
        hit[te.offsets[:-1] + y[test]] = 1.0
        p[test] = prob[te.offsets[:-1] + y[test]]
        brier[test] = np.add.reduceat((prob - hit) ** 2, te.offsets[:-1])
        top[test] = p[test] >= np.maximum.reduceat(prob, te.offsets[:-1])
        pair_pred.append(prob)
        pair_obs.append(hit)
    k = sizes.astype(float)
    m = 1.0 / k
    stats = {
        "brier": float(brier.mean()),
        "marginal_brier": float(np.mean((1.0 - 1.0 / k) ** 2 + (k - 1.0) / k**2)),
        "reliability": _reliability(np.concatenate(pair_pred), np.concatenate(pair_obs), rng),
        "uniform_ess": _ess(1.0 / (k * p)),
        "argmax": float(top.mean()),
        "rare": (),
    }
    return p, m, stats


def estimate_propensities(
    contexts: Any,
    actions: Any,
    *,
    family: str = "discrete",
    n_actions: int | None = None,
    candidates: CandidateSets | None = None,
    model: str = "logistic",
    calibration: str | None = "auto",
    n_folds: int = 5,
    epsilon: float = 0.01,
    random_state: Any = None,
) -> EstimatedPropensities:
    r"""Cross-fitted estimates p̂ᵢ = π̂₀^{(−k(i))}(yᵢ|xᵢ) of a log's propensities.

    .. math:: \hat p_i = \hat\pi_0^{(-k(i))}(y_i \mid x_i)

    where k(i) is row i's fold and π̂₀^{(−k)} the model fitted on the other folds (module
    docstring: the model of each family and the unseen-action rule).

    Parameters
    ----------
    contexts : array-like or sparse matrix of shape (n_samples, n_features) or None
        Contexts xᵢ (not used for candidate sets).
    actions : array-like of shape (n_samples,) or (n_samples, n_labels)
        Logged actions yᵢ: indices 0..K−1 (discrete), 0/1 vectors (multilabel) or indices into
        the row's candidates.
    family : {"discrete", "multilabel", "candidates"}, default="discrete"
        Policy family.
    n_actions : int or None, default=None
        K for the discrete family; inferred as max(y) + 1 when None.
    candidates : CandidateSets or None, default=None
        Per-row candidate vectors ψ_{i,c}; required for candidate sets.
    model : {"logistic", "boosting"}, default="logistic"
        Multinomial (per-label) logistic regression, or gradient-boosted trees; candidate sets
        take the conditional logit only.
    calibration : {"auto", "sigmoid", "isotonic"} or None, default="auto"
        Calibration of the classifier (scikit-learn's ``CalibratedClassifierCV``, inside each
        training fold); "auto": none for logistic regression, sigmoid for boosting.
    n_folds : int, default=5
        Cross-fitting folds.
    epsilon : float, default=0.01
        ε of the diagnostics: rows with p̂ᵢ ≥ 1 − ε count as near-deterministic, actions whose
        largest estimate is below ε as rarely taken.
    random_state : int, RandomState instance or None, default=None
        Seed of the folds (and of the boosted trees).

    Returns
    -------
    EstimatedPropensities
        The estimates, their provenance and diagnostics.

    Raises
    ------
    ValueError
        For an unknown family, model or calibration, a boosting model for candidate sets,
        bad folds, or actions outside 0..K−1.

    References
    ----------
    Chernozhukov, Chetverikov, Demirer, Duflo, Hansen, Newey & Robins (2018), Double/debiased
    machine learning for treatment and structural parameters, Econometrics J. 21(1), C1–C68,
    DOI:10.1111/ectj.12097, §3 (cross-fitting).
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got {model!r}")
    if calibration not in ("auto", "sigmoid", "isotonic", None):
        raise ValueError(
            f"calibration must be 'auto', 'sigmoid', 'isotonic' or None, got {calibration!r}"
        )
    if not 0.0 < epsilon < 0.5:
        raise ValueError(f"epsilon must be in (0, 0.5), got {epsilon!r}")
    if calibration == "auto":
        calibration = None if model == "logistic" else "sigmoid"
    rng = check_random_state(random_state)
    seed = int(rng.randint(2**31 - 1))
    y = np.asarray(actions)
    if y.dtype.kind not in "biu":
        if y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y)):
            y = y.astype(np.int64)
        else:
            raise ValueError(
                f"actions must be integer indices (map string ids to 0..K-1 first), got {y.dtype}"
            )
    folds = _folds(y.shape[0], n_folds, rng)
    if family == "candidates":
        if model != "logistic":
            raise ValueError(
                "candidate sets are scored by the conditional logit only (model='logistic')"
            )
        if not isinstance(candidates, CandidateSets):
            raise ValueError("the candidates family needs candidates=CandidateSets(...)")
        if np.any((y < 0) | (y >= candidates.sizes)):
            raise ValueError("actions must index into each row's candidates")
        p, m, stats = _candidates(candidates, y.astype(np.int64), folds, rng)
        k = None
    else:
        if contexts is None:
            raise ValueError(f"contexts are required to estimate the {family} logger")
        X = _dense_for(
            model, sp.csr_matrix(contexts) if sp.issparse(contexts) else np.asarray(contexts, float)
        )
        est = _model(model, calibration, seed, sp.issparse(X))
        if family == "discrete":
            k = int(y.max()) + 1 if n_actions is None else int(n_actions)
            if y.ndim != 1 or y.min() < 0 or y.max() >= k:
                raise ValueError(f"discrete actions must be indices in 0..{k - 1}")
            p, m, stats = _discrete(X, y.astype(np.int64), k, folds, est, epsilon, rng)
        else:
            if y.ndim != 2 or not np.isin(y, (0, 1)).all():
                raise ValueError("multilabel actions must be 0/1 vectors of shape (n, q)")
            k = int(y.shape[1])
            p, m, stats = _multilabel(X, y.astype(np.int64), folds, est, rng)
    p = np.clip(p, np.finfo(float).tiny, 1.0)
    diagnostics = LoggerDiagnostics(
        family=family,
        n_rows=int(p.size),
        n_actions=k,
        log_loss=float(-np.mean(np.log(p))),
        marginal_log_loss=float(-np.mean(np.log(m))),
        brier=stats["brier"],
        marginal_brier=stats["marginal_brier"],
        propensity_quantiles=_quantiles(p),
        uniform_effective_sample_size=stats["uniform_ess"],
        reliability=stats["reliability"],
        near_deterministic_fraction=float(np.mean(p >= 1.0 - epsilon)),
        argmax_agreement=stats["argmax"],
        rare_actions=stats["rare"],
    )
    provenance = {
        "propensity_source": "estimated",
        "model": "conditional-logit" if family == "candidates" else model,
        "calibration": calibration or "none",
        "folds": int(n_folds),
        "seed": seed,
        "unseen_action_rule": "laplace",
    }
    return EstimatedPropensities(p, diagnostics, provenance)


def estimate_log_propensities(
    log: LoggedBandit, **options: Any
) -> tuple[LoggedBandit, EstimatedPropensities]:
    r"""The log with its propensities replaced by cross-fitted estimates p̂ᵢ.

    :func:`estimate_propensities` on the log's own contexts (candidate vectors for candidate
    sets) and actions, its family and K; the logged propensities (if any) are not read.

    Parameters
    ----------
    log : LoggedBandit
        The checked log (its ``propensities`` may be a placeholder).
    **options
        ``model``, ``calibration``, ``n_folds``, ``epsilon``, ``random_state`` of
        :func:`estimate_propensities`.

    Returns
    -------
    log : LoggedBandit
        The same rows with ``propensities`` p̂ᵢ (and no ``logging_distribution``: the logged
        one would contradict the estimates).
    estimate : EstimatedPropensities
        The estimates, provenance and diagnostics.
    """
    estimate = estimate_propensities(
        log.contexts,
        log.actions,
        family=log.family,
        n_actions=None if log.family == "candidates" else log.n_actions,
        candidates=log.candidates,
        **options,
    )
    out = replace(log, propensities=estimate.propensities, logging_distribution=None)
    return out, estimate


def check_stochastic_logger(
    estimate: EstimatedPropensities,
    *,
    max_deterministic_fraction: float = 0.95,
    max_argmax_agreement: float = 0.98,
) -> None:
    """Raise when the estimated logger is (nearly) deterministic: no overlap, nothing to learn.

    Two signs, either suffices: most rows have an estimated propensity ≥ 1 − ε, or the logged
    action is the held-out model's most probable action in almost every row (a rule the
    model cannot represent exactly still shows up here).

    Parameters
    ----------
    estimate : EstimatedPropensities
        Output of :func:`estimate_propensities`.
    max_deterministic_fraction : float, default=0.95
        Largest tolerated fraction of rows whose estimated propensity is ≥ 1 − ε.
    max_argmax_agreement : float, default=0.98
        Largest tolerated fraction of rows whose logged action is the model's most probable.

    Raises
    ------
    InvalidLogError
        One violation on column ``action`` with the count of rows that show it.
    """
    d = estimate.diagnostics
    if d.near_deterministic_fraction > max_deterministic_fraction:
        share, what = d.near_deterministic_fraction, "estimated propensity ≥ 1 − ε"
    elif d.argmax_agreement is not None and d.argmax_agreement >= max_argmax_agreement:
        share, what = d.argmax_agreement, "logged action = the model's most probable action"
    else:
        return
    raise InvalidLogError(
        [
            Violation(
                column="action",
                n_invalid=int(round(share * d.n_rows)),
                n_rows=d.n_rows,
                message=f"look chosen by a deterministic logger (held out: {what})",
                hint=(
                    "Off-policy learning needs a stochastic logger: serve with an exploration "
                    "floor for a round, then retrain on those logs"
                ),
            )
        ]
    )
