"""Trials of the counterfactual search: a fit's validation scores and the selection rule."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from poem.estimators.ips import Estimate, evaluate_rows

__all__ = [
    "SCORINGS",
    "Trial",
    "ess_floor",
    "rows_scores",
    "select_trial",
    "trial_from_model",
    "validation_scores",
]

SCORINGS = ("ips", "snips", "ips_ucb", "snips_ucb")


@dataclass(frozen=True)
class Trial:
    """One fitted configuration and its validation scores.

    Attributes
    ----------
    params : dict
        The hyperparameters set on the clone.
    ips : Estimate
        IPS estimate of the fitted policy's risk on the validation log.
    snips : Estimate
        SNIPS estimate on the validation log.
    effective_sample_size : float
        ESS (Σrᵢ)²/Σrᵢ² of the validation weights.
    clipped_fraction : float
        Fraction of training rows whose weight reached the clip M at the solution.
    objective : float
        Training objective J(w) (scaled-loss units).
    n_iter : int
        Solver epochs or iterations.
    converged : bool
        Whether the solver met its tolerance.
    seconds : float
        Wall-clock seconds of ``fit``.
    resolved : dict
        Resolved ``clip_`` and ``variance_penalty_``.
    estimator : object or None
        The fitted estimator when ``run_trial(..., keep_estimator=True)``; not part of
        :meth:`to_dict`.
    """

    params: dict
    ips: Estimate
    snips: Estimate
    effective_sample_size: float
    clipped_fraction: float
    objective: float
    n_iter: int
    converged: bool
    seconds: float
    resolved: dict = field(default_factory=dict)
    estimator: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, float]:
        """Flat metric dictionary (the keys the flows log to MLflow)."""
        return {
            "ips_risk": self.ips.value,
            "ips_risk_lower": self.ips.lower,
            "ips_risk_upper": self.ips.upper,
            "ips_std_error": self.ips.std_error,
            "snips_risk": self.snips.value,
            "snips_risk_lower": self.snips.lower,
            "snips_risk_upper": self.snips.upper,
            "effective_sample_size": float(self.effective_sample_size),
            "clipped_fraction": float(self.clipped_fraction),
            "objective": float(self.objective),
            "n_iter": float(self.n_iter),
            "converged": float(self.converged),
            "fit_seconds": float(self.seconds),
            **{f"resolved_{k}": float(v) for k, v in self.resolved.items()},
        }


def validation_scores(
    policy: Any, validation_log: Any, confidence_level: float = 0.95
) -> tuple[Estimate, Estimate]:
    """IPS and SNIPS estimates of a policy's risk on the validation log (SNIPS NaN if undefined).

    ``policy`` needs ``log_action_probability_on(log)``; the scores are
    :func:`rows_scores` of its probabilities on the log's rows.
    """
    probabilities = policy.log_action_probability_on(validation_log)  # once for both
    return rows_scores(
        validation_log.losses,
        probabilities,
        validation_log.propensities,
        validation_log.loss_bounds,
        confidence_level,
    )


def rows_scores(
    losses: Any,
    probabilities: Any,
    propensities: Any,
    loss_bounds: tuple[float, float],
    confidence_level: float = 0.95,
) -> tuple[Estimate, Estimate]:
    """IPS and SNIPS (NaN if undefined) of per-row vectors (``evaluate_rows``)."""
    rows = (losses, probabilities, propensities, loss_bounds)
    ips_est = evaluate_rows(*rows, estimator="ips", confidence_level=confidence_level)
    try:
        snips_est = evaluate_rows(*rows, estimator="snips", confidence_level=confidence_level)
    except ValueError:  # every weight is 0: SNIPS is undefined, recorded as NaN (ranks last)
        nan = float("nan")
        snips_est = Estimate(
            "snips", nan, nan, nan, nan, ips_est.n, confidence_level, 0.0, 0.0, ips_est.method
        )
    return ips_est, snips_est


def trial_from_model(
    model: Any,
    params: Mapping[str, Any],
    scores: tuple[Estimate, Estimate],
    *,
    seconds: float,
    keep_estimator: bool = False,
) -> Trial:
    """The :class:`Trial` of a fitted estimator and its validation ``(ips, snips)`` scores."""
    ips_est, snips_est = scores
    return Trial(
        params=dict(params),
        ips=ips_est,
        snips=snips_est,
        effective_sample_size=float(ips_est.effective_sample_size),
        clipped_fraction=float(model.clipped_fraction_),
        objective=float(model.objective_),
        n_iter=int(model.n_iter_),
        converged=bool(model.converged_),
        seconds=seconds,
        resolved={"clip": model.clip_, "variance_penalty": model.variance_penalty_},
        estimator=model if keep_estimator else None,
    )


def _key(value: float) -> float:
    return value if math.isfinite(value) else math.inf


def ess_floor(n_validation: int, fraction: float, minimum: float) -> float:
    """The search's ESS guard: max(``minimum`` rows, ``fraction`` of the validation rows).

    A trial whose validation ESS is below it ranks last (:func:`select_trial`); the floor in
    rows protects a small validation log, where a fraction is one or two rows.
    """
    return max(float(minimum), float(fraction) * n_validation)


def select_trial(
    trials: Sequence[Trial], scoring: str = "ips", *, min_effective_sample_size: float = 0.0
) -> int:
    r"""Index of the trial with the lowest estimated risk; the other estimator breaks ties.

    With ``"ips_ucb"``/``"snips_ucb"`` the criterion is the estimate's upper confidence bound
    (counterfactual risk minimization applied to the choice among trials: of two equal
    estimates, the one resting on more effective samples wins).

    Trials whose validation ESS is below ``min_effective_sample_size`` (DESIGN §4.6) rank after
    every trial that reaches it, and among themselves by ESS, largest first, so when no trial
    passes the guard the best-supported one is selected.

    Parameters
    ----------
    trials : sequence of Trial
        Scored trials.
    scoring : {"ips", "snips", "ips_ucb", "snips_ucb"}, default="ips"
        Primary criterion: the estimate (IPS is unbiased, paper §6) or its upper confidence
        bound; non-finite scores rank last.
    min_effective_sample_size : float, default=0.0
        ESS guard (0 disables it).

    Returns
    -------
    int
        Position of the selected trial (the first one among exact ties).

    Raises
    ------
    ValueError
        For an unknown scoring or an empty sequence.
    """
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {list(SCORINGS)}, got {scoring!r}")
    if len(trials) == 0:
        raise ValueError("select_trial needs at least one trial, got 0")
    name, _, bound = scoring.partition("_")
    other = "snips" if name == "ips" else "ips"
    field = "upper" if bound else "value"
    keys = []
    for i, t in enumerate(trials):
        thin = bool(t.effective_sample_size < min_effective_sample_size)
        score = (_key(getattr(getattr(t, name), field)), _key(getattr(getattr(t, other), field)))
        keys.append((thin, (-_key(t.effective_sample_size), 0.0) if thin else score, i))
    return min(keys)[-1]
