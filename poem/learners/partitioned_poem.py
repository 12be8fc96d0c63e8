r"""POEM's fit and search trial on the training rows of a partitioned log (DESIGN §8).

The log is a partition set split by :func:`poem.partitioned_log.split_partitioned`. What
travels to the client, and why the fit is the in-memory one:

- :func:`prepare_training`: each partition sends its training rows' propensities and scaled
  losses (16 bytes a row; the clip rule and the calibrated λ* are then
  :func:`~poem.learners.poem.resolve_clip` and
  :func:`~poem.learners.poem.calibrated_variance_penalty` on exactly the in-memory values)
  and the count, mean and centred sum of squares of each feature (merged exactly, Chan et
  al. 1979) for the standardization. The standardized training rows are prepared and kept
  *where they live* (optionally replacing the raw ones, :func:`prepare_training`'s
  ``release``).
- :func:`fit_prepared`: every solver step ships w out and the partitions'
  :class:`~poem.learners.objective.CRMStatistics` back (Eq. 13, additive), so L-BFGS sees the
  in-memory J(w) and ∇J(w) up to round-off. AdaGrad runs
  :func:`~poem.learners.partitioned.adagrad_partitioned` (partition by partition: a valid
  Alg. 1 run, but not the in-memory minibatch order).
- :func:`run_trial_partitioned`: fit, then the validation scores from
  :func:`poem.partitioned_log.policy_rows` (probabilities computed where the rows live).

References
----------
Chan, Golub & LeVeque (1979), Updating formulae and a pairwise algorithm for computing sample
variances, Stanford CS Tech. Report STAN-CS-79-773 (the merge of means and sums of squares).
Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (10)–(13) (the CRM statistics).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from poem.exceptions import InvalidLogError, Violation
from poem.learners._lbfgs import lbfgs_statistics
from poem.learners._scaling import FeatureScaling, scaling_from_moments
from poem.learners.partitioned import (
    CRMPartition,
    adagrad_partition_pass,
    adagrad_partitioned,
    epoch_plan,
    partition_statistics,
    reduce_statistics,
)
from poem.learners.poem import initial_coef, resolve_clip
from poem.learners.search import (
    Trial,
    select_temperature,
    trial_from_model,
    validation_scores,
)
from poem.partitioned_log import (
    PartitionedSplit,
    kept_rows,
    policy_rows,
    release_rows,
    take_rows,
)
from poem.policies._base import PolicyFamily, check_serving_params
from poem.policies.stochastic import family_from_log

__all__ = [
    "PreparedTraining",
    "fit_prepared",
    "prepare_training",
    "run_trial_partitioned",
]


# -- fit -----------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class PreparedTraining:
    """Training rows prepared once per (log, rows, fit_intercept, standardize), for every trial.

    Attributes
    ----------
    family : PolicyFamily
        Policy family of the log.
    partitions : partition set
        :class:`~poem.learners.partitioned.CRMPartition` per partition (standardized inputs).
    scaling : FeatureScaling or None
        The standardization (None when not standardizing).
    propensities, scaled_losses : ndarray of shape (n_rows,)
        The training rows' pᵢ and δ'ᵢ (for the clip rule and λ*).
    n_rows, n_features : int
        Training rows and raw features.
    feature_names : tuple or None
        The log's feature names.
    fit_intercept, standardize : bool
        The settings the rows were prepared with.
    """

    family: PolicyFamily
    partitions: Any
    scaling: FeatureScaling | None
    propensities: np.ndarray
    scaled_losses: np.ndarray
    n_rows: int
    n_features: int
    feature_names: Any
    fit_intercept: bool
    standardize: bool


def _fit_header(log: Any, rows: np.ndarray, *, fit_intercept: bool, standardize: bool):
    """Per partition: family, p, δ', distinct actions and the features' moments."""
    if log is None or rows.size == 0:
        return None
    part = log.take(rows)
    family = family_from_log(part, fit_intercept)
    moments = None
    if standardize and family.name != "candidates":
        X = family.inputs_from_log(part)[:, : family.n_features]
        if sp.issparse(X):
            raise ValueError(
                "contexts: sparse inputs are not supported by the partitioned fit with "
                "standardize=True (the dense/sparse choice needs the whole log); set "
                "standardize: false or use the in-memory path"
            )
        X = np.asarray(X, dtype=np.float64)
        mean = X.mean(axis=0)
        moments = (X.shape[0], mean, np.square(X - mean).sum(axis=0), np.square(X).sum(axis=0))
    actions = np.unique(np.asarray(part.actions), axis=0)
    return family, part.propensities, part.scaled_losses(), actions, moments, part.feature_names


def _merged_scaling(moments: list, fit_intercept: bool) -> FeatureScaling:
    """Chan et al.'s merge of per-partition (n, mean, Σ(x − mean)², Σx²) into the scaling."""
    n = np.array([m[0] for m in moments], dtype=np.float64)
    total = n.sum()
    if fit_intercept:  # dense with an intercept: centred, divided by the standard deviation
        means = np.stack([m[1] for m in moments])
        mean = (n[:, None] * means).sum(axis=0) / total
        m2 = sum(m[2] for m in moments) + (n[:, None] * np.square(means - mean)).sum(axis=0)
        return scaling_from_moments(mean, np.sqrt(m2 / total), True)
    second = sum(m[3] for m in moments) / total  # not centred: the root mean square
    return scaling_from_moments(np.zeros(second.size), np.sqrt(second), False)


def _prepare(
    log: Any, rows: np.ndarray, keep: Any = None, *, family: PolicyFamily, scaling: Any
) -> Any:
    """The partition's prepared rows; with ``keep``, also the log reduced to those rows."""
    part = None
    if log is not None and rows.size:
        part = CRMPartition.from_log(log.take(rows), family)
        if scaling is not None:
            inputs = scaling.transform(part.inputs)
            part = CRMPartition(inputs, part.actions, part.scaled_losses, part.propensities)
    if keep is None:
        return part
    return part, take_rows(log, keep)


def prepare_training(
    split: PartitionedSplit,
    *,
    part: str = "train",
    fit_intercept: bool = True,
    standardize: bool = True,
    release: bool = False,
) -> tuple[PreparedTraining, PartitionedSplit]:
    """Prepare the training rows of a partitioned log where they live (module docstring).

    Parameters
    ----------
    split : PartitionedSplit
        The split of the log's partitions.
    part : {"train", "train+validation"}, default="train"
        The rows to train on (``training.refit_on``).
    fit_intercept, standardize : bool, default=True
        As :class:`~poem.learners.poem.POEM`'s parameters.
    release : bool, default=False
        Replace the raw training rows by the prepared ones in the same pass (``part`` must
        be ``"train"``): the partitions then hold each row once, and the returned split has
        ``"train"`` released. ``split`` is consumed.

    Returns
    -------
    prepared : PreparedTraining
    split : PartitionedSplit
        ``split`` itself, or the released one.

    Raises
    ------
    InvalidLogError
        With fewer than 2 training rows or 2 distinct logged actions (as ``POEM.fit``).
    ValueError
        For sparse contexts with ``standardize=True``, or ``release`` with another part.
    """
    if release and part != "train":
        raise ValueError(f"release=True needs part='train', got {part!r}")
    rows = split.rows_for(part)
    source = split.source
    headers = [
        h
        for h in source.map(
            _fit_header, rows, fit_intercept=fit_intercept, standardize=standardize, gather=True
        )
        if h is not None
    ]
    n = int(sum(h[1].size for h in headers))
    n_actions = np.unique(np.concatenate([h[3] for h in headers]), axis=0).shape[0] if n else 0
    if n < 2 or n_actions < 2:
        raise InvalidLogError(
            [
                Violation(
                    "action",
                    0,
                    n,
                    message=f"the training rows of the partitioned log have {n:,} rows and "
                    f"{n_actions} distinct logged actions",
                    hint="POEM needs at least 2 of each",
                )
            ]
        )
    family = headers[0][0]
    scaling = None
    if standardize and family.name != "candidates":
        scaling = _merged_scaling([h[4] for h in headers], family.fit_intercept)
    if release:
        keep = kept_rows(split, "train")
        pairs = source.map(_prepare, rows, keep, family=family, scaling=scaling, consume=True)
        parts = pairs.map(_first)
        split = release_rows(split, "train", pairs.map(_second, consume=True))
    else:
        parts = source.map(_prepare, rows, family=family, scaling=scaling)
    prepared = PreparedTraining(
        family,
        parts,
        scaling,
        np.concatenate([h[1] for h in headers]),
        np.concatenate([h[2] for h in headers]),
        n,
        family.n_features,
        headers[0][5],
        bool(fit_intercept),
        bool(standardize) and scaling is not None,
    )
    return prepared, split


def _first(pair: tuple) -> Any:
    return pair[0]


def _second(pair: tuple) -> Any:
    return pair[1]


def _statistics(part: Any, *, coef: np.ndarray, family: PolicyFamily, clip: float, chunk: Any):
    return partition_statistics(coef, family, part, clip, chunk_size=chunk)


def _adagrad_step(state: Any, part: Any, **kwargs: Any) -> Any:
    return adagrad_partition_pass(state, partition=part, **kwargs)


def fit_prepared(estimator: Any, prepared: PreparedTraining) -> Any:
    """Fit a :class:`~poem.learners.poem.POEM` on prepared partitions (as ``estimator.fit``).

    Same validation, clip rule, λ, warm start, standardization and fitted attributes as
    ``POEM.fit`` on the concatenated training rows; L-BFGS gives its solution up to
    round-off, AdaGrad runs partition by partition (module docstring).

    Parameters
    ----------
    estimator : POEM
        Unfitted estimator (``fit_intercept`` and ``standardize`` must match ``prepared``).
    prepared : PreparedTraining
        From :func:`prepare_training`.

    Returns
    -------
    POEM
        ``estimator``, fitted.

    Raises
    ------
    ValueError
        For invalid hyperparameters, a family other than ``estimator.policy``, or settings
        that differ from the preparation's.
    """
    est = estimator
    est._validate_params()
    family = prepared.family
    if family.name != est.policy:
        raise ValueError(
            f"policy={est.policy!r} but the log's family is {family.name!r}; "
            f"set policy={family.name!r}"
        )
    wanted = (bool(est.fit_intercept), bool(est.standardize) and family.name != "candidates")
    if wanted != (prepared.fit_intercept, prepared.standardize):
        raise ValueError(
            f"fit_intercept={est.fit_intercept}, standardize={est.standardize} but the "
            f"partitions were prepared with {prepared.fit_intercept}, {prepared.standardize}"
        )
    check_serving_params(est.temperature, est.exploration_floor, family.max_exploration_floor)
    coef0 = initial_coef(est.warm_start, family)
    if coef0 is not None and prepared.scaling is not None:
        coef0 = prepared.scaling.from_raw(coef0)
    clip = resolve_clip(est.clip, prepared.propensities)
    lam = est._resolved_variance_penalty(prepared.scaled_losses)
    parts = prepared.partitions

    def statistics(coef: np.ndarray) -> Any:
        kw = dict(coef=coef, family=family, clip=clip, chunk=est.chunk_size)
        return reduce_statistics(parts.map(_statistics, gather=True, **kw))

    start = np.zeros(family.coef_shape) if coef0 is None else np.asarray(coef0, np.float64)
    penalties = dict(variance_penalty=lam, l2_penalty=float(est.l2_penalty))
    if est.solver == "lbfgs":
        result = lbfgs_statistics(
            statistics, start, max_iter=int(est.max_iter), tol=float(est.tol), **penalties
        )
    else:
        seed = int(check_random_state(est.random_state).randint(2**31 - 1))
        step = dict(family=family, clip=clip, n_total=prepared.n_rows, **penalties)
        step["batch_size"] = int(est.batch_size)

        def epoch(state, coefficients, eta, number):
            plan = [(k, {"seed": s}) for k, s in epoch_plan(len(parts), seed, number)]
            return parts.fold(
                _adagrad_step, state, plan, coefficients=coefficients, learning_rate=eta, **step
            )

        result = adagrad_partitioned(
            statistics,
            epoch,
            start,
            learning_rate=est._step_size(prepared.n_rows),  # η, or γ·b/n per epoch
            max_iter=int(est.max_iter if est.max_epochs is None else est.max_epochs),
            tol=float(est.tol),
            **penalties,
        )
    shape = _Shape(prepared.n_rows, prepared.n_features, prepared.feature_names)
    return est._store_fit(result, family, prepared.scaling, clip, lam, coef0, shape)


@dataclass(frozen=True)
class _Shape:
    """What ``POEM._store_fit`` reads of the training log."""

    n_rows: int
    n_features: int
    feature_names: Any


def run_trial_partitioned(
    estimator: Any,
    params: Mapping[str, Any],
    prepared: PreparedTraining,
    split: PartitionedSplit,
    *,
    confidence_level: float = 0.95,
    keep_estimator: bool = False,
    temperatures: Sequence[float] | None = None,
    scoring: str = "ips",
    min_effective_sample_size: float = 0.0,
) -> Trial:
    """:func:`poem.learners.search.run_trial` on partitions: fit, then score on validation.

    Parameters
    ----------
    estimator : POEM
        Template estimator (not modified).
    params : dict
        Hyperparameters of this trial.
    prepared : PreparedTraining
        The prepared training rows (:func:`prepare_training`), shared by the trials.
    split : PartitionedSplit
        The split whose ``validation`` rows score the trial.
    confidence_level : float, default=0.95
        Level of the reported intervals.
    keep_estimator : bool, default=False
        Keep the fitted estimator in ``Trial.estimator``.
    temperatures, scoring, min_effective_sample_size
        The serving-temperature choice of ``run_trial`` (every temperature's probabilities in
        one pass over the validation partitions).

    Returns
    -------
    Trial
        As ``run_trial`` (same scores, up to round-off in the fit).
    """
    model = clone(estimator).set_params(**dict(params))
    begin = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit_prepared(model, prepared)
    seconds = time.perf_counter() - begin
    rows = split.rows_for("validation")
    if temperatures is not None:
        policies = tuple(model.policy_.with_serving(temperature=t) for t in temperatures)
        view, probs = policy_rows(split.source, rows, policies)
        return select_temperature(
            model,
            params,
            temperatures,
            [validation_scores(p, view, confidence_level) for p in probs],
            seconds=seconds,
            scoring=scoring,
            min_effective_sample_size=min_effective_sample_size,
            keep_estimator=keep_estimator,
        )
    view, (probs,) = policy_rows(split.source, rows, (model.policy_,))
    scores = validation_scores(probs, view, confidence_level)
    return trial_from_model(model, params, scores, seconds=seconds, keep_estimator=keep_estimator)
