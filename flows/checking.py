"""The one translation of ``mlflow.yml``'s ``data:`` and ``checks:`` into check settings.

``poem-pipeline check``, the ``retrain`` flow and the scheduled flow all call
:func:`check_settings`, so a log is refused by one exactly when it is refused by the others
(``tests/flows/test_own_log.py`` runs both over each ``checks:`` key).
"""

from __future__ import annotations

from data_checks.stages import CheckSettings
from flows.config import ChecksConfig, DataConfig
from poem.diagnostics.propensity import PropensityThresholds

__all__ = ["check_settings"]


def check_settings(checks: ChecksConfig, data: DataConfig | None = None) -> CheckSettings:
    """The :class:`~data_checks.stages.CheckSettings` of ``mlflow.yml``'s data and checks.

    ``checks.quarantine: false`` makes every quarantined row a refusal (a quarantine limit
    of 0). ``checks.block_on_warnings`` decides promotion, not the check, and is not part of
    the settings.

    Parameters
    ----------
    checks : ChecksConfig
        The ``checks:`` section.
    data : DataConfig or None, default=None
        Family, metadata overrides (bounds, number of actions, the log's own column names,
        action ids) and the accepted window; None checks with what the log declares.

    Returns
    -------
    CheckSettings
    """
    return CheckSettings(
        family=None if data is None else data.family,
        overrides={} if data is None else data.overrides(),
        window=None if data is None else data.window(),
        min_propensity=checks.min_propensity,
        min_rows=checks.min_rows,
        max_quarantine_fraction=checks.max_quarantine_fraction if checks.quarantine else 0.0,
        thresholds=PropensityThresholds(**checks.propensity.model_dump()),
        future_timestamps=checks.future_timestamps,
        propensity="logged" if data is None else data.propensity,
        estimation={} if data is None else data.propensity_estimation.options(),
    )
