"""Subcommands of the ``poem-pipeline`` console script (one module each).

Every module exposes ``add_parser(subparsers)`` and ``run(args) -> int``; the two
functions below hold the argparse set-up they share.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

__all__ = ["add_config_argument", "command_parser", "plain_text"]

_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")  # :mod:`deploy.closed_loop`, :class:`~a.B`


def plain_text(text: str | None) -> str | None:
    """A docstring as terminal text: reStructuredText roles and ``literals`` unwrapped."""
    if text is None:
        return None

    def role(match: re.Match) -> str:  # :class:`~a.B` shows B, :mod:`a.b` shows a.b
        return match.group(1).rsplit(".", 1)[-1] if "~" in match.group(0) else match.group(1)

    text = _ROLE.sub(role, text)
    return text.replace("``", "")


def command_parser(
    subparsers: argparse._SubParsersAction,
    name: str,
    *,
    help: str,
    description: str | None,
    run: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` whose ``--help`` shows the module docstring; dispatch to ``run``."""
    parser = subparsers.add_parser(
        name,
        help=help,
        description=plain_text(description),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run)
    return parser


_DEFAULT_CONFIG = "./mlflow.yml, else the packaged default"


def _config_path(value: str) -> Path:
    from flows.config import resolve_config_path

    return resolve_config_path(None if value == _DEFAULT_CONFIG else value)


def add_config_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """Add ``--config PATH``: the pipeline's one config file.

    Default: ``./mlflow.yml`` when it exists, else the default config carried by the package
    (so commands work from any folder; ``poem-pipeline init`` writes an editable copy).
    """
    parser.add_argument(
        "--config",
        type=_config_path,
        default=_DEFAULT_CONFIG,
        help=f"{help} (default: %(default)s)",
    )
