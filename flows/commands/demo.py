"""``poem-pipeline demo``: the whole pipeline twice on simulated digits logs, offline.

1. Simulates two days of logged bandit feedback from scikit-learn's bundled digits: a
   stochastic logging policy h₀ (multinomial logistic regression on 5% of the training part)
   picks one of 10 actions per image; the loss is 0 for the right digit, else 1; the
   propensity is h₀'s probability of the logged action (paper §6 protocol). Day 2 has twice
   day 1's traffic (each image ``2·replays`` times instead of ``replays``).
2. Runs the ``retrain`` flow on day 1 with a quick first search (:data:`DAY1_SEARCH`: L-BFGS
   from zeros, 5 iterations): checks, search (nested MLflow runs), training, the
   counterfactual A/B gate against the logging policy, registration and promotion.
3. Runs ``retrain`` on day 2 with the config's full search (warm starts from the champion
   included): the new challenger is gated against day 1's champion, which it beats clearly
   (promoted for every seed measured, with the gate's order drawn from fresh entropy).
4. Prints where to look: ``mlflow ui --backend-store-uri ...``, the address of the experiment's
   runs table with the headline columns, and ``poem-pipeline compare``.

Exit codes: 0 when both runs complete, 1 when a run fails, 2 for an invalid config.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from flows.commands import Deferred, command_parser
from flows.commands._console import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    StageProgress,
    exit_now,
    fail,
    interruptible,
    quiet,
)
from flows.config import ConfigError, default_config_path, load_config
from flows.prefect_server import prefect_api

# imported when the command runs (scikit-learn, Prefect, MLflow take seconds)
datasets = Deferred("poem.datasets")
exceptions = Deferred("poem.exceptions")
parquet = Deferred("poem.io.parquet")
retrain_flow = Deferred("flows.retrain")
simulate = Deferred("poem.simulate")
tracking = Deferred("flows.tracking")

LOCAL_UI = "http://127.0.0.1:5000"  # where `mlflow ui` listens by default
# day 1 starts the service with a quick first model; day 2 runs the config's full search
DAY1_SEARCH = {
    "search.grid.solver": ["lbfgs"],
    "search.grid.warm_start": ["zeros"],
    "training.params.max_iter": 5,
    "search.candidates": {},  # POEM alone: day 2's full search adds search.candidates
}
DAY1_TEXT = "a quick first search: L-BFGS from zeros, 5 iterations"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``demo`` and its arguments."""
    parser = command_parser(
        subparsers,
        "demo",
        help="simulate digits logs and run the retrain flow twice (offline, a few minutes)",
        run=run,
        config="pipeline config; its tracking store receives the runs",
    )
    for flag, kind, default, text in (
        ("--out", Path, Path("demo-output"), "folder for the simulated logs"),
        ("--seed", int, 0, "seed of the logger and the logs"),
        ("--replays", int, 2, "passes over the digits training images on day 1 (day 2: twice)"),
    ):
        parser.add_argument(flag, type=kind, default=default, help=f"{text} (default: %(default)s)")


def simulate_days(out: Path, seed: int, replays: int) -> list[tuple[Path, int]]:
    """Write two days of digits logs from one stochastic logger; returns (folder, rows) per day.

    Day 1 replays every training image ``replays`` times, day 2 (twice the traffic) ``2·replays``
    times: the gate on day 2 then has the test rows to show a clearly better challenger.
    """
    data = datasets.load_dataset("digits", random_state=seed)
    logger_policy = simulate.fit_logging_policy(
        data.X_train, data.Y_train, family="discrete", fraction=0.05, random_state=seed
    )
    days = []
    for day in (1, 2):
        log = simulate.supervised_to_bandit(
            data.X_train,
            data.Y_train,
            logger_policy,
            n_replays=replays * day,
            random_state=seed + day,
            start_time=f"2026-01-0{day}",
            event_id_prefix=f"d{day}-",
            feature_names=data.feature_names,
            order="context",  # the time split then gates on contexts training never saw
        )
        folder = out / "logs" / f"round-{day}"
        if folder.exists():
            for file in sorted(folder.rglob("*.parquet")):
                file.unlink()
        parquet.write_log(log, folder)
        days.append((folder, log.n_rows))
    return days


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline demo``."""
    quiet()
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        return fail(str(exc), EXIT_CONFIG)
    t0 = time.perf_counter()
    print(
        f"simulating two days of digits logs with a stochastic logger -> {args.out}/logs",
        flush=True,
    )
    days = simulate_days(args.out, args.seed, args.replays)
    with interruptible():
        try:
            print("    (starting Prefect's temporary API server)", flush=True)
            with prefect_api():  # dies with this command, even on kill -9; no Ctrl-C noise
                results = _run_days(args.config, days)
        except KeyboardInterrupt as exc:
            run_id = getattr(exc, "run_id", None)
            what = f"MLflow run {run_id} is marked KILLED" if run_id else "no run had started"
            print(f"interrupted: {what}; champion did not move", file=sys.stderr)
            exit_now(EXIT_INTERRUPTED)
    if not isinstance(results, list):
        return results
    print(
        f"done in {time.perf_counter() - t0:.0f}s; champion is version "
        f"{results[-1].champion_version} of {cfg.tracking.registered_model!r}"
    )
    print("see the runs, nested trials, reports and registered versions with:")
    for line in ui_lines(cfg.tracking.uri, results[-1].experiment_id):
        print(f"  {line}")
    own = "" if Path(args.config) == default_config_path() else f" --config {args.config}"
    print(f"  poem-pipeline compare{own}")
    print(results[-1].summary_line())
    return 0


def ui_lines(uri: str, experiment_id: str) -> list[str]:
    """How to open the experiment's runs table with the headline columns in MLflow's UI.

    MLflow 3.17 opens an experiment in its GenAI overview unless the address asks for the
    "Model training" mode (the mode is the browser's, not the experiment's), so the address
    printed is the saved view :func:`flows.tracking.headline_view_url`.
    """
    if uri.startswith(("http://", "https://")):  # a tracking server serves its UI
        return [f"open {tracking.headline_view_url(uri, experiment_id)}"]
    return [
        f"mlflow ui --backend-store-uri {uri}",
        f"then open {tracking.headline_view_url(LOCAL_UI, experiment_id)}",
    ]


def _run_days(config: Path, days: list[tuple[Path, int]]) -> list | int:
    """Run ``retrain`` on each day with one line per stage; the results, or an exit code.

    Day 1 runs with :data:`DAY1_SEARCH` (a quick first model), day 2 with the config as it is.
    The gate draws its order from fresh entropy on both days, as in production (recorded in
    each report): day 2's challenger is promoted whatever the order.
    """
    # imported here so that quiet() below silences it too (GX sets this logger to INFO)
    import great_expectations.data_context.types.base  # noqa: F401

    retrain = retrain_flow.retrain

    quiet()  # importing prefect and GX configures logging; silence the libraries again
    results = []
    with StageProgress().attached() as progress:
        for i, (folder, n_rows) in enumerate(days, start=1):
            search = DAY1_TEXT if i == 1 else "the config's full search"
            print(f"[{i}/2] retrain on {folder} ({n_rows:,} rows; {search})", flush=True)
            progress.restart()
            try:
                result = retrain(config, logs=folder, overrides=DAY1_SEARCH if i == 1 else None)
            except exceptions.InvalidLogError as exc:
                return fail(f"the logs failed their checks:\n{exc}", EXIT_FAILED)
            except Exception as exc:  # noqa: BLE001 - report any failure as an exit code
                return fail(f"retrain failed: {type(exc).__name__}: {exc}", EXIT_FAILED)
            for line in result.headline():
                print(f"      {line.strip()}", flush=True)
            results.append(result)
    return results
