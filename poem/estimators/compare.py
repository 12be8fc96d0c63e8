"""The counterfactual A/B gate's math: a paired comparison of two policies on one log.

Both policies are evaluated on the same rows, so their estimates are correlated; the gate
works with the paired per-row differences, whose mean estimates R(challenger) − R(champion)
without bias (DESIGN §5). The flows only call :func:`compare_policies` and publish
:meth:`PolicyComparison.to_markdown` / :meth:`PolicyComparison.to_dict`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from poem.estimators.bounds import INTERVAL_METHODS, _check_confidence_level, _check_option
from poem.estimators.gate_options import gate_option
from poem.estimators.improvement import draw_entropy, improvement_lower_bound
from poem.estimators.ips import Estimate, resolve_loss_baseline, shift_estimate
from poem.estimators.weights import (
    _check_losses,
    _check_real,
    _check_values,
    _check_weights,
)

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
    min_improvement, min_ess, randomization, order_seed, max_weight
        The arguments of :func:`compare_policies` the decision used (ε, n_min, U, the seed
        of the rows' order and the declared weight bound B; None where not given).
        ``order_seed`` is the entropy the order (and U, in :func:`poem.gate.gate_decision`)
        was drawn from: with it the decision replays exactly.
    seed_given : bool
        True when ``order_seed`` was given by the caller (a replay of that draw, not a fresh
        one: the level holds over fresh draws only); False when it was drawn fresh.
    attempt : int
        Which attempt on this test window against this champion (1: the first); its α is
        1 − the difference's confidence level.
    family_alpha : float or None
        The α all attempts on the window share (the ledger's), or None when not ledgered.
    propensity_source : {"logged", "estimated"}
        Whether the test rows' propensities were logged or estimated (then the decision rests
        on estimated propensities: :func:`poem.gate_estimated.estimated_gate_decision`).
    """

    challenger: Estimate
    champion: Estimate
    difference: Estimate
    upper_bound: float
    promote: bool
    reasons: tuple[str, ...]
    min_improvement: float = 0.0
    min_ess: float = 0.0
    randomization: float | None = None
    order_seed: int | None = None
    max_weight: float | None = None
    attempt: int = 1
    family_alpha: float | None = None
    seed_given: bool = False
    propensity_source: str = "logged"

    @property
    def alpha(self) -> float:
        """The α this decision spent: 1 − the one-sided confidence level."""
        return 1.0 - self.difference.confidence_level

    @property
    def decision(self) -> str:
        """``"promoted"`` or ``"rejected"``."""
        return "promoted" if self.promote else "rejected"

    @property
    def estimator(self) -> str:
        """The gate option's name (:data:`~poem.estimators.gate_options.GATE_OPTIONS`)."""
        return self.difference.estimator.removesuffix("_difference")

    @property
    def flags(self) -> tuple[str, ...]:
        """Every reliability flag of the reported intervals, prefixed with its estimate."""
        return tuple(
            f"{role}: {flag}"
            for role in ("challenger", "champion", "difference")
            for flag in getattr(self, role).flags
        )

    def metrics(self) -> dict[str, float]:
        """Estimator-independent metric names (the estimator is the ``gate_estimator`` param).

        The one place the gate's metric keys are spelled: ``challenger_risk`` (and
        ``_lower``/``_upper``), ``champion_risk``, ``risk_difference``,
        ``risk_difference_ucb`` (the bound that decides), both effective sample sizes,
        ``gate_promoted`` and ``<role>_interval_flagged`` (1.0 when the interval may
        undercover).
        """
        out: dict[str, float] = {"gate_promoted": float(self.promote)}
        for name, est in (
            ("challenger_risk", self.challenger),
            ("champion_risk", self.champion),
            ("risk_difference", self.difference),
        ):
            out |= {name: est.value, f"{name}_lower": est.lower, f"{name}_upper": est.upper}
            out[f"{name.removesuffix('_risk')}_interval_flagged"] = float(bool(est.flags))
        out["risk_difference_ucb"] = self.upper_bound
        if self.randomization is not None:
            out["gate_randomization"] = self.randomization
        out |= {"gate_attempt": self.attempt, "gate_alpha": self.alpha}
        out["gate_seed_given"] = float(self.seed_given)  # the seed itself: to_dict (128 bits)
        out["gate_estimated_propensities"] = float(self.propensity_source == "estimated")
        out["challenger_effective_sample_size"] = self.challenger.effective_sample_size
        out["champion_effective_sample_size"] = self.champion.effective_sample_size
        return {k: float(v) for k, v in out.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (nested estimates, bound, decision, reasons, thresholds)."""
        return {
            "decision": self.decision,
            "promote": bool(self.promote),
            "upper_bound": float(self.upper_bound),
            "min_improvement": float(self.min_improvement),
            "min_ess": float(self.min_ess),
            "randomization": self.randomization,
            "order_seed": self.order_seed,
            "seed_given": bool(self.seed_given),
            "max_weight": self.max_weight,
            "attempt": self.attempt,
            "alpha": self.alpha,
            "family_alpha": self.family_alpha,
            "estimator": self.estimator,
            "propensity_source": self.propensity_source,
            "reasons": list(self.reasons),
            "flags": list(self.flags),
            "metrics": self.metrics(),
            "challenger": self.challenger.to_dict(),
            "champion": self.champion.to_dict(),
            "difference": self.difference.to_dict(),
        }

    def to_markdown(self) -> str:
        """Small markdown report: estimates with intervals, difference, diagnostics, decision."""
        level = self.difference.confidence_level
        ledger = " (no attempt ledger)."
        if self.family_alpha is not None:
            ledger = f" of the window's {self.family_alpha:.4g}."
        order = ""
        if self.order_seed is not None:
            drawn = (
                "given (a replay of that draw, not a fresh attempt)"
                if self.seed_given
                else "drawn fresh for this attempt"
            )
            order = f" Rows in the random order of seed {self.order_seed}, {drawn}."
        rows = [
            ("challenger", self.challenger),
            ("champion", self.champion),
            ("difference (challenger − champion)", self.difference),
        ]
        source = []
        if self.propensity_source == "estimated":
            source = [
                "**Rests on estimated propensities** (the log recorded none): doubly robust "
                "terms with a margin for the propensity model's error; see the reasons.",
                "",
            ]
        lines = [
            f"## Counterfactual A/B gate: {self.decision}",
            "",
            *source,
            f"| | estimator | risk | {100 * level:g}% interval ({self.difference.method}) "
            "| std. error | effective sample size | clipped | interval reliable |",
            "|---|---|---|---|---|---|---|---|",
            *(
                f"| {label} | {e.estimator} | {e.value:.4g} | [{e.lower:.4g}, {e.upper:.4g}] | "
                f"{e.std_error:.3g} | {e.effective_sample_size:,.1f} | {e.clipped_fraction:.1%} | "
                f"{'yes' if e.reliable else 'no (see flags)'} |"
                for label, e in rows
            ),
            "",
            f"One-sided {100 * level:g}% upper confidence bound of the difference "
            f"({self.estimator} terms, {_bound_kind(self.randomization)}): "
            f"**{self.upper_bound:.4g}** (promotion needs < {0.0 - self.min_improvement:.4g}); "
            f"n = {self.difference.n:,} rows; "
            f"minimum challenger effective sample size {self.min_ess:,.4g}.",
            "",
            f"Attempt {self.attempt} on this test window against this champion: "
            f"α = {self.alpha:.4g}{ledger}{order}",
            "",
            f"**Decision: {self.decision}**",
            "",
            *(f"- {reason}" for reason in self.reasons),
        ]
        if self.flags:
            lines += [
                "",
                "Intervals that may cover less than their level (they do not decide; the "
                "bound above is valid at every n):",
                "",
                *(f"- {flag}" for flag in self.flags),
            ]
        return "\n".join(lines) + "\n"


def _bound_kind(randomization: float | None) -> str:
    """How the decisive bound was made, for the report and the reasons."""
    if randomization is None:
        return "betting bound valid at every n"
    return (
        f"randomized betting bound, U = {randomization:.4g}: it also promotes when the "
        "capital at the end of the log reaches U/α; valid at every n over the draw of U"
    )


def _check_threshold(value: Any, name: str) -> float:
    _check_real(value, name)
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
    loss_bounds: tuple[float, float] | None = None,
    max_weight: float | None = None,
    randomization: float | None = None,
    order_seed: int | None = None,
    total_variation: Any = None,
) -> PolicyComparison:
    r"""Paired off-policy comparison of a challenger with the champion, and the gate's decision.

    .. math::

        U = -\hat I_{LB}, \quad
        \text{promote} \iff U < -\epsilon \ \wedge\ n_e(r^c) \ge n_{min}

    where Î_LB is the betting lower confidence bound on R(champion) − R(challenger)
    (:func:`poem.estimators.improvement.improvement_lower_bound`, valid at every n), U the
    one-sided (1 − γ) upper confidence bound of R(challenger) − R(champion), ε the minimum
    improvement, n_e Kong's effective sample size of the challenger's weights r^c and n_min
    its minimum. The reported point estimates and two-sided intervals are the chosen
    estimator's (IPS, clipped IPS or SNIPS on δᵢ − c with the ``interval`` method; the
    difference uses the paired terms dᵢ = (δᵢ − c)(r^c_i − r^h_i), or the paired
    delta-method terms for SNIPS); they do not decide, and they carry reliability flags
    (:func:`poem.estimators.reliability.interval_flags`) when they may undercover.

    Guarantee: P(promote) ≤ γ when (1/n)Σᵢ(Rᵢ(challenger) − Rᵢ(champion)) ≥ −ε, with Rᵢ the
    risks at row i's context and time, under the assumptions of
    :func:`~poem.estimators.improvement.improvement_lower_bound` (with ``randomization``,
    over the draw of U).

    Parameters
    ----------
    losses : array-like of shape (n_samples,)
        Logged losses of the test split, in logged order, i.e. δᵢ.
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
        The gate option (:func:`~poem.estimators.gate_options.gate_option`: any name in
        ``GATE_OPTIONS``): the estimator of both risks, of their difference and of the bound's
        terms.
    clip : float or None, default=None
        Weight cap M; required for ``"clipped_ips"`` and rejected otherwise. The bound clips
        only the challenger's weights (pessimistic); the reported clipped estimates estimate
        the clipped risks and are flagged when any weight reaches M.
    interval, random_state
        As for :func:`~poem.estimators.ips.ips`, for the reported intervals (not the decision).
    loss_baseline : float, default=0.0
        Translation c of the reported estimates: they run on δᵢ − c with c added back to
        each risk (the difference does not move; :func:`poem.gate.counterfactual_ab_test`
        passes δ_max).
    loss_bounds : tuple of float or None, default=None
        (δ_min, δ_max) of the losses, i.e. (a, b); None uses the smallest and largest loss
        on the log (then it is assumed no loss can lie outside them).
    max_weight : float or None, default=None
        Declared weight bound B, as for :func:`~poem.estimators.improvement.improvement_capitals`.
    randomization : float or None, default=None
        U ~ Uniform(0, 1], independent of the log (e.g. :func:`poem.gate.decision_coin`):
        the bound also rejects when the final capital Kₙ ≥ U/γ; None: deterministic.
    order_seed : int or None, default=None
        Seed of the rows' random order (:func:`~poem.estimators.improvement.shuffle_rows`);
        None draws fresh entropy (:func:`~poem.estimators.improvement.draw_entropy`), the only
        way the bound is valid over the order. Kept in the result (with ``seed_given``), so
        the decision can be replayed.
    total_variation : array-like of shape (n_samples,) or None, default=None
        TV(xᵢ) (:func:`poem.gate.policy_total_variation`), as for
        :func:`~poem.estimators.improvement.improvement_capitals`.

    Returns
    -------
    PolicyComparison
        Both estimates, the paired difference, the bound U, the decision and its reasons.

    Raises
    ------
    ValueError
        If lengths differ, weights are non-finite or negative, ``confidence_level`` is not
        in (0, 1), ``min_improvement`` or ``min_ess`` is negative, ``estimator`` or
        ``interval`` is not an exact option name, ``clip`` is ≤ 0, missing for or given
        to the wrong estimator, a loss lies outside ``loss_bounds``, a weight above
        ``max_weight`` or ``randomization`` outside (0, 1].

    References
    ----------
    Waudby-Smith & Ramdas (2024), Estimating means of bounded random variables by betting,
    JRSS-B 86(1), arXiv:2010.09686 (the bound).
    Ramdas & Manole (2023), Randomized and exchangeable improvements of Markov's,
    Chebyshev's and Chernoff's inequalities, arXiv:2304.02611, §4 (randomized Ville).
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
    raw = _check_losses(losses, wc.size, "challenger_weights")
    c = resolve_loss_baseline(loss_baseline, (0.0, 0.0))
    d = raw - c  # translated losses δᵢ − c (reported estimates only)
    level = _check_confidence_level(confidence_level)
    epsilon = _check_threshold(min_improvement, "min_improvement")
    n_min = _check_threshold(min_ess, "min_ess")
    option = gate_option(estimator)  # owns the reported estimates, their intervals, the terms
    _check_option(interval, "interval", INTERVAL_METHODS)
    if loss_bounds is None:
        lo, hi = float(raw.min()), float(raw.max())
    else:
        lo, hi = (float(v) for v in loss_bounds)
        if not (np.isfinite(lo) and np.isfinite(hi) and lo <= hi):
            raise ValueError(f"loss_bounds must be finite with min <= max, got {loss_bounds!r}")
        _check_values((raw < lo) | (raw > hi), "losses", f"are outside loss_bounds {lo:g}..{hi:g}")
    bound = None if max_weight is None else float(max_weight)
    if bound is not None:
        if not (np.isfinite(bound) and bound >= 1.0):
            raise ValueError(f"max_weight must be finite and >= 1, got {max_weight!r}")
        above = np.maximum(wc, wh) > bound * (1 + 1e-12)
        _check_values(above, "weights", f"are above max_weight = {bound:g}")
    if randomization is not None:
        _check_real(randomization, "randomization", "a real number or None")
        if not (0.0 < randomization <= 1.0):
            raise ValueError(f"randomization must be in (0, 1], got {randomization!r}")
    coin = None if randomization is None else float(randomization)
    seed_given = order_seed is not None
    integer = isinstance(order_seed, (int, np.integer)) and not isinstance(order_seed, bool)
    if seed_given and not integer:
        raise ValueError(f"order_seed must be an integer or None (fresh), got {order_seed!r}")
    seed = draw_entropy() if order_seed is None else int(order_seed)
    tv = None
    if total_variation is not None:
        tv = np.asarray(total_variation, dtype=np.float64)
        if tv.shape != (wc.size,):
            raise ValueError(
                f"total_variation has shape {tv.shape}, expected ({wc.size},) (one per row)"
            )
        outside = ~np.isfinite(tv) | (tv < 0) | (tv > 1 + 1e-9)
        _check_values(outside, "total_variation", "are outside [0, 1]")
        tv = np.minimum(tv, 1.0)
    kwargs = {"confidence_level": level, "interval": interval, "random_state": random_state}
    challenger = shift_estimate(option.estimate(d, wc, clip, **kwargs), c)
    champion = shift_estimate(option.estimate(d, wh, clip, **kwargs), c)
    lcb = improvement_lower_bound(
        raw,
        wc,
        wh,
        estimator=estimator,
        loss_bounds=(lo, hi),
        max_weight=bound,
        clip=clip,
        confidence_level=level,
        randomization=coin,
        order_seed=seed,
        total_variation=tv,
    )
    # a challenger with the champion's probability of every logged action cannot be shown
    # better (the bound-free terms would add the noise (b − a)(r^h − 1) to its zero terms)
    ucb = max(-float(lcb), 0.0) if np.array_equal(wc, wh) else -float(lcb)
    difference = option.paired_difference(d, wc, wh, clip, level, interval, random_state)
    difference = replace(
        difference,
        effective_sample_size=min(challenger.effective_sample_size, champion.effective_sample_size),
        clipped_fraction=max(challenger.clipped_fraction, champion.clipped_fraction),
    )

    # A challenger equal to the champion up to floating-point rounding gives a difference of
    # ~1e-17 with a standard error of ~0; without a noise floor its "bound" would be below 0.
    noise = 1e3 * np.finfo(np.float64).eps * float(np.mean(np.abs(d) * (np.abs(wc) + np.abs(wh))))
    improves = bool(ucb < -max(epsilon, noise))
    logger = bool(np.all(wh == 1.0))
    enough = bool(challenger.effective_sample_size >= n_min)
    reasons = (
        f"{'passed' if improves else 'failed'}: improvement: the one-sided {100 * level:g}% upper "
        f"confidence bound of R(challenger) - R(champion) ({estimator} terms, "
        f"{_bound_kind(coin)}) is {ucb:.4g}, "
        f"{'below' if improves else 'not below'} -min_improvement = {0.0 - epsilon:.4g}",
        f"{'passed' if enough else 'failed'}: effective sample size: the challenger's is "
        f"{challenger.effective_sample_size:,.1f} of {d.size:,} rows, "
        f"{'at least' if enough else 'below'} min_ess = {n_min:,.4g}",
        f"assumed: {option.assumption(logger, bound, tv is not None)}",
    )
    return PolicyComparison(
        challenger,
        champion,
        difference,
        ucb,
        improves and enough,
        reasons,
        epsilon,
        n_min,
        coin,
        order_seed=seed,
        max_weight=bound,
        seed_given=seed_given,
    )
