"""``training:``: the learner and its fixed parameters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from flows.config._base import Scalar, Section
from flows.learners import LEARNERS

__all__ = ["POEM_PARAMS", "TrainingConfig"]


# training.params of the packaged default config (used when ``params`` is absent for POEM)
POEM_PARAMS: dict[str, Scalar] = {
    "policy": "discrete",
    "solver": "lbfgs",
    "objective": "auto",
    "variance_penalty": "calibrated",
    "l2_penalty": 0.0,
    "anchor_penalty": 0.0,
    "max_iter": 50,
    "max_epochs": 2,
    "learning_rate": 1000.0,
    "learning_rate_unit": "epoch",
    "batch_size": 300,
    "tol": 1e-05,
    "standardize": True,
    "warm_start": "champion",
    "temperature": 1.0,
    "exploration_floor": 0.01,
    "random_state": 0,
}


class TrainingConfig(Section):
    """The learner and its fixed parameters (grid values override them per trial)."""

    learner: str = "poem"
    params: dict[str, Scalar] = Field(default_factory=lambda: dict(POEM_PARAMS))
    refit_on: Literal["train", "train+validation"] = "train"

    @field_validator("learner")
    @classmethod
    def _known_learner(cls, learner: str) -> str:
        if learner not in LEARNERS:
            raise ValueError(f"unknown learner {learner!r}; choose one of {sorted(LEARNERS)}")
        return learner

    @model_validator(mode="before")
    @classmethod
    def _learner_defaults(cls, raw: Any) -> Any:
        # POEM's default params belong to POEM; another learner starts from its own defaults
        if isinstance(raw, dict) and "params" not in raw and raw.get("learner", "poem") != "poem":
            return {**raw, "params": {}}
        return raw
