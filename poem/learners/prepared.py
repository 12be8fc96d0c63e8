r"""Training rows prepared for the CRM solvers, wherever they live (DESIGN §4.3, §8).

The CRM objective depends on the data only through additive statistics
(:class:`~poem.learners.objective.CRMStatistics`), so the training rows are a *partition
set* (:mod:`poem.io.partitions`) of :class:`CRMPartition` objects — one for a log in memory,
one per Parquet row group on a cluster — and :meth:`PreparedTraining.statistics` is one map
and one reduce. The solvers and :meth:`POEM.fit_prepared
<poem.learners.poem.POEM.fit_prepared>` only see a :class:`PreparedTraining`, made by
:func:`prepare_log` (a log in memory, one partition) or :func:`prepare_training` (a split's
rows where they live: each partition sends its rows' pᵢ and δ'ᵢ, for the clip rule and λ*,
and its features' moments, merged exactly after Chan et al. 1979). Both give one result up
to round-off.

References
----------
Chan, Golub & LeVeque (1979), Updating formulae and a pairwise algorithm for computing sample
variances, Stanford CS Tech. Report STAN-CS-79-773 (the merge of means and sums of squares).
Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (10)–(13) (the CRM statistics).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from poem.data import LoggedBandit, check_logged_bandit
from poem.exceptions import InvalidLogError, Violation
from poem.io.partitions import LocalPartitions
from poem.learners._scaling import FeatureScaling, scaling_from_moments, standardize
from poem.learners.objective import CRMStatistics, crm_statistics
from poem.log_rows import PartitionedSplit, kept_rows, release_rows, take_rows
from poem.policies._base import PolicyFamily
from poem.policies.stochastic import family_from_log

__all__ = [
    "CRMPartition",
    "PreparedTraining",
    "partition_statistics",
    "prepare_log",
    "prepare_training",
    "reduce_statistics",
]

_MAX_STARTS = 8  # starting points whose statistics a preparation keeps


@dataclass(frozen=True)
class CRMPartition:
    """The rows of one partition, prepared for the CRM pass (everything but w).

    Attributes
    ----------
    inputs, actions, scaled_losses, propensities, loss_model
        The rows' arguments of :func:`~poem.learners.objective.crm_statistics`: ``inputs``
        standardized when asked, δ'ᵢ scaled with the whole log's bounds, and the additive
        loss model of the doubly robust objective (default None: IPS).
    """

    inputs: Any
    actions: np.ndarray
    scaled_losses: np.ndarray
    propensities: np.ndarray
    loss_model: np.ndarray | None = None

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.scaled_losses.shape[0])


def partition_statistics(
    partition: CRMPartition | None,
    *,
    coef: np.ndarray,
    family: PolicyFamily,
    clip: float,
    chunk_size: int | None = None,
) -> CRMStatistics:
    """The map: :func:`~poem.learners.objective.crm_statistics` of one partition at w (Eq. 13).

    Returns zero statistics with n = 0 for an empty partition (None).
    """
    if partition is None:
        return CRMStatistics.zeros(family.coef_shape)
    return crm_statistics(
        coef,
        family,
        partition.inputs,
        partition.actions,
        partition.scaled_losses,
        partition.propensities,
        clip,
        chunk_size=chunk_size,
        loss_model=partition.loss_model,
    )


def reduce_statistics(parts: Iterable[CRMStatistics]) -> CRMStatistics:
    """The reduce: the statistics of the union of the partitions (their sum, in order).

    Raises
    ------
    ValueError
        If there is no partition, or every partition is empty.
    """
    parts = list(parts)
    if not parts:
        raise ValueError("no partition statistics to reduce (0 partitions)")
    total = sum(parts[1:], parts[0])
    if total.n == 0:
        raise ValueError(f"all {len(parts)} partitions are empty (0 rows)")
    return total


@dataclass(frozen=True, eq=False)
class PreparedTraining:
    """Training rows prepared once per (rows, fit_intercept, standardize), for every fit.

    Attributes
    ----------
    family : PolicyFamily
        Policy family of the log.
    partitions : partition set
        One :class:`CRMPartition` (or None) per partition (:mod:`poem.io.partitions`).
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
    cache : dict
        Statistics at starting points and the loss model, computed once for every fit.
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
    cache: dict = field(default_factory=dict, repr=False)

    def statistics(self, coef: np.ndarray, clip: float, chunk_size: int | None = None):
        """:class:`CRMStatistics` of every training row at w: map, then reduce (Eq. 13)."""
        kw = dict(coef=coef, family=self.family, clip=clip, chunk_size=chunk_size)
        return reduce_statistics(self.partitions.map(partition_statistics, gather=True, **kw))

    def start_statistics(self, coef0: np.ndarray, clip: float, chunk_size: int | None = None):
        """:meth:`statistics` at the starting point w₀, once per w₀ and clip.

        Every trial of a search that starts from the same w₀ (zeros, or the champion) with the
        same clip begins with the same full pass (λ and μ do not enter the statistics).
        """
        w0 = np.asarray(coef0, dtype=np.float64)
        digest = hashlib.blake2b(w0.tobytes(), digest_size=16).hexdigest()
        starts = self.cache.setdefault("starts", {})
        key = (float(clip), digest)
        if key not in starts:
            if len(starts) >= _MAX_STARTS:
                starts.clear()
            starts[key] = self.statistics(w0, clip, chunk_size)
        return starts[key]


def prepare_log(log: LoggedBandit, *, fit_intercept: bool, standardize_features: bool):
    """Check a log and prepare it as one partition, once per log and setting.

    The checks (:func:`poem.data.check_logged_bandit`), inputs, standardization and scaled
    losses are computed on the first fit and kept, read-only, on the log (as
    :func:`functools.cached_property` does), so a search's trials prepare it once.

    Parameters
    ----------
    log : LoggedBandit
        The training log.
    fit_intercept : bool
        Whether the family adds an intercept input.
    standardize_features : bool
        Whether features are standardized (not for the candidates family).

    Returns
    -------
    PreparedTraining
        One partition (:class:`~poem.io.partitions.LocalPartitions`).

    Raises
    ------
    InvalidLogError
        When the log has fewer than 2 rows or 2 distinct actions, or breaks an invariant.
    """
    cache = log.__dict__.setdefault("_prepared_for_fit", {})
    key = (bool(fit_intercept), bool(standardize_features))
    if key not in cache:
        check_logged_bandit(log, min_rows=2, min_distinct_actions=2)
        family = family_from_log(log, fit_intercept=key[0])
        inputs = family.inputs_from_log(log)
        scaling = None
        if key[1] and family.name != "candidates":
            inputs, scaling = standardize(inputs, family.n_features, family.fit_intercept)
        scaled = log.scaled_losses()
        for array in (inputs, getattr(inputs, "data", None), scaled):
            if isinstance(array, np.ndarray):  # the log's own arrays already are read-only
                array.flags.writeable = False
        part = CRMPartition(inputs, np.asarray(log.actions), scaled, log.propensities)
        cache[key] = PreparedTraining(
            family,
            LocalPartitions([part]),
            scaling,
            log.propensities,
            scaled,
            log.n_rows,
            log.n_features,
            log.feature_names,
            key[0],
            scaling is not None,
        )
    return cache[key]


def _fit_header(log: Any, rows: np.ndarray, *, fit_intercept: bool, standardize: bool):
    """Per partition: family, p, δ', distinct actions, the features' moments and names."""
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
                "standardize: false or read the log as one partition"
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
        sub = log.take(rows)
        inputs = family.inputs_from_log(sub)
        if scaling is not None:
            inputs = scaling.transform(inputs)
        part = CRMPartition(inputs, np.asarray(sub.actions), sub.scaled_losses(), sub.propensities)
    if keep is None:
        return part
    return part, take_rows(log, keep)


def _first(pair: tuple) -> Any:
    return pair[0]


def _second(pair: tuple) -> Any:
    return pair[1]


def prepare_training(
    split: PartitionedSplit,
    *,
    part: str = "train",
    fit_intercept: bool = True,
    standardize: bool = True,
    release: bool = False,
) -> tuple[PreparedTraining, PartitionedSplit]:
    """Prepare a split's training rows where they live (module docstring).

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
    kw = dict(fit_intercept=fit_intercept, standardize=standardize)
    headers = [h for h in source.map(_fit_header, rows, gather=True, **kw) if h is not None]
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
        scaling is not None,
    )
    return prepared, split
