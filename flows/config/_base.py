"""The shared pieces of the config sections: the frozen base model and URI checks."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import inspect
import re
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Scalar = bool | int | float | str | None


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


def library_object(owner: str) -> Any:
    """The library object ``"package.module:Name"``, imported when first asked for.

    Config modules name library objects this way, not by an import statement, so that
    ``--help`` imports no library.
    """
    module, _, qualname = owner.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


@functools.cache
def _default_of(owner: str, name: str) -> Any:
    obj = library_object(owner)
    if dataclasses.is_dataclass(obj):
        (found,) = (f for f in dataclasses.fields(obj) if f.name == name)
        if found.default_factory is not dataclasses.MISSING:
            return found.default_factory()
        default = found.default
    else:
        default = inspect.signature(obj).parameters[name].default
    if default in (dataclasses.MISSING, inspect.Parameter.empty):
        raise TypeError(f"{owner} has no default for {name!r}")
    return default


def library_default(owner: str, name: str) -> Callable[[], Any]:
    """A pydantic ``default_factory``: the library's own default of ``name``.

    A default the library already writes (a dataclass field or a function parameter) is
    written once, there; the config reports it. ``owner`` is ``"module:Name"``, imported
    when a default is first needed, not when the config module is (``--help`` imports no
    library).

    Parameters
    ----------
    owner : str
        ``"package.module:Dataclass"`` or ``"package.module:function"``.
    name : str
        The field or parameter.

    Returns
    -------
    callable
        Returns the default; raises ``TypeError`` if the library gives none.
    """

    def factory() -> Any:
        return _default_of(owner, name)

    factory.__qualname__ = f"library_default({owner!r}, {name!r})"
    factory.owner = owner  # type: ignore[attr-defined]  # where the default is written
    return factory


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
ALIAS = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,254}")
# no file: MLflow 3's file store is in maintenance mode and fails at run time (ECOSYSTEM §3)
TRACKING_SCHEMES = ("sqlite", "http", "https", "postgresql", "mysql", "mssql")
ARTIFACT_SCHEMES = ("file", "s3", "gs", "wasbs", "abfss", "hdfs", "mlflow-artifacts", "http")
MAX_TRIALS = 1000  # search.grid points
# serving temperatures every fit is scored at (search.temperatures): halvings of the fitted scale
TEMPERATURES = (1.0, 0.5, 0.25, 0.125, 0.0625)
MAX_TEMPERATURES = 20
MAX_LOSS_RANGE = 1e12  # wider loss bounds lose the precision of the scaled losses


def uri_scheme(uri: str) -> str | None:
    match = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", uri)
    return match.group(1).lower() if match and len(match.group(1)) > 1 else None


def check_uri(uri: str, schemes: Sequence[str], what: str, *, plain_paths: bool) -> str:
    if not uri.strip():
        raise ValueError(f"{what} must not be empty")
    scheme = uri_scheme(uri)
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


def library_field(owner: str, name: str, **limits: Any) -> Any:
    """A pydantic field whose default is :func:`library_default` (validated like a given value)."""
    return Field(default_factory=library_default(owner, name), validate_default=True, **limits)
