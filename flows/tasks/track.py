"""Tasks that open and close the flow's parent MLflow run."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import PipelineConfig
from flows.registry import repair_promotions
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


@task(name="finish-tracking", cache_policy=NO_CACHE, **IO_RETRIES)
def finish_tracking(
    run: TrackedRun, status: str, outcome: dict[str, str] | None = None, data_path: str = ""
) -> None:
    """Name and describe the parent run by its outcome, then mark it FINISHED or FAILED.

    ``outcome`` holds ``decision``, ``champion``, ``challenger`` and ``summary`` (markdown).
    """
    outcome = outcome or {"decision": "failed", "summary": "the run failed; see its logs"}
    client = run.client()
    version = f" v{outcome['challenger']}" if outcome.get("challenger") else ""
    describe_run(
        client,
        run.run_id,
        name=run_name(data_path, f"{outcome['decision']}{version}") if data_path else None,
        description=f"retrain on `{data_path}`: {outcome.get('summary', '')}",
        tags={k: v for k, v in outcome.items() if k in ("decision", "champion", "challenger")},
    )
    finish_run(client, run.run_id, status)
