"""Scheduled retraining: a Prefect deployment of ``retrain`` over the newest log partitions.

The decision log (:mod:`poem.io.decisions`) appends ``date=YYYY-MM-DD/`` partitions. The flow
:func:`scheduled_retrain` picks the newest ``newest`` complete partitions (today's, still being
written, is skipped unless ``include_today``), skips the run when exactly these files were
already trained on (a registered version carries the same ``data_fingerprint`` tag), and
otherwise runs the ``retrain`` flow on them as a subflow; the gate decides as always.

A run that finds no complete partition **fails** (state Failed in the Prefect UI, the message
names the folder): a nightly retrain with no new data is something to look at, not a success.
A ``--logs`` folder that does not exist is refused when the deployment is served or deployed
(the same one-line error, exit 2), unless ``--create`` creates it (empty, before the first
decisions arrive).

Run it as a long-lived deployment with a cron schedule (``flow.serve``; ECOSYSTEM §2)::

    source .ci/env.sh
    prefect server start --host 127.0.0.1 --port 4200 &        # ready after ~6 s; UI on :4200
    export PREFECT_API_URL=http://127.0.0.1:4200/api
    python -m flows.deployments --config mlflow.yml --logs decisions --cron "0 2 * * *" --newest 1

or, for a team, deploy it to a work pool whose worker runs each flow run (``--pool``: the folder
is checked, then ``prefect deploy`` registers the deployment and the command returns)::

    python -m flows.deployments --config team.yml --logs decisions --pool poem-pool

and trigger a run by hand (from another shell with the same ``PREFECT_API_URL``)::

    prefect deployment run 'scheduled-retrain/nightly-retrain'
    prefect deployment run 'scheduled-retrain/nightly-retrain' --param newest=3

Stop the serve process with Ctrl-C (one SIGTERM suffices); stop the server by its PID.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlflow.exceptions import MlflowException
from prefect import flow, get_run_logger

from flows.commands import plain_text
from flows.config import ConfigError, TrackingConfig, load_config
from flows.retrain import retrain
from flows.story import decision_line
from flows.tracking import client_for, data_fingerprint
from poem.io.parquet import partition_date, scan_log_folder

__all__ = [
    "DEPLOYMENT_NAME",
    "ENTRYPOINT",
    "NoCompletePartitionsError",
    "deploy_to_pool",
    "logs_folder",
    "newest_partitions",
    "scheduled_retrain",
    "serve",
    "stage_partitions",
]

DEPLOYMENT_NAME = "nightly-retrain"
ENTRYPOINT = "flows.deployments:scheduled_retrain"  # what a worker imports (the installed package)
logger = logging.getLogger(__name__)


def newest_partitions(
    root: str | Path, newest: int = 1, *, today: _dt.date | None = None, include_today: bool = False
) -> list[Path]:
    """Return the ``newest`` latest ``date=YYYY-MM-DD`` folders (with data files) under ``root``.

    A ``date=`` folder whose name is not a calendar date is skipped with a warning.

    Parameters
    ----------
    root : str or Path
        Partitioned log folder.
    newest : int, default=1
        How many partitions to return (fewer when fewer exist).
    today : datetime.date or None
        Current UTC date (default: the clock).
    include_today : bool, default=False
        Whether today's (and later) partitions, still being appended, may be used.

    Returns
    -------
    list of Path
        Oldest first.

    Raises
    ------
    ValueError
        If ``newest`` < 1.
    """
    if newest < 1:
        raise ValueError(f"newest must be >= 1, got {newest}")
    today = today or _dt.datetime.now(_dt.UTC).date()
    found = []
    for child in sorted(Path(root).iterdir()) if Path(root).is_dir() else ():
        day, problem = partition_date(child.name)
        if problem is not None and child.is_dir():
            logger.warning("skipping %s: %s", child, problem)
            continue
        if not (day and child.is_dir() and scan_log_folder(child, within=root).files):
            continue
        if include_today or day < today:
            found.append((day, child))
    return [path for _, path in sorted(found)[-newest:]]


class NoCompletePartitionsError(RuntimeError):
    """A scheduled run found no complete ``date=`` partition: nothing new to train on."""


def logs_folder(config_path: str | Path, logs: str | Path | None, *, create: bool = False) -> Path:
    """The partitioned log folder of the deployment: ``logs``, else ``data.path`` of the config.

    With ``create`` a missing folder is created (empty: runs fail, naming it, until the
    decision log has written a complete ``date=`` partition into it).

    Raises
    ------
    FileNotFoundError
        If the folder does not exist (and not ``create``) or is not a folder (a typo would
        skip every run); the message names ``--create``.
    flows.config.ConfigError
        If ``logs`` is None and the config cannot be read.
    """
    root = Path(logs) if logs is not None else Path(load_config(config_path).data.path)
    where = "--logs" if logs is not None else f"data.path of {config_path}"
    if not root.exists() and create:
        root.mkdir(parents=True)
        print(
            f"created {root}: empty; the decision log (poem.io.decisions.DecisionLog) writes "
            "its date= partitions, each run trains on the newest complete one",
            file=sys.stderr,
        )
    if not root.exists():
        raise FileNotFoundError(
            f"{where}: {root} does not exist (the decision log writes it; pass --create to "
            "create it empty now)"
        )
    if not root.is_dir():
        raise FileNotFoundError(f"{where}: {root} is not a folder of date= partitions")
    return root


def stage_partitions(partitions: list[Path], target: Path) -> Path:
    """Return the folder to pass as ``--logs``: the partition, or hard links of several."""
    if len(partitions) == 1:
        return partitions[0]
    for part in partitions:
        (target / part.name).mkdir(parents=True, exist_ok=True)
        for file in scan_log_folder(part).files:  # the data-file rule of the readers
            dest = target / part.name / file.name
            try:
                os.link(file, dest)
            except OSError:  # another file system
                shutil.copy2(file, dest)
    return target


def _already_trained(tracking: TrackingConfig, fingerprint: str) -> str | None:
    """Version of the registered model trained on exactly these files, if any.

    ``fingerprint`` is :func:`poem.io.logs.log_fingerprint` of the staged partitions, the
    function ``retrain`` tags its versions with (``data_fingerprint``), so a partition that
    ``retrain`` trained on, given as its folder or as the folder holding it, is skipped.
    """
    try:
        versions = client_for(tracking).search_model_versions(f"name='{tracking.registered_model}'")
    except MlflowException:
        return None
    for mv in versions:
        if mv.tags.get("data_fingerprint") == fingerprint:
            return str(mv.version)
    return None


@flow(name="scheduled-retrain", validate_parameters=False)
def scheduled_retrain(
    config_path: str = "mlflow.yml",
    logs: str | None = None,
    newest: int = 1,
    include_today: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Retrain on the newest log partitions (the body of the scheduled deployment).

    Parameters
    ----------
    config_path : str, default="mlflow.yml"
        Pipeline config.
    logs : str or None
        Partitioned log folder (default: ``data.path`` of the config).
    newest : int, default=1
        Number of newest partitions to train on.
    include_today : bool, default=False
        Use today's partition too (normally still receiving decisions).
    force : bool, default=False
        Retrain even if these exact files were trained on before.

    Returns
    -------
    dict
        ``status`` (``"retrained"``, ``"skipped"``: these files were already trained on), the
        partitions, and for a retrain the decision and versions.

    Raises
    ------
    NoCompletePartitionsError
        When the folder holds no complete ``date=`` partition (or is gone): the flow run
        ends Failed, naming the folder.
    """
    logger = get_run_logger()
    cfg = None if logs else load_config(config_path)  # loaded once, when first needed
    root = Path(logs or cfg.data.path)
    partitions = newest_partitions(root, newest, include_today=include_today)
    names = [p.name for p in partitions]
    if not partitions:
        state = "does not exist" if not root.is_dir() else "holds no complete date= partition"
        raise NoCompletePartitionsError(
            f"{root} {state} (today's UTC partition counts only with include_today=true); "
            "nothing was retrained"
        )
    with tempfile.TemporaryDirectory(prefix="poem-staged-") as tmp:
        staged = stage_partitions(partitions, Path(tmp))
        fingerprint = data_fingerprint(staged)
        cfg = cfg or load_config(config_path)
        done = None if force else _already_trained(cfg.tracking, fingerprint)
        if done is not None:
            logger.info("partitions %s were already trained on (version %s); skipping", names, done)
            print(
                f"retrain on {', '.join(names)}: skipped, already trained as version {done}",
                flush=True,
            )
            return {
                "status": "skipped",
                "reason": f"already trained as version {done}",
                "partitions": names,
            }
        logger.info("retraining on %s", names)
        result = retrain(cfg, logs=staged)  # the settings loaded above: read once per run
    line = decision_line(result, names)
    logger.info(line)
    print(line, flush=True)  # the worker's console: one line per run, naming the decision
    return {
        "status": "retrained",
        "partitions": names,
        "decision": result.decision,
        "challenger_version": result.challenger_version,
        "champion_version": result.champion_version,
        "reasons": list(result.reasons),
    }


def serve(
    config_path: str, logs: str | None, cron: str, newest: int = 1, name: str = DEPLOYMENT_NAME
) -> None:
    """Register the deployment with its cron schedule; run it until interrupted (``flow.serve``).

    Raises
    ------
    FileNotFoundError
        If the log folder (``logs``, else ``data.path`` of the config) does not exist.
    """
    logs_folder(config_path, logs)
    scheduled_retrain.serve(
        name=name,
        cron=cron,
        parameters={
            "config_path": str(Path(config_path).resolve()),
            "logs": None if logs is None else str(Path(logs).resolve()),
            "newest": newest,
        },
        description="Retrain the POEM policy on the newest decision-log partitions; "
        "the gate decides promotion.",
    )


def deploy_to_pool(
    config_path: str,
    logs: str | None,
    cron: str,
    pool: str,
    newest: int = 1,
    name: str = DEPLOYMENT_NAME,
) -> int:
    """Check the log folder, then register the deployment with a work pool; the exit code.

    Runs ``prefect --no-prompt deploy`` of :data:`ENTRYPOINT` with the flow, schedule and
    parameters of :func:`serve`.

    Raises
    ------
    FileNotFoundError
        If the log folder (``logs``, else ``data.path`` of the config) does not exist.
    """
    logs_folder(config_path, logs)
    parameters: dict[str, Any] = {"config_path": str(Path(config_path).resolve())}
    if logs is not None:
        parameters["logs"] = str(Path(logs).resolve())
    parameters["newest"] = newest
    command = [sys.executable, "-m", "prefect", "--no-prompt", "deploy", ENTRYPOINT]
    command += ["--name", name, "--pool", pool, "--cron", cron]
    command += ["--params", json.dumps(parameters)]
    return subprocess.run(command, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """``python -m flows.deployments``: serve the scheduled retraining deployment, or deploy it."""
    parser = argparse.ArgumentParser(
        prog="python -m flows.deployments",
        description=plain_text(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    for flag, kind, default, text in (
        ("--config", str, "mlflow.yml", "pipeline config (default: %(default)s)"),
        ("--logs", str, None, "partitioned decision log (default: data.path of the config)"),
        ("--cron", str, "0 2 * * *", "cron schedule, UTC (default: %(default)r, nightly)"),
        ("--newest", int, 1, "newest partitions per run (default: %(default)s)"),
        ("--name", str, DEPLOYMENT_NAME, "deployment name (default: %(default)s)"),
    ):
        parser.add_argument(flag, type=kind, default=default, help=text)
    parser.add_argument(
        "--create",
        action="store_true",
        help="create the log folder when it does not exist yet (before the first decisions)",
    )
    parser.add_argument(
        "--pool",
        default=None,
        help="deploy to this work pool (its worker runs the flow runs) and return, "
        "instead of serving the deployment from this process",
    )
    args = parser.parse_args(argv)
    try:
        logs_folder(args.config, args.logs, create=args.create)
    except (FileNotFoundError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.pool is not None:
        return deploy_to_pool(args.config, args.logs, args.cron, args.pool, args.newest, args.name)
    if not os.environ.get("PREFECT_API_URL"):
        print(
            "warning: PREFECT_API_URL is not set; a temporary server lives only as long as "
            "this process",
            file=sys.stderr,
        )
    serve(args.config, args.logs, args.cron, args.newest, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
