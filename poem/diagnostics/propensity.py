"""Propensity sanity checks (DESIGN §4.6): :func:`propensity_report` → :class:`PropensityReport`.

The hard invariants (p finite and in (0, 1], valid actions, bounded losses) are enforced by
:class:`poem.data.LoggedBandit` itself; this module checks whether the propensities look like
those of a *stochastic logger* and how much a log can tell about a target policy. Every
check gets a status ``"pass" | "warn" | "fail"`` from :class:`PropensityThresholds` and a
one-line explanation. Checks that do not apply (support for candidate sets, the logging
distribution when the log has none, ESS without a target policy) are left out.

The key test uses the uniform reference policy u: its importance weights
wᵢ = u(yᵢ|xᵢ)/pᵢ have expectation exactly 1 under the logger when the logger has full
support, so a confidence interval of their mean that excludes 1 signals propensities that are
not the logger's (e.g. all multiplied by 0.5 gives a mean of 2).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poem.data import LoggedBandit
from poem.estimators.bounds import confidence_interval, standard_error
from poem.estimators.reliability import interval_flags
from poem.estimators.weights import (
    clipped_fraction,
    effective_sample_size,
    importance_weights,
    suggested_clip,
)
from poem.exceptions import PropensityWarning

__all__ = [
    "PropensityCheck",
    "PropensityReport",
    "PropensityThresholds",
    "propensity_report",
    "reference_probabilities",
    "report_from_statistics",
    "suggested_clip",
    "support_and_distribution",
]

STATUSES = ("pass", "warn", "fail")
_QUANTILES = (0.0, 0.01, 0.1, 0.5, 0.9, 1.0)
QUANTILE_NAMES = ("min", "p01", "p10", "p50", "p90", "max")


@dataclass(frozen=True)
class PropensityThresholds:
    """Thresholds of the propensity checks (``checks`` section of ``mlflow.yml``).

    Parameters
    ----------
    min_propensity_warn : float, default=1e-4
        Warn when the smallest propensity is below this (weights up to 1/p).
    near_deterministic_epsilon : float, default=1e-3
        A row is near-deterministic when p ≥ 1 − ε.
    near_deterministic_warn, near_deterministic_fail : float, default=0.5, 0.99
        Fractions of near-deterministic rows that warn / fail.
    uniform_weight_fail_tolerance : float, default=0.25
        Fail when the confidence interval of the mean uniform weight lies entirely outside
        [1 − tol, 1 + tol]; warn when it merely excludes 1.
    uniform_weight_min_ess : float, default=100
        Below this effective sample size of the uniform weights their mean is too heavy-tailed
        for a normal interval (e.g. multilabel logs with many labels, where u = 2^-q): the
        check is then inconclusive and only warns.
    min_ess_fraction_warn, min_ess_fraction_fail : float, default=0.1, 0.01
        ESS/n of the target policy below which to warn / fail.
    never_logged_warn, never_logged_fail : float, default=0.0, 0.5
        Fractions of actions (labels) never logged above which to warn / fail.
    distribution_tolerance : float, default=1e-6
        Tolerance of the logging-distribution checks (sum to 1, equals p at yᵢ).
    clipped_fraction_warn : float, default=0.05
        Warn when more weights than this reach the suggested clip M.
    confidence_level : float, default=0.95
        Level of the confidence interval of the mean uniform weight.
    """

    min_propensity_warn: float = 1e-4
    near_deterministic_epsilon: float = 1e-3
    near_deterministic_warn: float = 0.5
    near_deterministic_fail: float = 0.99
    uniform_weight_fail_tolerance: float = 0.25
    uniform_weight_min_ess: float = 100.0
    min_ess_fraction_warn: float = 0.1
    min_ess_fraction_fail: float = 0.01
    never_logged_warn: float = 0.0
    never_logged_fail: float = 0.5
    distribution_tolerance: float = 1e-6
    clipped_fraction_warn: float = 0.05
    confidence_level: float = 0.95

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if not 0 < self.confidence_level < 1:
            raise ValueError(f"confidence_level must be in (0, 1), got {self.confidence_level!r}")


@dataclass(frozen=True)
class PropensityCheck:
    """One check: name, status, the measured value and a one-line explanation."""

    name: str
    status: str
    value: float
    explanation: str
    details: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")


@dataclass(frozen=True)
class PropensityReport:
    """All propensity checks of one log (DESIGN §4.6).

    Attributes
    ----------
    n_rows : int
        Rows checked.
    family : str
        Policy family.
    quantiles : dict
        Propensity quantiles ``{"min", "p01", "p10", "p50", "p90", "max"}``.
    suggested_clip : float
        M = p₉₀/p₁₀ of the propensities (DESIGN §4.5).
    checks : tuple of PropensityCheck
        The checks, in a fixed order.
    target : str or None
        Description of the target policy used for ESS / clipping, if any.
    """

    n_rows: int
    family: str
    quantiles: dict
    suggested_clip: float
    checks: tuple[PropensityCheck, ...]
    target: str | None = None

    @property
    def status(self) -> str:
        """The worst status of all checks."""
        return max((c.status for c in self.checks), key=STATUSES.index, default="pass")

    @property
    def failed(self) -> tuple[PropensityCheck, ...]:
        """Checks with status ``"fail"``."""
        return tuple(c for c in self.checks if c.status == "fail")

    @property
    def warnings(self) -> tuple[PropensityCheck, ...]:
        """Checks with status ``"warn"``."""
        return tuple(c for c in self.checks if c.status == "warn")

    def check(self, name: str) -> PropensityCheck:
        """Return the check called ``name`` (KeyError if absent)."""
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; have {[c.name for c in self.checks]}")

    def emit_warnings(self) -> None:
        """Emit one :class:`poem.PropensityWarning` per warning or failure."""
        for c in self.checks:
            if c.status != "pass":
                warnings.warn(
                    f"{c.name} ({c.status}): {c.explanation}", PropensityWarning, stacklevel=2
                )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict."""
        return {
            "status": self.status,
            "n_rows": self.n_rows,
            "family": self.family,
            "target": self.target,
            "quantiles": dict(self.quantiles),
            "suggested_clip": self.suggested_clip,
            "checks": [
                {
                    "name": c.name,
                    "status": c.status,
                    "value": c.value,
                    "explanation": c.explanation,
                    "details": c.details,
                }
                for c in self.checks
            ],
        }

    def to_markdown(self) -> str:
        """Markdown table: one row per check."""
        q = ", ".join(f"{k} {v:.3g}" for k, v in self.quantiles.items())
        lines = [
            f"**Propensity checks: {self.status.upper()}** ({self.n_rows:,} rows; propensity {q}; "
            f"suggested clip M = {self.suggested_clip:.3g})",
            "",
            "| check | status | value | explanation |",
            "|---|---|---:|---|",
        ]
        lines += [
            f"| {c.name} | {c.status} | {c.value:.4g} | {c.explanation} |" for c in self.checks
        ]
        return "\n".join(lines)


def reference_probabilities(log: LoggedBandit) -> np.ndarray:
    r"""Probabilities of the logged actions under the uniform reference policy.

    .. math::

        u(y_i \mid x_i) = 1/K \text{ (discrete)},\ 1/k_i \text{ (candidates)},\
        2^{-q} \text{ (multilabel)}

    where K is the number of actions, kᵢ the size of row i's candidate set and q the number
    of labels.
    """
    n = log.n_rows
    if log.family == "candidates":
        assert log.candidates is not None
        return 1.0 / log.candidates.sizes.astype(np.float64)
    if log.family == "multilabel":
        return np.full(n, 2.0 ** -float(log.n_actions))
    return np.full(n, 1.0 / float(log.n_actions))


def _grade(bad: bool, fail: bool) -> str:
    return "fail" if fail else ("warn" if bad else "pass")


def support_and_distribution(
    log: LoggedBandit, tolerance: float
) -> tuple[np.ndarray | None, tuple[int, int, int] | None]:
    """Per-action logged counts and the logging-distribution check's counts (DESIGN §4.6).

    Parameters
    ----------
    log : LoggedBandit
        The log (or one partition of it: both results add up over partitions).
    tolerance : float
        Allowed deviation of a row's distribution sum from 1 and of its entry at yᵢ from pᵢ.

    Returns
    -------
    support : ndarray of shape (n_actions,) or None
        Times each action (label) was logged; None for candidate sets.
    distribution : tuple of int or None
        Rows whose distribution does not sum to 1, rows whose entry at the logged action
        differs from pᵢ, and rows with either; None when the log carries no distribution.
    """
    support = None
    if log.family == "discrete":
        support = np.bincount(log.actions, minlength=int(log.n_actions)).astype(np.int64)
    elif log.family == "multilabel":
        support = np.asarray(log.actions.sum(axis=0), dtype=np.int64).ravel()
    distribution = None
    if log.logging_distribution is not None:
        dist, p = log.logging_distribution, log.propensities
        bad_sum = np.abs(dist.sum(axis=1) - 1.0) > tolerance
        bad_p = np.abs(dist[np.arange(log.n_rows), log.actions] - p) > tolerance
        distribution = (int(bad_sum.sum()), int(bad_p.sum()), int((bad_sum | bad_p).sum()))
    return support, distribution


def propensity_report(
    log: LoggedBandit,
    *,
    target_policy: Any = None,
    thresholds: PropensityThresholds | None = None,
) -> PropensityReport:
    """Run the propensity sanity checks of DESIGN §4.6 on a (valid) log.

    Parameters
    ----------
    log : LoggedBandit
        The log; its hard invariants already hold.
    target_policy : StochasticPolicy or None, default=None
        When given, the ESS of its importance weights is checked and the clipped fraction
        uses its weights (else the uniform reference policy's).
    thresholds : PropensityThresholds or None, default=None
        Thresholds; defaults when None.

    Returns
    -------
    PropensityReport
    """
    t = thresholds or PropensityThresholds()
    p, n = log.propensities, log.n_rows
    qs = np.quantile(p, _QUANTILES)
    quantiles = dict(zip(QUANTILE_NAMES, (float(v) for v in qs), strict=True))
    clip = suggested_clip(p)
    w = importance_weights(reference_probabilities(log), p)
    uniform = None
    if w.size >= 2:
        uniform = (standard_error(w), effective_sample_size(w), interval_flags(w, w))
    support, distribution = support_and_distribution(log, t.distribution_tolerance)
    target, target_ess, weights = None, None, w
    if target_policy is not None:
        weights = importance_weights(target_policy.log_action_probability_on(log), p)
        target_ess = effective_sample_size(weights)
        target = f"{type(target_policy).__name__}({target_policy.family.__class__.__name__})"
    return report_from_statistics(
        t,
        n=n,
        family=log.family,
        quantiles=quantiles,
        clip=clip,
        near_deterministic=float(np.mean(p >= 1.0 - t.near_deterministic_epsilon)),
        uniform_mean=float(w.mean()),
        uniform=uniform,
        support=support,
        distribution=distribution,
        target=target,
        target_ess=target_ess,
        clipped=clipped_fraction(weights, clip),
    )


def report_from_statistics(
    t: PropensityThresholds,
    *,
    n: int,
    family: str,
    quantiles: dict,
    clip: float,
    near_deterministic: float,
    uniform_mean: float,
    uniform: tuple[float, float, tuple[str, ...]] | None,
    support: np.ndarray | None,
    distribution: tuple[int, int, int] | None,
    target: str | None,
    target_ess: float | None,
    clipped: float,
) -> PropensityReport:
    """Grade and explain the checks from a log's statistics (the one place that does).

    :func:`propensity_report` computes the statistics of a log in memory,
    :func:`poem.diagnostics.propensity_summary.summary_report` from the merged summaries of
    its partitions.

    Parameters
    ----------
    t : PropensityThresholds
        Thresholds.
    n : int
        Rows.
    family : str
        Policy family.
    quantiles : dict
        Propensity quantiles ``{"min", "p01", "p10", "p50", "p90", "max"}``.
    clip : float
        Suggested clip M = p₉₀/p₁₀.
    near_deterministic : float
        Fraction of rows with p ≥ 1 − ε.
    uniform_mean : float
        Mean weight of the uniform reference policy.
    uniform : tuple or None
        Its standard error, Kong's ESS and :func:`~poem.estimators.reliability.interval_flags`
        (None for fewer than 2 rows).
    support : ndarray or None
        Rows per action (discrete) or per label switched on (multilabel); None for candidates.
    distribution : tuple of int or None
        Rows whose logging distribution does not sum to 1, rows where it differs from p at
        the logged action, rows with either problem; None without a logging distribution.
    target : str or None
        Description of the target policy.
    target_ess : float or None
        Kong's ESS of the target's weights.
    clipped : float
        Fraction of the target's (else the uniform policy's) weights reaching M.

    Returns
    -------
    PropensityReport
    """
    lo = quantiles["min"]
    checks = [
        PropensityCheck(
            "min_propensity",
            _grade(lo < t.min_propensity_warn, False),
            float(lo),
            f"smallest propensity {lo:.3g} (largest weight 1/p = {1 / lo:.3g}); "
            f"warn below {t.min_propensity_warn:g}",
        ),
    ]
    frac = near_deterministic
    checks.append(
        PropensityCheck(
            "near_deterministic",
            _grade(frac > t.near_deterministic_warn, frac > t.near_deterministic_fail),
            frac,
            f"{frac:.1%} of rows have p ≥ 1 − {t.near_deterministic_epsilon:g}; a "
            f"deterministic logger gives no "
            "information about other actions",
        )
    )
    checks.append(_uniform_weight_check(n, uniform_mean, uniform, t))
    if support is not None:
        checks.append(_support_check(family, support, n, t))
    if distribution is not None:
        checks.append(_distribution_check(distribution, n, t))
    if target_ess is not None:
        ess = target_ess
        checks.append(
            PropensityCheck(
                "effective_sample_size",
                _grade(ess < t.min_ess_fraction_warn * n, ess < t.min_ess_fraction_fail * n),
                ess / n,
                f"ESS {ess:,.0f} of {n:,} rows ({ess / n:.1%}) for the target policy; "
                f"warn below {t.min_ess_fraction_warn:.0%}, fail below "
                f"{t.min_ess_fraction_fail:.0%}",
                {"ess": ess},
            )
        )
    which = "target" if target is not None else "uniform reference"
    note = " (propensities nearly constant: set M explicitly, e.g. 100)" if clip < 1.5 else ""
    checks.append(
        PropensityCheck(
            "clipping",
            _grade(clipped > t.clipped_fraction_warn, False),
            clipped,
            f"suggested clip M = p90/p10 = {clip:.3g}{note}; {clipped:.1%} of the {which} "
            f"policy's weights reach M",
            {"suggested_clip": clip},
        )
    )
    return PropensityReport(n, family, quantiles, clip, tuple(checks), target)


def _uniform_weight_check(
    n: int,
    mean: float,
    stats: tuple[float, float, tuple[str, ...]] | None,
    t: PropensityThresholds,
) -> PropensityCheck:
    if stats is None:
        return PropensityCheck(
            "uniform_weight", "warn", mean, "mean uniform weight needs at least 2 rows"
        )
    se, ess, flags = stats
    lo, hi = confidence_interval(mean, se, n, t.confidence_level)  # CI of (1/n) Σ u/pᵢ
    details = {"lower": lo, "upper": hi, "ess": ess}
    if ess < t.uniform_weight_min_ess:
        return PropensityCheck(
            "uniform_weight",
            "warn",
            mean,
            f"inconclusive: the uniform policy's weights are too heavy-tailed (ESS {ess:.3g} < "
            f"{t.uniform_weight_min_ess:g}) to test their mean {mean:.3g} against 1",
            details,
        )
    tol = t.uniform_weight_fail_tolerance
    status = _grade(not lo <= 1.0 <= hi, hi < 1.0 - tol or lo > 1.0 + tol)
    verdict = {
        "pass": "consistent with the logger's propensities",
        "warn": "excludes 1: propensities may not be the logger's (or it lacks full support)",
        "fail": "far from 1: propensities are not the logger's probabilities (wrong scale "
        "or deterministic)",
    }
    caveat = f"; the CI may undercover ({'; '.join(flags)})" if flags else ""  # DESIGN §4.2
    return PropensityCheck(
        "uniform_weight",
        status,
        mean,
        f"mean weight of the uniform policy {mean:.3g}, {t.confidence_level:.0%} CI "
        f"[{lo:.3g}, {hi:.3g}] "
        f"(expected 1): {verdict[status]}{caveat}",
        details,
    )


def _support_check(
    family: str, counts: np.ndarray, n: int, t: PropensityThresholds
) -> PropensityCheck:
    K = int(counts.size)
    if family == "discrete":
        never = np.flatnonzero(counts == 0)
        what = "actions"
    else:
        never = np.flatnonzero((counts == 0) | (counts == n))
        what = "labels (never on or never off)"
    frac = never.size / K
    return PropensityCheck(
        "support",
        _grade(frac > t.never_logged_warn, frac > t.never_logged_fail),
        frac,
        f"{never.size} of {K} {what} never "
        f"logged{': ' + str(never[:10].tolist()) if never.size else ''}; "
        "policies cannot be evaluated on actions the logger never took",
        {"never_logged": never.tolist()},
    )


def _distribution_check(
    counts: tuple[int, int, int], n: int, t: PropensityThresholds
) -> PropensityCheck:
    bad_sum, bad_p, n_bad = counts
    return PropensityCheck(
        "logging_distribution",
        _grade(n_bad > 0, n_bad > 0),
        n_bad / n,
        f"{bad_sum:,} rows whose distribution does not sum to 1 and "
        f"{bad_p:,} whose "
        f"probability of the logged action differs from the propensity (tolerance "
        f"{t.distribution_tolerance:g})",
        {
            "rows_not_summing_to_one": bad_sum,
            "rows_inconsistent_with_propensity": bad_p,
        },
    )
