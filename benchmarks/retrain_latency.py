"""Seconds a user waits: ``poem-pipeline retrain`` on a small CSV vs the library doing the same.

Writes the README's plain CSV (``x_0 … x_7``, a reward column, 4 actions, uniform logger;
``--rows`` rows, default 20,000), then times, each in a fresh process, median of ``--repeats``:

- **library**: ``poem`` + ``data_checks`` alone — read the CSV and check it (``check_logs``, the
  stages ``check`` and ``retrain`` run), split, fit POEM once (the config's training params),
  score it against the logging policy on the test split (``counterfactual_ab_test``);
- **retrain, one fit**: ``poem-pipeline retrain`` with a one-point search grid — the same
  computation plus Prefect (temporary API server), MLflow tracking and registration, GX;
- **retrain, default grid**: ``poem-pipeline retrain`` with the packaged config (its 20-point
  search), for reference.

``retrain`` runs in a work folder whose Prefect home already exists (the first run there
migrates Prefect's database; it is timed once, apart) and with a fresh Prefect result storage
per run (no cached trials). ``--source DIR`` runs the CLI of another checkout (e.g. an older
commit exported with ``git archive``) for a before/after comparison. Figure of merit: retrain
(one fit) / library, target <= 3.

    python benchmarks/retrain_latency.py --rows 20000 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

REPO = Path(__file__).resolve().parents[1]
LOG_FLAGS = ["--family", "discrete", "--reward-bounds", "0", "1", "--n-actions", "4"]
ONE_FIT = ["--set", "search.grid={variance_scale: [0.001], clip: [p90/p10]}"]

LIBRARY = """
import sys
from data_checks.check import check_logs
from poem.gate import counterfactual_ab_test
from poem.io.logs import read_log
from poem.learners import POEM
from poem.splits import split_log

path = sys.argv[1]
outcome = check_logs(path, family="discrete", reward_bounds=(0, 1), n_actions=4, plots=False)
assert outcome.exit_code == 0, outcome.to_text()
log = read_log(path, family="discrete", reward_bounds=(0, 1), n_actions=4)
parts = split_log(log, random_state=0)
policy = POEM(
    solver="lbfgs", variance_penalty="calibrated", variance_scale=0.001, clip="p90/p10",
    max_iter=50, random_state=0,
).fit(parts.train).policy_
print(counterfactual_ab_test(policy, None, parts.test, min_ess=100).decision)
"""


def write_csv(path: Path, n: int, seed: int = 0) -> None:
    """The README's plain-CSV example, with 8 features."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 8))
    action = rng.integers(0, 4, n)
    best = (x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0)
    click = rng.random(n) < np.where(action == best, 0.3, 0.1)
    frame = pd.DataFrame({"event_id": [f"ev-{i}" for i in range(n)]})
    frame["timestamp"] = pd.date_range("2026-03-01", periods=n, freq="10s").strftime(
        "%Y-%m-%dT%H:%M:%SZ"
    )
    for j in range(8):
        frame[f"x_{j}"] = x[:, j]
    frame = frame.assign(action=action, reward=click.astype(int), propensity=0.25)
    frame.to_csv(path, index=False)


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall seconds of one command; raises with its stderr when it fails."""
    t = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{command[:4]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--source", default=str(REPO), help="checkout whose CLI is timed")
    parser.add_argument("--skip-default-grid", action="store_true")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="poem-latency-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    csv = work / "export.csv"
    write_csv(csv, args.rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env |= {"PYTHONPATH": str(Path(args.source).resolve()), "PREFECT_HOME": str(work / "prefect")}
    cli = [sys.executable, "-m", "flows.cli", "retrain", "--logs", str(csv), *LOG_FLAGS]
    print(f"{args.rows:,} rows -> {csv}; CLI from {args.source}", flush=True)

    def retrain(extra: list[str], i: int) -> float:
        storage = {"PREFECT_LOCAL_STORAGE_PATH": str(work / f"storage-{time.time_ns()}")}
        return timed([*cli, *extra], work, env | storage)

    first = retrain(ONE_FIT, 0)
    print(f"retrain (one fit), first run in a fresh PREFECT_HOME: {first:.1f}s", flush=True)
    times: dict[str, list[float]] = {"library": [], "retrain (one fit)": []}
    if not args.skip_default_grid:
        times["retrain (default grid)"] = []
    for i in range(args.repeats):
        times["library"].append(timed([sys.executable, "-c", LIBRARY, str(csv)], work, env))
        times["retrain (one fit)"].append(retrain(ONE_FIT, i))
        if not args.skip_default_grid:
            times["retrain (default grid)"].append(retrain([], i))
        print(
            f"  repeat {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items()),
            flush=True,
        )
    base = statistics.median(times["library"])
    print(f"\nmedian of {args.repeats} (wall seconds, fresh process each):")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:<24} {median:6.1f}s  ({median / base:4.1f}x library)")


if __name__ == "__main__":
    main()
