"""``checks:``: the log checks' thresholds.

:func:`flows.checking.check_settings` is the one translation of this section that ``check``,
``retrain`` and the scheduled flow use; the defaults equal the library's
(:class:`data_checks.stages.CheckSettings` and
:class:`poem.diagnostics.propensity.PropensityThresholds`; ``--help`` may import neither, so
``tests/flows/test_check_settings.py`` holds them equal).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from flows.config._base import Section

__all__ = ["ChecksConfig", "PropensityChecksConfig"]


class PropensityChecksConfig(Section):
    """Thresholds of the propensity checks (``PropensityThresholds`` of ``poem.diagnostics``)."""

    min_propensity_warn: float = Field(1e-4, ge=0)
    near_deterministic_epsilon: float = Field(1e-3, ge=0)
    near_deterministic_warn: float = Field(0.5, ge=0)
    near_deterministic_fail: float = Field(0.99, ge=0)
    uniform_weight_fail_tolerance: float = Field(0.25, ge=0)
    uniform_weight_min_ess: float = Field(100.0, ge=0)
    min_ess_fraction_warn: float = Field(0.1, ge=0)
    min_ess_fraction_fail: float = Field(0.01, ge=0)
    never_logged_warn: float = Field(0.0, ge=0)
    never_logged_fail: float = Field(0.5, ge=0)
    distribution_tolerance: float = Field(1e-6, ge=0)
    clipped_fraction_warn: float = Field(0.05, ge=0)
    confidence_level: float = Field(0.95, gt=0, lt=1)

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

    min_rows: int = Field(100, ge=1)
    min_propensity: float = Field(0.0, ge=0, lt=1)
    quarantine: bool = True
    max_quarantine_fraction: float = Field(0.01, ge=0, le=1)
    block_on_warnings: bool = False
    future_timestamps: Literal["warn", "quarantine"] = "warn"
    propensity: PropensityChecksConfig = PropensityChecksConfig()
