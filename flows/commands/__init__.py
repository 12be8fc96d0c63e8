"""Subcommands of the ``poem-pipeline`` console script (one module each).

Every module exposes ``add_parser(subparsers)`` and ``run(args) -> int``; the functions below
hold the argparse set-up they share, and :class:`Deferred` the imports a command makes only
once it runs.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from flows.config import resolve_config_path

__all__ = ["Deferred", "add_config_argument", "command_parser", "plain_text"]


class Deferred:
    """A project module imported when a command first uses it, not when the parser is built.

    ``registry = Deferred("flows.registry")`` at a command's top; the first attribute access
    (``registry.rollback``) imports it, so ``--help`` does not pay for Prefect, MLflow, GX or
    scikit-learn. ``tests/flows/test_imports.py`` counts the literal name as an import.

    Parameters
    ----------
    name : str
        Dotted module name, e.g. ``"flows.registry"``.
    """

    __slots__ = ("__name",)

    def __init__(self, name: str) -> None:
        self.__name = name

    def load(self) -> ModuleType:
        """Import the module now (e.g. for the loggers a library configures when imported)."""
        return importlib.import_module(self.__name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.load(), attr)

    def __repr__(self) -> str:
        return f"Deferred({self.__name!r})"


_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :mod:`flows.closed_loop`, :class:`~a.B`


def plain_text(text: str | None) -> str | None:
    """A docstring as terminal text: reStructuredText roles and ``literals`` unwrapped."""
    if text is None:
        return None

    def role(match: re.Match) -> str:  # :class:`~a.B` shows B, :mod:`a.b` shows a.b
        return match.group(1).rsplit(".", 1)[-1] if "~" in match.group(0) else match.group(1)

    return _ROLE.sub(role, text).replace("``", "")


def command_parser(
    subparsers: argparse._SubParsersAction,
    name: str,
    *,
    help: str,
    run: Callable[[argparse.Namespace], int],
    config: str | None = None,
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose ``--help`` shows the docstring of ``run``'s module.

    It dispatches to ``run``; with ``config`` (its help text) it takes :func:`add_config_argument`.
    """
    parser = subparsers.add_parser(
        name,
        help=help,
        description=plain_text(sys.modules[run.__module__].__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run)
    if config is not None:
        add_config_argument(parser, config)
    return parser


_DEFAULT_CONFIG = "./mlflow.yml, else the packaged default"


def _config_path(value: str) -> Path:
    return resolve_config_path(None if value == _DEFAULT_CONFIG else value)


def add_config_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """Add ``--config PATH``: the pipeline's one config file.

    Default: :func:`flows.config.resolve_config_path`'s choice, so commands work from any folder.
    """
    parser.add_argument(
        "--config",
        type=_config_path,
        default=_DEFAULT_CONFIG,
        help=f"{help} (default: %(default)s)",
    )


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def add_column_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the flags naming a log's own columns (the ``data.*_column(s)`` keys of mlflow.yml)."""
    parser.add_argument(
        "--context-columns",
        type=_names,
        default=None,
        metavar="NAMES",
        help="the feature columns, comma-separated names or globs, e.g. age,income or 'f_*' "
        "(data.context_columns; default: x_0, x_1, ...)",
    )
    for name, canonical in (
        ("reward", "reward"),
        ("loss", "loss"),
        ("action", "action"),
        ("propensity", "propensity"),
    ):
        parser.add_argument(
            f"--{name}-column",
            default=None,
            metavar="COLUMN",
            help=f"the column holding the {canonical} (data.{name}_column; default: {canonical})",
        )
    parser.add_argument(
        "--action-ids",
        type=_names,
        default=None,
        metavar="IDS",
        help="the action column's own ids in the order of actions 0..K-1, comma-separated, "
        "e.g. shoes,hats,bags (data.action_ids); recorded in the log's metadata and the "
        "served model",
    )


def add_bounds_arguments(parser: argparse.ArgumentParser, helps: dict[str, str]) -> None:
    """Add ``--loss-bounds MIN MAX`` and ``--reward-bounds MIN MAX`` with these help texts."""
    for name in ("loss", "reward"):
        parser.add_argument(
            f"--{name}-bounds",
            type=float,
            nargs=2,
            metavar=("MIN", "MAX"),
            default=None,
            help=helps[name],
        )
