"""``poem-pipeline library-demo``: the library demo on scikit-learn's bundled digits (no network).

Simulates bandit logs from digits with a logging policy h₀, fits POEM, and prints h₀'s and
POEM's exact expected test loss beside their IPS/SNIPS estimates with confidence intervals.
All computation happens in :func:`poem.demo.run_digits_demo`; this module only prints.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from flows.commands import Deferred

demo = Deferred("poem.demo")  # scikit-learn: imported when the command runs


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``library-demo`` subcommand and its arguments."""
    parser = subparsers.add_parser(
        "library-demo",
        help="simulate bandit logs from digits, learn with POEM, print losses and estimates",
        description="Turn scikit-learn's digits into a 10-action bandit problem (paper §6), "
        "fit POEM on the simulated log and compare it with the logging policy h0: exact expected "
        "0/1 loss on the test set and counterfactual IPS/SNIPS estimates with intervals.",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the split, h0, the logs and POEM (default: 0)"
    )
    parser.add_argument(
        "--fraction",
        type=float,
        default=0.05,
        help="fraction of the training set h0 is fitted on (default: 0.05, as in the paper)",
    )
    parser.add_argument(
        "--replays",
        type=int,
        default=4,
        help="passes through the training set sampling actions from h0 (default: 4, as in paper)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=1.0,
        help="serving temperature of h0; < 1 makes the logger more deterministic (default: 1.0)",
    )
    parser.add_argument(
        "--solver",
        choices=("lbfgs", "adagrad"),
        default="lbfgs",
        help="POEM solver: lbfgs = POEM(B), adagrad = POEM(S) (default: lbfgs)",
    )
    for flag, default, text in (
        ("--variance-scale", 0.1, "c in the variance penalty lambda = c * lambda*"),
        ("--confidence-level", 0.95, "coverage of the estimate intervals"),
    ):
        parser.add_argument(
            flag, type=float, default=default, help=f"{text} (default: %(default)s)"
        )
    parser.add_argument(
        "--json", type=Path, default=None, help="also write the full result as JSON to this file"
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the digits demo and print its result; returns the exit code."""
    result = demo.run_digits_demo(
        fraction=args.fraction,
        n_replays=args.replays,
        temperature=args.temperature,
        solver=args.solver,
        variance_scale=args.variance_scale,
        confidence_level=args.confidence_level,
        random_state=args.seed,
    )
    level = f"{result.confidence_level:.0%}"
    print(
        f"digits as a {result.n_actions}-action bandit problem "
        f"(scikit-learn load_digits, seed {args.seed})"
    )
    print(
        f"logging policy h0: logistic regression on {result.logging_fraction:.0%} of the training "
        f"set; training log {result.n_train_log:,} rows ({result.n_replays} replays), held-out "
        f"log {result.n_test_log:,} rows"
    )
    status = "converged" if result.converged else "NOT converged"
    print(
        f"POEM(solver={result.solver}): clip M = {result.clip:.3g} (p90/p10), variance penalty "
        f"lambda = {result.variance_penalty:.3g} (c = {result.variance_scale:g}); "
        f"{result.n_iter} iterations, {status}, {result.fit_seconds:.1f} s"
    )
    print("\nTest set: exact expected 0/1 loss (uses the true labels) and counterfactual estimates")
    print(f"from the held-out bandit log ({level} intervals):\n")
    names = [e.estimator for e in result.policies[0].estimates]
    header = ["policy", "expected loss", "MAP loss"] + [f"{n.upper()} [{level} CI]" for n in names]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for policy in result.policies:
        cells = [policy.name, f"{policy.expected_loss:.3f}", f"{policy.map_loss:.3f}"]
        cells += [f"{e.value:.3f} [{e.lower:.3f}, {e.upper:.3f}]" for e in policy.estimates]
        print("| " + " | ".join(cells) + " |")
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
        print(f"\nwrote {args.json}")
    return 0
