"""``poem-pipeline demo``: the whole pipeline twice on simulated digits logs, offline.

1. Simulates two days of logged bandit feedback from scikit-learn's bundled digits: a
   stochastic logging policy h₀ (multinomial logistic regression on 5% of the training part)
   picks one of 10 actions per image; the loss is 0 for the right digit, else 1; the
   propensity is h₀'s probability of the logged action (paper §6 protocol).
2. Runs the ``retrain`` flow on day 1: checks, search (nested MLflow runs), training, the
   counterfactual A/B gate against the logging policy, registration and promotion.
3. Runs ``retrain`` on day 2: the new challenger is gated against day 1's champion.
4. Prints where to look: ``mlflow ui --backend-store-uri ...`` and ``poem-pipeline compare``.

Exit codes: 0 when both runs complete, 1 when a run fails, 2 for an invalid config.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import warnings
from pathlib import Path

from flows.commands import add_config_argument, command_parser
from flows.config import ConfigError, load_config

# Quiet, offline defaults for a direct `poem-pipeline demo` (.ci/env.sh sets the same).
_QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "true",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    "PREFECT_LOGGING_LEVEL": "ERROR",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register ``demo`` and its arguments."""
    parser = command_parser(
        subparsers,
        "demo",
        help="simulate digits logs and run the retrain flow twice (offline, about a minute)",
        description=__doc__,
        run=run,
    )
    add_config_argument(parser, "pipeline config; its tracking store receives the runs")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("demo-output"),
        help="folder for the simulated logs (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the logger and the logs (default: 0)"
    )
    parser.add_argument(
        "--replays",
        type=int,
        default=2,
        help="passes over the digits training images per simulated day (default: 2)",
    )


def simulate_days(out: Path, seed: int, replays: int) -> list[tuple[Path, int]]:
    """Write two days of digits logs from one stochastic logger; returns (folder, rows) per day."""
    from poem.datasets import load_dataset
    from poem.io.parquet import write_log
    from poem.simulate import fit_logging_policy, supervised_to_bandit

    data = load_dataset("digits", random_state=seed)
    logger_policy = fit_logging_policy(
        data.X_train, data.Y_train, family="discrete", fraction=0.05, random_state=seed
    )
    days = []
    for day in (1, 2):
        log = supervised_to_bandit(
            data.X_train,
            data.Y_train,
            logger_policy,
            n_replays=replays,
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
        write_log(log, folder)
        days.append((folder, log.n_rows))
    return days


class _Progress(logging.Handler):
    """Prints one line per finished flow stage, with the time since the run started."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.start = time.perf_counter()

    def emit(self, record: logging.LogRecord) -> None:
        print(f"    {time.perf_counter() - self.start:6.1f}s  {record.getMessage()}", flush=True)


def _quiet() -> None:
    for key, value in _QUIET_ENV.items():
        os.environ.setdefault(key, value)
    warnings.simplefilter("ignore")
    for name in (
        "mlflow",
        "great_expectations",
        "great_expectations.data_context.types.base",
        "alembic",
        "py.warnings",
    ):
        logging.getLogger(name).setLevel(logging.ERROR)


def run(args: argparse.Namespace) -> int:
    """Entry point of ``poem-pipeline demo``."""
    _quiet()
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    print(
        f"simulating two days of digits logs with a stochastic logger -> {args.out}/logs",
        flush=True,
    )
    days = simulate_days(args.out, args.seed, args.replays)
    # imported here so that _quiet() below silences it too (GX sets this logger to INFO)
    import great_expectations.data_context.types.base  # noqa: F401

    from flows.retrain import retrain
    from flows.tasks import PROGRESS
    from poem.exceptions import InvalidLogError

    _quiet()  # importing prefect and GX configures logging; silence the libraries again
    progress = _Progress()
    PROGRESS.addHandler(progress)
    PROGRESS.setLevel(logging.INFO)
    PROGRESS.propagate = False
    results = []
    for i, (folder, n_rows) in enumerate(days, start=1):
        print(f"[{i}/2] retrain on {folder} ({n_rows:,} rows)", flush=True)
        if i == 1:
            print("    (the first run also starts Prefect's temporary API server)", flush=True)
        progress.start = time.perf_counter()
        try:
            result = retrain(args.config, logs=folder)
        except InvalidLogError as exc:
            print(f"error: the logs failed their checks:\n{exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # noqa: BLE001 - report any failure as an exit code
            print(f"error: retrain failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        against = (
            f"version {result.previous_champion_version}"
            if result.previous_champion_version
            else ("the logging policy")
        )
        m = result.metrics
        print(
            f"      challenger v{result.challenger_version} vs champion ({against}): IPS risk "
            f"{m['challenger_risk']:.3f} vs {m['champion_risk']:.3f}, upper bound of the "
            f"difference {m['risk_difference_ucb']:+.3f} -> {result.decision}",
            flush=True,
        )
        results.append(result)
    store = cfg.tracking.uri
    print(
        f"done in {time.perf_counter() - t0:.0f}s; champion is version "
        f"{results[-1].champion_version} "
        f"of {cfg.tracking.registered_model!r}"
    )
    print("see the runs, nested trials, reports and registered versions with:")
    print(f"  mlflow ui --backend-store-uri {store}")
    print(f"  poem-pipeline compare --config {args.config}")
    print(results[-1].summary_line())
    return 0
