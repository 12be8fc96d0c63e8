"""The counterfactual A/B gate's math: a paired comparison of two policies on one log.

Both policies are evaluated on the same rows, so their estimates are correlated; the gate
works with the paired per-row differences, whose mean estimates R(challenger) − R(champion)
without bias (DESIGN §5). The flows only call :func:`compare_policies` and publish
:meth:`PolicyComparison.to_markdown` / :meth:`PolicyComparison.to_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from poem.estimators.bounds import (
    INTERVAL_METHODS,
    _check_confidence_level,
    _check_option,
    standard_error,
)
from poem.estimators.ips import (
    ESTIMATORS,
    Estimate,
    _dispatch,
    _interval,
    _mean_statistic,
    _ratio_statistic,
    _snips_value_and_influence,
    resolve_loss_baseline,
    shift_estimate,
)
from poem.estimators.weights import _check_clip, _check_losses, _check_weights

__all__ = ["PolicyComparison", "compare_policies"]


@dataclass(frozen=True)
class PolicyComparison:
    """Outcome of the counterfactual A/B gate.

    Attributes
    ----------
    challenger, champion : Estimate
        Each policy's risk estimate on the log.
    difference : Estimate
        Paired estimate of R(challenger) − R(champion) with its two-sided interval; its ESS
        is the smaller and its clipped fraction the larger of the two policies'.
    upper_bound : float
        One-sided (1 − γ) upper confidence bound of the difference.
    promote : bool
        True iff ``upper_bound < -min_improvement`` and the challenger's ESS ≥ ``min_ess``.
    reasons : tuple of str
        One human-readable line per condition, starting with ``"passed:"`` or ``"failed:"``.
    min_improvement : float
        Required improvement (risk units).
    min_ess : float
        Required challenger effective sample size.
    """

    challenger: Estimate
    champion: Estimate
    difference: Estimate
    upper_bound: float
    promote: bool
    reasons: tuple[str, ...]
    min_improvement: float = 0.0
    min_ess: float = 0.0

    @property
    def decision(self) -> str:
        """``"promoted"`` or ``"rejected"``."""
        return "promoted" if self.promote else "rejected"

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (nested estimates, bound, decision, reasons, thresholds)."""
        return {
            "decision": self.decision,
            "promote": bool(self.promote),
            "upper_bound": float(self.upper_bound),
            "min_improvement": float(self.min_improvement),
            "min_ess": float(self.min_ess),
            "reasons": list(self.reasons),
            "challenger": self.challenger.to_dict(),
            "champion": self.champion.to_dict(),
            "difference": self.difference.to_dict(),
        }

    def to_markdown(self) -> str:
        """Small markdown report: estimates with intervals, difference, diagnostics, decision."""
        level = self.difference.confidence_level
        rows = [
            ("challenger", self.challenger),
            ("champion", self.champion),
            ("difference (challenger − champion)", self.difference),
        ]
        lines = [
            f"## Counterfactual A/B gate: {self.decision}",
            "",
            f"| | estimator | risk | {100 * level:g}% interval ({self.difference.method}) "
            "| std. error | effective sample size | clipped |",
            "|---|---|---|---|---|---|---|",
        ]
        for label, e in rows:
            lines.append(
                f"| {label} | {e.estimator} | {e.value:.4g} | [{e.lower:.4g}, {e.upper:.4g}] | "
                f"{e.std_error:.3g} | {e.effective_sample_size:,.1f} | {e.clipped_fraction:.1%} |"
            )
        lines += [
            "",
            f"One-sided {100 * level:g}% upper confidence bound of the difference: "
            f"**{self.upper_bound:.4g}** (promotion needs < {0.0 - self.min_improvement:.4g}); "
            f"n = {self.difference.n:,} rows; "
            f"minimum challenger effective sample size {self.min_ess:,.4g}.",
            "",
            f"**Decision: {self.decision}**",
            "",
        ]
        lines += [f"- {reason}" for reason in self.reasons]
        return "\n".join(lines) + "\n"


def _check_threshold(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    if not (np.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return float(value)


def compare_policies(
    losses: Any,
    challenger_weights: Any,
    champion_weights: Any,
    *,
    confidence_level: float = 0.95,
    min_improvement: float = 0.0,
    min_ess: float = 100.0,
    estimator: str = "ips",
    clip: float | None = None,
    interval: str = "t",
    random_state: Any = 0,
    loss_baseline: float = 0.0,
) -> PolicyComparison:
    r"""Paired off-policy comparison of a challenger with the champion, and the gate's decision.

    .. math::

        d_i = \delta_i (r^{c}_i - r^{h}_i), \quad \hat\Delta = \bar d, \quad
        U = \hat\Delta + q_{1-\gamma} \sqrt{\hat V(d)/n}, \quad
        \text{promote} \iff U < -\epsilon \ \wedge\ n_e(r^c) \ge n_{min}

    where δᵢ is the logged loss, r^c_i and r^h_i the challenger's and champion's importance
    weights (clipped at M for ``"clipped_ips"``), Δ̂ the estimated risk difference, V̂(d) the
    sample variance of the dᵢ, q_{1−γ} the one-sided Student-t (n − 1 degrees of freedom) or
    normal quantile, U the one-sided upper confidence bound, ε the minimum improvement,
    n_e Kong's effective sample size and n_min its minimum. For ``"snips"`` the dᵢ are the
    paired delta-method terms r^c_i(δᵢ − R̂^c)/r̄^c − r^h_i(δᵢ − R̂^h)/r̄^h of the
    two self-normalized estimates and Δ̂ = R̂^c − R̂^h. With ``interval="bootstrap"`` U is the
    (1 − γ) percentile of the paired bootstrap distribution of Δ̂.

    Parameters
    ----------
    losses : array-like of shape (n_samples,)
        Logged losses of the test split, i.e. δᵢ.
    challenger_weights : array-like of shape (n_samples,)
        Challenger's importance weights, i.e. r^c_i.
    champion_weights : array-like of shape (n_samples,)
        Champion's importance weights, i.e. r^h_i; all ones when the champion is the
        logging policy.
    confidence_level : float, default=0.95
        Confidence of the one-sided bound and of the intervals, in (0, 1), i.e. 1 − γ.
    min_improvement : float, default=0.0
        Required risk reduction, ≥ 0, in loss units, i.e. ε.
    min_ess : float, default=100.0
        Required challenger effective sample size, ≥ 0, i.e. n_min.
    estimator : {"ips", "clipped_ips", "snips"}, default="ips"
        Estimator of both risks and of their difference.
    clip : float or None, default=None
        Weight cap M; required for ``"clipped_ips"`` and rejected otherwise.
    interval : {"t", "normal", "bootstrap"}, default="t"
        Interval method.
    random_state : int, RandomState instance or None, default=0
        Seed of the bootstrap (used only when ``interval="bootstrap"``).
    loss_baseline : float, default=0.0
        Translation c: every estimate runs on δᵢ − c (c added back to each policy's risk; the
        difference does not move). The pairs dᵢ = (δᵢ − c)(r^c_i − r^h_i) stay unbiased for
        R(challenger) − R(champion) for any c because E[r^c_i − r^h_i] = 0; c = δ_max (what
        :func:`poem.gate.counterfactual_ab_test` passes) makes a challenger that merely avoids
        the logged actions look worse, not better.

    Returns
    -------
    PolicyComparison
        Both estimates, the paired difference, the bound U, the decision and its reasons.

    Raises
    ------
    ValueError
        If lengths differ, weights are non-finite or negative, ``confidence_level`` is not
        in (0, 1), ``min_improvement`` or ``min_ess`` is negative, ``estimator`` or
        ``interval`` is not an exact option name, or ``clip`` is ≤ 0, missing for or given
        to the wrong estimator.

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (1) (each risk).
    Owen (2013), Monte Carlo theory, methods and examples, §9.2 (delta method for ratio
    estimates, used for SNIPS).
    Kong (1992), A note on importance sampling using standardized weights, Technical Report
    348, University of Chicago (effective sample size).
    """
    wc = _check_weights(challenger_weights, "challenger_weights")
    wh = _check_weights(champion_weights, "champion_weights")
    if wh.size != wc.size:
        raise ValueError(
            f"champion_weights has {wh.size:,} rows but challenger_weights has {wc.size:,}"
        )
    c = resolve_loss_baseline(loss_baseline, (0.0, 0.0))
    d = _check_losses(losses, wc.size, "challenger_weights") - c  # translated losses δᵢ − c
    level = _check_confidence_level(confidence_level)
    epsilon = _check_threshold(min_improvement, "min_improvement")
    n_min = _check_threshold(min_ess, "min_ess")
    _check_option(estimator, "estimator", ESTIMATORS)
    _check_option(interval, "interval", INTERVAL_METHODS)
    kwargs = {"confidence_level": level, "interval": interval, "random_state": random_state}
    challenger = shift_estimate(_dispatch(estimator, d, wc, clip, **kwargs), c)
    champion = shift_estimate(_dispatch(estimator, d, wh, clip, **kwargs), c)

    if estimator == "clipped_ips":
        M = _check_clip(clip)
        wc, wh = np.minimum(M, wc), np.minimum(M, wh)
    if estimator == "snips":
        value_c, e_c = _snips_value_and_influence(d, wc)
        value_h, e_h = _snips_value_and_influence(d, wh)
        terms, value = e_c - e_h, value_c - value_h

        def statistic(loss, a, b):
            return _ratio_statistic(loss, a) - _ratio_statistic(loss, b)
    else:
        terms = d * (wc - wh)  # paired differences dᵢ (DESIGN §5)
        value = float(terms.mean())

        def statistic(loss, a, b):
            return _mean_statistic(loss, a) - _mean_statistic(loss, b)

    se = standard_error(terms)
    arrays = (d, wc, wh)
    lower, upper = _interval(statistic, arrays, value, se, d.size, level, interval, random_state)
    _, ucb = _interval(statistic, arrays, value, se, d.size, level, interval, random_state, "less")
    difference = Estimate(
        f"{estimator}_difference",
        float(value),
        se,
        lower,
        upper,
        int(d.size),
        level,
        min(challenger.effective_sample_size, champion.effective_sample_size),
        max(challenger.clipped_fraction, champion.clipped_fraction),
        interval,
    )

    # A challenger equal to the champion up to floating-point rounding gives a difference of
    # ~1e-17 with a standard error of ~0; without a noise floor its "bound" would be below 0.
    noise = 1e3 * np.finfo(np.float64).eps * float(np.mean(np.abs(d) * (np.abs(wc) + np.abs(wh))))
    improves = bool(ucb < -max(epsilon, noise))
    enough = bool(challenger.effective_sample_size >= n_min)
    reasons = (
        f"{'passed' if improves else 'failed'}: improvement: the one-sided {100 * level:g}% upper "
        f"confidence bound of R(challenger) - R(champion) ({estimator}, {interval} interval) "
        f"is {ucb:.4g}, "
        f"{'below' if improves else 'not below'} -min_improvement = {0.0 - epsilon:.4g}",
        f"{'passed' if enough else 'failed'}: effective sample size: the challenger's is "
        f"{challenger.effective_sample_size:,.1f} of {d.size:,} rows, "
        f"{'at least' if enough else 'below'} min_ess = {n_min:,.4g}",
    )
    return PolicyComparison(
        challenger, champion, difference, float(ucb), improves and enough, reasons, epsilon, n_min
    )
