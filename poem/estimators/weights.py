"""Importance weights rᵢ = π(yᵢ|xᵢ) / pᵢ, their clipping and their diagnostics.

The weights are the only place where the target policy enters an off-policy estimate
(Swaminathan & Joachims 2015, JMLR 16, arXiv:1502.02362, Eq. (1)); the diagnostics
(effective sample size, clipped fraction) say how much a log can tell about that policy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "clip_weights",
    "clipped_fraction",
    "effective_sample_size",
    "importance_weights",
    "suggested_clip",
]

_N_EXAMPLES = 5


def _as_vector(values: Any, name: str) -> np.ndarray:
    """``values`` as a 1-d float array; ValueError naming ``name`` otherwise."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-dimensional (n_samples,), got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty; at least one row is needed")
    return arr.astype(np.float64, copy=False)


def _check_values(mask: np.ndarray, name: str, what: str) -> None:
    """Raise ``ValueError`` naming ``name``, the count and the first positions where ``mask``."""
    n_bad = int(mask.sum())
    if n_bad:
        rows = np.flatnonzero(mask)[:_N_EXAMPLES].tolist()
        raise ValueError(
            f"{name}: {n_bad:,} of {mask.size:,} values {what}; first positions: {rows}"
        )


def _check_weights(weights: Any, name: str = "weights") -> np.ndarray:
    """Validate importance weights: 1-d, finite and non-negative."""
    w = _as_vector(weights, name)
    _check_values(~np.isfinite(w), name, "are not finite (NaN or inf)")
    _check_values(w < 0, name, "are negative (weights are ratios of probabilities)")
    return w


def _check_losses(losses: Any, n_rows: int, other: str = "weights") -> np.ndarray:
    """Validate losses: 1-d, finite, with one entry per weight."""
    d = _as_vector(losses, "losses")
    if d.shape[0] != n_rows:
        raise ValueError(f"losses has {d.shape[0]:,} rows but {other} has {n_rows:,}")
    _check_values(~np.isfinite(d), "losses", "are not finite (NaN or inf)")
    return d


def _check_real(value: Any, name: str, what: str = "a real number") -> None:
    """Raise ``TypeError`` naming ``name`` unless ``value`` is a real number (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__}")


def _check_clip(clip: Any) -> float:
    """Validate the weight cap M > 0 (``inf`` allowed: no clipping)."""
    _check_real(clip, "clip")
    if np.isnan(clip) or clip <= 0:
        raise ValueError(f"clip must be > 0, got {clip!r}")
    return float(clip)


def importance_weights(target_probs: Any, propensities: Any) -> np.ndarray:
    r"""Compute the importance weights of the logged actions under a target policy.

    .. math:: r_i = \pi(y_i \mid x_i) / p_i

    where π(yᵢ|xᵢ) is the target policy's probability of the logged action and pᵢ the
    logging policy's (the propensity).

    Parameters
    ----------
    target_probs : array-like of shape (n_samples,)
        Probabilities of the logged actions under the target policy, in [0, 1], i.e. π(yᵢ|xᵢ).
    propensities : array-like of shape (n_samples,)
        Probabilities of the logged actions under the logging policy, in (0, 1], i.e. pᵢ.

    Returns
    -------
    ndarray of shape (n_samples,)
        The weights rᵢ ≥ 0.

    Raises
    ------
    ValueError
        If the lengths differ, ``target_probs`` leaves [0, 1] or ``propensities`` leaves
        (0, 1] (NaN and inf included); the message names the argument and the count.

    References
    ----------
    Swaminathan & Joachims (2015), Batch learning from logged bandit feedback through
    counterfactual risk minimization, JMLR 16, arXiv:1502.02362, Eq. (1).
    """
    pi = _as_vector(target_probs, "target_probs")
    p = _as_vector(propensities, "propensities")
    if pi.shape[0] != p.shape[0]:
        raise ValueError(
            f"target_probs has {pi.shape[0]:,} rows but propensities has {p.shape[0]:,}"
        )
    _check_values(~(np.isfinite(pi) & (pi >= 0) & (pi <= 1)), "target_probs", "are outside [0, 1]")
    _check_values(~(np.isfinite(p) & (p > 0) & (p <= 1)), "propensities", "are outside (0, 1]")
    return pi / p  # Eq. (1): rᵢ = π(yᵢ|xᵢ) / pᵢ


def clip_weights(weights: Any, clip: float) -> np.ndarray:
    r"""Cap importance weights at M.

    .. math:: \bar r_i = \min(M, r_i)

    where rᵢ is the importance weight and M the clip.

    Parameters
    ----------
    weights : array-like of shape (n_samples,)
        Importance weights, i.e. rᵢ.
    clip : float
        Weight cap, > 0 (``inf`` means no clipping), i.e. M.

    Returns
    -------
    ndarray of shape (n_samples,)
        The clipped weights min(M, rᵢ).

    Raises
    ------
    ValueError
        If ``weights`` has non-finite or negative values, or ``clip`` ≤ 0.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, §3 (the clipped estimator
    R̂^M just before Eq. (2)).
    """
    w = _check_weights(weights)
    return np.minimum(_check_clip(clip), w)


def effective_sample_size(weights: Any) -> float:
    r"""Kong's effective sample size of importance weights.

    .. math:: n_e = \Big(\sum_i r_i\Big)^2 \Big/ \sum_i r_i^2

    where rᵢ are the importance weights. n_e equals n when every weight is equal and falls
    towards 1 when one weight dominates; it is 0 when every weight is 0 (the target policy
    never takes a logged action).

    Parameters
    ----------
    weights : array-like of shape (n_samples,)
        Importance weights, i.e. rᵢ.

    Returns
    -------
    float
        The effective sample size n_e ∈ [0, n].

    Raises
    ------
    ValueError
        If ``weights`` is empty or has non-finite or negative values.

    References
    ----------
    Kong (1992), A note on importance sampling using standardized weights, Technical
    Report 348, Department of Statistics, University of Chicago.
    Owen (2013), Monte Carlo theory, methods and examples, §9.3 (effective sample size).
    """
    r = _check_weights(weights)
    largest = float(r.max())
    if largest == 0.0:
        return 0.0
    r = r / largest  # n_e is scale-free; rescaling keeps r² from under- or overflowing
    return float(r.sum()) ** 2 / float(np.dot(r, r))


def clipped_fraction(weights: Any, clip: float | None) -> float:
    r"""Fraction of rows whose importance weight reaches the cap M.

    .. math:: f_M = \frac{1}{n} \sum_i [r_i \ge M]

    where rᵢ are the importance weights and M the clip (the same rule as
    :func:`poem.learners.objective.crm_statistics`: a row with rᵢ ≥ M has zero gradient).

    Parameters
    ----------
    weights : array-like of shape (n_samples,)
        Importance weights, i.e. rᵢ.
    clip : float or None
        Weight cap, > 0, i.e. M. ``None`` (no clipping) gives 0.

    Returns
    -------
    float
        The clipped fraction f_M ∈ [0, 1].

    Raises
    ------
    ValueError
        If ``weights`` has non-finite or negative values, or ``clip`` ≤ 0.
    """
    r = _check_weights(weights)
    if clip is None:
        return 0.0
    return float(np.mean(r >= _check_clip(clip)))


def suggested_clip(propensities: Any) -> float:
    r"""Weight cap from the propensities' spread (paper §4.4 and §6, DESIGN §4.5).

    .. math:: M = p_{(90)} / p_{(10)}

    where p₍ₖ₎ is the k-th percentile of the propensities pᵢ: the weight a policy reaches by
    moving mass from typically-likely to typically-unlikely logged actions.

    Parameters
    ----------
    propensities : array-like of shape (n_samples,)
        Logging propensities, i.e. pᵢ.

    Returns
    -------
    float
        The clip M (1 for a uniform logger).

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, §6 ("the ratio of the 90%ile to
    the 10%ile propensity score").
    """
    p90, p10 = np.percentile(np.asarray(propensities, dtype=np.float64), [90, 10])
    return float(p90 / p10)
