"""Closed loop on Yeast: true expected Hamming loss of the champion per round vs h₀ and the skyline.

Runs :func:`flows.closed_loop.run_closed_loop` (the ``poem-pipeline simulate`` logic) for 5
rounds on the shared Yeast data (1500 train / 917 test rows, 103 features, 14 labels): round 0
registers h₀ (logistic regressions on 5% of the training labels) as champion; each round serves
the champion through the pyfunc on the training contexts, logs decisions + Hamming-loss
feedback as a new partition, retrains with the project's ``mlflow.yml`` and gates.

Usage::

    source .ci/env.sh
    .venv/bin/python benchmarks/closed_loop_yeast.py --data-dir ../shared/data [--rounds 5] [--n-replays 1] \
        [--set search.scoring=snips]   # gate.estimator=snips needs checks.min_propensity > 0
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=ROOT.parent / "shared" / "data",
        help="shared data folder holding yeast/",
    )
    parser.add_argument(
        "--rounds", type=int, default=5, help="retraining rounds (default: %(default)s)"
    )
    parser.add_argument(
        "--n-replays", type=int, default=1, help="passes over the contexts per round"
    )
    parser.add_argument("--config", type=Path, default=ROOT / "mlflow.yml", help="pipeline config")
    parser.add_argument(
        "--output", type=Path, default=None, help="work folder (default: a temporary one)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override a config value, e.g. --set search.scoring=snips (YAML value)",
    )
    args = parser.parse_args(argv)
    overrides: dict[str, dict] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        overrides.setdefault(section, {})[name] = yaml.safe_load(value)
    if not (args.data_dir / "yeast").is_dir():
        print(f"error: {args.data_dir}/yeast not found (pass --data-dir)", file=sys.stderr)
        return 2
    from flows.closed_loop import run_closed_loop

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="closed-loop-yeast-") as tmp:
        out = args.output or Path(tmp)
        result = run_closed_loop(
            args.config,
            out,
            dataset="yeast",
            data_dir=args.data_dir,
            rounds=args.rounds,
            n_replays=args.n_replays,
            seed=args.seed,
            config_overrides=overrides,
            progress=lambda r: print(
                f"round {r.round} done in {r.seconds:.1f} s: {r.decision}; "
                f"champion v{r.champion_version} = {r.champion_true_loss:.4f}",
                flush=True,
            ),
        )
        print()
        print(result.to_markdown())
        losses = result.champion_losses()
        print()
        print(
            f"h0 {result.logging_true_loss:.4f} → champion after round {args.rounds}: {losses[-1]:.4f} "
            f"(skyline {result.skyline_true_loss:.4f}); "
            f"change vs h0: {losses[-1] / result.logging_true_loss - 1:+.1%}"
        )
        print(f"wall time {time.monotonic() - started:.0f} s")
        print(
            json.dumps(
                {
                    "champion_true_loss": losses,
                    "h0": result.logging_true_loss,
                    "skyline": result.skyline_true_loss,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
