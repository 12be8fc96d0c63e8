"""Propensity sanity checks (DESIGN §4.6) of a log held as one partition or many (DESIGN §8).

:func:`propensity_report` checks a log in memory; the partitions of a log reduce to small
:class:`PropensitySummary` objects (:func:`propensity_summary`, a few kilobytes each) that add
up with :func:`merge_summaries` and are graded by :func:`summary_report`.

The hard invariants are enforced by :class:`poem.data.LoggedBandit` itself; these checks ask
whether the propensities look like those of a *stochastic logger* and how much a log can
tell about a target policy. Each check gets a status ``"pass" | "warn" | "fail"`` from
:class:`PropensityThresholds` and a one-line explanation; checks that do not apply are left
out. The key test: the uniform reference policy's weights u(yᵢ|xᵢ)/pᵢ have expectation
exactly 1 under a logger with full support, so a confidence interval of their mean that
excludes 1 signals propensities that are not the logger's.

Counts, extremes and moments are exact (:class:`~poem.diagnostics.mergeable.Moments`); the
quantiles come from a :class:`~poem.diagnostics.mergeable.LogHistogram` (each within
relative ρ = 2⁻¹⁰ of ``numpy.quantile``, the clip M = p₉₀/p₁₀ within 2ρ, the clipped fraction
up to the weights within relative 3ρ of M). The report does not depend on the partitioning.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from poem.data import LoggedBandit
from poem.diagnostics.mergeable import LogHistogram, Moments
from poem.estimators.bounds import confidence_interval
from poem.estimators.reliability import flags_from_moments
from poem.estimators.weights import importance_weights
from poem.exceptions import PropensityWarning

__all__ = [
    "PropensityCheck",
    "PropensityReport",
    "PropensitySummary",
    "PropensityThresholds",
    "merge_summaries",
    "propensity_report",
    "propensity_summary",
    "reference_probabilities",
    "summary_report",
]

STATUSES = ("pass", "warn", "fail")
_QUANTILES = {"min": 0.0, "p01": 0.01, "p10": 0.1, "p50": 0.5, "p90": 0.9, "max": 1.0}


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
            "checks": [asdict(c) for c in self.checks],
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
            *(f"| {c.name} | {c.status} | {c.value:.4g} | {c.explanation} |" for c in self.checks),
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
    if log.family == "candidates":
        assert log.candidates is not None
        return 1.0 / log.candidates.sizes.astype(np.float64)
    if log.family == "multilabel":
        return np.full(log.n_rows, 2.0 ** -float(log.n_actions))
    return np.full(log.n_rows, 1.0 / float(log.n_actions))


@dataclass(frozen=True)
class PropensitySummary:
    """Additive summary of one partition (or of several, merged) for the propensity checks.

    Attributes
    ----------
    family : str
        Policy family.
    n_actions : int
        Actions K (discrete) or labels q (multilabel); 0 for candidates.
    propensities : LogHistogram
        Sketch of the propensities pᵢ.
    near_deterministic : int
        Rows with p ≥ 1 − ε.
    uniform : Moments
        Moments of the uniform policy's weights u(yᵢ|xᵢ)/pᵢ.
    clip_weights : LogHistogram
        Sketch of the positive weights of the clipping check (the target's, else the uniform's).
    target : Moments or None
        Moments of the target policy's weights (for its ESS).
    target_name : str or None
        Description of the target policy.
    action_counts : ndarray or None
        Rows per action (discrete) or per label switched on (multilabel); None for candidates.
    distribution_bad : tuple of int or None
        Rows whose logging distribution does not sum to 1, rows where it differs from p at
        the logged action, and rows with either problem; None without a logging distribution.
    """

    family: str
    n_actions: int
    propensities: LogHistogram
    near_deterministic: int
    uniform: Moments
    clip_weights: LogHistogram
    target: Moments | None = None
    target_name: str | None = None
    action_counts: np.ndarray | None = field(default=None, repr=False)
    distribution_bad: tuple[int, int, int] | None = None

    @property
    def n_rows(self) -> int:
        """Rows summarised."""
        return self.uniform.n


def propensity_report(
    log: LoggedBandit,
    *,
    target_policy: Any = None,
    thresholds: PropensityThresholds | None = None,
) -> PropensityReport:
    """Run the propensity sanity checks on a (valid) log: :func:`summary_report` of one partition.

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
    summary = propensity_summary(log, target_policy=target_policy, thresholds=thresholds)
    return summary_report(summary, thresholds=thresholds)


def propensity_summary(
    log: LoggedBandit,
    *,
    target_policy: Any = None,
    thresholds: PropensityThresholds | None = None,
) -> PropensitySummary:
    """Summarise one partition for :func:`summary_report`.

    Parameters
    ----------
    log : LoggedBandit
        The partition's kept rows.
    target_policy : StochasticPolicy or None, default=None
        As in :func:`propensity_report`.
    thresholds : PropensityThresholds or None, default=None
        Only ``near_deterministic_epsilon`` and ``distribution_tolerance`` are used here.

    Returns
    -------
    PropensitySummary
    """
    t = thresholds or PropensityThresholds()
    p = log.propensities
    uniform = importance_weights(reference_probabilities(log), p)
    target, name, clip_weights = None, None, uniform
    if target_policy is not None:
        clip_weights = importance_weights(target_policy.log_action_probability_on(log), p)
        target = Moments.of(clip_weights)
        name = f"{type(target_policy).__name__}({target_policy.family.__class__.__name__})"
    counts = None
    if log.family == "discrete":
        counts = np.bincount(log.actions, minlength=int(log.n_actions)).astype(np.int64)
    elif log.family == "multilabel":
        counts = np.asarray(log.actions.sum(axis=0), dtype=np.int64).ravel()
    bad = None
    if (dist := log.logging_distribution) is not None:
        bad_sum = np.abs(dist.sum(axis=1) - 1.0) > t.distribution_tolerance
        bad_p = np.abs(dist[np.arange(log.n_rows), log.actions] - p) > t.distribution_tolerance
        bad = (int(bad_sum.sum()), int(bad_p.sum()), int((bad_sum | bad_p).sum()))
    return PropensitySummary(
        log.family,
        0 if log.family == "candidates" else int(log.n_actions),
        LogHistogram.of(p),
        int(np.sum(p >= 1.0 - t.near_deterministic_epsilon)),
        Moments.of(uniform),
        LogHistogram.of(clip_weights[clip_weights > 0]),
        target,
        name,
        counts,
        bad,
    )


def merge_summaries(summaries: Sequence[PropensitySummary]) -> PropensitySummary:
    """Add up the summaries of the partitions of one log.

    Raises
    ------
    ValueError
        When ``summaries`` is empty or mixes families or numbers of actions.
    """
    if not summaries:
        raise ValueError("merge_summaries needs at least one summary")
    total = summaries[0]
    for s in summaries[1:]:
        if (s.family, s.n_actions) != (total.family, total.n_actions):
            raise ValueError(
                f"partitions disagree: family {s.family!r} with {s.n_actions} actions vs "
                f"{total.family!r} with {total.n_actions}"
            )
        counts, bad = total.action_counts, total.distribution_bad
        if bad is not None:
            bad = tuple(a + b for a, b in zip(bad, s.distribution_bad, strict=True))
        total = replace(
            total,
            propensities=total.propensities.merge(s.propensities),
            near_deterministic=total.near_deterministic + s.near_deterministic,
            uniform=total.uniform.merge(s.uniform),
            clip_weights=total.clip_weights.merge(s.clip_weights),
            target=None if total.target is None else total.target.merge(s.target),
            action_counts=None if counts is None else counts + s.action_counts,
            distribution_bad=bad,
        )
    return total


def summary_report(
    summary: PropensitySummary, *, thresholds: PropensityThresholds | None = None
) -> PropensityReport:
    """Grade and explain the checks of a (merged) summary: the one place that does.

    Parameters
    ----------
    summary : PropensitySummary
        Summary of a log: one partition's, or the partitions' merged by
        :func:`merge_summaries`.
    thresholds : PropensityThresholds or None, default=None
        Thresholds; defaults when None.

    Returns
    -------
    PropensityReport
    """
    t = thresholds or PropensityThresholds()
    n, family = summary.n_rows, summary.family
    qs = summary.propensities.quantile(list(_QUANTILES.values()))
    quantiles = dict(zip(_QUANTILES, (float(v) for v in qs), strict=True))
    lo, clip = quantiles["min"], quantiles["p90"] / quantiles["p10"]
    frac = summary.near_deterministic / n
    checks = [
        PropensityCheck(
            "min_propensity",
            _grade(lo < t.min_propensity_warn, False),
            lo,
            f"smallest propensity {lo:.3g} (largest weight 1/p = {1 / lo:.3g}); "
            f"warn below {t.min_propensity_warn:g}",
        ),
        PropensityCheck(
            "near_deterministic",
            _grade(frac > t.near_deterministic_warn, frac > t.near_deterministic_fail),
            frac,
            f"{frac:.1%} of rows have p ≥ 1 − {t.near_deterministic_epsilon:g}; a "
            "deterministic logger gives no information about other actions",
        ),
        _uniform_weight_check(summary.uniform, t),
    ]
    if summary.action_counts is not None:
        checks.append(_support_check(family, summary.action_counts, n, t))
    if summary.distribution_bad is not None:
        checks.append(_distribution_check(summary.distribution_bad, n, t))
    if summary.target is not None:
        ess = summary.target.ess
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
    clipped = summary.clip_weights.count_at_least(clip) / n
    which = "target" if summary.target_name is not None else "uniform reference"
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
    return PropensityReport(n, family, quantiles, clip, tuple(checks), summary.target_name)


def _grade(bad: bool, fail: bool) -> str:
    return "fail" if fail else ("warn" if bad else "pass")


def _uniform_weight_check(m: Moments, t: PropensityThresholds) -> PropensityCheck:
    n, mean = m.n, m.mean
    if n < 2:
        return PropensityCheck(
            "uniform_weight", "warn", mean, "mean uniform weight needs at least 2 rows"
        )
    lo, hi = confidence_interval(mean, m.standard_error, n, t.confidence_level)  # (1/n) Σ u/pᵢ
    details = {"lower": lo, "upper": hi, "ess": m.ess}
    if m.ess < t.uniform_weight_min_ess:
        return PropensityCheck(
            "uniform_weight",
            "warn",
            mean,
            f"inconclusive: the uniform policy's weights are too heavy-tailed (ESS {m.ess:.3g} < "
            f"{t.uniform_weight_min_ess:g}) to test their mean {mean:.3g} against 1",
            details,
        )
    flags = flags_from_moments(n, m.ess, m.nonzero, m.skewness, kurtosis=m.kurtosis)
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
        f"[{lo:.3g}, {hi:.3g}] (expected 1): {verdict[status]}{caveat}",
        details,
    )


def _support_check(
    family: str, counts: np.ndarray, n: int, t: PropensityThresholds
) -> PropensityCheck:
    K, discrete = int(counts.size), family == "discrete"
    never = np.flatnonzero((counts == 0) if discrete else (counts == 0) | (counts == n))
    what = "actions" if discrete else "labels (never on or never off)"
    frac = never.size / K
    return PropensityCheck(
        "support",
        _grade(frac > t.never_logged_warn, frac > t.never_logged_fail),
        frac,
        f"{never.size} of {K} {what} never logged"
        f"{': ' + str(never[:10].tolist()) if never.size else ''}; "
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
        f"{bad_sum:,} rows whose distribution does not sum to 1 and {bad_p:,} whose probability "
        f"of the logged action differs from the propensity (tolerance "
        f"{t.distribution_tolerance:g})",
        {"rows_not_summing_to_one": bad_sum, "rows_inconsistent_with_propensity": bad_p},
    )
