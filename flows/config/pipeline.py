"""The whole ``mlflow.yml``: :class:`PipelineConfig` and its cross-section checks."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, model_validator

from flows.config._base import Section, library_object
from flows.config.checks import ChecksConfig
from flows.config.dask import DaskConfig
from flows.config.data import DataConfig
from flows.config.gate import OPTION, GateConfig
from flows.config.search import (
    AUTO,
    DEFAULT_CANDIDATES,
    SearchConfig,
)
from flows.config.tracking import TrackingConfig
from flows.config.training import TrainingConfig
from flows.learners import (
    LEARNERS,
    candidate_params,
    check_learner_params,
    learner_families,
    learner_param_names,
)

__all__ = ["PipelineConfig", "flatten"]


class PipelineConfig(Section):
    """The whole ``mlflow.yml``."""

    tracking: TrackingConfig = TrackingConfig()
    data: DataConfig = DataConfig()
    checks: ChecksConfig = Field(default_factory=ChecksConfig)  # the library's defaults
    search: SearchConfig = Field(default_factory=SearchConfig)  # the library's defaults
    training: TrainingConfig = TrainingConfig()
    gate: GateConfig = Field(default_factory=GateConfig)  # the library's defaults
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
        data = raw.get("data")
        family = (data.get("family") if isinstance(data, dict) else None) or "discrete"
        if isinstance(search, dict) and search.get("candidates", AUTO) == AUTO:
            # auto (or absent): the family's measured default (flows.config.search.
            # DEFAULT_CANDIDATES: discrete the IPW classifier, multilabel poem_marginal), else {}
            auto = dict(DEFAULT_CANDIDATES.get(family, {}))
            raw = {**raw, "search": {**search, "candidates": auto}}
        return raw

    @model_validator(mode="after")
    def _gate_option_checks(self) -> PipelineConfig:
        # the option's own checks, with the declared floor (e.g. snips needs one)
        option = library_object(OPTION)(self.gate.estimator)
        option.check_config(self.gate.clip, self.checks.min_propensity)
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

    @model_validator(mode="after")
    def _candidate_learners(self) -> PipelineConfig:
        for name, spec in self.search.candidates.items():
            where = f"search.candidates.{name}"
            if name not in LEARNERS:
                raise ValueError(
                    f"{where}: unknown learner {name!r}; choose one of {sorted(LEARNERS)}"
                )
            if name == self.training.learner:
                raise ValueError(
                    f"{where}: {name!r} is training.learner already (its grid is search.grid); "
                    "drop it from search.candidates or choose another training.learner"
                )
            families = learner_families(name)
            if families is not None and self.data.family not in families:
                raise ValueError(
                    f"{where}: learner {name!r} fits {list(families)} logs, but data.family is "
                    f"{self.data.family!r}; drop it (search.candidates: {{}} searches "
                    "training.learner alone)"
                )
            known = learner_param_names(name)
            for section, keys in (("params", spec.params), ("grid", spec.grid)):
                unknown = sorted(set(keys) - known)
                if unknown:
                    raise ValueError(
                        f"{where}.{section}: unknown parameter(s) {unknown} for learner "
                        f"{name!r}; valid: {sorted(known)}"
                    )
            fixed = candidate_params(name, spec.params, self.training.params)
            _learner_check(f"{where}.params", name, fixed)
            for key, values in spec.grid.items():
                for i, value in enumerate(values):
                    _learner_check(f"{where}.grid.{key}[{i}]", name, {**fixed, key: value})
            if "temperature" in spec.grid and self.search.temperatures is not None:
                raise ValueError(
                    f"{where}.grid.temperature and search.temperatures both set: every fit is "
                    "scored at each of search.temperatures (no refit); drop the grid entry"
                )
            if self.search.temperatures is not None and "temperature" not in known:
                raise ValueError(
                    f"{where}: learner {name!r} has no temperature parameter, but every fit is "
                    "scored at search.temperatures; drop it or set search.temperatures: null"
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
