r"""Cross-fitted learning evidence: the ranked-first configuration refitted on the training rows.

The validation rows choose the configuration, so their evidence pays for the choice
(:mod:`poem.learners.selection`: 1 − γ/K or the max-t level) and is only as strong as their
clusters are many: yeast has 375 validation contexts, a DR se of ≈ 0.095 and fits ≈ 0.05–0.2
better (closing note of stop 49). The training rows hold three times the contexts, and none of
them chose anything if the configuration is refitted without them. :func:`crossfit_evidence`
splits the training rows into k folds by cluster; for each fold f it refits the configuration
on the other folds, serves it at the temperature the validation rows chose, and computes the
paired doubly robust difference (:func:`~poem.learners.learning_evidence.learning_evidence`)
against the same champion candidate on fold f, with its loss model cross-fitted on fold f and
``model_log`` (the validation rows), never the refit's own rows: a loss model fitted on them
shares their noise with the refit, which learned to pick the actions those rows happened to
reward, and its model term turns optimistic (emotions seed 109: −0.41 with the refit's rows,
−0.22 with the validation rows, for refits 0.0–0.23 worse on test). The folds are pooled,
weighted by their clusters G_f / G:

.. math::

    \hat\Delta_{cv} = \sum_f \frac{G_f}{G}\hat\Delta_f, \qquad
    \widehat{se}_{cv} = \Big(\sum_f \frac{G_f^2}{G^2}\widehat{se}_f^{\,2}\Big)^{1/2},

the folds being disjoint sets of independent clusters; the model term and the mean weight
(and so the coverage penalty) likewise, with t quantiles on Σ_f (G_f − 1) degrees of freedom.
Each fold has its own refit, and an unstable configuration (AdaGrad from zeros served at a low
temperature) gives refits whose true differences differ by more than the folds' standard
errors say (emotions seed 207: +0.43, −0.15 and −0.30 on the folds' own contexts, estimated
+0.07, −0.10 and −0.55 ± 0.14–0.23, pooled −0.19 ± 0.10 though the full fit was 0.22 worse on
test). So each bound is the larger of the within-fold one and the between-fold one,

.. math::

    \hat\Delta_{cv} + \max\Big(t_{1-\gamma,\,\sum_f (G_f-1)}\,\widehat{se}_{cv},\;
    t_{1-\gamma,\,k-1}\,\Big(\frac{\sum_f w_f(\hat\Delta_f-\hat\Delta_{cv})^2}{1-\sum_f w_f^2}
    \sum_f w_f^2\Big)^{1/2}\Big), \qquad w_f = G_f/G,

the second the spread of the folds' estimates themselves (refit instability and estimation
noise together, k − 1 degrees of freedom).
The bound is a test of the *configuration* as refitted on (k − 1)/k of the rows, the usual
cross-validation reading: the served policy is the full fit, which has seen more rows.

``exclude``: training rows no fold is evaluated on (they still train the refits), e.g. rows
the champion itself was fitted on, where it is better than anywhere else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy import stats

from poem.data import LoggedBandit
from poem.estimators._loss_model import group_folds, row_cluster_codes
from poem.learners.learning_evidence import (
    COVERAGE_LEVEL,
    LearningEvidence,
    evidence_model,
    learning_evidence,
)

__all__ = ["crossfit_evidence", "crossfit_folds", "pool_evidence"]


def crossfit_folds(
    n_rows: int, folds: int = 3, groups: Any = None, random_state: int = 0
) -> list[np.ndarray]:
    """Sorted row indices of ``folds`` parts of ``n_rows`` rows, whole clusters (``groups``) each.

    Raises ValueError for fewer than 2 folds, ``groups`` not labelling every row, or fewer than
    2 clusters per fold.
    """
    k = int(folds)
    if k < 2:
        raise ValueError(f"cross-fitted evidence needs at least 2 folds, got {folds!r}")
    codes = row_cluster_codes(n_rows, groups, "training row")
    g = int(codes.max(initial=-1)) + 1
    if g < 2 * k:
        raise ValueError(f"{k} folds need at least {2 * k} training clusters, got {g}")
    row_fold = group_folds(codes, k, random_state)
    return [np.flatnonzero(row_fold == f) for f in range(k)]


def pool_evidence(
    parts: Sequence[LearningEvidence], confidence_level: float, loss_range: float
) -> LearningEvidence:
    """The folds' evidence pooled by clusters (module docstring), at ``confidence_level``.

    ``loss_range``: δ_max − δ_min, the value of the pooled weights' unseen mass.
    """
    if not parts:
        raise ValueError("no folds to pool")
    g = np.array([p.n_clusters for p in parts], dtype=np.float64)
    w = g / g.sum()
    dof = float(np.sum(g - 1))
    t = float(stats.t.ppf(confidence_level, dof))
    t_cover = float(stats.t.ppf(COVERAGE_LEVEL, dof))

    v2 = float(np.dot(w, w))
    t_between = float(stats.t.ppf(confidence_level, len(parts) - 1)) if len(parts) > 1 else np.inf

    def pooled(values, errors):
        return float(np.dot(w, values)), float(math.sqrt(np.dot(w**2, np.square(errors))))

    def half_width(values, se):  # the larger of the within-fold and the between-fold bound
        values = np.asarray(values, dtype=np.float64)
        spread = float(np.dot(w, (values - np.dot(w, values)) ** 2)) / (1.0 - v2)
        return max(t * se, t_between * math.sqrt(spread * v2))

    diff, se = pooled([p.difference for p in parts], [p.std_error for p in parts])
    model_t = [  # each fold's model se, from its bound at its level
        (p.model_upper - p.model_difference) / stats.t.ppf(p.confidence_level, p.n_clusters - 1)
        for p in parts
    ]
    model, model_se = pooled([p.model_difference for p in parts], model_t)
    weight, weight_se = pooled([p.weight_mean for p in parts], [p.weight_std_error for p in parts])
    weight_upper = weight + t_cover * weight_se
    deficit = max(0.0, 1.0 - weight_upper)
    penalty = float(loss_range) * deficit if deficit > 1e-9 else 0.0
    return LearningEvidence(
        difference=diff,
        std_error=se,
        upper=diff + half_width([p.difference for p in parts], se),
        confidence_level=float(confidence_level),
        model_difference=model,
        model_upper=model + half_width([p.model_difference for p in parts], model_se),
        n_validation=int(sum(p.n_validation for p in parts)),
        n_clusters=int(g.sum()),
        n_model_rows=int(sum(p.n_model_rows for p in parts)),
        loss_model_r2=float(np.dot(w, [p.loss_model_r2 for p in parts])),
        weight_mean=weight,
        weight_std_error=weight_se,
        weight_upper=weight_upper,
        coverage_penalty=penalty,
    )


def crossfit_evidence(
    refit: Callable[[LoggedBandit], Any],
    candidate: Any,
    training_log: LoggedBandit,
    *,
    temperature: float | None = None,
    folds: int = 3,
    groups: Any = None,
    exclude: Any = None,
    model_log: LoggedBandit | None = None,
    confidence_level: float = 0.95,
    random_state: int = 0,
    logger: Any = None,
) -> LearningEvidence:
    """R(configuration) − R(candidate), cross-fitted on ``training_log`` (module docstring).

    Parameters
    ----------
    refit : callable
        ``rows ↦ fitted estimator`` (its ``policy_``) of the configuration on a training log.
    candidate : StochasticPolicy
        The champion candidate the validation evidence compares with, as served.
    training_log : LoggedBandit
        The training rows (e.g. the flow's evidence sample of them).
    temperature : float or None, default=None
        Serving temperature of each refit (the validation rows' choice); None: as fitted.
    folds : int, default=3
        k, folds by cluster.
    groups : array-like or None, default=None
        Cluster label of each training row (a context and its replays); None: every row its own.
    exclude : array-like of int or None, default=None
        Training rows no fold is evaluated on (they still train the refits).
    model_log : LoggedBandit or None, default=None
        Rows the loss model is cross-fitted on beside the held fold (the validation rows);
        never the refit's own rows (module docstring). None: the held fold alone.
    confidence_level : float, default=0.95
        Level 1 − γ of the pooled one-sided bounds.
    random_state : int, default=0
        Seed of the folds and of the loss model's cross-fitting.
    logger : StochasticPolicy or None, default=None
        The multilabel rows' known logger (per-label weights, as the validation evidence).

    Raises
    ------
    ValueError
        For bad ``folds`` / ``groups`` (:func:`crossfit_folds`), an ``exclude`` outside the
        rows, or a fold with fewer than 2 clusters left to evaluate on.
    """
    n = training_log.n_rows
    parts = crossfit_folds(n, folds, groups, random_state)
    held_out = np.ones(n, dtype=bool)
    if exclude is not None:
        drop = np.asarray(exclude, dtype=np.int64).ravel()
        if drop.size and (drop.min() < 0 or drop.max() >= n):
            raise ValueError(f"exclude must index the {n} training rows")
        held_out[drop] = False
    labels = None if groups is None else np.asarray(groups)
    out = []
    for f, rows in enumerate(parts):
        rest = np.sort(np.concatenate([p for i, p in enumerate(parts) if i != f]))
        policy = refit(training_log.take(rest)).policy_
        if temperature is not None:
            policy = policy.with_serving(temperature=float(temperature))
        scored = rows[held_out[rows]]
        fold_groups = None if labels is None else labels[scored]
        if (scored.size if labels is None else np.unique(fold_groups).size) < 2:
            raise ValueError(f"fold {f} has fewer than 2 clusters left once rows are excluded")
        held = training_log.take(scored)
        model = evidence_model(
            held,
            model_log,
            groups=fold_groups,
            logger=logger,
            random_state=random_state,
        )
        out.append(
            learning_evidence(
                policy, candidate, held, confidence_level=confidence_level, model=model
            )
        )
    lo, hi = training_log.loss_bounds
    return pool_evidence(out, confidence_level, float(hi - lo))
