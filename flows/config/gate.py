"""``gate:``: the counterfactual A/B gate (DESIGN §5)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from flows.config._base import Section, library_object
from flows.config._base import library_field as _of

__all__ = ["GateConfig"]

OPTIONS = "poem.estimators.gate_options:GATE_OPTIONS"  # the registry: one class per option
OPTION = "poem.estimators.gate_options:gate_option"

DECISION = "poem.gate:gate_decision"


class GateConfig(Section):
    """The counterfactual A/B gate (DESIGN §5).

    ``confidence_level``: 1 − α shared by every attempt on one test window against one
    champion; attempt k gets αₖ = α(1 − q)q^{k−1} with q = ``retry_fraction``
    (:mod:`poem.ledger`, recorded by :mod:`flows.ledger`; α and q are pinned by a window's
    first attempt). ``seed``: null (default) draws the test rows' random order (and the coin)
    from fresh entropy at each attempt, recorded in the report; an integer replays that draw
    (tests, demos): a replay, not a fresh attempt.
    """

    # the defaults of :func:`poem.gate.gate_decision`, written there once
    estimator: str = _of(DECISION, "estimator")  # a name in gate_options.GATE_OPTIONS
    clip: float | None = _of(DECISION, "clip", gt=0)
    interval: Literal["t", "normal", "bootstrap"] = _of(DECISION, "interval")
    confidence_level: float = _of(DECISION, "confidence_level", gt=0, lt=1)
    min_improvement: float = _of(DECISION, "min_improvement", ge=0)
    min_ess: float = _of(DECISION, "min_ess", ge=0)
    randomized: bool = _of(DECISION, "randomized")
    seed: int | None = Field(None, ge=0)
    retry_fraction: float = Field(0.2, gt=0, lt=1)

    @field_validator("estimator", mode="before")
    @classmethod
    def _registered_option(cls, value: object) -> object:
        options = library_object(OPTIONS)
        if isinstance(value, str) and value in options:
            return value
        names = sorted(options, key=lambda n: options[n].uses_clip)  # clip-free first
        listed = ", ".join(repr(n) for n in names[:-1]) + f" or {names[-1]!r}"
        raise ValueError(f"Input should be {listed}, got {value!r}")

    @model_validator(mode="after")
    def _option_checks(self) -> GateConfig:
        option = library_object(OPTION)(self.estimator)
        option.check_config(self.clip)  # the option's own config checks
        return self
