"""The ``poem-pipeline`` console script.

Each subcommand lives in its own module under :mod:`flows.commands` exposing
``add_parser(subparsers)`` (registers its arguments, with help) and ``run(args) -> int``
(the exit code). The command modules are light; what takes seconds to import (Prefect, MLflow,
GX, scikit-learn) they declare as :class:`flows.commands.Deferred` modules, imported when the
command runs, so ``poem-pipeline --help`` stays fast and a command only pays for what it uses.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Sequence
from types import ModuleType

from flows.commands import (
    check,
    compare,
    demo,
    init,
    library_demo,
    make_logs,
    retrain,
    rollback,
    simulate,
)

# subcommand name -> its module under flows.commands (append new commands here)
COMMANDS: dict[str, ModuleType] = {
    "init": init,
    "demo": demo,
    "make-logs": make_logs,
    "check": check,
    "retrain": retrain,
    "compare": compare,
    "rollback": rollback,
    "library-demo": library_demo,
    "simulate": simulate,
}


def _version() -> str:
    try:
        return importlib.metadata.version("poem-pipeline")
    except importlib.metadata.PackageNotFoundError:  # running from a source tree
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per registered command."""
    parser = argparse.ArgumentParser(
        prog="poem-pipeline",
        description="Counterfactual Risk Minimization pipeline: validate logged bandit feedback, "
        "learn with POEM, gate against the champion, register and serve stochastic policies.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {_version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and dispatch; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
