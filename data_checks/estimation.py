"""The propensity-estimation stage of a check (``data.propensity: estimate``).

A log that recorded no propensities is checked with a placeholder
(:func:`data_checks.stages.with_placeholder_propensities`); :func:`estimate_stage` then fits the
logging policy on the kept rows (:func:`poem.logging_policy.estimate_log_propensities`,
cross-fitted), refuses a (nearly) deterministic logger as a dataset-level failure of the report
(one line: no overlap, nothing to learn off-policy), and grades the propensity checks again on
the estimates. ``poem-pipeline check`` and the ``retrain`` flow both call it, so a log is
refused by one exactly when the other refuses it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from data_checks.report import DataCheckReport
from data_checks.stages import CheckSettings, failed_report
from poem.diagnostics.propensity import PropensityReport, propensity_report
from poem.exceptions import InvalidLogError
from poem.logging_policy import (
    EstimatedPropensities,
    check_stochastic_logger,
    estimate_log_propensities,
)

__all__ = ["ESTIMATED", "LOGGED", "PROPENSITY_SOURCE_KEY", "Estimated", "estimate_stage"]

# the prepared log's metadata key and its values (the gate and the labels read them)
PROPENSITY_SOURCE_KEY = "propensity_source"
LOGGED, ESTIMATED = "logged", "estimated"


@dataclass(frozen=True)
class Estimated:
    """What the estimation stage produced.

    Attributes
    ----------
    log : LoggedBandit or None
        The kept rows with the cross-fitted propensities (None: refused).
    report : DataCheckReport
        The check's report, with one dataset-level failure when the logger is refused.
    propensity : PropensityReport or None
        The propensity checks graded on the estimates (None: refused).
    estimate : EstimatedPropensities
        Estimates, diagnostics and provenance.
    """

    log: Any
    report: DataCheckReport
    propensity: PropensityReport | None
    estimate: EstimatedPropensities

    @property
    def metadata(self) -> dict[str, Any]:
        """The prepared log's propensity metadata: ``propensity_source: estimated`` + provenance."""
        return {**self.estimate.provenance, PROPENSITY_SOURCE_KEY: ESTIMATED}


def estimate_stage(log: Any, report: DataCheckReport, settings: CheckSettings) -> Estimated:
    """Replace the placeholder propensities of the checked rows by cross-fitted estimates.

    Parameters
    ----------
    log : LoggedBandit
        The kept rows (placeholder propensities).
    report : DataCheckReport
        The check's (passed) report.
    settings : CheckSettings
        ``settings.estimation``: the options of the estimate; ``settings.thresholds``: of
        the propensity checks graded again.

    Returns
    -------
    Estimated
        On a (nearly) deterministic logger: ``log`` and ``propensity`` None and the report
        failed with the refusal (column ``action``).
    """
    estimated, estimate = estimate_log_propensities(log, **settings.estimation)
    try:
        check_stochastic_logger(estimate)
    except InvalidLogError as exc:
        failures = failed_report(report.source, exc, "stochastic_logger").failures
        return Estimated(None, replace(report, failures=report.failures + failures), None, estimate)
    graded = propensity_report(estimated, thresholds=settings.thresholds)
    return Estimated(estimated, report, graded, estimate)
