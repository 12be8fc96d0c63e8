"""Seconds a user waits: ``poem-pipeline retrain`` on a small CSV vs the library doing the same.

Writes the README's plain CSV (``x_0 … x_7``, a reward column, 4 actions, uniform logger;
``--rows`` rows, default 20,000), then times, each in a fresh process, median of ``--repeats``,
two pairs (a search grid of one point, and the packaged config's 20-point grid):

- **library**: ``poem`` + ``data_checks`` alone, doing the computation ``retrain`` does with the
  same config values (read from the packaged config by this script, passed as JSON): read the
  CSV once and check it (``check_logs``: the GX suite, quarantine, the propensity checks — the
  stages ``check`` and ``retrain`` run), split (``data.split``), search the grid on the
  validation split (``search_hyperparameters``: scoring, serving temperatures, ESS guard of
  ``search``), refit the selected point on train, score it against the logging policy on the
  test split (``counterfactual_ab_test`` with ``gate``);
- **retrain**: ``poem-pipeline retrain`` as a user runs it in a fresh shell (``python -m
  flows.cli``, no ``PREFECT_API_URL``): the same computation plus Prefect (temporary API
  server), MLflow tracking and registration, the plots and reports.

``retrain`` runs in a work folder whose Prefect home already exists (the first run there
creates Prefect's database; it is timed once, apart) and with a fresh Prefect result storage
per run (no cached trials). ``--source DIR`` runs the CLI of another checkout; ``--baseline
DIR`` also times another checkout's CLI (e.g. the commit before a change, exported with ``git
archive``) in the same repeats, interleaved, so that load affects both alike. Figure of merit:
retrain / library for each grid, target <= 3 (wall seconds; the CPU seconds of each
process tree are printed beside them).

    python benchmarks/retrain_latency.py --rows 20000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from flows.config import default_config_path, load_config, parse_overrides

REPO = Path(__file__).resolve().parents[1]
LOG_FLAGS = ["--family", "discrete", "--reward-bounds", "0", "1", "--n-actions", "4"]
LOG_OVERRIDES = {
    "data.family": "discrete",
    "training.params.policy": "discrete",
    "data.reward_bounds": [0, 1],
    "data.n_actions": 4,
}
ONE_POINT = "{variance_scale: [0.001], clip: [p90/p10]}"
GRIDS = {"one fit": ["--set", f"search.grid={ONE_POINT}"], "default grid": []}

LIBRARY = """
import json, sys
from data_checks.check import check_logs
from poem.gate import counterfactual_ab_test
from poem.learners import POEM
from poem.learners.search import ess_floor, search_hyperparameters
from poem.log_rows import as_partitions, split_partitioned

path, spec = sys.argv[1], json.loads(sys.argv[2])
outcome = check_logs(path, family="discrete", reward_bounds=(0, 1), n_actions=4, plots=False)
assert outcome.exit_code == 0, outcome.to_text()
split = split_partitioned(as_partitions(outcome.log), **spec["split"])
train, validation, test = (split.log(p) for p in ("train", "validation", "test"))
search = spec["search"]
result = search_hyperparameters(
    POEM(**spec["params"]), train, validation, spec["grid"],
    scoring=search["scoring"], confidence_level=search["confidence_level"],
    temperatures=search["temperatures"],
    min_effective_sample_size=ess_floor(
        validation.n_rows, search["min_ess_fraction"], search["min_ess"]
    ),
)
policy = POEM(**{**spec["params"], **result.best_params}).fit(train).policy_
gate = spec["gate"]
print(counterfactual_ab_test(
    policy, None, test, estimator=gate["estimator"], clip=gate["clip"],
    confidence_level=gate["confidence_level"], min_improvement=gate["min_improvement"],
    min_ess=gate["min_ess"], interval=gate["interval"], order_seed=gate["seed"], attempt=None,
).decision)
"""


def library_spec(grid_args: list[str]) -> str:
    """The config values ``retrain`` uses, as the library script's JSON argument.

    ``warm_start: champion`` is ``zeros`` here: there is no champion in the benchmark's
    registry before a promotion (``flows.learners.resolve_warm_start``), so both start at 0.
    """
    cfg = load_config(default_config_path(), {**LOG_OVERRIDES, **parse_overrides(grid_args[1:])})

    def no_champion(value: object) -> object:
        return "zeros" if value == "champion" else value

    params = {k: no_champion(v) for k, v in cfg.training.params.items()}
    grid = {k: [no_champion(v) for v in values] for k, values in cfg.search.grid.items()}
    return json.dumps(
        {
            "params": params,
            "grid": grid,
            "search": cfg.search.model_dump(),
            "split": cfg.data.split.model_dump(),
            "gate": cfg.gate.model_dump(),
        }
    )


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


CPU: dict[str, list[float]] = {}  # CPU seconds (user + sys) of each timed process tree


def timed(command: list[str], cwd: Path, env: dict[str, str], name: str = "") -> float:
    """Wall seconds of one command; raises with its stderr when it fails.

    Its CPU seconds, with those of the children it waited for (the temporary Prefect server),
    go to ``CPU[name]``: a figure the machine's load stretches less than the wall time.
    """
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{command[:4]} exited {done.returncode}:\n{done.stderr[-3000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    CPU.setdefault(name, []).append(cpu)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--source", default=str(REPO), help="checkout whose CLI is timed")
    parser.add_argument("--baseline", default=None, help="another checkout's CLI, timed too")
    parser.add_argument("--skip-default-grid", action="store_true")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="poem-latency-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    csv = work / "export.csv"
    write_csv(csv, args.rows)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env |= {"PREFECT_HOME": str(work / "prefect")}
    cli = ["-m", "flows.cli", "retrain", "--logs", str(csv), *LOG_FLAGS]
    sources = {"retrain": Path(args.source).resolve()}
    if args.baseline:
        sources["baseline retrain"] = Path(args.baseline).resolve()
    grids = {k: v for k, v in GRIDS.items() if k == "one fit" or not args.skip_default_grid}
    specs = {grid: library_spec(extra) for grid, extra in grids.items()}
    print(f"{args.rows:,} rows -> {csv}; " + ", ".join(f"{k}: {v}" for k, v in sources.items()))

    def retrain(source: Path, extra: list[str], name: str = "") -> float:
        storage = {"PREFECT_LOCAL_STORAGE_PATH": str(work / f"storage-{time.time_ns()}")}
        runs = env | storage | {"PYTHONPATH": str(source)}
        return timed([sys.executable, *cli, *extra], work, runs, name)

    def library(grid: str) -> float:
        command = [sys.executable, "-c", LIBRARY, str(csv), specs[grid]]
        return timed(command, work, env | {"PYTHONPATH": str(REPO)}, f"library ({grid})")

    first = retrain(sources["retrain"], GRIDS["one fit"])
    print(f"retrain (one fit), first run in a fresh PREFECT_HOME: {first:.1f}s", flush=True)
    times: dict[str, list[float]] = {}
    for i in range(args.repeats):
        for grid, extra in grids.items():
            times.setdefault(f"library ({grid})", []).append(library(grid))
            for name, source in sources.items():
                key = f"{name} ({grid})"
                times.setdefault(key, []).append(retrain(source, extra, key))
        print(
            f"  repeat {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f}s" for k, v in times.items()),
            flush=True,
        )
    print(f"\nmedian of {args.repeats} (wall seconds, fresh process each):")
    for name, values in times.items():
        grid = name[name.index("(") + 1 : -1]
        base = statistics.median(times[f"library ({grid})"])
        median = statistics.median(values)
        cpu, cpu_base = statistics.median(CPU[name]), statistics.median(CPU[f"library ({grid})"])
        print(
            f"  {name:<32} {median:6.1f}s  ({median / base:4.2f}x library ({grid}));  "
            f"CPU {cpu:5.1f}s ({cpu / cpu_base:4.2f}x)"
        )


if __name__ == "__main__":
    main()
