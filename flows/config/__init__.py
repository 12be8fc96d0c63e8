"""Typed configuration of the pipeline, loaded from ``mlflow.yml`` (STYLE §7).

The only module that reads YAML (strictly: :mod:`flows._yaml`) or environment variables.
:func:`load_config` returns a frozen :class:`PipelineConfig`; each task gets only its section.
Every value and every combination that would fail mid-run or do nothing is checked at load,
before any data is read, and reported as one bounded :class:`ConfigError` naming the key.
Relative paths are resolved against the working directory at load; ``MLFLOW_TRACKING_URI``,
when set, overrides ``tracking.uri``; ``POEM_OUTAGE_DELAY_SCALE`` scales the waits for a
tracking server's outage (:func:`outage_delay_scale`).

The sections live one per module (``flows/config/tracking.py``, ``data.py``, ``checks.py``,
``search.py``, ``training.py``, ``gate.py``, ``dask.py``), the whole file in ``pipeline.py``;
this module loads it.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flows._yaml import (
    ConfigError,
    YamlError,
    apply_overrides,
    parse_overrides,
    read_yaml_file,
    shorten,
)
from flows.config._base import TRACKING_SCHEMES, check_uri, uri_scheme
from flows.config.checks import ChecksConfig, PropensityChecksConfig
from flows.config.dask import DaskConfig
from flows.config.data import DataConfig, SplitConfig
from flows.config.gate import GateConfig
from flows.config.pipeline import PipelineConfig, flatten
from flows.config.search import AUTO, DEFAULT_CANDIDATES, CandidateLearner, SearchConfig
from flows.config.tracking import TrackingConfig
from flows.config.training import POEM_PARAMS, TrainingConfig

__all__ = [
    "ChecksConfig",
    "ConfigError",
    "DaskConfig",
    "DataConfig",
    "GateConfig",
    "OUTAGE_DELAY_SCALE",
    "PipelineConfig",
    "PropensityChecksConfig",
    "SearchConfig",
    "SplitConfig",
    "TrackingConfig",
    "TrainingConfig",
    "apply_overrides",
    "default_config_path",
    "flatten",
    "format_errors",
    "load_config",
    "outage_delay_scale",
    "parse_overrides",
    "resolve_config_path",
]


def _resolve(cfg: PipelineConfig, cwd: Path) -> PipelineConfig:
    tracking = cfg.tracking
    uri = os.environ.get("MLFLOW_TRACKING_URI") or tracking.uri
    if uri != tracking.uri:
        try:
            check_uri(uri, TRACKING_SCHEMES, "tracking URI", plain_paths=False)
        except ValueError as exc:
            raise ConfigError(f"environment variable MLFLOW_TRACKING_URI: {exc}") from None
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri.startswith(prefix + "/"):
        uri = prefix + str((cwd / uri[len(prefix) :]).resolve())
    location = tracking.artifact_location
    if uri_scheme(location) is None:
        location = (cwd / location).resolve().as_uri()
    tracking = tracking.model_copy(update={"uri": uri, "artifact_location": location})
    data = cfg.data.model_copy(update={"path": str((cwd / cfg.data.path).resolve())})
    return cfg.model_copy(update={"tracking": tracking, "data": data})


OUTAGE_DELAY_SCALE = "POEM_OUTAGE_DELAY_SCALE"
"""The environment variable whose number multiplies every wait for a tracking server's outage."""


@functools.cache
def outage_delay_scale() -> float:
    """The factor on the waits between attempts of a call that met a tracking server's outage.

    ``POEM_OUTAGE_DELAY_SCALE`` (default 1: the waits of
    :data:`flows.tracking.OUTAGE_DELAYS` and :data:`flows.tasks.track.CLOSE_DELAYS`, 3, 10 and
    20 s); 0.1 makes them 0.3, 1 and 2 s. The number of attempts never changes. Read once per
    process (the first call); :func:`load_config` checks it, so a bad value stops ``retrain``
    before it starts.

    Raises
    ------
    ConfigError
        If the variable is set and is not a finite number >= 0 (the message shows the value).
    """
    raw = os.environ.get(OUTAGE_DELAY_SCALE)
    if raw is None or not raw.strip():
        return 1.0
    try:
        scale = float(raw)
    except ValueError:
        scale = math.nan
    if not (math.isfinite(scale) and scale >= 0):
        raise ConfigError(
            f"environment variable {OUTAGE_DELAY_SCALE}={shorten(raw)} must be a number >= 0 "
            "(the factor on the 3, 10 and 20 s waits for a tracking server's outage); unset it "
            "for the full waits"
        )
    return scale


MAX_MESSAGE_ERRORS = 5


def format_errors(path: Path | str, err: ValidationError) -> str:
    """One bounded line naming each invalid key of ``path`` (at most five, then a count)."""
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
        inconsistent combination; one bounded message naming the file and the key path; or
        if ``POEM_OUTAGE_DELAY_SCALE`` is not a number >= 0 (:func:`outage_delay_scale`).
    """
    path = resolve_config_path(path)
    if not path.exists():  # a device, pipe or folder: named by read_yaml_file
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
        raw = apply_overrides(_with_default_tables(raw, overrides), overrides)
    try:
        cfg = PipelineConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_errors(path, exc)) from None
    outage_delay_scale()  # a bad POEM_OUTAGE_DELAY_SCALE: refused here, before the run
    return _resolve(cfg, Path.cwd())


def _with_default_tables(raw: dict[str, Any], overrides: Any = None) -> dict[str, Any]:
    """Fill an absent ``training.params`` / ``search.grid`` with the defaults (for ``--set``)."""
    training, search = raw.get("training", {}), raw.get("search", {})
    if not (isinstance(training, dict) and isinstance(search, dict)):
        return raw  # the validation names the bad section
    if training.get("learner", "poem") != "poem":
        return {**raw, "training": {"params": {}, **training}}
    defaults = {"grid": dict(SearchConfig().grid)}
    data = raw.get("data")
    family = (data.get("family") if isinstance(data, dict) else None) or "discrete"
    family = dict(overrides or {}).get("data.family", family)  # the family the run will have
    if family in DEFAULT_CANDIDATES and search.get("candidates", AUTO) == AUTO:
        # auto resolved here, so that --set can edit the default candidate's grid
        defaults["candidates"] = {
            name: CandidateLearner(**spec).model_dump(mode="json")
            for name, spec in DEFAULT_CANDIDATES[family].items()
        }
        search = {k: v for k, v in search.items() if k != "candidates"}
    return {
        **raw,
        "training": {"params": dict(POEM_PARAMS), **training},
        "search": {**defaults, **search},
    }
