"""``poem-pipeline rollback``: move the ``champion`` alias back to the previous champion.

``--to VERSION`` moves it to any version instead (back or forward; the output says which),
also when no version is champion (its version was deleted). A version the gate rejected is
refused unless ``--force``. The target's model files and code are verified against the digests
recorded at registration before the alias moves: a deleted or edited model is refused.

Exit codes: 0 on success, 1 when there is nothing to roll back, the target is refused or the
store cannot be read, 2 for an invalid config.
"""

from __future__ import annotations

import argparse

from flows.commands import Deferred, command_parser
from flows.commands._console import EXIT_CONFIG, EXIT_FAILED, fail
from flows.config import ConfigError, load_config
from flows.store_faults import StoreError

registry = Deferred("flows.registry")  # MLflow: imported when the command runs
tracking = Deferred("flows.tracking")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``rollback`` and its arguments."""
    parser = command_parser(
        subparsers,
        "rollback",
        help="move the champion alias back to the previous champion",
        run=run,
        config="pipeline config file naming the tracking store and model",
    )
    parser.add_argument(
        "--to",
        dest="to_version",
        default=None,
        help="version to make champion (default: the previous-champion alias)",
    )
    parser.add_argument("--force", action="store_true", help="allow a version the gate rejected")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline rollback``."""
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)
    from mlflow.exceptions import MlflowException

    try:
        result = registry.rollback(
            tracking.client_for(cfg.tracking), cfg.tracking, args.to_version, force=args.force
        )
    except (registry.RollbackError, StoreError, MlflowException, OSError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return fail(first, EXIT_FAILED)  # one line, never a traceback (a corrupt store)
    if result.demoted == "none":
        print(
            f"{cfg.tracking.registered_model}: champion set to version {result.champion} "
            "(no version was champion)"
        )
    else:
        print(
            f"{cfg.tracking.registered_model}: champion moved {result.direction} from version "
            f"{result.demoted} to version {result.champion}"
        )
    print(f"champion={result.champion}")
    return 0
