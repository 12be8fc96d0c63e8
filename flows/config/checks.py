"""``checks:``: the log checks' thresholds.

:func:`flows.checking.check_settings` is the one translation of this section that ``check``,
``retrain`` and the scheduled flow use. Every default the library writes is the library's,
read from it (:func:`flows.config._base.library_default`): those of
:class:`data_checks.stages.CheckSettings` and of
:class:`poem.diagnostics.propensity.PropensityThresholds`; only ``quarantine`` and
``block_on_warnings``, which the library does not have, are written here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from flows.config._base import Section
from flows.config._base import library_field as _of

__all__ = ["ChecksConfig", "PropensityChecksConfig"]

SETTINGS = "data_checks.stages:CheckSettings"
THRESHOLDS = "poem.diagnostics.propensity:PropensityThresholds"


class PropensityChecksConfig(Section):
    """Thresholds of the propensity checks (``PropensityThresholds`` of ``poem.diagnostics``)."""

    min_propensity_warn: float = _of(THRESHOLDS, "min_propensity_warn", ge=0)
    near_deterministic_epsilon: float = _of(THRESHOLDS, "near_deterministic_epsilon", ge=0)
    near_deterministic_warn: float = _of(THRESHOLDS, "near_deterministic_warn", ge=0)
    near_deterministic_fail: float = _of(THRESHOLDS, "near_deterministic_fail", ge=0)
    uniform_weight_fail_tolerance: float = _of(THRESHOLDS, "uniform_weight_fail_tolerance", ge=0)
    uniform_weight_min_ess: float = _of(THRESHOLDS, "uniform_weight_min_ess", ge=0)
    min_ess_fraction_warn: float = _of(THRESHOLDS, "min_ess_fraction_warn", ge=0)
    min_ess_fraction_fail: float = _of(THRESHOLDS, "min_ess_fraction_fail", ge=0)
    never_logged_warn: float = _of(THRESHOLDS, "never_logged_warn", ge=0)
    never_logged_fail: float = _of(THRESHOLDS, "never_logged_fail", ge=0)
    distribution_tolerance: float = _of(THRESHOLDS, "distribution_tolerance", ge=0)
    clipped_fraction_warn: float = _of(THRESHOLDS, "clipped_fraction_warn", ge=0)
    confidence_level: float = _of(THRESHOLDS, "confidence_level", gt=0, lt=1)

    @model_validator(mode="after")
    def _ordered(self) -> PropensityChecksConfig:
        for low, high in (
            ("near_deterministic_warn", "near_deterministic_fail"),
            ("min_ess_fraction_fail", "min_ess_fraction_warn"),
            ("never_logged_warn", "never_logged_fail"),
        ):
            if getattr(self, low) > getattr(self, high):
                raise ValueError(
                    f"checks.propensity.{low} ({getattr(self, low)}) must be <= "
                    f"checks.propensity.{high} ({getattr(self, high)})"
                )
        return self


class ChecksConfig(Section):
    """Log checks: GX expectation parameters, quarantine, and propensity thresholds.

    Propensity checks with status ``fail`` stop the flow; ``warn`` only blocks promotion when
    ``block_on_warnings`` is true. Rows dated later than the run's clock are a warning
    (``future_timestamps: warn``, kept) or quarantined (``quarantine``).
    """

    min_rows: int = _of(SETTINGS, "min_rows", ge=1)
    min_propensity: float = _of(SETTINGS, "min_propensity", ge=0, lt=1)
    quarantine: bool = True
    max_quarantine_fraction: float = _of(SETTINGS, "max_quarantine_fraction", ge=0, le=1)
    block_on_warnings: bool = False
    future_timestamps: Literal["warn", "quarantine"] = _of(SETTINGS, "future_timestamps")
    propensity: PropensityChecksConfig = Field(default_factory=PropensityChecksConfig)
