"""``data:``: where the logs are and how to read them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from flows.config._base import MAX_LOSS_RANGE, Section

__all__ = ["DataConfig", "PropensityEstimationConfig", "SplitConfig"]

PROPENSITY_SOURCES = ("logged", "estimate")


class SplitConfig(Section):
    """Train / validation / test split (by time when timestamps exist, else seeded random)."""

    validation_fraction: float = Field(0.25, gt=0, lt=1)
    test_fraction: float = Field(0.25, gt=0, lt=1)
    by_time: bool = True
    random_state: int = Field(0, ge=0)

    @model_validator(mode="after")
    def _fractions(self) -> SplitConfig:
        if self.validation_fraction + self.test_fraction >= 1:
            raise ValueError(
                "validation_fraction + test_fraction must be < 1, got "
                f"{self.validation_fraction} + {self.test_fraction}"
            )
        return self


class PropensityEstimationConfig(Section):
    """How ``data.propensity: estimate`` fits the logging policy π̂₀(a|x) (cross-fitted).

    ``model``: multinomial (per-label) logistic regression or gradient-boosted trees
    (candidate sets: a conditional logit over each row's candidates, ``logistic`` only);
    ``calibration``: ``auto`` (none for logistic, sigmoid for boosting), ``sigmoid``,
    ``isotonic`` or ``none``; ``folds``: cross-fitting folds (each row is scored by a model
    that did not see it); ``seed``: of the folds (recorded in the log's provenance).
    """

    model: Literal["logistic", "boosting"] = "logistic"
    calibration: Literal["auto", "sigmoid", "isotonic", "none"] = "auto"
    folds: int = Field(5, ge=2, le=20)
    seed: int = Field(0, ge=0)

    def options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`poem.logging_policy.estimate_propensities`."""
        return {
            "model": self.model,
            "calibration": None if self.calibration == "none" else self.calibration,
            "n_folds": self.folds,
            "random_state": self.seed,
        }


class DataConfig(Section):
    """Where the logs are and how to read them (Parquet file or ``date=`` folder, or ``*.csv``).

    Bounds, family and number of actions declared in the log's metadata are used unless
    given here. A log with its own column names maps them here (``--context-columns``,
    ``--reward-column``, ... of ``check``): ``context_columns`` (names or globs such as
    ``f_*``, in feature order), ``reward_column`` or ``loss_column``, ``action_column``,
    ``propensity_column``; ``action_ids`` lists the action column's own ids, the i-th being
    action i (recorded in the log's metadata and the served model).

    ``propensity``: ``logged`` (default) reads the logger's probabilities from the propensity
    column; ``estimate`` is for a log that recorded none (a rules engine, a history export):
    the logging policy is fitted on the log's own contexts and actions, cross-fitted
    (``propensity_estimation``), a (nearly) deterministic logger is refused, and every run,
    version and decision on it is labelled ``propensity_source=estimated``.
    """

    path: str = Field("demo-output/logs/round-1", min_length=1)
    family: Literal["discrete", "multilabel", "candidates"] = "discrete"
    loss_bounds: tuple[float, float] | None = None
    reward_bounds: tuple[float, float] | None = None
    n_actions: int | None = Field(None, ge=2)
    window_start: datetime | None = None
    window_end: datetime | None = None
    context_columns: list[str] | None = None
    reward_column: str | None = None
    loss_column: str | None = None
    action_column: str | None = None
    propensity_column: str | None = None
    action_ids: list[str] | None = None
    propensity: Literal["logged", "estimate"] = "logged"
    propensity_estimation: PropensityEstimationConfig = PropensityEstimationConfig()
    split: SplitConfig = SplitConfig()

    @field_validator("loss_bounds", "reward_bounds")
    @classmethod
    def _bounds(cls, bounds: tuple[float, float] | None) -> tuple[float, float] | None:
        if bounds is not None:
            low, high = bounds
            if not low < high:
                raise ValueError(f"bounds must be [min, max] with min < max, got [{low}, {high}]")
            if high - low > MAX_LOSS_RANGE:
                raise ValueError(
                    f"bounds span {high - low:.3g}, more than {MAX_LOSS_RANGE:.0e}; rescale "
                    "the losses (e.g. to thousands) so the scaled losses keep their precision"
                )
        return bounds

    @field_validator("context_columns", "action_ids")
    @classmethod
    def _names(cls, names: list[str] | None) -> list[str] | None:
        if names is not None:
            if not names or not all(isinstance(n, str) and n.strip() for n in names):
                raise ValueError(f"must be a non-empty list of names, got {names!r}")
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"repeats {repeated[:3]}")
        return names

    @model_validator(mode="after")
    def _one_kind_of_bounds(self) -> DataConfig:
        if self.loss_bounds is not None and self.reward_bounds is not None:
            raise ValueError("give loss_bounds or reward_bounds, not both")
        if self.loss_column is not None and self.reward_column is not None:
            raise ValueError("give data.loss_column or data.reward_column, not both")
        if self.reward_column is not None and self.loss_bounds is not None:
            raise ValueError(
                "data.reward_column needs data.reward_bounds (the rewards' range), not loss_bounds"
            )
        if self.propensity == "estimate" and self.propensity_column is not None:
            raise ValueError(
                f"data.propensity_column {self.propensity_column!r} names logged propensities "
                "but data.propensity is estimate; drop one (logged propensities are exact)"
            )
        if (
            self.propensity == "estimate"
            and self.family == "candidates"
            and self.propensity_estimation.model != "logistic"
        ):
            raise ValueError(
                "data.propensity_estimation.model: candidate sets are scored by a conditional "
                "logit only; use logistic"
            )
        if self.action_ids is not None and self.n_actions not in (None, len(self.action_ids)):
            raise ValueError(
                f"data.action_ids lists {len(self.action_ids)} ids but data.n_actions is "
                f"{self.n_actions}; drop n_actions (it is the number of ids)"
            )
        if self.window_start is not None and self.window_end is not None:
            # naive datetimes are UTC (as log timestamps are)
            start, end = (
                m.replace(tzinfo=UTC) if m.tzinfo is None else m
                for m in (self.window_start, self.window_end)
            )
            if not start < end:
                raise ValueError(
                    f"data.window_start {self.window_start.isoformat()} must be before "
                    f"data.window_end {self.window_end.isoformat()}"
                )
        return self

    def overrides(self) -> dict[str, Any]:
        """Metadata overrides for the log readers (only the keys that are set)."""
        keys = (
            "loss_bounds",
            "reward_bounds",
            "n_actions",
            "context_columns",
            "reward_column",
            "loss_column",
            "action_column",
            "propensity_column",
            "action_ids",
        )
        out = {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
        if self.action_ids is not None:
            out["n_actions"] = len(self.action_ids)
        return {k: tuple(v) if isinstance(v, list) else v for k, v in out.items()}

    def window(self) -> tuple[datetime | None, datetime | None] | None:
        """Return the accepted timestamp window, or None when unbounded."""
        if self.window_start is None and self.window_end is None:
            return None
        return (self.window_start or datetime(1970, 1, 1), self.window_end or datetime(2262, 4, 11))
