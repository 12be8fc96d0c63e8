r"""Exact map-reduce training over row partitions (DESIGN §4.3, §8).

The CRM objective depends on the data only through the additive statistics Σuᵢ, Σuᵢ², Σ∇uᵢ
and Σuᵢ∇uᵢ (:class:`~poem.learners.objective.CRMStatistics`, paper Eq. 10/12/13). So a log
split into partitions — Parquet files, Dask partitions, anything — trains exactly as in memory:

- **map**: :func:`partition_statistics` on each partition at the current w (pure; runs where
  the partition lives);
- **reduce**: :func:`reduce_statistics` sums them (on the client);
- **solve**: :func:`~poem.learners._lbfgs.lbfgs_statistics` takes the reduced statistics as a
  *statistics provider* ``w ↦ CRMStatistics`` (:func:`partitions_statistics` is the in-process
  one; :mod:`poem._dask` builds one over a Dask cluster) and gives the in-memory J(w), ∇J(w).

The minibatch path (paper Alg. 1, DESIGN §4.4) keeps the same shape: the majorizer constants
A, B come from one map-reduce pass at w₀, and an epoch runs :func:`adagrad_partition_pass` on
each partition in turn, handing the small AdaGrad state (w, h) from one partition to the next
(:func:`adagrad_partitioned`). Nothing here imports a scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from poem.learners._adagrad import SolverResult
from poem.learners.objective import (
    CRMStatistics,
    crm_objective_from_statistics,
    crm_statistics,
    majorized_gradient,
    majorizer_coefficients,
)
from poem.policies._base import PolicyFamily

__all__ = [
    "AdaGradState",
    "CRMPartition",
    "StatisticsProvider",
    "adagrad_partition_pass",
    "adagrad_partitioned",
    "epoch_plan",
    "partition_statistics",
    "partitions_statistics",
    "reduce_statistics",
    "sequential_epoch",
]

StatisticsProvider = Callable[[np.ndarray], CRMStatistics]
"""``w ↦`` the :class:`CRMStatistics` of the whole training set at w."""


@dataclass(frozen=True)
class CRMPartition:
    """The rows of one partition, prepared for the CRM pass (everything but w).

    Attributes
    ----------
    inputs : prepared inputs
        ``family.inputs_from_log(log)`` of the partition's rows.
    actions : ndarray
        Logged actions yᵢ.
    scaled_losses : ndarray of shape (n_rows,)
        Scaled losses δ'ᵢ ∈ [−1, 0] (DESIGN §4.1), scaled with the whole log's bounds.
    propensities : ndarray of shape (n_rows,)
        Logging propensities pᵢ.
    """

    inputs: Any
    actions: np.ndarray
    scaled_losses: np.ndarray
    propensities: np.ndarray

    @classmethod
    def from_log(cls, log: Any, family: PolicyFamily) -> CRMPartition:
        """Prepare a :class:`~poem.data.LoggedBandit` holding one partition's rows."""
        return cls(
            family.inputs_from_log(log),
            np.asarray(log.actions),
            log.scaled_losses(),
            log.propensities,
        )

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.scaled_losses.shape[0])


def partition_statistics(
    coef: np.ndarray,
    family: PolicyFamily,
    partition: CRMPartition | None,
    clip: float,
    *,
    chunk_size: int | None = None,
) -> CRMStatistics:
    r"""The map: :func:`~poem.learners.objective.crm_statistics` of one partition at w (Eq. 13).

    .. math::

        \Big(n_P, \sum_{i \in P} u_i, \sum_{i \in P} u_i^2, \sum_{i \in P} \nabla u_i,
        \sum_{i \in P} u_i \nabla u_i\Big)

    where P is the partition's set of rows and uᵢ = δ'ᵢ min(M, rᵢ).

    Parameters
    ----------
    coef : ndarray of shape ``family.coef_shape``
        Parameters w.
    family : PolicyFamily
        Policy family.
    partition : CRMPartition or None
        The partition's rows; None (or zero rows) for an empty partition.
    clip : float
        Weight cap M.
    chunk_size : int or None, default=None
        Passed to :func:`~poem.learners.objective.crm_statistics`.

    Returns
    -------
    CRMStatistics
        Zero statistics with n = 0 for an empty partition.
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


def partitions_statistics(
    family: PolicyFamily, partitions: Sequence[CRMPartition | None], clip: float
) -> StatisticsProvider:
    """In-process statistics provider: map :func:`partition_statistics`, then reduce."""

    def statistics(coef: np.ndarray) -> CRMStatistics:
        return reduce_statistics(partition_statistics(coef, family, p, clip) for p in partitions)

    return statistics


@dataclass(frozen=True)
class AdaGradState:
    """What an AdaGrad epoch hands from one partition to the next (a few coef-sized arrays).

    Attributes
    ----------
    coef : ndarray
        Current parameters w.
    accumulator : ndarray
        AdaGrad history h (element-wise sum of squared gradients).
    progressive : CRMStatistics or None
        Sum of the minibatch statistics of this epoch so far, each at the w it was evaluated at
        (Alg. 1's progressive validation); None before the first minibatch.
    """

    coef: np.ndarray
    accumulator: np.ndarray
    progressive: CRMStatistics | None = None


def adagrad_partition_pass(
    state: AdaGradState,
    family: PolicyFamily,
    partition: CRMPartition | None,
    clip: float,
    coefficients: tuple[float, float, float],
    *,
    n_total: int,
    variance_penalty: float,
    l2_penalty: float,
    learning_rate: float,
    batch_size: int,
    seed: int,
) -> AdaGradState:
    r"""Majorized AdaGrad steps over one partition's rows in shuffled minibatches (Alg. 1).

    .. math::

        g_t = \frac{1}{b}\sum_{i \in B_t}\left[\nabla u_i + \lambda\sqrt{n}
              (A \nabla u_i + 2 B u_i \nabla u_i)\right] + 2\mu w, \quad
        h_t = h_{t-1} + g_t^2, \quad w_{t+1} = w_t - \eta\, g_t / \sqrt{h_t}

    where B_t is a minibatch of b rows, n the training-set size (all partitions), (A, B) the
    majorizer coefficients of Prop. 4 at the epoch's majorization point, λ the variance
    penalty, μ the L2 penalty and η the learning rate.

    Parameters
    ----------
    state : AdaGradState
        State after the previous partition.
    family : PolicyFamily
        Policy family.
    partition : CRMPartition or None
        This partition's rows (None or empty: the state is returned unchanged).
    clip : float
        Weight cap M.
    coefficients : tuple of float
        (A, B, C) from :func:`~poem.learners.objective.majorizer_coefficients`.
    n_total : int
        Training-set size n.
    variance_penalty, l2_penalty, learning_rate : float
        λ, μ, η.
    batch_size : int
        Minibatch size b.
    seed : int
        Seed of this partition's shuffle in this epoch.

    Returns
    -------
    AdaGradState
        State after this partition's minibatches.
    """
    if partition is None or partition.n_rows == 0:
        return state
    n = partition.n_rows
    perm = np.random.default_rng(seed).permutation(n)
    inputs = family.subset(partition.inputs, perm)
    a, d, p = partition.actions[perm], partition.scaled_losses[perm], partition.propensities[perm]
    w, h, seen = state.coef, state.accumulator.copy(), state.progressive
    b = max(1, int(batch_size))
    for start in range(0, n, b):
        stop = min(n, start + b)
        batch = crm_statistics(
            w,
            family,
            family.row_slice(inputs, start, stop),
            a[start:stop],
            d[start:stop],
            p[start:stop],
            clip,
        )
        seen = batch if seen is None else seen + batch
        g = majorized_gradient(
            batch,
            w,
            coefficients,
            n_total=n_total,
            variance_penalty=variance_penalty,
            l2_penalty=l2_penalty,
        )
        h += g * g
        w = w - learning_rate * g / np.sqrt(np.where(h > 0, h, 1.0))  # AdaGrad step (Alg. 1)
    return AdaGradState(w, h, seen)


def adagrad_partitioned(
    statistics: StatisticsProvider,
    epoch: Callable[[AdaGradState, tuple[float, float, float], float, int], AdaGradState],
    coef0: np.ndarray,
    *,
    variance_penalty: float,
    l2_penalty: float = 0.0,
    learning_rate: float = 1.0,
    max_iter: int = 50,
    tol: float = 1e-6,
    initial_accumulator: float = 1.0,
) -> SolverResult:
    r"""Minibatch AdaGrad over partitions with map-reduce majorization (Alg. 1, Prop. 4).

    Each epoch majorizes √V̂ at the current w₀ from the reduced statistics (one map-reduce
    pass: A, B, C of Prop. 4), then runs ``epoch`` — :func:`adagrad_partition_pass` over every
    partition in turn — and recomputes J(w) exactly (another map-reduce pass). An epoch that
    raises J is rejected (w and h restored) and η halved: the MM descent property only holds
    inside the majorizer's region of validity. Stops when ‖∇J‖₂ ≤ tol, when an accepted epoch
    lowers J by at most tol·max(1, |J|), or when η falls below 10⁻³ of its initial value.

    Parameters
    ----------
    statistics : callable
        Statistics provider ``w ↦ CRMStatistics`` of the whole training set.
    epoch : callable
        ``epoch(state, coefficients, learning_rate, epoch_number)`` runs one pass over all
        partitions and returns the new :class:`AdaGradState`.
    coef0 : ndarray
        Starting point w₀ (0 is the uniform policy).
    variance_penalty, l2_penalty, learning_rate : float
        λ, μ, η.
    max_iter : int, default=50
        Maximum number of accepted epochs.
    tol : float, default=1e-6
        Stopping tolerance.
    initial_accumulator : float, default=1.0
        Initial AdaGrad history h₀ (Alg. 1 line 14).

    Returns
    -------
    SolverResult
        Final w, epochs run, J(w), ‖∇J(w)‖, convergence flag and clipped-row count.
    """
    w = np.array(coef0, dtype=np.float64)
    h = np.full(w.shape, float(initial_accumulator))
    stats = statistics(w)
    value, grad = crm_objective_from_statistics(stats, w, variance_penalty, l2_penalty)
    eta, converged, epochs, accepted = float(learning_rate), False, 0, 0
    converged = bool(np.linalg.norm(grad) <= tol)
    while not converged and accepted < max_iter:
        epochs += 1
        coefficients = majorizer_coefficients(stats)  # Prop. 4 at the current w₀
        state = epoch(AdaGradState(w, h), coefficients, eta, epochs)
        new_stats = statistics(state.coef)
        new_value, new_grad = crm_objective_from_statistics(
            new_stats, state.coef, variance_penalty, l2_penalty
        )
        if not np.isfinite(new_value) or new_value > value:
            eta *= 0.5  # reject the epoch (MM safeguard)
            converged = eta < 1e-3 * learning_rate
            continue
        accepted += 1
        converged = bool(
            np.linalg.norm(new_grad) <= tol or value - new_value <= tol * max(1.0, abs(new_value))
        )
        w, h, stats, value, grad = state.coef, state.accumulator, new_stats, new_value, new_grad
    return SolverResult(
        w, epochs, float(value), float(np.linalg.norm(grad)), converged, stats.n_clipped
    )


def epoch_plan(n_partitions: int, random_state: int, epoch: int) -> list[tuple[int, int]]:
    """Order of the partitions in one epoch and the seed of each one's shuffle.

    The same plan on every scheduler, so an epoch run on a cluster equals the in-process one.
    """
    rng = np.random.default_rng([int(random_state), int(epoch)])
    order = rng.permutation(n_partitions)
    seeds = rng.integers(2**31, size=n_partitions)
    return [(int(k), int(s)) for k, s in zip(order, seeds, strict=True)]


def sequential_epoch(
    family: PolicyFamily,
    partitions: Sequence[CRMPartition | None],
    clip: float,
    *,
    n_total: int,
    variance_penalty: float,
    l2_penalty: float,
    batch_size: int,
    random_state: int,
) -> Callable[[AdaGradState, tuple[float, float, float], float, int], AdaGradState]:
    """In-process ``epoch`` for :func:`adagrad_partitioned` (partitions per :func:`epoch_plan`)."""

    def epoch(
        state: AdaGradState, coefficients: tuple[float, float, float], eta: float, number: int
    ) -> AdaGradState:
        for k, seed in epoch_plan(len(partitions), random_state, number):
            state = adagrad_partition_pass(
                state,
                family,
                partitions[k],
                clip,
                coefficients,
                n_total=n_total,
                variance_penalty=variance_penalty,
                l2_penalty=l2_penalty,
                learning_rate=eta,
                batch_size=batch_size,
                seed=seed,
            )
        return state

    return epoch
