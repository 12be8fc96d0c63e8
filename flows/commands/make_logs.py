"""``poem-pipeline make-logs``: canonical Parquet logs, simulated or from the Open Bandit Dataset.

The paper's supervised → bandit conversion (§6: h₀ fitted on 5 % of the training set, which is
replayed through it), or ``--dataset obd``'s real logged feedback (:func:`poem.io.obd.read_obd`,
δ = −click). This module only wires :mod:`poem.simulate`, :mod:`poem.io.obd` and the writer.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from flows.commands import Deferred

# imported when the command runs (scikit-learn, pandas, pyarrow take seconds)
datasets = Deferred("poem.datasets")
obd = Deferred("poem.io.obd")
parquet = Deferred("poem.io.parquet")
simulate = Deferred("poem.simulate")

DATASETS = ("digits", "yeast", "tmc2007", "emotions", "medical", "obd")  # + poem.datasets.DATASETS


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``make-logs`` subcommand and its arguments."""
    parser = subparsers.add_parser(
        "make-logs",
        help="simulate logged bandit feedback from a supervised data set and write "
        "canonical Parquet logs",
        description="Fit a logging policy h0 on 5% of a supervised training set, replay the "
        "training set through h0 and write the log as date-partitioned Parquet "
        "(date=YYYY-MM-DD/part-*.parquet).",
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        required=True,
        help="supervised data set: digits (bundled, discrete), yeast, tmc2007, emotions or "
        "medical (multilabel, need --data-dir); or obd, the Open Bandit Dataset's real logs "
        "(needs --data-dir)",
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
    obd = parser.add_argument_group("Open Bandit Dataset (--dataset obd)")
    for flag, choices, text in (
        ("--behavior-policy", ("random", "bts"), "logging policy folder"),
        ("--campaign", ("all", "men", "women"), "campaign folder"),
    ):  # the default is the first choice
        obd.add_argument(
            flag, choices=choices, default=choices[0], help=f"{text} (default: %(default)s)"
        )
    obd.add_argument(
        "--position",
        type=int,
        choices=(1, 2, 3),
        default=None,
        help="write the discrete log of one slot (items as actions, user features as "
        "contexts); default: the candidates log of all slots (items × positions)",
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
    if args.n_events is not None and args.n_events < 1:
        print(f"error: --n-events must be >= 1, got {args.n_events}")
        return 2
    if args.dataset == "obd":  # one Open Bandit Dataset folder
        if args.data_dir is None:
            print("error: --dataset obd needs --data-dir (the folder holding obd/)")
            return 2
        log = obd.read_obd(
            args.data_dir,
            args.behavior_policy,
            args.campaign,
            family="candidates" if args.position is None else "discrete",
            position=args.position,
            interactions=False,
        )
        return _write(
            log,
            args,
            f"of the Open Bandit Dataset ({args.behavior_policy}/{args.campaign}, "
            "{n_actions} actions)",
        )
    data = datasets.load_dataset(args.dataset, args.data_dir, random_state=args.seed)
    h0 = simulate.fit_logging_policy(
        data.X_train,
        data.Y_train,
        family=data.family,
        temperature=args.logger_temperature,
        random_state=args.seed,
    )
    replays = 4 if args.n_events is None else math.ceil(args.n_events / data.X_train.shape[0])
    log = simulate.supervised_to_bandit(
        data.X_train,
        data.Y_train,
        h0,
        n_replays=replays,
        random_state=args.seed,
        start_time=args.start_time,
        feature_names=data.feature_names,
        order=args.order,
    )
    return _write(
        log,
        args,
        f"of {args.dataset} ({{n_actions}} "
        f"{'actions' if log.family == 'discrete' else 'labels'}, logger "
        f"{log.logging_model_version})",
    )


def _write(log: Any, args: argparse.Namespace, description: str) -> int:
    """Keep the first ``--n-events`` rows, write the log, print one line; returns 0."""
    if args.n_events is not None and args.n_events < log.n_rows:
        log = log.take(range(args.n_events))
    path = parquet.write_log(
        log, args.out, partition_by_date=not args.no_partition, overwrite=args.overwrite
    )
    text = description.format(n_actions=log.n_actions or "-")
    print(f"wrote {log.n_rows:,} {log.family} events {text} to {path}")
    return 0
