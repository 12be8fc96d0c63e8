"""``tracking:``: where runs and models are recorded (MLflow)."""

from __future__ import annotations

import itertools
import re

from pydantic import field_serializer, field_validator, model_validator

from flows.config._base import (
    ALIAS,
    ARTIFACT_SCHEMES,
    NAME,
    TRACKING_SCHEMES,
    Section,
    check_uri,
)
from flows.redact import redact

__all__ = ["TrackingConfig"]


class TrackingConfig(Section):
    """Where runs and models are recorded (MLflow)."""

    uri: str = "sqlite:///mlflow.db"
    artifact_location: str = "./mlartifacts"
    experiment: str = "poem-retrain"
    registered_model: str = "poem-policy"
    champion_alias: str = "champion"
    challenger_alias: str = "challenger"
    previous_champion_alias: str = "previous-champion"
    # gate against the logging policy although the model had a champion that no longer
    # resolves (a deleted version); recorded on the new version (retrain --start-over-from-logger)
    start_over_from_logger: bool = False

    @field_serializer("uri", "artifact_location", when_used="json")
    def _without_password(self, value: str) -> str:
        # a JSON dump is a record (Prefect's flow-run parameters, config/resolved.yml, MLflow
        # params): no password in it; the object itself keeps the URI as given
        return redact(value)

    @field_validator("uri")
    @classmethod
    def _tracking_uri(cls, uri: str) -> str:
        return check_uri(uri, TRACKING_SCHEMES, "tracking URI", plain_paths=False)

    @field_validator("artifact_location")
    @classmethod
    def _artifact_location(cls, location: str) -> str:
        return check_uri(location, ARTIFACT_SCHEMES, "artifact location", plain_paths=True)

    @field_validator("experiment")
    @classmethod
    def _experiment(cls, name: str) -> str:
        if not name.strip() or any(ord(c) < 32 for c in name) or len(name) > 500:
            raise ValueError("experiment name must be 1-500 printable characters")
        return name

    @field_validator("registered_model")
    @classmethod
    def _model_name(cls, name: str) -> str:
        if not NAME.fullmatch(name):
            raise ValueError(
                "registered model name must be 1-255 letters, digits, '.', '_' or '-' "
                "(no '/', ':', '@' or spaces: it is part of models:/NAME@ALIAS URIs)"
            )
        return name

    @field_validator("champion_alias", "challenger_alias", "previous_champion_alias")
    @classmethod
    def _alias(cls, alias: str) -> str:
        if not ALIAS.fullmatch(alias) or alias.lower() == "latest" or re.fullmatch(r"v\d+", alias):
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
