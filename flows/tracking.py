"""MLflow tracking helpers: experiments, parent and nested runs, params, metrics, artifacts.

Everything goes through an explicit :class:`mlflow.MlflowClient` built from
``cfg.tracking`` (no fluent active-run state), so nested trial runs can be logged from any
thread and nothing depends on a global tracking URI. Metric names follow STYLE §3
(``snake_case``, ``<estimator>_<quantity>``), identical across runs so runs compare in the UI.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunStatus
from mlflow.exceptions import MlflowException
from mlflow.utils.time import get_current_time_millis

from flows.config import TrackingConfig

__all__ = [
    "COMPARE_METRICS",
    "PARENT_RUN_TAG",
    "TrackedRun",
    "client_for",
    "create_nested_run",
    "data_fingerprint",
    "ensure_experiment",
    "finish_run",
    "flatten",
    "log_artifact",
    "log_json",
    "log_metrics",
    "log_params",
    "log_text",
    "recent_runs",
    "start_run",
]

PARENT_RUN_TAG = "mlflow.parentRunId"
_MAX_PARAM_LENGTH = 6000
_BATCH = 100


def client_for(tracking: TrackingConfig) -> MlflowClient:
    """Return a client for the configured tracking store and model registry."""
    return MlflowClient(tracking_uri=tracking.uri, registry_uri=tracking.uri)


@dataclass(frozen=True)
class TrackedRun:
    """The flow's parent MLflow run, handed to every task that logs."""

    tracking: TrackingConfig
    experiment_id: str
    run_id: str

    def client(self) -> MlflowClient:
        """Return a client for this run's store."""
        return client_for(self.tracking)


def ensure_experiment(client: MlflowClient, tracking: TrackingConfig) -> str:
    """Id of ``tracking.experiment``, created with the explicit artifact location if missing."""
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(
            tracking.experiment, artifact_location=tracking.artifact_location
        )
    except MlflowException:  # created concurrently
        experiment = client.get_experiment_by_name(tracking.experiment)
        if experiment is None:
            raise
        return experiment.experiment_id


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested mappings → ``a.b.c`` keys (MLflow params and metrics are flat)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping):
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def start_run(
    client: MlflowClient, experiment_id: str, run_name: str, tags: Mapping[str, Any] | None = None
) -> str:
    """Create a parent run (status RUNNING); returns its id."""
    run = client.create_run(
        experiment_id, run_name=run_name, tags={k: str(v) for k, v in (tags or {}).items()}
    )
    return run.info.run_id


def log_params(client: MlflowClient, run_id: str, params: Mapping[str, Any]) -> None:
    """Log flattened params (values stringified and truncated to MLflow's limit)."""
    items = [Param(k, str(v)[:_MAX_PARAM_LENGTH]) for k, v in flatten(params).items()]
    for start in range(0, len(items), _BATCH):
        client.log_batch(run_id, params=items[start : start + _BATCH])


def log_metrics(
    client: MlflowClient, run_id: str, metrics: Mapping[str, Any], step: int = 0
) -> None:
    """Log numeric metrics (booleans as 0/1); non-numeric and non-finite values are skipped."""
    now = get_current_time_millis()
    items = []
    for key, value in flatten(metrics).items():
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, int | float) and math.isfinite(value):
            items.append(Metric(key, float(value), now, step))
    for start in range(0, len(items), _BATCH):
        client.log_batch(run_id, metrics=items[start : start + _BATCH])


def log_text(client: MlflowClient, run_id: str, text: str, artifact_file: str) -> None:
    """Store ``text`` as the run artifact ``artifact_file`` (e.g. ``gate/report.md``)."""
    client.log_text(run_id, text, artifact_file)


def log_json(client: MlflowClient, run_id: str, data: Any, artifact_file: str) -> None:
    """Store JSON-serialisable ``data`` as the run artifact ``artifact_file``."""
    client.log_text(run_id, json.dumps(data, indent=2, sort_keys=True, default=str), artifact_file)


def log_artifact(
    client: MlflowClient, run_id: str, path: str | Path, artifact_path: str | None = None
) -> None:
    """Upload a file or a whole folder under ``artifact_path``."""
    path = Path(path)
    if path.is_dir():
        client.log_artifacts(run_id, str(path), artifact_path)
    else:
        client.log_artifact(run_id, str(path), artifact_path)


def create_nested_run(
    client: MlflowClient,
    experiment_id: str,
    parent_run_id: str,
    run_name: str,
    params: Mapping[str, Any],
    metrics: Mapping[str, Any],
) -> str:
    """Create a finished child run of ``parent_run_id`` with one trial's params and metrics."""
    run = client.create_run(experiment_id, run_name=run_name, tags={PARENT_RUN_TAG: parent_run_id})
    run_id = run.info.run_id
    log_params(client, run_id, params)
    log_metrics(client, run_id, metrics)
    client.set_terminated(run_id, RunStatus.to_string(RunStatus.FINISHED))
    return run_id


def finish_run(client: MlflowClient, run_id: str, status: str = "FINISHED") -> None:
    """Mark a run FINISHED or FAILED."""
    client.set_terminated(run_id, status)


def data_fingerprint(path: str | Path) -> str:
    """SHA-256 of exactly the files the log reader reads (:func:`poem.io.logs.log_fingerprint`)."""
    from poem.io.logs import log_fingerprint

    return log_fingerprint(path)


COMPARE_METRICS = (
    "n_rows",
    "validation_ips_risk",
    "challenger_ips_risk",
    "champion_ips_risk",
    "difference_ips_risk_ucb",
    "challenger_effective_sample_size",
)


def recent_runs(
    client: MlflowClient, tracking: TrackingConfig, n: int = 10
) -> list[dict[str, Any]]:
    """Return the last ``n`` flow runs (parents only), newest first, with metrics and versions."""
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is None:
        return []
    runs = client.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=500
    )
    parents = [r for r in runs if PARENT_RUN_TAG not in r.data.tags][:n]
    versions: dict[str, tuple[str, str]] = {}
    try:
        for mv in client.search_model_versions(f"name='{tracking.registered_model}'"):
            versions[mv.run_id] = (str(mv.version), mv.tags.get("gate_decision", ""))
    except MlflowException:
        pass
    rows = []
    for r in parents:
        version, decision = versions.get(r.info.run_id, ("", ""))
        n_trials = sum(1 for t in runs if t.data.tags.get(PARENT_RUN_TAG) == r.info.run_id)
        rows.append(
            {
                "run_id": r.info.run_id,
                "run_name": r.info.run_name,
                "status": r.info.status,
                "start_time": r.info.start_time,
                "n_trials": n_trials,
                "version": version,
                "decision": decision or ("failed" if r.info.status == "FAILED" else ""),
                **{m: r.data.metrics.get(m) for m in COMPARE_METRICS},
            }
        )
    return rows
