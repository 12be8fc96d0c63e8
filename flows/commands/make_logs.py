"""``poem-pipeline make-logs``: write canonical Parquet logs simulated from a supervised data set.

Supervised → bandit conversion of the paper (§6): a logging policy h₀ is fitted on 5 % of
the training set, then the training set is replayed through h₀ (action, propensity, loss per
row). All computation is in :mod:`poem.datasets`, :mod:`poem.simulate` and
:mod:`poem.io.parquet`; this module only wires them.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

DATASETS = ("digits", "yeast", "tmc2007", "emotions", "medical")  # poem.datasets.DATASETS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``make-logs`` subcommand and its arguments."""
    parser = subparsers.add_parser(
        "make-logs",
        help="simulate logged bandit feedback from a supervised data set and write "
        "canonical Parquet logs",
        description="Fit a logging policy h0 on 5%% of a supervised training set, replay the "
        "training set through h0 and write the log as date-partitioned Parquet "
        "(date=YYYY-MM-DD/part-*.parquet).",
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        required=True,
        help="supervised data set: digits (bundled, discrete), yeast, tmc2007, emotions or "
        "medical (multilabel, need --data-dir)",
    )
    parser.add_argument(
        "--out", type=Path, required=True, help="output folder of the partitioned log"
    )
    parser.add_argument(
        "--n-events",
        type=int,
        default=None,
        help="number of logged events (default: 4 replays of the training set)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of h0's training subsample and of the sampled actions (default: 0)",
    )
    parser.add_argument(
        "--logger-temperature",
        type=float,
        default=1.0,
        help="temperature of h0; < 1 makes the logger more deterministic (default: 1.0)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="folder holding yeast/ and tmc2007/ (the shared data folder)",
    )
    parser.add_argument(
        "--start-time",
        default="2026-01-01T00:00:00",
        help="timestamp of the first event; one event per second after it (default: "
        "2026-01-01T00:00:00)",
    )
    parser.add_argument(
        "--order",
        choices=["context", "pass"],
        default="context",
        help="row (time) order: each context's replays together, so a time split separates "
        "contexts, or the paper's pass after pass (default: context)",
    )
    parser.add_argument(
        "--no-partition",
        action="store_true",
        help="write a single Parquet file at --out instead of date partitions",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace a log already at --out (default: refuse)"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Simulate the log and write it; returns the exit code."""
    from poem.datasets import load_dataset
    from poem.io.parquet import write_log
    from poem.simulate import fit_logging_policy, supervised_to_bandit

    if args.n_events is not None and args.n_events < 1:
        print(f"error: --n-events must be >= 1, got {args.n_events}")
        return 2
    data = load_dataset(args.dataset, args.data_dir, random_state=args.seed)
    h0 = fit_logging_policy(
        data.X_train,
        data.Y_train,
        family=data.family,
        temperature=args.logger_temperature,
        random_state=args.seed,
    )
    n_train = data.X_train.shape[0]
    replays = 4 if args.n_events is None else math.ceil(args.n_events / n_train)
    log = supervised_to_bandit(
        data.X_train,
        data.Y_train,
        h0,
        n_replays=replays,
        random_state=args.seed,
        start_time=args.start_time,
        feature_names=data.feature_names,
        order=args.order,
    )
    if args.n_events is not None and args.n_events < log.n_rows:
        log = log.take(range(args.n_events))
    path = write_log(
        log, args.out, partition_by_date=not args.no_partition, overwrite=args.overwrite
    )
    print(
        f"wrote {log.n_rows:,} {log.family} events of {args.dataset} ({log.n_actions} "
        f"{'actions' if log.family == 'discrete' else 'labels'}, logger "
        f"{log.logging_model_version}) to {path}"
    )
    return 0
