"""``poem-pipeline retrain``: run the ``retrain`` flow once.

Exit codes: 0 when the flow completes (decision ``promoted`` or ``rejected``), 1 when the logs
fail their checks or the run fails, 2 for an invalid config. The last line printed is
``decision=<promoted|rejected> champion=<version>``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from flows.commands import add_config_argument, command_parser
from flows.config import ConfigError, load_config

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``retrain`` and its arguments."""
    parser = command_parser(
        subparsers,
        "retrain",
        help="validate logs, learn a policy, gate it against the champion, register and promote",
        description=__doc__,
        run=run,
    )
    add_config_argument(parser, "pipeline config file")
    parser.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="log file or date-partitioned folder; overrides data.path of the config",
    )


def run_retrain(config: Path, logs: Path | None) -> int:
    """Load the config, run the flow, print the outcome; return the exit code."""
    try:
        load_config(config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    from flows.prefect_server import prefect_api
    from flows.retrain import retrain
    from poem.exceptions import InvalidLogError

    try:
        with prefect_api():  # a temporary server that dies with this command, even on kill -9
            result = retrain(config, logs)
    except InvalidLogError as exc:
        print(
            f"error: the logs failed their checks; nothing was trained or registered:\n{exc}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except Exception as exc:  # noqa: BLE001 - the CLI reports any failure as an exit code
        print(f"error: retrain failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for reason in result.reasons:
        print(f"  {reason}")
    print(f"challenger version {result.challenger_version}; MLflow run {result.mlflow_run_id}")
    print(result.summary_line())
    return EXIT_OK


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline retrain``."""
    return run_retrain(args.config, args.logs)
