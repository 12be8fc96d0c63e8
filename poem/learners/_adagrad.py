r"""Minibatch AdaGrad with iterated variance majorization (paper §5.3, Alg. 1; DESIGN §4.4).

The variance term √V̂(u_w) of the CRM objective is not a sum over rows, so it has no unbiased
minibatch gradient. Proposition 4 of Swaminathan & Joachims (2015) bounds it at the last
majorization point w₀ by a function that *is* a sum over rows,

.. math::

    \sqrt{\hat V(u_w)} \le A \sum_i u_i + B \sum_i u_i^2 + C,

so each epoch minimises the majorized objective by AdaGrad (Duchi et al., 2011) and then
re-majorizes at the new w. Both the majorizer and the convergence check use
:mod:`poem.learners.objective`; nothing here re-derives the objective.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from poem.learners.objective import (
    CRMStatistics,
    crm_objective_from_statistics,
    crm_statistics,
    majorized_batch_gradient,
    majorized_gradient,
    majorizer_coefficients,
)
from poem.policies._base import PolicyFamily

__all__ = ["SolverResult", "adagrad"]

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


def _rows(inputs: Any, start: int, stop: int, family: PolicyFamily) -> Any:
    """Contiguous rows: a cheap slice for arrays and CSR, the family's subset otherwise."""
    if isinstance(inputs, np.ndarray) or sp.issparse(inputs):
        return inputs[start:stop]
    return family.subset(inputs, np.arange(start, stop))


def adagrad(
    family: PolicyFamily,
    inputs: Any,
    actions: np.ndarray,
    scaled_losses: np.ndarray,
    propensities: np.ndarray,
    *,
    clip: float,
    variance_penalty: float,
    l2_penalty: float = 0.0,
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
    loss_model: np.ndarray | None = None,
) -> SolverResult:
    r"""Minimise the CRM objective by minibatch AdaGrad on its variance majorizer (Alg. 1).

    .. math::

        g_t = \frac{1}{b}\sum_{i \in B_t}\left[\nabla u_i + \lambda\sqrt{n}
              (A \nabla u_i + 2 B u_i \nabla u_i)\right] + 2\mu w, \quad
        h_t = h_{t-1} + g_t^2, \quad
        w_{t+1} = w_t - \eta\, g_t / \sqrt{h_t}

    where B_t is a minibatch of b rows, n the training-set size, (A, B) the majorizer
    coefficients of Prop. 4 at the last majorization point, λ the variance penalty, μ the L2
    penalty, h the AdaGrad history (element-wise) and η the learning rate. Starts at w₀
    (``coef0``; default 0, the uniform policy). Re-majorizes on the full training set after
    every epoch and, when ``majorize_every`` is set, every that many minibatches. The history
    starts at h = 1 as in Alg. 1 (line 14), so early steps are plain SGD steps of size η. When
    an epoch raises the full-batch objective J, ½ then ¼ of the epoch's displacement are
    tried (one full pass each) and η is multiplied by the fraction that lowered J — the
    displacement a proportionally shorter step would have made, so the next epoch does not
    overshoot again; if neither lowers J the epoch is rejected and η is divided by 8 (the MM
    descent property of Prop. 4 only holds inside the majorizer's region of validity);
    rejected epochs do not count towards ``max_iter``. Stopping is on ‖∇J‖₂ ≤ tol, on the
    relative decrease of J over an accepted epoch ≤ tol, or on η falling below 10⁻³ of its
    initial value.

    Parameters
    ----------
    family : PolicyFamily
        Policy family.
    inputs : prepared inputs
        ``family.inputs_from_log(log)``, i.e. the contexts xᵢ.
    actions : ndarray
        Logged actions yᵢ.
    scaled_losses : ndarray of shape (n_samples,)
        Scaled losses δ'ᵢ ∈ [−1, 0].
    propensities : ndarray of shape (n_samples,)
        Logging propensities pᵢ.
    clip : float
        Weight cap M (``np.inf`` for none).
    variance_penalty : float
        λ ≥ 0; 0 gives IPS(S).
    l2_penalty : float, default=0.0
        μ ≥ 0.
    learning_rate : float, default=1.0
        AdaGrad step size η.
    batch_size : int, default=100
        Minibatch size b.
    max_iter : int, default=200
        Maximum number of accepted epochs (rejected epochs, at most 4 in all since each divides
        η by 8, do not count).
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
        Skip the full-batch pass after each epoch: the next majorizer and the stopping rule
        use the epoch's progressive statistics (each minibatch's statistics at the w it was
        evaluated at, summed over the epoch — Alg. 1's progressive validation), and an epoch
        whose progressive objective rose halves η instead of being rejected. About half the
        cost per epoch; J(w) and ∇J(w) are computed exactly once, at the end.
    initial_statistics : CRMStatistics or None, default=None
        The statistics at w₀ when already known (e.g. shared by a search's trials); None
        computes them.
    loss_model : ndarray of shape (n_samples, q + 1) or None, default=None
        Per-row additive loss model: the doubly robust objective
        (:func:`~poem.learners.objective.crm_statistics`); None: IPS.

    Returns
    -------
    SolverResult
        Final w, epochs, J(w), ‖∇J(w)‖, convergence flag and clipped-row count.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). Batch learning from logged bandit feedback through
    counterfactual risk minimization. JMLR 16, arXiv:1502.02362, §5.3, Prop. 4, Alg. 1.
    Duchi, J., Hazan, E. & Singer, Y. (2011). Adaptive subgradient methods. JMLR 12.
    """
    rng = random_state if random_state is not None else np.random.default_rng()
    n = family.n_rows(inputs)
    b = max(1, min(int(batch_size), n))

    def full(w: np.ndarray):
        return crm_statistics(
            w,
            family,
            inputs,
            actions,
            scaled_losses,
            propensities,
            clip,
            chunk_size=chunk_size,
            loss_model=loss_model,  # the epoch check and the majorizer: the objective minimized
        )

    w = np.zeros(family.coef_shape) if coef0 is None else np.array(coef0, dtype=np.float64)
    h = np.full(family.coef_shape, float(initial_accumulator))  # Alg. 1 line 14: h ← 1
    stats = full(w) if initial_statistics is None else initial_statistics
    value, grad = crm_objective_from_statistics(stats, w, variance_penalty, l2_penalty)
    coefficients = majorizer_coefficients(stats)
    eta = float(learning_rate)
    converged = bool(np.linalg.norm(grad) <= tol)
    epoch = accepted_epochs = 0
    while not converged and accepted_epochs < max_iter:
        epoch += 1
        w_start, h_start = w, h.copy()
        perm = rng.permutation(n)
        X = family.subset(inputs, perm)
        a, d, p = actions[perm], scaled_losses[perm], propensities[perm]
        m = None if loss_model is None else loss_model[perm]
        seen = []
        for k, start in enumerate(range(0, n, b)):
            if majorize_every and k and k % majorize_every == 0 and variance_penalty:
                coefficients = majorizer_coefficients(full(w))
            stop = min(n, start + b)
            rows = (_rows(X, start, stop, family), a[start:stop], d[start:stop], p[start:stop])
            m_rows = None if m is None else m[start:stop]
            if progressive:  # the epoch's statistics are kept for the next majorizer
                batch = crm_statistics(w, family, *rows, clip, loss_model=m_rows)
                seen.append(batch)
                g = majorized_gradient(
                    batch,
                    w,
                    coefficients,
                    n_total=n,
                    variance_penalty=variance_penalty,
                    l2_penalty=l2_penalty,
                )
            else:  # one VJP of one vector per step
                g = majorized_batch_gradient(
                    w,
                    family,
                    *rows,
                    clip,
                    coefficients,
                    n_total=n,
                    variance_penalty=variance_penalty,
                    l2_penalty=l2_penalty,
                    loss_model=m_rows,
                )
            h += g * g
            w = w - eta * g / np.sqrt(np.where(h > 0, h, 1.0))  # AdaGrad step (Alg. 1)
        if progressive:
            prog = sum(seen[1:], seen[0])  # progressive validation statistics of this epoch
            new_value, _ = crm_objective_from_statistics(prog, w, variance_penalty, l2_penalty)
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
            new_stats, w, variance_penalty, l2_penalty
        )
        if not np.isfinite(new_value) or new_value > value:
            # MM safeguard: the epoch raised the true objective (steps too long for the
            # majorizer's region of validity). Backtrack along the epoch's displacement and
            # shrink η by the fraction that worked (⅛ when none did: the epoch is rejected).
            step, accepted = w - w_start, False
            for fraction in _BACKTRACK:
                w_try = w_start + fraction * step
                new_stats = full(w_try)
                new_value, new_grad = crm_objective_from_statistics(
                    new_stats, w_try, variance_penalty, l2_penalty
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
        value, grad = crm_objective_from_statistics(stats, w, variance_penalty, l2_penalty)
    return SolverResult(
        w, epoch, float(value), float(np.linalg.norm(grad)), converged, stats.n_clipped
    )
