"""``gate:``: the counterfactual A/B gate (DESIGN §5)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from flows.config._base import Section
from flows.config._base import library_field as _of

__all__ = ["GateConfig"]

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
    estimator: Literal["ips", "snips", "clipped_ips"] = _of(DECISION, "estimator")
    clip: float | None = _of(DECISION, "clip", gt=0)
    interval: Literal["t", "normal", "bootstrap"] = _of(DECISION, "interval")
    confidence_level: float = _of(DECISION, "confidence_level", gt=0, lt=1)
    min_improvement: float = _of(DECISION, "min_improvement", ge=0)
    min_ess: float = _of(DECISION, "min_ess", ge=0)
    randomized: bool = _of(DECISION, "randomized")
    seed: int | None = Field(None, ge=0)
    retry_fraction: float = Field(0.2, gt=0, lt=1)

    @model_validator(mode="after")
    def _clip_for_clipped(self) -> GateConfig:
        if self.estimator == "clipped_ips" and self.clip is None:
            raise ValueError("estimator 'clipped_ips' needs a clip value")
        if self.estimator != "clipped_ips" and self.clip is not None:
            raise ValueError(
                f"gate.clip ({self.clip}) is only used by estimator 'clipped_ips', but "
                f"gate.estimator is {self.estimator!r}; set gate.clip: null or "
                "gate.estimator: clipped_ips"
            )
        return self
