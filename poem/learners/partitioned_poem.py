r"""POEM's split, fit, search trial and gate on a log held as partitions (DESIGN §8).

Everything here works on a *partition set* — :class:`poem.io.partitions.LocalPartitions` in
this process, :class:`poem._dask.ClusterPartitions` on a Dask cluster — of
:class:`~poem.data.LoggedBandit` partitions (None when empty), through its ``map`` and
``fold`` only. What travels to the client, and why the result is the in-memory one:

- **split** (:func:`split_partitioned`): each partition sends its row count and timestamps
  (8 bytes a row); the client applies :func:`poem.splits.split_rows` — the rule of
  :func:`~poem.splits.split_log` — to the concatenation and sends each partition its local
  row positions. Same rows as in memory.
- **fit** (:func:`prepare_training`, :func:`fit_prepared`): each partition sends its
  propensities and scaled losses (16 bytes a row; the clip rule and the calibrated λ* are
  then :func:`~poem.learners.poem.resolve_clip` and
  :func:`~poem.learners.poem.calibrated_variance_penalty` on exactly the in-memory values)
  and the count, mean and centred sum of squares of each feature (merged exactly, Chan et
  al. 1979) for the standardization. The standardized training rows are prepared and kept
  *where they live*; every solver step ships w out and the partitions'
  :class:`~poem.learners.objective.CRMStatistics` back (Eq. 13, additive), so L-BFGS sees
  the in-memory J(w) and ∇J(w) up to round-off. AdaGrad runs
  :func:`~poem.learners.partitioned.adagrad_partitioned` (partition by partition; a valid
  Alg. 1 run, but not the in-memory minibatch order).
- **scores and gate** (:func:`policy_rows`, :func:`counterfactual_ab_test_partitioned`): the
  policies' probabilities of the logged actions are computed where the rows live (the
  O(n·d·K) part); the client receives, per row, the loss, the propensity and one
  probability per policy (24–32 bytes a row, in log order) and runs the in-memory functions
  — :func:`poem.learners.search.validation_scores` and :func:`poem.gate.counterfactual_ab_test`
  — on them. The betting bound of the gate is sequential in the rows' order (a capital
  process), so it is not a sum over partitions; it runs on the client over those per-row
  vectors, in the same order as in memory, hence the same decision and metrics.

References
----------
Chan, Golub & LeVeque (1979), Updating formulae and a pairwise algorithm for computing sample
variances, Stanford CS Tech. Report STAN-CS-79-773 (the merge of means and sums of squares).
Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (10)–(13) (the CRM statistics).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state

from poem.exceptions import InvalidLogError, Violation
from poem.gate import counterfactual_ab_test
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
from poem.learners.search import Trial, trial_from_model, validation_scores
from poem.policies._base import PolicyFamily, check_serving_params
from poem.policies.stochastic import family_from_log
from poem.splits import split_rows, split_summary

__all__ = [
    "FixedProbabilities",
    "PartitionedSplit",
    "PreparedTraining",
    "RowsView",
    "counterfactual_ab_test_partitioned",
    "fit_prepared",
    "policy_rows",
    "prepare_training",
    "run_trial_partitioned",
    "split_partitioned",
]

PARTS = ("train", "validation", "test")


# -- split ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class PartitionedSplit:
    """Train / validation / test rows of a partitioned log (row positions per partition).

    Attributes
    ----------
    source : partition set
        The log's partitions (:class:`~poem.data.LoggedBandit` or None each).
    rows : dict
        ``"train"``, ``"validation"``, ``"test"`` → one sorted array of local row positions
        per partition.
    method : {"time", "random"}
        How rows were assigned.
    summary : dict
        As :meth:`poem.splits.LogSplit.summary`.
    """

    source: Any
    rows: dict
    method: str
    summary: dict

    def rows_for(self, part: str) -> list[np.ndarray]:
        """Local rows of ``part``: a split name, or ``"train+validation"`` (refit_on).

        Raises
        ------
        ValueError
            For any other name.
        """
        if part in PARTS:
            return self.rows[part]
        if part == "train+validation":
            return [
                np.sort(np.concatenate([a, b]))
                for a, b in zip(self.rows["train"], self.rows["validation"], strict=True)
            ]
        raise ValueError(f"part must be one of {[*PARTS, 'train+validation']}, got {part!r}")

    def n_rows(self, part: str) -> int:
        """Rows of ``part`` over all partitions."""
        return int(sum(r.size for r in self.rows_for(part)))


def _split_key(log: Any) -> tuple[int, Any]:
    return (0, None) if log is None else (log.n_rows, log.timestamps)


def split_partitioned(
    source: Any,
    *,
    validation_fraction: float = 0.25,
    test_fraction: float = 0.25,
    by_time: bool = True,
    random_state: Any = None,
) -> PartitionedSplit:
    """:func:`poem.splits.split_log` of the concatenated partitions, as row positions.

    Parameters
    ----------
    source : partition set
        The log's partitions, in read order.
    validation_fraction, test_fraction, by_time, random_state
        As for :func:`~poem.splits.split_log`.

    Returns
    -------
    PartitionedSplit
        The same rows as ``split_log`` of the concatenated log.

    Raises
    ------
    ValueError
        As :func:`~poem.splits.split_log`.
    """
    keys = source.map(_split_key, gather=True)
    sizes = [k[0] for k in keys]
    stamps = [k[1] for k in keys if k[0]]
    timestamps = None if any(t is None for t in stamps) or not stamps else np.concatenate(stamps)
    method, *parts = split_rows(
        sum(sizes),
        timestamps,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
        by_time=by_time,
        random_state=random_state,
    )
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    rows = {}
    for name, global_rows in zip(PARTS, parts, strict=True):
        cut = np.searchsorted(global_rows, offsets)
        rows[name] = [global_rows[cut[k] : cut[k + 1]] - offsets[k] for k in range(len(sizes))]
    return PartitionedSplit(source, rows, method, split_summary(method, parts, timestamps))


# -- per-row vectors for the estimators and the gate ---------------------------------------------
@dataclass(frozen=True)
class RowsView:
    """The per-row columns the estimators read, gathered from partitions (in log order).

    Duck-types the attributes of :class:`~poem.data.LoggedBandit` that
    :func:`~poem.estimators.ips.evaluate_policy` and :func:`poem.gate.counterfactual_ab_test`
    read (``losses``, ``propensities``, ``loss_bounds``, ``n_rows``), with
    :class:`FixedProbabilities` standing in for the policies.
    """

    losses: np.ndarray
    propensities: np.ndarray
    loss_bounds: tuple[float, float]

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.losses.shape[0])


@dataclass(frozen=True)
class FixedProbabilities:
    """A policy's π(yᵢ|xᵢ) on a :class:`RowsView`'s rows, computed where the rows live."""

    probabilities: np.ndarray

    def log_action_probability_on(self, log: Any) -> np.ndarray:
        """π(yᵢ|xᵢ) of the view's rows."""
        if log.n_rows != self.probabilities.size:
            raise ValueError(
                f"probabilities for {self.probabilities.size:,} rows, log has {log.n_rows:,}"
            )
        return self.probabilities


def _policy_rows(log: Any, rows: np.ndarray, *, policies: tuple) -> tuple | None:
    if log is None or rows.size == 0:
        return None
    part = log.take(rows)
    probs = tuple(p.log_action_probability_on(part) for p in policies)
    return np.asarray(part.losses), part.propensities, part.loss_bounds, probs


def policy_rows(
    source: Any, rows: list[np.ndarray], policies: tuple = ()
) -> tuple[RowsView, list[FixedProbabilities]]:
    """Losses, propensities and each policy's probabilities of the given rows, in log order.

    Parameters
    ----------
    source : partition set
        The log's partitions.
    rows : list of ndarray
        Local row positions per partition (:meth:`PartitionedSplit.rows_for`).
    policies : tuple of StochasticPolicy, default=()
        Policies whose π(yᵢ|xᵢ) to compute on the workers.

    Returns
    -------
    view : RowsView
    probabilities : list of FixedProbabilities
        One per policy.

    Raises
    ------
    ValueError
        When no row is selected.
    """
    pieces = [p for p in source.map(_policy_rows, rows, policies=tuple(policies), gather=True) if p]
    if not pieces:
        raise ValueError("no rows selected in any of the partitions (0 rows)")
    view = RowsView(
        np.concatenate([p[0] for p in pieces]),
        np.concatenate([p[1] for p in pieces]),
        pieces[0][2],
    )
    probs = [
        FixedProbabilities(np.concatenate([p[3][j] for p in pieces])) for j in range(len(policies))
    ]
    return view, probs


def counterfactual_ab_test_partitioned(
    challenger: Any, champion: Any, split: PartitionedSplit, **kwargs: Any
) -> Any:
    """:func:`poem.gate.counterfactual_ab_test` on the test rows of a partitioned split.

    The probabilities are computed on the workers; the decision rule (betting bound,
    estimates, ESS, failed checks) runs unchanged on the gathered per-row vectors, so the
    comparison equals the in-memory one on the same rows (module docstring).

    Parameters
    ----------
    challenger : StochasticPolicy
        The newly trained policy.
    champion : StochasticPolicy or None
        The production policy; None for the logging policy.
    split : PartitionedSplit
        The split whose ``test`` rows the gate uses.
    **kwargs
        Passed to :func:`~poem.gate.counterfactual_ab_test` (estimator, clip, levels, ...).

    Returns
    -------
    PolicyComparison
    """
    policies = (challenger,) if champion is None else (challenger, champion)
    view, probs = policy_rows(split.source, split.rows_for("test"), policies)
    return counterfactual_ab_test(probs[0], None if champion is None else probs[1], view, **kwargs)


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


def _prepare(log: Any, rows: np.ndarray, *, family: PolicyFamily, scaling: Any):
    if log is None or rows.size == 0:
        return None
    part = CRMPartition.from_log(log.take(rows), family)
    if scaling is None:
        return part
    return CRMPartition(
        scaling.transform(part.inputs), part.actions, part.scaled_losses, part.propensities
    )


def prepare_training(
    source: Any, rows: list[np.ndarray], *, fit_intercept: bool = True, standardize: bool = True
) -> PreparedTraining:
    """Prepare the training rows of a partitioned log where they live (module docstring).

    Parameters
    ----------
    source : partition set
        The log's partitions.
    rows : list of ndarray
        Local training rows per partition.
    fit_intercept, standardize : bool, default=True
        As :class:`~poem.learners.poem.POEM`'s parameters.

    Returns
    -------
    PreparedTraining

    Raises
    ------
    InvalidLogError
        With fewer than 2 training rows or 2 distinct logged actions (as ``POEM.fit``).
    ValueError
        For sparse contexts with ``standardize=True``.
    """
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
    parts = source.map(_prepare, rows, family=family, scaling=scaling)
    return PreparedTraining(
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
            learning_rate=float(est.learning_rate),
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
    view, (probs,) = policy_rows(split.source, split.rows_for("validation"), (model.policy_,))
    scores = validation_scores(probs, view, confidence_level)
    return trial_from_model(model, params, scores, seconds=seconds, keep_estimator=keep_estimator)
