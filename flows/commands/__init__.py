"""Subcommands of the ``poem-pipeline`` console script (one module each).

Every module exposes ``add_parser(subparsers)`` and ``run(args) -> int``; the two
functions below hold the argparse set-up they share.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

__all__ = ["add_config_argument", "command_parser"]


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
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=run)
    return parser


def add_config_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """Add ``--config PATH`` (default ``mlflow.yml``), the pipeline's one config file."""
    parser.add_argument(
        "--config", type=Path, default=Path("mlflow.yml"), help=f"{help} (default: %(default)s)"
    )
