r"""Minibatch AdaGrad with iterated variance majorization (paper §5.3, Alg. 1; DESIGN §4.4).

The variance term √V̂(u_w) of the CRM objective is not a sum over rows, so it has no unbiased
minibatch gradient. Proposition 4 of Swaminathan & Joachims (2015) bounds it at the last
majorization point w₀ by a sum over rows (:func:`~poem.learners.objective.majorizer_coefficients`),
so each epoch minimises the majorized objective by AdaGrad (Duchi et al., 2011) and then
re-majorizes at the new w.

**The minibatch order.** The training rows are a partition set
(:class:`~poem.learners.prepared.PreparedTraining`). An epoch visits the partitions in log
order, handing an :class:`EpochState` from one to the next (``fold``); each partition draws
its rows' order from the state's generator (``rng.permutation(n_k)``) and takes minibatches of
b rows in that order. A log in memory is one partition: its epoch is ``rng.permutation(n)``
cut into minibatches. With k partitions an epoch is a valid Alg. 1 epoch with other
minibatches (none spans two partitions), so AdaGrad's iterates depend on the layout; the
full-batch passes (J, ∇J, the majorizer, the MM safeguard) do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from poem._blas import single_blas_thread
from poem.learners.objective import (
    CRMStatistics,
    _majorized_batch_gradient,
    crm_objective_from_statistics,
    crm_statistics,
    majorized_gradient,
    majorizer_coefficients,
)
from poem.learners.prepared import partition_statistics
from poem.policies._base import PolicyFamily

__all__ = ["EpochState", "SolverResult", "adagrad", "partition_epoch"]

_BACKTRACK = (0.5, 0.25)  # fractions of a rejected epoch's displacement tried, in order


@dataclass(frozen=True)
class SolverResult:
    """Outcome of one solver run.

    Attributes
    ----------
    coef : ndarray
        Final parameters w.
    n_iter : int
        Epochs (AdaGrad) or iterations (L-BFGS) performed.
    objective : float
        CRM objective J(w) at ``coef`` on the full training set (scaled-loss units).
    gradient_norm : float
        ‖∇J(w)‖₂ at ``coef``.
    converged : bool
        Whether a stopping criterion was met before the iteration budget ran out.
    n_clipped : int
        Training rows whose importance weight reached the clip M at ``coef``.
    """

    coef: np.ndarray
    n_iter: int
    objective: float
    gradient_norm: float
    converged: bool
    n_clipped: int


@dataclass(frozen=True)
class EpochState:
    """What an epoch hands from one partition to the next (a few coef-sized arrays).

    Attributes
    ----------
    coef : ndarray
        Current parameters w.
    accumulator : ndarray
        AdaGrad history h (element-wise sum of squared gradients).
    coefficients : tuple of float
        Majorizer (A, B, C) in use.
    rng : numpy.random.Generator
        Source of the partitions' shuffles.
    batches : int
        Minibatches taken so far in this epoch.
    progressive : CRMStatistics or None
        Sum of this epoch's minibatch statistics, each at the w it was evaluated at (Alg. 1's
        progressive validation); None before the first minibatch or when not kept.
    """

    coef: np.ndarray
    accumulator: np.ndarray
    coefficients: tuple
    rng: Any
    batches: int = 0
    progressive: CRMStatistics | None = None


def partition_epoch(
    state: EpochState,
    partition: Any,
    *,
    family: PolicyFamily,
    clip: float,
    n_total: int,
    batch_size: int,
    variance_penalty: float,
    l2_penalty: float,
    l2_center: np.ndarray | None,
    learning_rate: float,
    majorize_every: int | None,
    progressive: bool,
    chunk_size: int | None,
) -> EpochState:
    """:func:`adagrad`'s steps over one partition's rows in shuffled minibatches (Alg. 1).

    ``partition`` is a :class:`~poem.learners.prepared.CRMPartition` (None or empty: the state
    is returned unchanged, no random number drawn); n in the step is ``n_total``, the rows of
    all partitions. ``majorize_every`` re-majorizes on the partition's own rows.
    """
    if partition is None or partition.n_rows == 0:
        return state
    n = partition.n_rows
    perm = state.rng.permutation(n)
    X = family.subset(partition.inputs, perm)
    a, d = partition.actions[perm], partition.scaled_losses[perm]
    p = partition.propensities[perm]
    m = None if partition.loss_model is None else partition.loss_model[perm]
    if m is not None:  # the doubly robust terms read yᵢ as floats: convert once per epoch
        a = a.astype(np.float64)
    # w and h are updated in place, on copies: the epoch's start (state) stays intact for
    # the MM safeguard's backtracking and rejection
    w, h = np.array(state.coef, dtype=np.float64), np.array(state.accumulator, dtype=np.float64)
    coefficients, k, seen = state.coefficients, state.batches, state.progressive
    positive = bool(np.all(h > 0))  # h only grows: then √h needs no guard all epoch
    step, root = np.empty_like(w), np.empty_like(w)
    b = max(1, min(int(batch_size), n_total))
    penalties = dict(
        n_total=n_total,
        variance_penalty=variance_penalty,
        l2_penalty=l2_penalty,
        l2_center=l2_center,
    )
    with single_blas_thread():  # once per epoch, not per minibatch (poem._blas)
        for start in range(0, n, b):
            if majorize_every and k and k % majorize_every == 0 and variance_penalty:
                whole = partition_statistics(
                    partition, coef=w, family=family, clip=clip, chunk_size=chunk_size
                )
                coefficients = majorizer_coefficients(whole)
            stop = min(n, start + b)
            rows = (family.row_slice(X, start, stop), a[start:stop], d[start:stop], p[start:stop])
            m_rows = None if m is None else m[start:stop]
            if progressive:  # the epoch's statistics are kept for the next majorizer
                batch = crm_statistics(w, family, *rows, clip, loss_model=m_rows)
                seen = batch if seen is None else seen + batch
                g = majorized_gradient(batch, w, coefficients, **penalties)
            else:  # one VJP of one vector per step
                g = _majorized_batch_gradient(
                    w, family, *rows, clip, coefficients, loss_model=m_rows, **penalties
                )
            _adagrad_step(w, h, g, learning_rate, positive, step, root)
            k += 1
    return EpochState(w, h, coefficients, state.rng, k, seen)


def _adagrad_step(w, h, g, learning_rate, positive, step, root) -> None:
    r"""One AdaGrad step in place (Alg. 1): h ← h + g², w ← w − η g / √h.

    The same operations in the same order as ``h = h + g*g; w = w - η*g/√h`` (the same
    bits), without the coef-sized temporaries; ``step`` and ``root`` are scratch arrays.
    Coordinates with h = 0 (only when the history starts at 0, ``positive`` False) take
    √h = 1, so a zero gradient there moves nothing.
    """
    np.multiply(g, g, out=step)
    h += step
    np.sqrt(h if positive else np.where(h > 0, h, 1.0), out=root)
    np.multiply(learning_rate, g, out=step)
    np.divide(step, root, out=step)
    w -= step


def adagrad(
    data: Any,
    *,
    clip: float,
    variance_penalty: float,
    l2_penalty: float = 0.0,
    l2_center: np.ndarray | None = None,
    learning_rate: float = 1.0,
    batch_size: int = 100,
    max_iter: int = 200,
    tol: float = 1e-6,
    majorize_every: int | None = None,
    random_state: np.random.Generator | None = None,
    chunk_size: int | None = None,
    coef0: np.ndarray | None = None,
    initial_accumulator: float = 1.0,
    progressive: bool = False,
    initial_statistics: CRMStatistics | None = None,
) -> SolverResult:
    r"""Minimise the CRM objective by minibatch AdaGrad on its variance majorizer (Alg. 1).

    .. math::

        g_t = \frac{1}{b}\sum_{i \in B_t}\left[\nabla u_i + \lambda\sqrt{n}
              (A \nabla u_i + 2 B u_i \nabla u_i)\right] + 2\mu (w - c), \quad
        h_t = h_{t-1} + g_t^2, \quad
        w_{t+1} = w_t - \eta\, g_t / \sqrt{h_t}

    where B_t is a minibatch of b rows, n the training-set size, (A, B) the majorizer
    coefficients of Prop. 4 at the last majorization point, λ the variance penalty, μ the L2
    penalty, h the AdaGrad history (element-wise) and η the learning rate. Re-majorizes on the
    full training set after every epoch (and every ``majorize_every`` minibatches). When an
    epoch raises the full-batch J (Prop. 4's descent only holds inside the majorizer's region
    of validity), ½ then ¼ of its displacement are tried and η is multiplied by the fraction
    that lowered J; if neither does, the epoch is rejected and η divided by 8. Stops on
    ‖∇J‖₂ ≤ tol, a relative decrease of J over an accepted epoch ≤ tol, or η below 10⁻³ of its
    initial value. The minibatch order is the module docstring's.

    Parameters
    ----------
    data : PreparedTraining
        The training rows as a partition set (:mod:`poem.learners.prepared`), i.e. the
        contexts xᵢ, actions yᵢ, scaled losses δ'ᵢ ∈ [−1, 0] and propensities pᵢ.
    clip : float
        Weight cap M (``np.inf`` for none).
    variance_penalty : float
        λ ≥ 0; 0 gives IPS(S).
    l2_penalty : float, default=0.0
        μ ≥ 0.
    l2_center : ndarray or None, default=None
        Centre c of the L2 term μ‖w − c‖² (None: 0; the gradient's 2μw is then 2μ(w − c)).
    learning_rate : float, default=1.0
        AdaGrad step size η.
    batch_size : int, default=100
        Minibatch size b.
    max_iter : int, default=200
        Maximum number of accepted epochs (at most 4 rejected ones, which do not count).
    tol : float, default=1e-6
        Stop when ‖∇J‖₂ ≤ tol or an epoch decreases J by at most tol·max(1, |J|).
    majorize_every : int or None, default=None
        Also re-majorize every this many minibatches (None: once per epoch).
    random_state : numpy.random.Generator or None, default=None
        Source of the minibatch shuffles.
    chunk_size : int or None, default=None
        Row chunk for the full-batch statistics (bounded memory; same result).
    coef0 : ndarray of shape ``family.coef_shape`` or None, default=None
        Starting point w₀ (None: w₀ = 0, the uniform policy); the first majorization is at w₀.
    initial_accumulator : float, default=1.0
        Initial AdaGrad history h₀ (Alg. 1 line 14 uses 1; 0 gives the textbook AdaGrad).
    progressive : bool, default=False
        Majorize and stop on each epoch's progressive statistics (Alg. 1's progressive
        validation) instead of a full-batch pass; an epoch whose progressive objective rose
        halves η instead of being rejected. J(w) and ∇J(w) are computed once, at the end.
    initial_statistics : CRMStatistics or None, default=None
        The statistics at w₀ when already known (e.g. shared by a search's trials); None
        computes them.

    Returns
    -------
    SolverResult
        Final w, epochs, J(w), ‖∇J(w)‖, convergence flag and clipped-row count.

    Raises
    ------
    ValueError
        For ``majorize_every`` on rows held in more than one partition.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). Batch learning from logged bandit feedback through
    counterfactual risk minimization. JMLR 16, arXiv:1502.02362, §5.3, Prop. 4, Alg. 1.
    Duchi, J., Hazan, E. & Singer, Y. (2011). Adaptive subgradient methods. JMLR 12.
    """
    family, parts = data.family, data.partitions
    if majorize_every and len(parts) > 1:
        raise ValueError(
            f"majorize_every needs the training rows in one partition, they are in {len(parts)}"
        )
    rng = random_state if random_state is not None else np.random.default_rng()
    n = int(data.n_rows)
    full = partial(data.statistics, clip=clip, chunk_size=chunk_size)  # statistics at w
    plan = [(k, {}) for k in range(len(parts))]
    step = dict(
        family=family,
        clip=clip,
        n_total=n,
        batch_size=int(batch_size),
        variance_penalty=variance_penalty,
        l2_penalty=l2_penalty,
        l2_center=l2_center,
        majorize_every=majorize_every,
        progressive=bool(progressive),
        chunk_size=chunk_size,
    )
    w = np.zeros(family.coef_shape) if coef0 is None else np.array(coef0, dtype=np.float64)
    h = np.full(family.coef_shape, float(initial_accumulator))  # Alg. 1 line 14: h ← 1
    stats = full(w) if initial_statistics is None else initial_statistics
    value, grad = crm_objective_from_statistics(stats, w, variance_penalty, l2_penalty, l2_center)
    coefficients = majorizer_coefficients(stats)
    eta = float(learning_rate)
    converged = bool(np.linalg.norm(grad) <= tol)
    epoch = accepted_epochs = 0
    while not converged and accepted_epochs < max_iter:
        epoch += 1
        w_start, h_start = w, h
        state = parts.fold(
            partition_epoch, EpochState(w, h, coefficients, rng), plan, learning_rate=eta, **step
        )
        w, h, coefficients, rng = state.coef, state.accumulator, state.coefficients, state.rng
        if progressive:
            prog = state.progressive  # progressive validation statistics of this epoch
            new_value, _ = crm_objective_from_statistics(
                prog, w, variance_penalty, l2_penalty, l2_center
            )
            if not np.isfinite(new_value) or (epoch > 1 and new_value > value):
                eta *= 0.5
            converged = bool(epoch > 1 and abs(value - new_value) <= tol * max(1.0, abs(new_value)))
            converged = converged or eta < 1e-3 * learning_rate
            value = new_value
            coefficients = majorizer_coefficients(prog)
            accepted_epochs += 1
            continue
        new_stats = full(w)
        new_value, new_grad = crm_objective_from_statistics(
            new_stats, w, variance_penalty, l2_penalty, l2_center
        )
        if not np.isfinite(new_value) or new_value > value:
            # MM safeguard (docstring): backtrack along the epoch's displacement, shrink η
            step_w, accepted = w - w_start, False
            for fraction in _BACKTRACK:
                w_try = w_start + fraction * step_w
                new_stats = full(w_try)
                new_value, new_grad = crm_objective_from_statistics(
                    new_stats, w_try, variance_penalty, l2_penalty, l2_center
                )
                if np.isfinite(new_value) and new_value <= value:
                    w, accepted = w_try, True
                    break
            eta *= fraction if accepted else 0.5 * _BACKTRACK[-1]
            if not accepted:
                w, h = w_start, h_start
                converged = eta < 1e-3 * learning_rate  # at most 4 rejected epochs in all
                continue
        accepted_epochs += 1
        converged = bool(
            np.linalg.norm(new_grad) <= tol or value - new_value <= tol * max(1.0, abs(new_value))
        )
        stats, value, grad = new_stats, new_value, new_grad
        coefficients = majorizer_coefficients(stats)  # Prop. 4 at the new w₀
    if progressive and epoch:
        stats = full(w)
        value, grad = crm_objective_from_statistics(
            stats, w, variance_penalty, l2_penalty, l2_center
        )
    return SolverResult(
        w, epoch, float(value), float(np.linalg.norm(grad)), converged, stats.n_clipped
    )
