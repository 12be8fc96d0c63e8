r"""Did the fit learn anything? Doubly robust paired evidence against the best re-tempered champion.

The search ranks fits and champion candidates (the champion re-tempered, no refit,
:mod:`poem.learners.champion_candidates`) by their validation scores, and the lowest of many
noisy estimates is often a fit that is truly worse. Before a fit is served in place of the
best candidate, the two are compared **on the same validation rows** by the doubly robust
estimate Δ̂ of their difference (:func:`learning_evidence`), unbiased for R(π_f) − R(π_c)
when the propensities are right, whatever the loss model.

**Both halves must agree.** The fit was *selected* on these rows, and the selection leaks
into Δ̂'s weighted residual term (a fit whose weights fall on rows with low realised losses
is both selected and low there), while the model term
:math:`m_i = \hat v_i(\pi_f) - \hat v_i(\pi_c)` depends on the contexts only (cross-fitted
predictions); on a sparse-label synthetic set the DR bound alone served fits that were truly
worse (README). So the fit is served only when both one-sided upper bounds at level 1 − γ are < 0:

.. math::

    \hat\Delta + t_{1-\gamma,\,n_v-1}\,\widehat{se} < 0
    \quad\text{and}\quad
    \bar m + t_{1-\gamma,\,n_v-1}\,\widehat{se}_m < 0.

This intersection–union test can only turn a "shown" into "not shown", so the chance of
serving a fit that is not better stays at most that of the DR bound alone. The model term's
standard error treats the cross-fitted predictions as fixed, so its bound is a necessary
agreement, not a test on its own.

**Rows that share a context are not independent.** When several validation rows come from one
context (a user's repeated sessions; the replays of a supervised example in
``benchmarks/paper_multilabel.py``), their terms are correlated, the model term exactly so (it
depends on the context only), and the row-wise standard error is too small. ``groups`` gives
each row its cluster; the standard errors are then cluster-robust (Liang & Zeger 1986) and the t
quantile has G − 1 degrees of freedom for G clusters:

.. math:: \widehat{se}^2 = \frac{G}{G-1}\,\frac{1}{n_v^2}\sum_g \Big(\sum_{i\in g}
          (t_i - \bar t)\Big)^2,

which equals the row-wise s²/n_v when every row is its own cluster.

**Weights that do not cover the rows.** Both bounds rest on the normal approximation of
weighted terms, and a fit far from the logger can put most of its mass on actions the
validation rows never logged: its weights are then small on every row seen, the heavy ones
unseen, and the estimate of that mass is the loss model's alone, which nothing on these rows
checks. One quantity has a mean known exactly: every policy's weights average 1 under the
logger, the joint rᵢ = π(yᵢ|xᵢ)/pᵢ and, for a known multilabel logger, the per-label mᵢ
(:func:`poem.estimators.marginal.marginal_weights`). A mean weight shown below 1 measures the
share of the policy's mass the rows did not see; valued at the loss range, the fit's is added
to the DR bound (pessimism for the unseen share only):

.. math::

    \hat\Delta + t_{1-\gamma,\,G-1}\,\widehat{se}
    + (\delta_{\max} - \delta_{\min})\,(1 - U_f)_+ < 0,
    \qquad U_f = \max_{\text{weighting}}\; \bar r_f + t_{0.999,\,G-1}\,\widehat{se}_r,

U_f the larger of the fit's joint and per-label bounds. Only the fit is charged: the candidate
is the champion re-tempered, served with the fit's exploration floor, and the mass of it the
rows miss is that floor's uniform share, which the fit has too and which cancels in the paired
difference; charging it as well turned away a sharpening 0.16 better in truth (emotions seed
206: the champion as served had U = 0.994, a penalty of 0.033 against a bound of −0.028).
The null E r̄ = 1 holds for every policy,
so the weights' bound tests the sample, not the policy, and its level is fixed
(:data:`COVERAGE_LEVEL` = 0.999) rather than the comparison's: a policy whose weights cover the
rows pays nothing (at the comparison's own level, ≈ 0.95–0.98, a plain refusal below 1 turned
away 4 true gains in 20 emotions runs, seeds 100–109 and 200–209). Measured (closing note of
stop 47): emotions seed 109, the one default run worse than h₀, has m̄ = 0.09 ± 0.14 and
r̄ = 0.11 ± 0.03 (z −6.6 and −27.7); its shown deficit, 0.47 of the mass at a loss range of 6
labels (penalty 2.81), turns its DR bound −0.16 into +2.66.

The loss model δ̂ is cross-fitted (``n_folds``) on the validation rows together with
``model_log`` (training rows), so no row's prediction comes from a model that saw it
(Chernozhukov et al. 2018): the additive model of :mod:`poem.learners._additive` for
multilabel logs, the ridge model of :func:`poem.estimators.dr.fit_loss_model` otherwise.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats
from sklearn.linear_model import Ridge

from poem.data import LoggedBandit
from poem.estimators._loss_model import cluster_codes
from poem.estimators.dr import LossPredictions, fit_loss_model
from poem.estimators.marginal import check_logger, marginal_weights
from poem.estimators.weights import importance_weights
from poem.learners._additive import fit_additive_loss_model
from poem.learners._trials import Trial, select_trial
from poem.learners.champion_candidates import selected_champion_policy
from poem.learners.prepared import prepare_log
from poem.log_rows import concat_logs

__all__ = [
    "COVERAGE_LEVEL",
    "EvidenceModel",
    "LearningEvidence",
    "confirm_fit",
    "evidence_model",
    "learning_evidence",
    "paired_parts",
    "paired_terms",
    "policy_weights",
    "simultaneous_level",
]


COVERAGE_LEVEL = 0.999  # one-sided level of the weights' bound (module docstring)


@dataclass(frozen=True)
class LearningEvidence:
    """The paired doubly robust comparison of a fit with the best no-learning candidate.

    Attributes
    ----------
    difference : float
        Δ̂ = estimated R(fit) − R(candidate) on the validation rows, in loss units.
    std_error : float
        Standard error of Δ̂ (the per-row differences' sd / √n_v).
    upper : float
        One-sided upper bound Δ̂ + t·se at ``confidence_level``.
    confidence_level : float
        Level of the bound, 1 − γ.
    model_difference : float
        The model term alone, m̄ = mean of v̂ᵢ(fit) − v̂ᵢ(candidate), in loss units.
    model_upper : float
        One-sided upper bound m̄ + t·se_m at ``confidence_level``.
    n_validation : int
        Validation rows compared, n_v.
    n_clusters : int
        Independent clusters among them, G (n_v without ``groups``).
    n_model_rows : int
        Rows the loss model was cross-fitted on (validation and model rows).
    loss_model_r2 : float
        Out-of-fold R² of the loss model on the validation rows' logged losses.
    weight_mean : float
        Mean validation weight of the fit (the weighting with the larger upper bound: joint
        rᵢ, or per-label mᵢ with a known multilabel logger); 1 in expectation.
    weight_std_error : float
        Its (cluster-robust) standard error.
    weight_upper : float
        U_f = weight_mean + t·weight_std_error at :data:`COVERAGE_LEVEL`; < 1 shows the fit's
        weights under-cover the validation rows (module docstring).
    coverage_penalty : float
        (δ_max − δ_min)·(1 − U_f)₊, added to ``upper`` for the decision; 0 when the fit's
        weights cover the rows.
    """

    difference: float
    std_error: float
    upper: float
    confidence_level: float
    model_difference: float
    model_upper: float
    n_validation: int
    n_clusters: int
    n_model_rows: int
    loss_model_r2: float
    weight_mean: float = 1.0
    weight_std_error: float = 0.0
    weight_upper: float = 1.0
    coverage_penalty: float = 0.0

    @property
    def covered(self) -> bool:
        """Whether the fit's weights are not shown to under-cover the rows (no penalty)."""
        return bool(self.coverage_penalty == 0.0)

    @property
    def refused_for_coverage(self) -> bool:
        """Whether the penalty alone keeps the fit out: both bounds < 0, yet not learned."""
        return bool(self.upper < 0.0 and self.model_upper < 0.0 and not self.learned)

    @property
    def learned(self) -> bool:
        """Whether the fit is shown better: upper + coverage_penalty < 0 and model_upper < 0."""
        return bool(self.upper + self.coverage_penalty < 0.0 and self.model_upper < 0.0)

    def to_dict(self) -> dict[str, float]:
        """Flat metrics (the flow logs them with a ``learning_`` prefix)."""
        return {
            **{k: float(v) for k, v in asdict(self).items()},
            "covered": float(self.covered),
            "learned": float(self.learned),
        }


def _model_values(log: LoggedBandit, n: int, n_folds: int, random_state: int, groups=None):
    """(logged δ̂ of the first ``n`` rows, π ↦ v̂ of the first ``n`` rows), in loss units.

    ``groups``: cluster codes of every row of ``log``, whose clusters share a fold; None: rows
    are assigned one by one.
    """
    if log.family == "multilabel":
        prepared = prepare_log(log, fit_intercept=True, standardize_features=True)
        part = prepared.partitions.items[0]
        gc = fit_additive_loss_model(
            part.inputs,
            part.actions,
            part.scaled_losses,
            folds=n_folds,
            random_state=random_state,
            groups=groups,
        )[:n]
        lo, hi = log.loss_bounds
        g, c = gc[:, :-1] * (hi - lo), hi + gc[:, -1] * (hi - lo)  # δ = δ_max + (δ_max − δ_min)δ'
        actions = np.asarray(log.actions[:n], dtype=np.float64)
        return c + np.sum(actions * g, axis=1), lambda marginals: c + np.sum(marginals * g, axis=1)
    full = fit_loss_model(
        log, loss_model=Ridge(alpha=1.0), n_folds=n_folds, random_state=random_state, groups=groups
    )
    end = int(full.offsets[n])
    kept = LossPredictions(full.values[:end], full.offsets[: n + 1], full.logged[:n], n_folds)
    return kept.logged, kept.expected_loss


def _mean_and_se(terms: np.ndarray, groups: np.ndarray | None) -> tuple[float, float]:
    """Mean of ``terms`` and its standard error, row-wise or cluster-robust over ``groups``."""
    mean, n = float(terms.mean()), terms.size
    if groups is None:
        return mean, float(terms.std(ddof=1) / math.sqrt(n))
    sums = np.bincount(groups, weights=terms - mean)
    g = sums.size
    return mean, float(math.sqrt(g / (g - 1) * np.sum(sums**2)) / n)


def _clusters(groups: Any, n: int) -> np.ndarray | None:
    """Dense cluster codes 0..G−1 of the validation rows, or None (every row its own)."""
    if groups is None:
        return None
    labels = np.asarray(groups)
    if labels.shape != (n,):
        raise ValueError(
            f"groups must have one label per validation row ({n}), got shape {labels.shape}"
        )
    codes = cluster_codes(labels)
    if codes.max(initial=0) + 1 < 2:
        raise ValueError("the paired comparison needs at least 2 groups, got 1")
    return codes


@dataclass(frozen=True)
class EvidenceModel:
    """The cross-fitted loss model of one set of validation rows (:func:`evidence_model`).

    Attributes
    ----------
    logged : ndarray of shape (n_v,)
        δ̂(xᵢ, yᵢ) of the logged actions, in loss units.
    expected : callable
        Marginals or probabilities of a policy on the validation rows ↦ v̂ᵢ(π), in loss units.
    clusters : ndarray or None
        Dense cluster codes of the validation rows (None: every row its own).
    n_clusters : int
        G.
    n_model_rows : int
        Rows the loss model was cross-fitted on.
    logger_marginals : ndarray of shape (n_v, q) or None
        π₀,l(1|xᵢ) of the validation rows' logger (multilabel, ``evidence_model(logger=)``):
        :func:`paired_terms` then uses the per-label weights mᵢ; None: the joint rᵢ.
    """

    logged: np.ndarray
    expected: Any
    clusters: np.ndarray | None
    n_clusters: int
    n_model_rows: int
    logger_marginals: np.ndarray | None = None


def evidence_model(
    validation_log: LoggedBandit,
    model_log: LoggedBandit | None = None,
    *,
    n_folds: int = 5,
    random_state: int = 0,
    groups: Any = None,
    logger: Any = None,
) -> EvidenceModel:
    """Cross-fit the loss model of :func:`learning_evidence` once for several comparisons.

    Parameters are :func:`learning_evidence`'s; ``logger`` (the policy that logged the
    multilabel validation rows, checked on every row) makes the comparisons use per-label
    weights (:mod:`poem.estimators.marginal`). Raises ValueError as :func:`learning_evidence`
    does for fewer than 2 validation rows, bad ``groups`` or logs of different families, and
    for a ``logger`` that did not log the rows.
    """
    n = validation_log.n_rows
    if n < 2:
        raise ValueError(f"the paired comparison needs at least 2 validation rows, got {n}")
    clusters = _clusters(groups, n)
    n_clusters = n if clusters is None else int(clusters.max()) + 1
    rows = validation_log
    if model_log is not None and model_log.n_rows:
        if model_log.family != validation_log.family:
            raise ValueError(
                f"model_log is a {model_log.family!r} log, validation_log {validation_log.family!r}"
            )
        rows = concat_logs([validation_log, model_log])
    row_groups = None
    if clusters is not None:  # the model rows are clusters of their own
        row_groups = np.concatenate([clusters, n_clusters + np.arange(rows.n_rows - n)])
    logged, expected = _model_values(rows, n, n_folds, random_state, row_groups)
    base = None if logger is None else check_logger(logger, validation_log, "validation rows")
    return EvidenceModel(logged, expected, clusters, n_clusters, rows.n_rows, base)


def paired_parts(
    fit: Any, candidate: Any, validation_log: LoggedBandit, model: EvidenceModel
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Per-row parts of :func:`paired_terms`: the model gain and the weight differences.

    Returns ``(gain, weights, per_label)``: ``gain[i]`` = v̂ᵢ(π_f) − v̂ᵢ(π_c),
    ``weights[i]`` = r^f_i − r^c_i (joint, π/p) and ``per_label[i]`` = m^f_i − m^c_i
    (:func:`poem.estimators.marginal.marginal_weights`; None without
    ``model.logger_marginals``).
    """
    n = validation_log.n_rows
    gain, weights = np.zeros(n), np.zeros(n)
    per_label = None if model.logger_marginals is None else np.zeros(n)
    for sign, policy in ((1.0, fit), (-1.0, candidate)):
        gain += sign * model.expected(policy.predict_proba(_inputs(validation_log)))
        joint, *marginal = policy_weights(policy, validation_log, model.logger_marginals)
        weights += sign * joint
        if per_label is not None:
            per_label += sign * marginal[0]
    return gain, weights, per_label


def _inputs(log: LoggedBandit) -> Any:
    """What a policy reads of the log's rows: candidate sets, or contexts."""
    return log.candidates if log.family == "candidates" else log.contexts


def policy_weights(
    policy: Any, validation_log: LoggedBandit, logger_marginals: np.ndarray | None = None
) -> list[np.ndarray]:
    """A policy's validation weights, each with mean 1 under the logger: [joint rᵢ, per-label mᵢ].

    The per-label mᵢ (:func:`poem.estimators.marginal.marginal_weights`) only with the
    logger's ``logger_marginals`` π₀,l(1|xᵢ) (:func:`poem.estimators.marginal.check_logger`).
    """
    joint = policy.action_probability(_inputs(validation_log), validation_log.actions)
    out = [importance_weights(joint, validation_log.propensities)]
    if logger_marginals is not None:
        out.append(marginal_weights(policy, logger_marginals, validation_log))
    return out


def paired_terms(
    fit: Any, candidate: Any, validation_log: LoggedBandit, model: EvidenceModel
) -> tuple[np.ndarray, np.ndarray]:
    """Per-row terms of Δ̂ (:func:`learning_evidence`) and of its model term, in loss units.

    Returns ``(terms, gain)``: ``terms[i]`` = v̂ᵢ(π_f) − v̂ᵢ(π_c) + (r^f_i − r^c_i)(δᵢ − δ̂ᵢ),
    ``gain[i]`` = v̂ᵢ(π_f) − v̂ᵢ(π_c). With ``model.logger_marginals`` the terms with the
    per-label weights mᵢ in place of r (:func:`poem.estimators.marginal.marginal_weights`:
    unbiased for a loss additive over labels) are computed too, and the weighting whose terms
    have the smaller (cluster-robust) standard error is returned: a choice by spread, not by
    the estimate. Per-label weights vary less for policies near the logger (a sharpened
    champion, a warm-started fit), joint weights for policies far from it, where rᵢ ≈ 0 on
    most rows and the terms are the model's (measured: emotions, a fit 0.53 better on test,
    s.e. 0.18 joint vs 0.28 per label).
    """
    residual = np.asarray(validation_log.losses, dtype=np.float64) - model.logged
    gain, weights, per_label = paired_parts(fit, candidate, validation_log, model)
    terms = gain + weights * residual
    if per_label is not None:  # the weighting whose terms vary less
        other = gain + per_label * residual
        if _mean_and_se(other, model.clusters)[1] < _mean_and_se(terms, model.clusters)[1]:
            terms = other
    return terms, gain


def simultaneous_level(
    fits: list[Any],
    candidate: Any,
    validation_log: LoggedBandit,
    model: EvidenceModel,
    *,
    confidence_level: float = 0.9,
    n_draws: int = 4000,
    random_state: int = 0,
) -> float:
    r"""The one-sided level whose t quantile bounds all K paired differences at once (max-t).

    The K comparisons of the fits :math:`\pi_1..\pi_K` with one candidate are strongly
    dependent (fits of one grid differ little), so Bonferroni's 1 − γ/K is conservative. With
    :math:`Z_k = (\hat\Delta_k - \Delta_k)/\widehat{se}_k` asymptotically jointly normal with
    the correlation of the per-cluster sums :math:`S_{gk}` of the centred terms, the critical
    value is the 1 − γ quantile of :math:`\max_k Z^*_k`, drawn by the Gaussian multiplier
    bootstrap :math:`Z^*_k = \sum_g \xi_g S_{gk} / \sqrt{\sum_g S_{gk}^2}`, ξ_g ~ N(0, 1)
    (Chernozhukov, Chetverikov & Kato 2013; the single-step max-T of Westfall & Young 1993).
    Then every :math:`\Delta_k \le \hat\Delta_k + c\,\widehat{se}_k` holds together with
    probability ≈ 1 − γ, whichever fit the validation rows rank first; c is the larger of the
    DR terms' and the model terms' critical values (each half of the intersection–union test
    is simultaneous on its own), returned as the level L = Φ(c) that
    :func:`learning_evidence` is then called at (its t quantile with G − 1 degrees of freedom
    is ≥ c: small G stays conservative). K = 1 gives
    ``confidence_level`` (up to the draws); K independent fits about Šidák's 1 − γ/K.

    Parameters
    ----------
    fits : list of StochasticPolicy
        The fits as served (duplicates are harmless: perfectly correlated).
    candidate : StochasticPolicy
        The champion candidate they are compared with.
    validation_log, model
        The rows and their cross-fitted loss model (:func:`evidence_model`).
    confidence_level : float, default=0.9
        1 − γ, the simultaneous level.
    n_draws : int, default=4000
        Bootstrap draws.
    random_state : int, default=0
        Seed of the draws.

    Returns
    -------
    float
        The per-comparison level, in [``confidence_level``, 1).
    """
    level = float(confidence_level)
    if not fits:
        return level
    clusters = model.clusters
    g = model.n_clusters
    columns = []
    for fit in fits:
        terms, gain = paired_terms(fit, candidate, validation_log, model)
        columns += [terms - terms.mean(), gain - gain.mean()]
    centred = np.column_stack(columns)
    sums = (
        centred
        if clusters is None
        else np.stack([np.bincount(clusters, weights=c, minlength=g) for c in centred.T], axis=1)
    )
    scale = np.sqrt(np.sum(sums**2, axis=0))
    keep = scale > 1e-12 * max(1.0, float(scale.max(initial=0.0)))
    if not keep.any():
        return level
    xi = np.random.default_rng(random_state).standard_normal((n_draws, g))
    draws = (xi @ np.where(keep, sums, 0.0)) / np.where(keep, scale, 1.0)
    c = max(  # the DR bounds (even columns) and the model-term bounds (odd), each simultaneous
        float(np.quantile(np.max(draws[:, part][:, keep[part]], axis=1), level))
        for part in (slice(0, None, 2), slice(1, None, 2))
        if keep[part].any()
    )
    return min(max(level, float(stats.norm.cdf(c))), 1.0 - 1e-12)


def learning_evidence(
    fit: Any,
    candidate: Any,
    validation_log: LoggedBandit,
    model_log: LoggedBandit | None = None,
    *,
    confidence_level: float = 0.95,
    n_folds: int = 5,
    random_state: int = 0,
    groups: Any = None,
    model: EvidenceModel | None = None,
) -> LearningEvidence:
    r"""Doubly robust paired estimate of R(fit) − R(candidate) on the validation rows.

    .. math:: \hat\Delta = \frac{1}{n_v}\sum_i \big[\hat v_i(\pi_f) - \hat v_i(\pi_c)
              + (r^f_i - r^c_i)(\delta_i - \hat\delta(x_i, y_i))\big]

    where :math:`\hat v_i(\pi) = E_{y\sim\pi(\cdot|x_i)} \hat\delta(x_i, y)` is the
    cross-fitted loss model's expected loss of π on row i, r^π_i = π(yᵢ|xᵢ)/pᵢ and δᵢ the logged
    loss (Dudík, Langford & Li 2011, Eq. 2, on the paired difference).

    Parameters
    ----------
    fit : StochasticPolicy
        The fitted challenger, as served.
    candidate : StochasticPolicy
        The best no-learning candidate (the champion re-tempered), as served.
    validation_log : LoggedBandit
        The validation rows both are compared on.
    model_log : LoggedBandit or None, default=None
        More rows of the same log (training rows) the loss model is cross-fitted on beside
        the validation rows; None: the validation rows only.
    confidence_level : float, default=0.95
        Level 1 − γ of the one-sided upper bound, in (0, 1).
    n_folds : int, default=5
        Cross-fitting folds of the loss model, ≥ 2.
    random_state : int, default=0
        Seed of the fold assignment.
    groups : array-like of shape (n_v,) or None, default=None
        Cluster label of each validation row (e.g. a context or user id); rows with one label
        are dependent: the standard errors are cluster-robust with G − 1 degrees of freedom and
        the loss model is cross-fitted by cluster (no row's prediction comes from a model that saw
        its cluster; each ``model_log`` row is a cluster of its own). None: every row is
        independent.
    model : EvidenceModel or None, default=None
        The cross-fitted loss model of these rows (:func:`evidence_model`), shared by several
        comparisons on the same rows; None fits it here from ``model_log``, ``n_folds``,
        ``random_state`` and ``groups``.

    Returns
    -------
    LearningEvidence
        Δ̂, its standard error and upper bound, the model term's mean and upper bound, the
        loss model's out-of-fold R², and the fit's mean validation weight with its bound.

    Raises
    ------
    ValueError
        If the confidence level is not in (0, 1), the validation log has fewer than 2 rows,
        ``groups`` does not label each row or has one label, the two logs differ in family, or
        the loss model cannot be fitted.
    """
    level = float(confidence_level)
    if not 0.0 < level < 1.0:
        raise ValueError(f"confidence_level must be in (0, 1), got {confidence_level!r}")
    if model is None:
        model = evidence_model(
            validation_log, model_log, n_folds=n_folds, random_state=random_state, groups=groups
        )
    n, clusters, n_clusters = validation_log.n_rows, model.clusters, model.n_clusters
    logged = model.logged
    losses = np.asarray(validation_log.losses, dtype=np.float64)
    residual = losses - logged
    terms, gain = paired_terms(fit, candidate, validation_log, model)
    t = float(stats.t.ppf(level, n_clusters - 1))
    mean, se = _mean_and_se(terms, clusters)
    model_mean, model_se = _mean_and_se(gain, clusters)
    ss = float(np.sum((losses - losses.mean()) ** 2))
    t_cover = float(stats.t.ppf(COVERAGE_LEVEL, n_clusters - 1))
    weight_mean, weight_se = max(
        (
            _mean_and_se(w, clusters)
            for w in policy_weights(fit, validation_log, model.logger_marginals)
        ),
        key=lambda m_se: m_se[0] + t_cover * m_se[1],
    )
    weight_upper = weight_mean + t_cover * weight_se
    lo, hi = validation_log.loss_bounds
    deficit = max(0.0, 1.0 - weight_upper)
    return LearningEvidence(
        difference=mean,
        std_error=se,
        upper=mean + t * se,
        confidence_level=level,
        model_difference=model_mean,
        model_upper=model_mean + t * model_se,
        n_validation=n,
        n_clusters=n_clusters,
        n_model_rows=model.n_model_rows,
        loss_model_r2=1.0 - float(np.sum(residual**2)) / ss if ss > 0 else float("nan"),
        weight_mean=weight_mean,
        weight_std_error=weight_se,
        weight_upper=weight_upper,
        coverage_penalty=float(hi - lo) * deficit if deficit > 1e-9 else 0.0,
    )


def confirm_fit(
    fit: Any,
    candidates: list[Trial],
    champion: Any,
    validation_log: LoggedBandit,
    model_log: LoggedBandit | None = None,
    *,
    scoring: str,
    min_effective_sample_size: float = 0.0,
    exploration_floor: float | None = None,
    confidence_level: float = 0.9,
    groups: Any = None,
    model: EvidenceModel | None = None,
) -> tuple[int, LearningEvidence]:
    """The best champion candidate and the evidence that ``fit`` beats it (confirm-learning).

    The candidate is the search's own choice among ``candidates``
    (:func:`~poem.learners._trials.select_trial` with ``scoring`` and the ESS guard), served as
    :func:`~poem.learners.champion_candidates.selected_champion_policy`; the evidence is
    :func:`learning_evidence` of ``fit`` against it (``groups``: its cluster labels of the
    validation rows). The fit is served when ``evidence.learned``, else that candidate.

    Returns
    -------
    reference : int
        Position of the best candidate in ``candidates``.
    evidence : LearningEvidence
        R(fit) − R(candidate) on the validation rows, with its one-sided bound.
    """
    reference = select_trial(
        candidates, scoring, min_effective_sample_size=min_effective_sample_size
    )
    candidate = selected_champion_policy(candidates[reference].params, champion, exploration_floor)
    evidence = learning_evidence(
        fit,
        candidate,
        validation_log,
        model_log,
        confidence_level=confidence_level,
        groups=groups,
        model=model,
    )
    return reference, evidence
