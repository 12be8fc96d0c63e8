"""``poem-pipeline check LOGS``: validate a log (GX suite, quarantine, propensity checks, plots).

The config's ``data`` and ``checks`` sections are read exactly as ``retrain`` reads them
(:func:`flows.checking.check_settings`); each flag replaces its key. All work is done by
:func:`data_checks.check.check_logs`.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from flows.commands import (
    Deferred,
    add_bounds_arguments,
    add_column_arguments,
    add_config_argument,
)
from flows.commands._console import EXIT_CONFIG, fail
from flows.config import (
    ChecksConfig,
    ConfigError,
    DataConfig,
    PipelineConfig,
    format_errors,
    load_config,
)

# imported when the command runs (Great Expectations, pandas take seconds)
artifact = Deferred("poem.io.artifact")
data_check = Deferred("data_checks.check")
checking = Deferred("flows.checking")


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
    add_column_arguments(parser)
    add_config_argument(
        parser, "config whose data and checks sections give the defaults (those of retrain)"
    )
    parser.add_argument(
        "--estimate",
        action="store_true",
        help="the log has no propensity column: estimate the logging policy (cross-fitted, "
        "data.propensity: estimate) and print how far to trust it",
    )
    parser.add_argument(
        "--min-propensity",
        type=float,
        default=None,
        help="propensities must be strictly greater than this (default: checks.min_propensity "
        "of the config, as retrain)",
    )
    parser.add_argument(
        "--max-quarantine-fraction",
        type=float,
        default=None,
        help="fail when more than this fraction of rows is quarantined (default: "
        "checks.max_quarantine_fraction of the config, as retrain)",
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


def settings_of(args: argparse.Namespace, cfg: PipelineConfig) -> Any:
    """The check settings of ``retrain`` with this config, with the given flags replacing keys.

    The one translation :func:`flows.checking.check_settings` of ``data:`` and
    ``checks:``, so ``check`` refuses exactly what ``retrain`` refuses; each flag replaces
    its key (``--family`` → ``data.family``, ``--min-propensity`` →
    ``checks.min_propensity``, ...). Without ``--family`` the family the log declares is
    used (``data.family`` for a CSV without a ``.meta.json``).

    Raises
    ------
    ConfigError
        When the flags and the config together are invalid (e.g. loss and reward bounds).
    """
    data = cfg.data.model_dump()
    flags = {
        "n_actions": args.n_actions,
        "context_columns": args.context_columns,
        "reward_column": args.reward_column,
        "loss_column": args.loss_column,
        "action_column": args.action_column,
        "propensity_column": args.propensity_column,
        "action_ids": args.action_ids,
    }
    if args.loss_bounds is not None or args.reward_bounds is not None:
        flags.update(loss_bounds=args.loss_bounds, reward_bounds=args.reward_bounds)
        data.update(loss_bounds=None, reward_bounds=None)
    if args.window is not None:
        flags.update(window_start=args.window[0], window_end=args.window[1])
    if args.estimate:
        flags["propensity"] = "estimate"
    checks = cfg.checks.model_dump()
    for key in ("min_propensity", "max_quarantine_fraction"):
        if getattr(args, key) is not None:
            checks[key] = getattr(args, key)
    updates = {k: v for k, v in flags.items() if v is not None}
    try:
        data_cfg = DataConfig.model_validate({**data, **updates})
        checks_cfg = ChecksConfig.model_validate(checks)
    except ValidationError as exc:
        raise ConfigError(format_errors("the flags and config", exc)) from None
    settings = checking.check_settings(checks_cfg, data_cfg)
    family = args.family
    if family is None and not declares_metadata(args.logs):
        family = data_cfg.family
    return replace(settings, family=family)


def run(args: argparse.Namespace) -> int:
    """Check the log, print the result; returns 0 (usable), 1 (hard failure) or 2 (usage)."""
    if not args.logs.exists():
        return fail(f"{args.logs} does not exist", EXIT_CONFIG)
    try:
        settings = settings_of(args, load_config(args.config))
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)

    target = None if args.target_policy is None else artifact.load_policy(args.target_policy)
    outcome = data_check.check_logs(
        args.logs,
        settings=settings,
        out_dir=args.out,
        target_policy=target,
        partitions=data_check.PartitionOptions(
            mode=args.partitions,
            min_bytes=int(args.partitions_min_mb * 2**20),
            scheduler=args.scheduler,
            n_workers=args.workers,
        ),
    )
    print(json.dumps(outcome.to_dict(), indent=2, default=str) if args.json else outcome.to_text())
    return outcome.exit_code


def declares_metadata(path: Path) -> bool:
    """Whether the log carries poem metadata: a Parquet log, or a CSV with its ``.meta.json``."""
    return path.suffix.lower() != ".csv" or path.with_name(path.name + ".meta.json").is_file()
