"""``poem-pipeline init``: write the annotated default ``mlflow.yml`` into the current folder.

The file is the config the package carries (every key, its default and what it does); edit
``data.path`` (and the bounds/family of logs without metadata), then run ``check`` and
``retrain``. An existing file is kept unless ``--force``.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from flows.commands import command_parser
from flows.commands._console import EXIT_CONFIG, fail
from flows.config import default_config_path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``init`` and its arguments."""
    parser = command_parser(
        subparsers,
        "init",
        help="write the annotated default mlflow.yml into the current folder",
        run=run,
    )
    parser.add_argument(
        "--path",
        type=Path,
        default=Path("mlflow.yml"),
        help="where to write the config (default: %(default)s)",
    )
    parser.add_argument("--force", action="store_true", help="overwrite an existing file")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline init``; 0, or 2 when the file exists."""
    if args.path.exists() and not args.force:
        return fail(f"{args.path} exists; pass --force to overwrite it", EXIT_CONFIG)
    args.path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(default_config_path(), args.path)
    print(f"wrote {args.path} (the annotated default config); next:")
    print("  edit data.path, then: poem-pipeline check LOGS  /  poem-pipeline retrain")
    return 0
