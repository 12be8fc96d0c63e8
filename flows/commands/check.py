"""``poem-pipeline check LOGS``: validate a log (GX suite, quarantine, propensity checks, plots).

The quarantine limit and the propensity floor default to the config's ``checks`` section, as
for ``retrain``. All work is done by :func:`data_checks.check.check_logs`.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flows.commands import Deferred, add_bounds_arguments, add_config_argument
from flows.commands._console import EXIT_CONFIG, fail
from flows.config import ConfigError, load_config

# imported when the command runs (Great Expectations, pandas take seconds)
artifact = Deferred("poem.io.artifact")
data_check = Deferred("data_checks.check")


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``check`` subcommand and its arguments."""
    parser = subparsers.add_parser(
        "check",
        help="validate logged bandit feedback: schema, ranges, quarantine, propensity "
        "sanity checks",
        description="Run the Great Expectations suite of the log's family, quarantine rows failing "
        "row-level checks, run the propensity sanity checks and draw diagnostic plots. Exit code "
        "0 = usable (warnings allowed), 1 = hard failure, 2 = missing file or invalid config.",
    )
    parser.add_argument("logs", type=Path, help="Parquet file, date-partitioned folder or CSV file")
    parser.add_argument(
        "--family",
        choices=("discrete", "multilabel", "candidates"),
        default=None,
        help="expected family (required for logs without poem metadata)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="folder for check_report.json, quarantine.parquet, data_docs/ and plots/",
    )
    add_bounds_arguments(
        parser,
        {
            "loss": "declared loss bounds, for logs without metadata",
            "reward": "declared reward bounds, for logs with a reward column "
            "(converted to loss = -reward)",
        },
    )
    parser.add_argument(
        "--n-actions",
        type=int,
        default=None,
        help="number of actions K (discrete), for logs without metadata",
    )
    parser.add_argument(
        "--window",
        nargs=2,
        metavar=("START", "END"),
        default=None,
        help="accepted timestamp window (ISO 8601), e.g. 2026-01-01 2026-02-01",
    )
    add_config_argument(parser, "config whose checks section gives the defaults below")
    parser.add_argument(
        "--min-propensity",
        type=float,
        default=None,
        help="propensities must be strictly greater than this (default: checks.min_propensity "
        "of the config, 0)",
    )
    parser.add_argument(
        "--max-quarantine-fraction",
        type=float,
        default=None,
        help="fail when more than this fraction of rows is quarantined (default: "
        "checks.max_quarantine_fraction of the config, 0.01, as retrain)",
    )
    parser.add_argument(
        "--target-policy",
        type=Path,
        default=None,
        help="policy artifact folder (poem.io.artifact) for the ESS check and weight plot",
    )
    parser.add_argument(
        "--partitions",
        choices=("auto", "always", "never"),
        default="auto",
        help="check a Parquet log one row group at a time (Dask): auto = when its files "
        "total at least --partitions-min-mb (default: auto)",
    )
    parser.add_argument(
        "--partitions-min-mb", type=float, default=1024.0, help="size for auto (default: 1024)"
    )
    parser.add_argument(
        "--scheduler",
        default="local",
        help="for partitions: local (a LocalCluster), sync (in this process) or a Dask "
        "scheduler address tcp://HOST:PORT (default: local)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="workers of the LocalCluster (default: 2)"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the JSON report instead of the table"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Check the log, print the result; returns 0 (usable), 1 (hard failure) or 2 (usage)."""
    if not args.logs.exists():
        return fail(f"{args.logs} does not exist", EXIT_CONFIG)
    try:
        checks = load_config(args.config).checks
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)

    target = None if args.target_policy is None else artifact.load_policy(args.target_policy)
    outcome = data_check.check_logs(
        args.logs,
        family=args.family,
        out_dir=args.out,
        window=args.window,
        min_propensity=checks.min_propensity
        if args.min_propensity is None
        else args.min_propensity,
        max_quarantine_fraction=checks.max_quarantine_fraction
        if args.max_quarantine_fraction is None
        else args.max_quarantine_fraction,
        target_policy=target,
        loss_bounds=args.loss_bounds,
        reward_bounds=args.reward_bounds,
        n_actions=args.n_actions,
        partitions=data_check.PartitionOptions(
            mode=args.partitions,
            min_bytes=int(args.partitions_min_mb * 2**20),
            scheduler=args.scheduler,
            n_workers=args.workers,
        ),
    )
    print(json.dumps(outcome.to_dict(), indent=2, default=str) if args.json else outcome.to_text())
    return outcome.exit_code
