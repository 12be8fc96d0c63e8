"""Typed configuration of the pipeline, loaded from ``mlflow.yml`` (STYLE §7).

The only module that reads YAML (strictly: :mod:`flows._yaml`) or environment variables.
:func:`load_config` returns a frozen :class:`PipelineConfig`; each task gets only its section.
Every value and every combination that would fail mid-run or do nothing is checked at load,
before any data is read, and reported as one bounded :class:`ConfigError` naming the key.
Relative paths are resolved against the working directory at load; ``MLFLOW_TRACKING_URI``,
when set, overrides ``tracking.uri``.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from flows._yaml import (
    ConfigError,
    YamlError,
    apply_overrides,
    parse_overrides,
    read_yaml_file,
    shorten,
)
from flows.learners import LEARNERS, check_learner_params, learner_param_names

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
    "apply_overrides",
    "default_config_path",
    "flatten",
    "load_config",
    "parse_overrides",
    "resolve_config_path",
]

Scalar = bool | int | float | str | None


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,254}")
# no file: MLflow 3's file store is in maintenance mode and fails at run time (ECOSYSTEM §3)
_TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")
_ARTIFACT_SCHEMES = ("file", "s3", "gs", "wasbs", "abfss", "hdfs", "mlflow-artifacts", "http")
MAX_TRIALS = 1000  # search.grid points
# serving temperatures every fit is scored at (search.temperatures): halvings of the fitted scale
TEMPERATURES = (1.0, 0.5, 0.25, 0.125, 0.0625)
MAX_TEMPERATURES = 20
MAX_LOSS_RANGE = 1e12  # wider loss bounds lose the precision of the scaled losses


def _scheme(uri: str) -> str | None:
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", uri)
    return match.group(1).lower() if match and len(match.group(1)) > 1 else None


def _check_uri(uri: str, schemes: Sequence[str], what: str, *, plain_paths: bool) -> str:
    if not uri.strip():
        raise ValueError(f"{what} must not be empty")
    scheme = _scheme(uri)
    if scheme is None and plain_paths:
        return uri
    if scheme == "file" and "file" not in schemes:
        raise ValueError(
            f"{what}: MLflow 3 no longer runs on a file: store (maintenance mode, it fails at "
            "run time); use sqlite:///mlflow.db, or a tracking server http(s)://HOST:PORT"
        )
    if scheme not in schemes:
        found = "has no scheme" if scheme is None else f"has scheme {scheme!r}"
        raise ValueError(
            f"{what} {found}; allowed: {', '.join(schemes)}"
            + (" or a plain path" if plain_paths else "")
        )
    if scheme == "sqlite" and not uri.startswith("sqlite:///"):
        raise ValueError(f"{what} must look like sqlite:///relative.db or sqlite:////abs/path.db")
    return uri


class TrackingConfig(_Section):
    """Where runs and models are recorded (MLflow)."""

    uri: str = "sqlite:///mlflow.db"
    artifact_location: str = "./mlartifacts"
    experiment: str = "poem-retrain"
    registered_model: str = "poem-policy"
    champion_alias: str = "champion"
    challenger_alias: str = "challenger"
    previous_champion_alias: str = "previous-champion"

    @field_validator("uri")
    @classmethod
    def _tracking_uri(cls, uri: str) -> str:
        return _check_uri(uri, _TRACKING_SCHEMES, "tracking URI", plain_paths=False)

    @field_validator("artifact_location")
    @classmethod
    def _artifact_location(cls, location: str) -> str:
        return _check_uri(location, _ARTIFACT_SCHEMES, "artifact location", plain_paths=True)

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, name: str) -> str:
        if not name.strip() or any(ord(c) < 32 for c in name) or len(name) > 500:
            raise ValueError("experiment name must be 1-500 printable characters")
        return name

    @field_validator("registered_model")
    @classmethod
    def _model_name(cls, name: str) -> str:
        if not _NAME.fullmatch(name):
            raise ValueError(
                "registered model name must be 1-255 letters, digits, '.', '_' or '-' "
                "(no '/', ':', '@' or spaces: it is part of models:/NAME@ALIAS URIs)"
            )
        return name

    @field_validator("champion_alias", "challenger_alias", "previous_champion_alias")
    @classmethod
    def _alias(cls, alias: str) -> str:
        if not _ALIAS.fullmatch(alias) or alias.lower() == "latest" or re.fullmatch(r"v\d+", alias):
            raise ValueError(
                "an alias is a letter or '_' followed by letters, digits, '_' or '-', and not "
                "'latest' or v<number> (reserved by MLflow)"
            )
        return alias

    @model_validator(mode="after")
    def _distinct_aliases(self) -> TrackingConfig:
        names = ("champion_alias", "challenger_alias", "previous_champion_alias")
        for a, b in itertools.combinations(names, 2):
            if getattr(self, a) == getattr(self, b):
                raise ValueError(
                    f"tracking.{a} and tracking.{b} are both {getattr(self, a)!r}; the three "
                    "aliases must differ (one version per role)"
                )
        return self


class SplitConfig(_Section):
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


class DataConfig(_Section):
    """Where the logs are and how to read them (Parquet file or ``date=`` folder, or ``*.csv``).

    Bounds, family and number of actions declared in the log's metadata are used unless
    given here.
    """

    path: str = Field("demo-output/logs/round-1", min_length=1)
    family: Literal["discrete", "multilabel", "candidates"] = "discrete"
    loss_bounds: tuple[float, float] | None = None
    reward_bounds: tuple[float, float] | None = None
    n_actions: int | None = Field(None, ge=2)
    window_start: datetime | None = None
    window_end: datetime | None = None
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

    @model_validator(mode="after")
    def _one_kind_of_bounds(self) -> DataConfig:
        if self.loss_bounds is not None and self.reward_bounds is not None:
            raise ValueError("give loss_bounds or reward_bounds, not both")
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


class ChecksConfig(_Section):
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


class SearchConfig(_Section):
    """Hyperparameter grid searched on the validation split (selection by IPS or SNIPS).

    Trials whose validation ESS is below ``min_ess_fraction`` of the validation rows, or below
    ``min_ess`` rows, rank after the others (:func:`poem.learners.search.select_trial`). With a
    champion, ``learning_confidence_level`` is the level of
    :func:`flows.tasks.search.choose_challenger`, which decides whether a selected fit is served.
    """

    grid: dict[str, list[Scalar]] = Field(
        default_factory=lambda: {
            "solver": ["adagrad", "lbfgs"],
            "warm_start": ["zeros", "champion"],
            "variance_scale": [0.0001, 0.001, 0.003, 0.01, 0.03],
            "clip": ["p90/p10"],
        }
    )
    scoring: Literal["ips", "snips", "ips_ucb", "snips_ucb"] = "snips_ucb"
    temperatures: list[float] | None = Field(default_factory=lambda: list(TEMPERATURES))
    min_ess_fraction: float = Field(0.01, ge=0, lt=1)
    min_ess: float = Field(10.0, ge=0)
    confidence_level: float = Field(0.95, gt=0, lt=1)
    learning_confidence_level: float = Field(0.9, gt=0, lt=1)
    max_workers: int = Field(2, ge=1, le=64)
    cache_expiration_hours: float = Field(24.0, gt=0, le=24 * 365 * 10)

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, grid: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        if not grid:
            raise ValueError(
                "the grid is empty (one trial would run silently); give at least one parameter "
                "with its values, e.g. variance_scale: [0.0, 0.1, 1.0] (one value = one trial)"
            )
        n_trials = 1
        for key, values in grid.items():
            if not values:
                raise ValueError(f"grid entry {key!r} has no values")
            repeated = [v for i, v in enumerate(values) if v in values[:i]]
            if repeated:
                raise ValueError(f"grid entry {key!r} repeats {repeated[:3]} (identical trials)")
            n_trials *= len(values)
        if n_trials > MAX_TRIALS:
            raise ValueError(f"the grid has {n_trials:,} points; at most {MAX_TRIALS:,}")
        return grid

    @field_validator("temperatures")
    @classmethod
    def _temperatures(cls, values: list[float] | None) -> list[float] | None:
        if values is None:
            return None
        if not values:
            raise ValueError(
                "temperatures is empty; give at least one, e.g. [1.0], or null to serve at "
                "training.params.temperature"
            )
        bad = [t for t in values if not (math.isfinite(t) and t > 0)]
        if bad:
            raise ValueError(f"temperatures must be finite and > 0, got {bad[:3]}")
        repeated = [t for i, t in enumerate(values) if t in values[:i]]
        if repeated:
            raise ValueError(f"temperatures repeats {repeated[:3]}")
        if len(values) > MAX_TEMPERATURES:
            raise ValueError(f"{len(values)} temperatures; at most {MAX_TEMPERATURES}")
        return values


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


class TrainingConfig(_Section):
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


class GateConfig(_Section):
    """The counterfactual A/B gate (DESIGN §5).

    ``confidence_level``: 1 − α shared by every attempt on one test window against one
    champion; attempt k gets αₖ = α(1 − q)q^{k−1} with q = ``retry_fraction``
    (:mod:`poem.ledger`, recorded by :mod:`flows.ledger`). ``seed``: the random order of the
    test rows the bound bets on.
    """

    estimator: Literal["ips", "snips", "clipped_ips"] = "ips"
    clip: float | None = Field(None, gt=0)
    interval: Literal["t", "normal", "bootstrap"] = "t"
    confidence_level: float = Field(0.95, gt=0, lt=1)
    min_improvement: float = Field(0.0, ge=0)
    min_ess: float = Field(100.0, ge=0)
    randomized: bool = False
    seed: int = Field(0, ge=0)
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


class DaskConfig(_Section):
    """Where the log is processed (DESIGN §8): in this process, or on a Dask cluster.

    ``mode``: ``auto`` starts a ``LocalCluster`` when the log's files hold more than
    ``min_log_mib`` MiB, ``always`` always does, ``never`` keeps the thread pool; a
    ``scheduler_address`` (``tcp://host:8786``) uses that cluster instead. ``partitioned``
    chooses between the two cluster routes of :mod:`flows.cluster`.
    """

    mode: Literal["auto", "always", "never"] = "auto"
    min_log_mib: float = Field(2048.0, ge=0)
    scheduler_address: str | None = None
    n_workers: int = Field(2, ge=1)
    threads_per_worker: int = Field(1, ge=1)
    memory_limit: str = "4GiB"
    partitioned: bool = True


class PipelineConfig(_Section):
    """The whole ``mlflow.yml``."""

    tracking: TrackingConfig = TrackingConfig()
    data: DataConfig = DataConfig()
    checks: ChecksConfig = ChecksConfig()
    search: SearchConfig = SearchConfig()
    training: TrainingConfig = TrainingConfig()
    gate: GateConfig = GateConfig()
    dask: DaskConfig = DaskConfig()

    @model_validator(mode="before")
    @classmethod
    def _grid_for_learner(cls, raw: Any) -> Any:
        if not isinstance(raw, dict):
            return raw
        learner = (raw.get("training") or {}).get("learner", "poem")
        search = raw.get("search") or {}
        default = learner == "poem" or learner not in LEARNERS
        if not default and isinstance(search, dict) and "grid" not in search:
            raise ValueError(
                f"search.grid: the default grid is POEM's; give learner {learner!r} its own, "
                "e.g. grid: {l2_penalty: [0.0, 1.0]}"
            )
        return raw

    @model_validator(mode="after")
    def _snips_needs_a_weight_bound(self) -> PipelineConfig:
        if self.gate.estimator == "snips" and self.checks.min_propensity <= 0:
            raise ValueError(
                "gate.estimator 'snips' needs a declared weight bound: set "
                "checks.min_propensity > 0 (the logger's floor), or use gate.estimator: ips"
            )
        return self

    @model_validator(mode="after")
    def _learner_params(self) -> PipelineConfig:
        learner = self.training.learner
        known = learner_param_names(learner)
        for section, keys in (
            ("training.params", self.training.params),
            ("search.grid", self.search.grid),
        ):
            unknown = sorted(set(keys) - known)
            if unknown:
                raise ValueError(
                    f"{section}: unknown parameter(s) {unknown} for learner "
                    f"{learner!r}; valid: {sorted(known)}"
                )
        fixed = dict(self.training.params)
        effective = _learner_check("training.params", learner, fixed)
        grid = self.search.grid
        for key, values in grid.items():
            for i, value in enumerate(values):
                _learner_check(f"search.grid.{key}[{i}]", learner, {**fixed, key: value})
        if self.search.temperatures is not None and "temperature" in grid:
            raise ValueError(
                "search.grid.temperature and search.temperatures both set: every fit is scored "
                "at each of search.temperatures (no refit); drop the grid entry, or set "
                "search.temperatures: null to refit per grid temperature"
            )
        if self.search.temperatures is not None and "temperature" not in known:
            raise ValueError(
                f"search.temperatures: learner {learner!r} has no temperature "
                "parameter; set search.temperatures: null"
            )
        penalties = grid.get("variance_penalty", [effective.get("variance_penalty")])
        numeric = [p for p in penalties if not isinstance(p, str)]
        if len(grid.get("variance_scale", [])) > 1 and numeric:
            raise ValueError(
                f"search.grid.variance_scale only scales variance_penalty 'calibrated', but "
                f"variance_penalty is {numeric[0]!r}: the trials would be identical; set "
                "training.params.variance_penalty: calibrated, or search variance_penalty instead"
            )
        policy = effective.get("policy")
        if policy is not None and policy != self.data.family:
            where = (
                "training.params.policy"
                if "policy" in self.training.params
                else f"the {learner!r} learner's default policy"
            )
            raise ValueError(
                f"{where} is {policy!r} but data.family is {self.data.family!r}; they must match"
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
        return {key: str(value) for key, value in flatten(self.model_dump(mode="json")).items()}


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings → ``a.b.c`` keys (MLflow params and metrics are flat)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def _learner_check(where: str, learner: str, params: dict[str, Any]) -> dict[str, Any]:
    """The learner's own validation of ``params``; errors become ``ValueError`` naming ``where``."""
    try:
        return check_learner_params(learner, params)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{where}: {exc}") from None


def _resolve(cfg: PipelineConfig, cwd: Path) -> PipelineConfig:
    tracking = cfg.tracking
    uri = os.environ.get("MLFLOW_TRACKING_URI") or tracking.uri
    if uri != tracking.uri:
        try:
            _check_uri(uri, _TRACKING_SCHEMES, "tracking URI", plain_paths=False)
        except ValueError as exc:
            raise ConfigError(f"environment variable MLFLOW_TRACKING_URI: {exc}") from None
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        uri = prefix + str((cwd / uri[len(prefix) :]).resolve())
    location = tracking.artifact_location
    if _scheme(location) is None:
        location = (cwd / location).resolve().as_uri()
    tracking = tracking.model_copy(update={"uri": uri, "artifact_location": location})
    data = cfg.data.model_copy(update={"path": str((cwd / cfg.data.path).resolve())})
    return cfg.model_copy(update={"tracking": tracking, "data": data})


MAX_MESSAGE_ERRORS = 5


def _format_errors(path: Path, err: ValidationError) -> str:
    lines = []
    errors = err.errors()
    for e in errors[:MAX_MESSAGE_ERRORS]:
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(f"unknown key {loc!r}")
        elif e["type"] == "missing":
            lines.append(f"missing key {loc!r}")
        else:
            msg = e["msg"].removeprefix("Value error, ")
            if not loc or msg.startswith(f"{loc}.") or msg.startswith(f"{e['loc'][0]}."):
                lines.append(msg)  # a combination check: its message names the keys
            elif "got " in msg:
                lines.append(f"{loc}: {msg}")  # the message already shows the value
            else:
                lines.append(f"{loc}: {msg} (got {shorten(e.get('input'))})")
    if len(errors) > MAX_MESSAGE_ERRORS:
        lines.append(f"and {len(errors) - MAX_MESSAGE_ERRORS} more")
    return f"invalid config {path}: " + "; ".join(lines)


def default_config_path() -> Path:
    """The annotated default ``mlflow.yml`` carried by the package (``poem-pipeline init``)."""
    return Path(__file__).with_name("mlflow.yml")


def resolve_config_path(path: str | os.PathLike[str] | None) -> Path:
    """``path``, or when None ``./mlflow.yml`` if present, else :func:`default_config_path`."""
    if path is not None:
        return Path(path)
    local = Path("mlflow.yml")
    return local if local.is_file() else default_config_path()


def load_config(
    path: str | os.PathLike[str] | None = None, overrides: Mapping[str, Any] | None = None
) -> PipelineConfig:
    """Read, validate and resolve ``mlflow.yml``.

    Parameters
    ----------
    path : str or path-like or None, default=None
        The YAML file; None means :func:`resolve_config_path`'s choice. Every section is
        optional; an empty file gives the packaged default config.
    overrides : mapping or None, default=None
        Dotted key path → value (``--set``, see :func:`parse_overrides`), applied before
        validation.

    Returns
    -------
    PipelineConfig
        Frozen, with relative paths made absolute and ``MLFLOW_TRACKING_URI`` applied.

    Raises
    ------
    ConfigError
        If the file is missing, unreadable, not UTF-8, not strict YAML (aliases, duplicate
        keys), not a mapping, or has an unknown key, a value of the wrong type or range or an
        inconsistent combination; one bounded message naming the file and the key path.
    """
    path = resolve_config_path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path} (`poem-pipeline init` writes one)")
    try:
        raw = read_yaml_file(path)
    except YamlError as exc:
        raise ConfigError(str(exc)) from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc.strerror}") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise ConfigError(
            f"config file {path} must hold a mapping of sections, got {type(raw).__name__}"
        )
    if overrides:
        raw = apply_overrides(_with_default_tables(raw), overrides)
    try:
        cfg = PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(path, exc)) from None
    return _resolve(cfg, Path.cwd())


def _with_default_tables(raw: dict[str, Any]) -> dict[str, Any]:
    """Fill an absent ``training.params`` / ``search.grid`` with the defaults (for ``--set``)."""
    training, search = raw.get("training", {}), raw.get("search", {})
    if not (isinstance(training, dict) and isinstance(search, dict)):
        return raw  # the validation names the bad section
    if training.get("learner", "poem") != "poem":
        return {**raw, "training": {"params": {}, **training}}
    return {
        **raw,
        "training": {"params": dict(POEM_PARAMS), **training},
        "search": {"grid": dict(SearchConfig().grid), **search},
    }
