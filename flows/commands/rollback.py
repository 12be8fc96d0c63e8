"""``poem-pipeline rollback``: move the ``champion`` alias back to the previous champion.

Exit codes: 0 on success, 1 when there is nothing to roll back, 2 for an invalid config.
"""

from __future__ import annotations

import argparse
import sys

from flows.commands import add_config_argument, command_parser
from flows.config import ConfigError, load_config


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``rollback`` and its arguments."""
    parser = command_parser(
        subparsers,
        "rollback",
        help="move the champion alias back to the previous champion",
        description=__doc__,
        run=run,
    )
    add_config_argument(parser, "pipeline config file naming the tracking store and model")
    parser.add_argument(
        "--to",
        dest="to_version",
        default=None,
        help="version to make champion (default: the previous-champion alias)",
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline rollback``."""
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from mlflow.exceptions import MlflowException

    from flows.registry import RollbackError, rollback
    from flows.tracking import client_for

    try:
        demoted, restored = rollback(client_for(cfg.tracking), cfg.tracking, args.to_version)
    except (RollbackError, MlflowException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"{cfg.tracking.registered_model}: champion moved from version {demoted} "
        f"back to version {restored}"
    )
    print(f"champion={restored}")
    return 0
