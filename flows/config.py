"""Typed configuration of the pipeline, loaded from ``mlflow.yml`` (STYLE §7).

This is the only module that reads YAML or environment variables. :func:`load_config`
returns a frozen :class:`PipelineConfig`; the flow passes each task only its sub-model
(``cfg.training``, ``cfg.gate``, ...). Unknown keys, wrong types and a missing file all
raise one :class:`ConfigError` whose message names the offending key.

Relative paths (the sqlite database of ``tracking.uri``, ``tracking.artifact_location``,
``data.path``) are resolved against the current working directory when the file is loaded,
so the resolved config logged to MLflow is unambiguous. ``MLFLOW_TRACKING_URI``, when set,
overrides ``tracking.uri``.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from flows.learners import LEARNERS, learner_param_names

__all__ = [
    "ChecksConfig",
    "ConfigError",
    "DaskConfig",
    "DataConfig",
    "GateConfig",
    "PipelineConfig",
    "PropensityChecksConfig",
    "SearchConfig",
    "SplitConfig",
    "TrackingConfig",
    "TrainingConfig",
    "load_config",
]

Scalar = bool | int | float | str | None


class ConfigError(ValueError):
    """``mlflow.yml`` is missing, unreadable or invalid; the message names the key."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TrackingConfig(_Section):
    """Where runs and models are recorded (MLflow)."""

    uri: str = "sqlite:///mlflow.db"
    artifact_location: str = "./mlartifacts"
    experiment: str = "poem-retrain"
    registered_model: str = "poem-policy"
    champion_alias: str = "champion"
    challenger_alias: str = "challenger"
    previous_champion_alias: str = "previous-champion"


class SplitConfig(_Section):
    """Train / validation / test split (by time when timestamps exist, else seeded random)."""

    validation_fraction: float = Field(0.25, gt=0, lt=1)
    test_fraction: float = Field(0.25, gt=0, lt=1)
    by_time: bool = True
    random_state: int = 0

    @model_validator(mode="after")
    def _fractions(self) -> SplitConfig:
        if self.validation_fraction + self.test_fraction >= 1:
            raise ValueError(
                "validation_fraction + test_fraction must be < 1, got "
                f"{self.validation_fraction} + {self.test_fraction}"
            )
        return self


class DataConfig(_Section):
    """Where the logs are and how to read them (Parquet file or ``date=`` folder, or ``*.csv``).

    Bounds, family and number of actions declared in the log's metadata are used unless
    given here.
    """

    path: str = "demo-output/logs"
    family: Literal["discrete", "multilabel", "candidates"] = "discrete"
    loss_bounds: tuple[float, float] | None = None
    reward_bounds: tuple[float, float] | None = None
    n_actions: int | None = Field(None, ge=2)
    window_start: datetime | None = None
    window_end: datetime | None = None
    split: SplitConfig = SplitConfig()

    @model_validator(mode="after")
    def _one_kind_of_bounds(self) -> DataConfig:
        if self.loss_bounds is not None and self.reward_bounds is not None:
            raise ValueError("give loss_bounds or reward_bounds, not both")
        return self

    def overrides(self) -> dict[str, Any]:
        """Metadata overrides for the log readers (only the keys that are set)."""
        keys = ("loss_bounds", "reward_bounds", "n_actions")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}

    def window(self) -> tuple[datetime | None, datetime | None] | None:
        """Return the accepted timestamp window, or None when unbounded."""
        if self.window_start is None and self.window_end is None:
            return None
        return (self.window_start or datetime(1970, 1, 1), self.window_end or datetime(2262, 4, 11))


class PropensityChecksConfig(_Section):
    """Thresholds of the propensity checks (``PropensityThresholds`` of ``poem.diagnostics``)."""

    min_propensity_warn: float = Field(1e-4, ge=0)
    near_deterministic_epsilon: float = Field(1e-3, ge=0)
    near_deterministic_warn: float = Field(0.5, ge=0)
    near_deterministic_fail: float = Field(0.99, ge=0)
    uniform_weight_fail_tolerance: float = Field(0.25, ge=0)
    min_ess_fraction_warn: float = Field(0.1, ge=0)
    min_ess_fraction_fail: float = Field(0.01, ge=0)
    never_logged_warn: float = Field(0.0, ge=0)
    never_logged_fail: float = Field(0.5, ge=0)
    distribution_tolerance: float = Field(1e-6, ge=0)
    clipped_fraction_warn: float = Field(0.05, ge=0)
    confidence_level: float = Field(0.95, gt=0, lt=1)


class ChecksConfig(_Section):
    """Log checks: GX expectation parameters, quarantine, and propensity thresholds.

    Propensity checks with status ``fail`` stop the flow; ``warn`` only blocks promotion when
    ``block_on_warnings`` is true.
    """

    min_rows: int = Field(100, ge=1)
    min_propensity: float = Field(0.0, ge=0, lt=1)
    quarantine: bool = True
    max_quarantine_fraction: float = Field(0.01, ge=0, le=1)
    block_on_warnings: bool = False
    propensity: PropensityChecksConfig = PropensityChecksConfig()


class SearchConfig(_Section):
    """Hyperparameter grid searched on the validation split (selection by IPS or SNIPS).

    Trials whose validation ESS is below ``min_ess_fraction`` of the validation rows rank after
    the others (:func:`poem.learners.search.select_trial`).
    """

    grid: dict[str, list[Scalar]] = {"variance_scale": [0.0, 0.01, 0.1, 1.0]}
    scoring: Literal["ips", "snips"] = "ips"
    min_ess_fraction: float = Field(0.01, ge=0, lt=1)
    confidence_level: float = Field(0.95, gt=0, lt=1)
    max_workers: int = Field(2, ge=1)
    cache_expiration_hours: float = Field(24.0, gt=0)

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, grid: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for key, values in grid.items():
            if not values:
                raise ValueError(f"grid entry {key!r} has no values")
        return grid


class TrainingConfig(_Section):
    """The learner and its fixed parameters (grid values override them per trial)."""

    learner: str = "poem"
    params: dict[str, Scalar] = {}
    refit_on: Literal["train", "train+validation"] = "train"

    @field_validator("learner")
    @classmethod
    def _known_learner(cls, learner: str) -> str:
        if learner not in LEARNERS:
            raise ValueError(f"unknown learner {learner!r}; choose one of {sorted(LEARNERS)}")
        return learner


class GateConfig(_Section):
    """The counterfactual A/B gate (DESIGN §5)."""

    estimator: Literal["ips", "snips", "clipped_ips"] = "ips"
    clip: float | None = Field(None, gt=0)
    interval: Literal["t", "normal", "bootstrap"] = "t"
    confidence_level: float = Field(0.95, gt=0, lt=1)
    min_improvement: float = Field(0.0, ge=0)
    min_ess: float = Field(100.0, ge=0)

    @model_validator(mode="after")
    def _clip_for_clipped(self) -> GateConfig:
        if self.estimator == "clipped_ips" and self.clip is None:
            raise ValueError("estimator 'clipped_ips' needs a clip value")
        return self


class DaskConfig(_Section):
    """Where the search trials run (DESIGN §8): threads in this process, or a Dask cluster.

    ``mode``: ``auto`` starts a ``LocalCluster`` when the log's files hold more than
    ``min_log_mib`` MiB, ``always`` always does, ``never`` keeps the thread pool. A
    ``scheduler_address`` (``tcp://host:8786``) uses that cluster instead of starting one.
    Dask workers report to Prefect's API, so a cluster needs a Prefect server
    (``PREFECT_API_URL``), not the ephemeral one (:mod:`flows.dask_runner`).
    """

    mode: Literal["auto", "always", "never"] = "auto"
    min_log_mib: float = Field(2048.0, ge=0)
    scheduler_address: str | None = None
    n_workers: int = Field(2, ge=1)
    threads_per_worker: int = Field(1, ge=1)
    memory_limit: str = "4GiB"


class PipelineConfig(_Section):
    """The whole ``mlflow.yml``."""

    tracking: TrackingConfig = TrackingConfig()
    data: DataConfig = DataConfig()
    checks: ChecksConfig = ChecksConfig()
    search: SearchConfig = SearchConfig()
    training: TrainingConfig = TrainingConfig()
    gate: GateConfig = GateConfig()
    dask: DaskConfig = DaskConfig()

    @model_validator(mode="after")
    def _learner_params(self) -> PipelineConfig:
        known = learner_param_names(self.training.learner)
        for section, keys in (
            ("training.params", self.training.params),
            ("search.grid", self.search.grid),
        ):
            unknown = sorted(set(keys) - known)
            if unknown:
                raise ValueError(
                    f"{section}: unknown parameter(s) {unknown} for learner "
                    f"{self.training.learner!r}; valid: {sorted(known)}"
                )
        return self

    def with_data_path(self, path: str | os.PathLike[str]) -> PipelineConfig:
        """Return a copy reading logs from ``path`` (the ``--logs`` override)."""
        data = self.data.model_copy(update={"path": str(Path(path).resolve())})
        return self.model_copy(update={"data": data})

    def to_yaml(self) -> str:
        """Dump the resolved configuration as YAML (logged as ``config/resolved.yml``)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)

    def flat_params(self) -> dict[str, str]:
        """``section.key`` → value strings, for MLflow params."""
        out: dict[str, str] = {}

        def walk(prefix: str, value: Any) -> None:
            if isinstance(value, dict):
                for k, v in value.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
            else:
                out[prefix] = str(value)

        walk("", self.model_dump(mode="json"))
        return out


def _resolve(cfg: PipelineConfig, cwd: Path) -> PipelineConfig:
    tracking = cfg.tracking
    uri = os.environ.get("MLFLOW_TRACKING_URI") or tracking.uri
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        uri = prefix + str((cwd / uri[len(prefix) :]).resolve())
    location = tracking.artifact_location
    if "://" not in location:
        location = (cwd / location).resolve().as_uri()
    tracking = tracking.model_copy(update={"uri": uri, "artifact_location": location})
    data = cfg.data.model_copy(update={"path": str((cwd / cfg.data.path).resolve())})
    return cfg.model_copy(update={"tracking": tracking, "data": data})


def _format_errors(path: Path, err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown key {loc!r}")
        elif e["type"] == "missing":
            lines.append(f"missing key {loc!r}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            where = f"{loc}: " if loc else ""
            lines.append(f"{where}{msg} (got {e.get('input')!r})" if loc else msg)
    return f"invalid config {path}: " + "; ".join(lines)


def load_config(path: str | os.PathLike[str]) -> PipelineConfig:
    """Read, validate and resolve ``mlflow.yml``.

    Parameters
    ----------
    path : str or path-like
        The YAML file. Every section is optional; defaults are documented on the models.

    Returns
    -------
    PipelineConfig
        Frozen, with relative paths made absolute and ``MLFLOW_TRACKING_URI`` applied.

    Raises
    ------
    ConfigError
        If the file is missing, is not a YAML mapping, has an unknown key or a value of the
        wrong type or range; the message names the file and the key.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(
            f"config file {path} must hold a mapping of sections, got {type(raw).__name__}"
        )
    try:
        cfg = PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, exc)) from None
    return _resolve(cfg, Path.cwd())
