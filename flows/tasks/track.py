"""Tasks that open and close the flow's parent MLflow run."""

from __future__ import annotations

import time
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import PipelineConfig
from flows.registry import repair_promotions
from flows.store_faults import is_permanent_store_error
from flows.tasks import IO_RETRIES, task_logger
from flows.tracking import (
    TrackedRun,
    client_for,
    describe_run,
    ensure_experiment,
    finish_run,
    log_dataset_input,
    log_params,
    log_text,
    reap_stale_runs,
    run_name,
    scaled_delays,
    single_attempts,
    start_run,
)


@task(name="start-tracking", cache_policy=NO_CACHE, **IO_RETRIES)
def start_tracking(cfg: PipelineConfig, fingerprint: str, flow_run_id: str) -> TrackedRun:
    """Close what killed runs left, create the parent run, log config, params and the log."""
    client = client_for(cfg.tracking)
    experiment_id = ensure_experiment(client, cfg.tracking)
    reaped = reap_stale_runs(client, experiment_id)
    repaired = repair_promotions(client, cfg.tracking)
    if reaped or repaired:
        task_logger().warning("closed killed runs %s; repaired versions %s", reaped, repaired)
    tags = {
        "data_fingerprint": fingerprint,
        "prefect_flow_run_id": flow_run_id,
        "data_path": cfg.data.path,
        "decision": "running",
    }
    run_id = start_run(client, experiment_id, run_name(cfg.data.path), tags)
    try:  # e.g. a read-only artifact folder: the run must not stay RUNNING
        describe_run(client, run_id, description=f"retrain on `{cfg.data.path}` (running)")
        log_params(client, run_id, {**cfg.flat_params(), "gate_estimator": cfg.gate.estimator})
        log_text(client, run_id, cfg.to_yaml(), "config/resolved.yml")
        log_dataset_input(client, run_id, cfg.data.path, fingerprint, "training")
    except BaseException:
        finish_run(client, run_id, "FAILED")
        raise
    return TrackedRun(cfg.tracking, experiment_id, run_id)


END_REASON_TAG = "poem.end_reason"  # why a run ended FAILED or KILLED (one line)
# seconds between attempts to close a run on a tracking server (times POEM_OUTAGE_DELAY_SCALE)
CLOSE_DELAYS = (3.0, 10.0, 20.0)


@task(name="finish-tracking", cache_policy=NO_CACHE, **IO_RETRIES)
def finish_tracking(
    run: TrackedRun,
    status: str,
    outcome: dict[str, str] | None = None,
    data_path: str = "",
    reason: str | None = None,
) -> None:
    """Name and describe the parent run by its outcome, then mark it FINISHED, FAILED or KILLED.

    ``outcome`` holds ``decision``, ``champion``, ``challenger`` and ``summary`` (markdown);
    ``reason`` (why it failed or was killed) becomes the tag :data:`END_REASON_TAG`.
    """
    outcome = outcome or {"decision": status.lower(), "summary": "the run failed; see its logs"}
    client = run.client()
    version = f" v{outcome['challenger']}" if outcome.get("challenger") else ""
    tags = {k: v for k, v in outcome.items() if k in ("decision", "champion", "challenger")}
    if reason:
        tags[END_REASON_TAG] = reason
    describe_run(
        client,
        run.run_id,
        name=run_name(data_path, f"{outcome['decision']}{version}") if data_path else None,
        description=f"retrain on `{data_path}`: {outcome.get('summary', reason or '')}",
        tags=tags,
    )
    finish_run(client, run.run_id, status)


def close_run(
    run: TrackedRun,
    status: str,
    outcome: dict[str, str] | None = None,
    data_path: str = "",
    reason: str | None = None,
    delays: tuple[float, ...] | None = None,
) -> Exception | None:
    """Close the run without Prefect (:func:`finish_tracking`'s body), retrying a server outage.

    For when the flow is ending and Prefect's API may be the failure. A tracking server
    (``http(s)://``) gets an attempt after each of ``delays`` (a restarted server or database is
    caught; ~35 s in all with MLflow's own HTTP retries); a local store one attempt, and a full
    or read-only store is never retried. ``delays`` (default :data:`CLOSE_DELAYS`) are
    multiplied by ``POEM_OUTAGE_DELAY_SCALE`` (:func:`flows.tracking.scaled_delays`). Returns
    None once closed, else the last error.
    """
    delays = scaled_delays(CLOSE_DELAYS if delays is None else delays)
    remote = run.tracking.uri.startswith(("http://", "https://"))
    error: Exception | None = None
    for delay in (0.0, *(delays if remote else ())):
        time.sleep(delay)
        try:
            with single_attempts():  # these delays are the bound, not the client's on top
                finish_tracking.fn(run, status, outcome, data_path, reason)
            return None
        except Exception as exc:  # noqa: BLE001 - reported by the caller, with the run's error
            error = exc
            if is_permanent_store_error(exc):
                break
    return error


def read_alias(
    run: Any, alias: str, delays: tuple[float, ...] | None = None
) -> tuple[bool, str | None]:
    """``(read, version)`` of ``alias`` of the run's model (``read`` False: the store is down).

    Retried like :func:`close_run`; a missing alias reads as ``(True, None)``.
    """
    from mlflow.exceptions import MlflowException

    delays = scaled_delays(CLOSE_DELAYS if delays is None else delays)
    remote = run.tracking.uri.startswith(("http://", "https://"))
    for delay in (0.0, *(delays if remote else ())):
        time.sleep(delay)
        try:
            client = run.client()
            with single_attempts():  # retried on these delays
                found = client.get_model_version_by_alias(run.tracking.registered_model, alias)
            return True, str(found.version)
        except MlflowException as exc:
            if exc.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return True, None
        except Exception:  # noqa: BLE001, S112 - the server is down: try again, then say so
            continue
    return False, None
