"""The ``poem-pipeline`` console script: one subcommand per module of :mod:`flows.commands`.

Run as a program, the process exits right after the ``atexit`` callbacks, without tearing down
the interpreter (:func:`_skip_teardown`): freeing Prefect, MLflow and GX cost seconds after
every ``retrain``.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.metadata
import os
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
    serve,
    simulate,
)

# subcommand name ('-' for the module name's '_') -> its module (append new commands here)
COMMANDS: dict[str, ModuleType] = {
    module.__name__.rsplit(".", 1)[1].replace("_", "-"): module
    for module in (
        init,
        demo,
        make_logs,
        check,
        retrain,
        compare,
        rollback,
        serve,
        library_demo,
        simulate,
    )
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


_EXIT: dict[str, int] = {}  # the code main() returned, as a program (read by _skip_teardown)


def _skip_teardown() -> None:
    """Exit with main()'s code once every other ``atexit`` callback ran; no interpreter teardown.

    Registered first, so it runs last; threads were joined before ``atexit`` runs. Without a
    recorded code (main raised) the interpreter ends normally.
    """
    if "code" in _EXIT:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT["code"])


def main(argv: Sequence[str] | None = None) -> int:
    """Parse arguments and dispatch; returns the process exit code.

    ``argv=None`` (the console script, ``python -m flows.cli``): the process also exits without
    an interpreter teardown once the command is done (module docstring).
    """
    if argv is None:
        atexit.register(_skip_teardown)  # before Prefect, MLflow, GX register theirs
    args = build_parser().parse_args(argv)
    code = int(args.func(args) or 0)
    if argv is None:
        _EXIT["code"] = code
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
