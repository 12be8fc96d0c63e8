"""``poem-pipeline simulate``: the closed loop — deploy, collect, retrain, iterate.

Round 0 registers the logging policy h₀ as ``champion``; each round serves the champion through
the serving pyfunc (in process), logs decisions with their propensities and the feedback of a
supervised → bandit environment (digits, or Yeast from ``--data-dir``) as a new date partition,
runs ``retrain`` on it, and the gate decides. Prints, per round, the true expected loss of the
served policy, of the challenger and of the champion afterwards, the gate decision and its
interval. Everything is written under ``--output`` (its own MLflow store and registry, the logs,
``closed_loop.json`` and ``closed_loop.md``). The work is done by :mod:`flows.closed_loop`.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from flows._yaml import YamlError, parse_yaml
from flows.commands import Deferred, command_parser
from flows.commands._console import EXIT_CONFIG, fail

closed_loop = Deferred("flows.closed_loop")  # Prefect, MLflow: imported when the command runs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``simulate`` and its arguments."""
    parser = command_parser(
        subparsers,
        "simulate",
        help="closed-loop simulation: serve the champion, log, retrain, gate, repeat",
        run=run,
        config="pipeline config whose training, search, checks and gate settings are used; "
        "its tracking store is NOT touched",
    )
    parser.add_argument(
        "--dataset",
        choices=("digits", "yeast"),
        default="digits",
        help="supervised data set of the environment (default: %(default)s)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="shared data folder holding yeast/ (required for --dataset yeast)",
    )
    for flag, kind, default, text in (
        ("--rounds", int, 3, "retraining rounds after round 0"),
        ("--n-replays", int, 1, "passes over the training contexts per round"),
        ("--fraction", float, 0.05, "fraction of training labels h0 is fitted on"),
    ):
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default: %(default)s)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of h0's subsample and the served draws"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("simulate-output"),
        help="folder for the simulation's MLflow store, registry, logs and report "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="delete an earlier simulation in --output first"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a value of the simulation's config (YAML value; repeatable), "
        "e.g. --set search.scoring=snips --set gate.min_ess=10",
    )


def run(args: argparse.Namespace) -> int:
    """Run the loop, print each round as it finishes; returns 0, or 2 for invalid arguments."""
    if args.dataset == "yeast" and args.data_dir is None:
        return fail("--dataset yeast needs --data-dir (the folder holding yeast/)", EXIT_CONFIG)
    if args.rounds < 1 or args.n_replays < 1:
        return fail("--rounds and --n-replays must be >= 1", EXIT_CONFIG)
    overrides: dict[str, dict] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not (sep and dot and section and name):
            return fail(f"--set expects SECTION.KEY=VALUE, got {item!r}", EXIT_CONFIG)
        try:
            overrides.setdefault(section, {})[name] = parse_yaml(value, f"--set {key}")
        except YamlError as exc:  # invalid, deeply nested, a huge integer: one line
            return fail(str(exc), EXIT_CONFIG)
    out = args.output
    if out.exists() and any(out.iterdir()):
        if not args.overwrite:
            message = f"{out} is not empty; pass --overwrite or choose another --output"
            return fail(message, EXIT_CONFIG)
        if not (out / "simulate.yml").is_file():
            message = f"{out} is not a simulation folder (no simulate.yml); not deleting it"
            return fail(message, EXIT_CONFIG)
        shutil.rmtree(out)

    def show(r) -> None:  # noqa: ANN001 - a RoundReport
        interval = (
            ""
            if r.difference is None
            else (f" Δ̂={r.difference:+.4f} [{r.difference_lower:+.4f}, {r.difference_upper:+.4f}]")
        )
        challenger = (
            ""
            if r.challenger_version is None
            else (f" challenger v{r.challenger_version}={r.challenger_true_loss:.4f}")
        )
        print(
            f"round {r.round}: served v{r.served_version} true loss "
            f"{r.served_true_loss:.4f};{challenger} "
            f"{r.decision}{interval}; champion v{r.champion_version} ({r.champion_true_loss:.4f}) "
            f"[{r.seconds:.1f} s]",
            flush=True,
        )

    result = closed_loop.run_closed_loop(
        args.config,
        out,
        dataset=args.dataset,
        data_dir=args.data_dir,
        rounds=args.rounds,
        n_replays=args.n_replays,
        fraction=args.fraction,
        seed=args.seed,
        config_overrides=overrides,
        progress=show,
    )
    markdown = result.to_markdown()
    (out / "closed_loop.md").write_text(markdown + "\n")
    (out / "closed_loop.json").write_text(json.dumps(result.to_dict(), indent=2) + "\n")
    print(f"\n{markdown}")
    return 0
