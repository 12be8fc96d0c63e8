"""Tasks that open and close the flow's parent MLflow run."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import PipelineConfig
from flows.tasks import IO_RETRIES
from flows.tracking import (
    TrackedRun,
    client_for,
    ensure_experiment,
    finish_run,
    log_params,
    log_text,
    start_run,
)


@task(name="start-tracking", cache_policy=NO_CACHE, **IO_RETRIES)
def start_tracking(cfg: PipelineConfig, fingerprint: str, flow_run_id: str) -> TrackedRun:
    """Create the parent run; log the resolved config (artifact + params) and the data hash."""
    client = client_for(cfg.tracking)
    experiment_id = ensure_experiment(client, cfg.tracking)
    tags = {
        "data_fingerprint": fingerprint,
        "prefect_flow_run_id": flow_run_id,
        "data_path": cfg.data.path,
    }
    run_id = start_run(client, experiment_id, f"retrain-{flow_run_id[:8]}", tags)
    log_params(client, run_id, cfg.flat_params())
    log_text(client, run_id, cfg.to_yaml(), "config/resolved.yml")
    return TrackedRun(cfg.tracking, experiment_id, run_id)


@task(name="finish-tracking", cache_policy=NO_CACHE, **IO_RETRIES)
def finish_tracking(run: TrackedRun, status: str) -> None:
    """Mark the parent run FINISHED or FAILED."""
    finish_run(run.client(), run.run_id, status)
