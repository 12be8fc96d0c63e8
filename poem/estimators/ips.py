"""Inverse-propensity estimators of a policy's risk: IPS, clipped IPS and SNIPS.

Pure functions of the logged losses δᵢ and the importance weights rᵢ
(:func:`poem.estimators.weights.importance_weights`) returning a frozen :class:`Estimate`
with a standard error, a confidence interval and the weight diagnostics (DESIGN §4.2).
Risks are in the units of the losses given (lower is better).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from poem.estimators.bounds import (
    INTERVAL_METHODS,
    _check_confidence_level,
    _check_option,
    bootstrap_interval,
    confidence_interval,
    standard_error,
)
from poem.estimators.reliability import interval_flags
from poem.estimators.weights import (
    _check_clip,
    _check_losses,
    _check_weights,
    clipped_fraction,
    effective_sample_size,
    importance_weights,
)

__all__ = [
    "ESTIMATORS",
    "Estimate",
    "clipped_ips",
    "evaluate_policy",
    "evaluate_rows",
    "ips",
    "snips",
]

ESTIMATORS = ("ips", "clipped_ips", "snips")


@dataclass(frozen=True)
class Estimate:
    """An off-policy risk estimate with its uncertainty and weight diagnostics.

    Attributes
    ----------
    estimator : str
        ``"ips"``, ``"clipped_ips"``, ``"snips"`` (or ``"<name>_difference"`` for a paired
        difference, :func:`poem.estimators.compare.compare_policies`).
    value : float
        The risk estimate R̂ (units of the losses).
    std_error : float
        Its standard error.
    lower, upper : float
        Two-sided confidence interval at ``confidence_level``.
    n : int
        Number of rows.
    confidence_level : float
        Coverage of the interval, 1 − γ.
    effective_sample_size : float
        Kong's ESS of the weights the estimate uses.
    clipped_fraction : float
        Fraction of rows with rᵢ ≥ M (0 when nothing is clipped).
    method : str
        Interval method: ``"t"``, ``"normal"`` or ``"bootstrap"``.
    flags : tuple of str
        Reasons why the interval may cover less than ``confidence_level``
        (:func:`poem.estimators.reliability.interval_flags`); empty when none applies.
    """

    estimator: str
    value: float
    std_error: float
    lower: float
    upper: float
    n: int
    confidence_level: float
    effective_sample_size: float
    clipped_fraction: float
    method: str
    flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "flags", tuple(self.flags))  # a JSON list comes back as a tuple

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict of every field (plain ``str``, ``int`` and ``float``)."""
        out = asdict(self)
        for key, value in out.items():
            if isinstance(value, (float, np.floating)):
                out[key] = float(value)
            elif isinstance(value, (int, np.integer)):
                out[key] = int(value)
        out["flags"] = list(self.flags)
        return out

    @property
    def reliable(self) -> bool:
        """True when no reliability flag was raised for the interval."""
        return not self.flags

    def __str__(self) -> str:
        return (
            f"{self.estimator} = {self.value:.4g} (se {self.std_error:.3g}; "
            f"{100 * self.confidence_level:g}% {self.method} interval "
            f"[{self.lower:.4g}, {self.upper:.4g}]; "
            f"n = {self.n:,}, ESS = {self.effective_sample_size:,.1f})"
        )


# -- per-row statistics, vectorised over resamples (last axis = rows) ------------------------------
def _mean_statistic(losses: np.ndarray, weights: np.ndarray) -> np.ndarray:
    return np.mean(losses * weights, axis=-1)  # Eq. (1)


def _ratio_statistic(losses: np.ndarray, weights: np.ndarray) -> np.ndarray:
    total = np.sum(weights, axis=-1)
    safe = np.where(total > 0, total, 1.0)
    return np.where(total > 0, np.sum(losses * weights, axis=-1) / safe, np.nan)


def _snips_value_and_influence(losses: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray]:
    """SNIPS value and its delta-method linearisation eᵢ = rᵢ(δᵢ − R̂)/r̄ (mean zero)."""
    total = float(weights.sum())
    if total == 0.0:
        raise ValueError(
            "weights are all 0: the target policy puts no probability on any logged action, "
            "so SNIPS is undefined"
        )
    share = weights / total  # normalise first: no underflow for tiny weights
    value = float(np.dot(losses, share))
    return value, share * weights.size * (losses - value)  # eᵢ = rᵢ(δᵢ − R̂)/r̄


def _interval(statistic, arrays, value, se, n, level, method, random_state):
    """Two-sided interval of ``value``: t/normal from ``se``, or a bootstrap of ``statistic``."""
    if method == "bootstrap":
        return bootstrap_interval(
            statistic, arrays, confidence_level=level, random_state=random_state
        )
    return confidence_interval(value, se, n, level, method)


def _losses_and_weights(losses: Any, weights: Any) -> tuple[np.ndarray, np.ndarray]:
    """Validated losses δᵢ and weights rᵢ of the same length, at least two rows."""
    w = _check_weights(weights)
    d = _check_losses(losses, w.size)
    if d.size < 2:
        raise ValueError(f"losses has {d.size} row(s); at least 2 are needed for a standard error")
    return d, w


def _prepare(losses: Any, weights: Any, confidence_level: Any, interval: Any, random_state: Any):
    d, w = _losses_and_weights(losses, weights)
    level = _check_confidence_level(confidence_level)
    _check_option(interval, "interval", INTERVAL_METHODS)
    return d, w, (level, interval, random_state)


def _estimate(name, value, terms, statistic, d, w, options, clipped=0.0) -> Estimate:
    """The :class:`Estimate` of ``value`` with the standard error of its per-row ``terms``."""
    level, interval, random_state = options
    se, n = standard_error(terms), d.size
    lower, upper = _interval(statistic, (d, w), value, se, n, level, interval, random_state)
    ess, flags = effective_sample_size(w), interval_flags(terms, w, clipped)
    return Estimate(name, value, se, lower, upper, int(n), level, ess, clipped, interval, flags)


def ips(
    losses: Any,
    weights: Any,
    *,
    confidence_level: float = 0.95,
    interval: str = "t",
    random_state: Any = 0,
) -> Estimate:
    r"""Inverse propensity scoring (IPS) estimate of a policy's risk.

    .. math::

        \hat R(\pi) = \frac{1}{n} \sum_{i=1}^n u_i, \quad u_i = \delta_i r_i, \quad
        \mathrm{se} = \sqrt{\hat V(u) / n}

    where δᵢ is the logged loss, rᵢ = π(yᵢ|xᵢ)/pᵢ the importance weight, n the number of
    rows and V̂(u) the sample variance of the terms uᵢ. R̂ is unbiased when every action the
    target policy can take has pᵢ > 0.

    Parameters
    ----------
    losses : array-like of shape (n_samples,)
        Logged losses, i.e. δᵢ.
    weights : array-like of shape (n_samples,)
        Importance weights, ≥ 0, i.e. rᵢ.
    confidence_level : float, default=0.95
        Coverage of the interval, in (0, 1), i.e. 1 − γ.
    interval : {"t", "normal", "bootstrap"}, default="t"
        Student-t (n − 1 degrees of freedom), normal, or percentile-bootstrap interval.
    random_state : int, RandomState instance or None, default=0
        Seed of the bootstrap (used only when ``interval="bootstrap"``).

    Returns
    -------
    Estimate
        ``estimator="ips"``, clipped fraction 0.

    Raises
    ------
    ValueError
        If the lengths differ, there are fewer than two rows, values are non-finite,
        weights are negative, ``confidence_level`` is not in (0, 1) or ``interval`` is not
        an exact option name.

    References
    ----------
    Swaminathan & Joachims (2015), Batch learning from logged bandit feedback through
    counterfactual risk minimization, JMLR 16, arXiv:1502.02362, Eq. (1).
    """
    d, w, options = _prepare(losses, weights, confidence_level, interval, random_state)
    u = d * w  # Eq. (1) terms uᵢ = δᵢ rᵢ
    return _estimate("ips", float(u.mean()), u, _mean_statistic, d, w, options)


def clipped_ips(
    losses: Any,
    weights: Any,
    clip: float,
    *,
    confidence_level: float = 0.95,
    interval: str = "t",
    random_state: Any = 0,
) -> Estimate:
    r"""Clipped IPS estimate of a policy's risk (weights capped at M).

    .. math::

        \hat R^M(\pi) = \frac{1}{n} \sum_{i=1}^n u_i, \quad
        u_i = \delta_i \min(M, r_i), \quad
        \mathrm{se} = \sqrt{\hat V(u) / n}

    where δᵢ is the logged loss, rᵢ the importance weight, M the clip, n the number of rows
    and V̂(u) the sample variance of the uᵢ. Clipping trades bias for variance: for
    non-negative losses R̂^M ≤ R̂ and it grows with M; for the scaled losses δ' ≤ 0 it
    bounds R from above (paper §4.3).

    Parameters
    ----------
    losses, weights : array-like of shape (n_samples,)
        δᵢ and the (unclipped) rᵢ, as for :func:`ips`.
    clip : float
        Weight cap, > 0 (``inf`` disables clipping), i.e. M.
    confidence_level, interval, random_state
        As for :func:`ips`.

    Returns
    -------
    Estimate
        ``estimator="clipped_ips"``; ESS of the clipped weights; the fraction of rows with
        rᵢ ≥ M.

    Raises
    ------
    ValueError
        As :func:`ips`, and if ``clip`` ≤ 0.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, §3 (R̂^M just before Eq. (2)).
    Ionides (2008), Truncated importance sampling, J. Comput. Graph. Stat. 17(2),
    DOI:10.1198/106186008X320456.
    """
    d, w, options = _prepare(losses, weights, confidence_level, interval, random_state)
    M = _check_clip(clip)
    clipped, w = clipped_fraction(w, M), np.minimum(M, w)
    u = d * w  # Eq. (1) terms with the clipped weights min(M, rᵢ)
    return _estimate("clipped_ips", float(u.mean()), u, _mean_statistic, d, w, options, clipped)


def snips(
    losses: Any,
    weights: Any,
    *,
    confidence_level: float = 0.95,
    interval: str = "t",
    random_state: Any = 0,
) -> Estimate:
    r"""Self-normalized IPS (SNIPS) estimate of a policy's risk, with a delta-method interval.

    .. math::

        \hat R_{SN}(\pi) = \frac{\sum_i \delta_i r_i}{\sum_i r_i}, \quad
        \mathrm{se} = \sqrt{\hat V(e) / n}, \quad
        e_i = \frac{r_i (\delta_i - \hat R_{SN})}{\bar r}

    where δᵢ is the logged loss, rᵢ the importance weight, r̄ the mean weight, n the number
    of rows and V̂(e) the sample variance of the linearised terms eᵢ (first-order delta
    method for a ratio of means; Σeᵢ = 0). R̂_SN is a weighted mean of the losses, so it
    stays within [min δ, max δ]; it is biased by O(1/n) but has lower variance than IPS.

    Parameters
    ----------
    losses, weights : array-like of shape (n_samples,)
        δᵢ and rᵢ (not all 0), as for :func:`ips`.
    confidence_level, random_state
        As for :func:`ips`.
    interval : {"t", "normal", "bootstrap"}, default="t"
        Delta-method interval with Student-t or normal quantiles, or a percentile bootstrap
        of the ratio.

    Returns
    -------
    Estimate
        ``estimator="snips"``, clipped fraction 0.

    Raises
    ------
    ValueError
        As :func:`ips`, and if every weight is 0 (SNIPS undefined).

    References
    ----------
    Swaminathan & Joachims (2015), The self-normalized estimator for counterfactual
    learning, NeurIPS 28.
    Owen (2013), Monte Carlo theory, methods and examples, §9.2 (self-normalized importance
    sampling and its delta-method variance).
    """
    d, w, options = _prepare(losses, weights, confidence_level, interval, random_state)
    value, e = _snips_value_and_influence(d, w)
    return _estimate("snips", value, e, _ratio_statistic, d, w, options)


def _dispatch(estimator: str, losses: Any, weights: Any, clip: Any, **kwargs: Any) -> Estimate:
    _check_option(estimator, "estimator", ESTIMATORS)
    if estimator == "clipped_ips":
        if clip is None:
            raise ValueError("clip is required when estimator='clipped_ips'")
        return clipped_ips(losses, weights, clip, **kwargs)
    if clip is not None:
        raise ValueError(
            f"clip is only used by estimator='clipped_ips', got clip={clip!r} "
            f"with estimator={estimator!r}"
        )
    if estimator == "ips":
        return ips(losses, weights, **kwargs)
    return snips(losses, weights, **kwargs)


def evaluate_policy(
    policy: Any,
    log: Any,
    *,
    estimator: str = "ips",
    clip: float | None = None,
    confidence_level: float = 0.95,
    interval: str = "t",
    random_state: Any = 0,
    loss_baseline: str | float = "max",
) -> Estimate:
    r"""Estimate a stochastic policy's risk on a log.

    .. math:: r_i = \pi(y_i \mid x_i) / p_i

    where π(yᵢ|xᵢ) is the policy's served probability of the logged action (temperature and
    exploration floor included) and pᵢ the logged propensity; the weights rᵢ and the losses
    δᵢ then go to :func:`ips`, :func:`clipped_ips` or :func:`snips`.

    Parameters
    ----------
    policy : StochasticPolicy
        Target policy π (anything with ``log_action_probability_on(log)``).
    log : LoggedBandit
        Logged feedback (xᵢ, yᵢ, δᵢ, pᵢ).
    estimator : {"ips", "clipped_ips", "snips"}, default="ips"
        Which estimator.
    clip : float or None, default=None
        Weight cap M; required for ``"clipped_ips"`` and rejected otherwise.
    confidence_level, interval, random_state
        As for :func:`ips`.
    loss_baseline : "max" or float, default="max"
        Translation c: the estimator runs on δᵢ − c and c is added back,
        R̂ = c + (1/n) Σ (δᵢ − c) rᵢ, unbiased for every c because E[rᵢ] = 1. ``"max"`` uses
        c = δ_max (losses ≤ 0 as in the paper's §4.3, DESIGN §4.1), so a policy that merely
        avoids the logged actions is scored pessimistically (R̂ → δ_max), not optimistically
        (propensity overfitting, Swaminathan & Joachims 2015b). SNIPS does not depend on c;
        0.0 gives plain Eq. (1).

    Returns
    -------
    Estimate
        The estimate, in the log's loss units.

    Raises
    ------
    ValueError
        If ``estimator`` is unknown, ``clip`` is missing for or given to the wrong
        estimator, or any error of the chosen estimator.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (1).
    """
    _check_option(estimator, "estimator", ESTIMATORS)
    return evaluate_rows(
        log.losses,
        policy.log_action_probability_on(log),
        log.propensities,
        log.loss_bounds,
        estimator=estimator,
        clip=clip,
        confidence_level=confidence_level,
        interval=interval,
        random_state=random_state,
        loss_baseline=loss_baseline,
    )


def evaluate_rows(
    losses: Any,
    probabilities: Any,
    propensities: Any,
    loss_bounds: tuple[float, float],
    *,
    estimator: str = "ips",
    clip: float | None = None,
    confidence_level: float = 0.95,
    interval: str = "t",
    random_state: Any = 0,
    loss_baseline: str | float = "max",
) -> Estimate:
    r"""A policy's risk from per-row vectors: :func:`evaluate_policy` without the log.

    .. math:: r_i = \pi(y_i \mid x_i) / p_i

    where π(yᵢ|xᵢ) is the policy's probability of the logged action (computed where the rows
    live, e.g. :func:`poem.log_rows.policy_rows`) and pᵢ the logged propensity.

    Parameters
    ----------
    losses : array-like of shape (n_samples,)
        Logged losses, i.e. δᵢ.
    probabilities : array-like of shape (n_samples,)
        The policy's probability of each logged action, i.e. π(yᵢ|xᵢ).
    propensities : array-like of shape (n_samples,)
        Logged propensities, i.e. pᵢ.
    loss_bounds : tuple of float
        Declared (δ_min, δ_max) (``loss_baseline="max"`` uses δ_max).
    estimator, clip, confidence_level, interval, random_state, loss_baseline
        As for :func:`evaluate_policy`.

    Returns
    -------
    Estimate
        The estimate, in the losses' units.

    Raises
    ------
    ValueError
        As :func:`evaluate_policy`.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (1).
    """
    _check_option(estimator, "estimator", ESTIMATORS)
    c = resolve_loss_baseline(loss_baseline, loss_bounds)
    weights = importance_weights(probabilities, propensities)
    options = dict(confidence_level=confidence_level, interval=interval, random_state=random_state)
    d = np.asarray(losses) - c
    return shift_estimate(_dispatch(estimator, d, weights, clip, **options), c)


def resolve_loss_baseline(loss_baseline: str | float, loss_bounds: tuple[float, float]) -> float:
    """The translation c for ``loss_baseline`` ("max" → δ_max, or a finite number).

    Raises
    ------
    ValueError
        If ``loss_baseline`` is another string or not finite.
    """
    if isinstance(loss_baseline, str):
        if loss_baseline != "max":
            raise ValueError(f"loss_baseline must be 'max' or a number, got {loss_baseline!r}")
        return float(loss_bounds[1])
    c = float(loss_baseline)
    if not np.isfinite(c):
        raise ValueError(f"loss_baseline must be finite, got {loss_baseline!r}")
    return c


def shift_estimate(estimate: Estimate, c: float) -> Estimate:
    """Add the translation c back to an estimate's value and interval (SE unchanged)."""
    if c == 0.0:
        return estimate
    return replace(
        estimate, value=estimate.value + c, lower=estimate.lower + c, upper=estimate.upper + c
    )
