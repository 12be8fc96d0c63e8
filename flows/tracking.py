"""MLflow tracking helpers: experiments, parent and nested runs, params, metrics, artifacts.

Everything goes through an explicit :class:`mlflow.MlflowClient` built from
``cfg.tracking`` (no fluent active-run state), so nested trial runs can be logged from any
thread and nothing depends on a global tracking URI. Metric names follow STYLE §3
(``snake_case``, ``<estimator>_<quantity>``), identical across runs so runs compare in the UI.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import math
import os
import re
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from mlflow import MlflowClient
from mlflow.entities import Dataset, DatasetInput, InputTag, Metric, Param, RunStatus
from mlflow.exceptions import MlflowException
from mlflow.utils.time import get_current_time_millis

from flows.config import TrackingConfig, flatten, outage_delay_scale
from flows.redact import redact
from flows.store_faults import check_database, check_store, is_database_uri, sqlite_path
from poem.io.logs import log_fingerprint

__all__ = [
    "COMPARE_METRICS",
    "OUTAGE_DELAYS",
    "OutageRetryingClient",
    "compare_metrics",
    "PARENT_RUN_TAG",
    "TrackedRun",
    "client_for",
    "create_nested_run",
    "data_fingerprint",
    "ensure_experiment",
    "experiment_ui_tags",
    "headline_view_url",
    "is_database_outage",
    "finish_run",
    "flatten",
    "describe_run",
    "log_artifact",
    "log_dataset_input",
    "log_json",
    "log_metrics",
    "log_params",
    "log_text",
    "reap_stale_runs",
    "recent_runs",
    "redact",
    "run_name",
    "scaled_delays",
    "single_attempts",
    "start_run",
    "store_lock",
    "store_lock_path",
    "tracking_uri_scope",
]

PARENT_RUN_TAG = "mlflow.parentRunId"


_MAX_PARAM_LENGTH = 6000
_BATCH = 100


class StoreLockTimeout(TimeoutError):
    """Another process held the tracking store's lock for longer than the timeout."""


def store_lock_path(uri: str) -> Path:
    """The lock file of :func:`store_lock`: in the temporary folder, one per store.

    Keyed by the sqlite database's resolved path (else by the URI), so every process of this
    machine that opens the store agrees on it, and no ``mlflow.db.lock`` is left beside the
    database (in a project's working tree).
    """
    database = sqlite_path(uri)
    key = uri if database is None else str(database.resolve())
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"poem-pipeline-store-{digest}.lock"


@contextlib.contextmanager
def store_lock(uri: str, timeout: float = 300.0) -> Iterator[None]:
    """Hold an exclusive lock on the tracking store ``uri`` (``fcntl.flock`` on a lock file).

    Serializes between processes of one machine what must not interleave: the creation and
    migration of a sqlite store, and breaking a dead holder's registry lock.

    Raises
    ------
    StoreLockTimeout
        If the lock is not free within ``timeout`` seconds (the message names the lock file).
    """
    path = store_lock_path(uri)
    database = sqlite_path(uri)
    if database is not None and not database.parent.is_dir():
        database.parent.mkdir(parents=True, exist_ok=True)  # where sqlite creates the store
    try:
        fh = open(os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600), "a+b")  # noqa: SIM115
    except PermissionError:  # another user's lock file: flock needs no write access
        fh = open(path, "rb")  # noqa: SIM115
    with fh:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise StoreLockTimeout(
                        f"the tracking store lock {path} was held by another process for more "
                        f"than {timeout:g} s"
                    ) from None
                time.sleep(0.05)  # lock poll interval
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@functools.cache
def _initialise_store(uri: str) -> None:
    """Create (or migrate) the tracking and registry tables once per process, under the lock.

    Concurrent migrations of one fresh sqlite store can break it for good; a corrupt database
    is refused first (:func:`check_store`).
    """
    check_store(uri)
    with store_lock(uri):
        database = sqlite_path(uri)
        if database is not None and not database.exists():  # owner only, whatever the umask
            os.close(os.open(database, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        client.search_experiments(max_results=1)  # tracking tables
        client.search_registered_models(max_results=1)  # registry tables (same database)


@functools.cache
def _reached_database(uri: str) -> None:
    """:func:`flows.store_faults.check_database`, until it first succeeds in this process."""
    check_database(uri)


# Bounded retries and timeout towards a remote tracking server (MLflow's defaults take minutes
# to report an unreachable one); explicit MLFLOW_HTTP_* environment variables win.
HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}


# urllib3's words when the server answered 503 to every one of MLflow's HTTP retries: the
# tracking server is up and its database is not (a PostgreSQL restart: MLflow answers 503
# TEMPORARILY_UNAVAILABLE while its connections fail)
DATABASE_OUTAGE = re.compile(r"too many 503 error responses")
# waits before each further attempt of a call that met a database outage (33 s in all, with
# MLflow's own ~3 s of HTTP retries per attempt): a restart of the tracking database; each is
# multiplied by POEM_OUTAGE_DELAY_SCALE (flows.config.outage_delay_scale, default 1)
OUTAGE_DELAYS = (3.0, 10.0, 20.0)


def scaled_delays(delays: tuple[float, ...]) -> tuple[float, ...]:
    """``delays`` times :func:`flows.config.outage_delay_scale` (``POEM_OUTAGE_DELAY_SCALE``)."""
    scale = outage_delay_scale()
    return tuple(delay * scale for delay in delays)


def is_database_outage(exc: BaseException) -> bool:
    """True when ``exc`` is a tracking server's 503 to all of MLflow's HTTP retries."""
    return (
        isinstance(exc, MlflowException)
        and exc.message.startswith("API request to")
        and DATABASE_OUTAGE.search(exc.message) is not None
    )


_RETRYING = threading.local()  # a call inside a retried call is not retried again


@contextlib.contextmanager
def single_attempts() -> Iterator[None]:
    """Calls of :class:`OutageRetryingClient` in this block (this thread) are made once.

    For a caller that already retries on its own delays (closing a run at the end, reading an
    alias after a failure), so that an outage does not cost both bounds multiplied.
    """
    previous = getattr(_RETRYING, "active", False)
    _RETRYING.active = True
    try:
        yield
    finally:
        _RETRYING.active = previous


class OutageRetryingClient(MlflowClient):
    """An :class:`mlflow.MlflowClient` whose calls wait out a restart of the server's database.

    A tracking server whose database is restarting answers 503 to each of MLflow's HTTP retries
    (about 3 s, :data:`HTTP_DEFAULTS`) and a PostgreSQL restart takes 5–30 s, so a write
    outside a retried stage (``select-challenger``'s metrics, ``split-logs``' params) failed the
    run. A public method that fails that way (:func:`is_database_outage`) is called again after
    each of :attr:`delays` (:data:`OUTAGE_DELAYS`, times ``POEM_OUTAGE_DELAY_SCALE``:
    :func:`scaled_delays`); any other error, and a server that does not answer at all
    (connection refused: not retried here), is raised at once.
    """

    delays: tuple[float, ...] = OUTAGE_DELAYS

    def __getattribute__(self, name: str) -> Any:
        attribute = super().__getattribute__(name)
        if name.startswith("_") or not callable(attribute):
            return attribute
        delays = scaled_delays(super().__getattribute__("delays"))

        @functools.wraps(attribute)
        def retried(*args: Any, **kwargs: Any) -> Any:
            if getattr(_RETRYING, "active", False):
                return attribute(*args, **kwargs)
            with single_attempts():
                for delay in delays:
                    try:
                        return attribute(*args, **kwargs)
                    except MlflowException as exc:
                        if not is_database_outage(exc):
                            raise
                    time.sleep(delay)
                return attribute(*args, **kwargs)

        return retried


def quiet_run_links() -> None:
    """Stop MLflow printing "View run … at: …" for every run it ends on a tracking server.

    A retrain ends one nested run per search trial: forty such lines in a worker's output (the
    runs table is one address, :func:`headline_view_url`). An explicit
    ``MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT`` wins.
    """
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def client_for(tracking: TrackingConfig, *, read_only: bool = False) -> MlflowClient:
    """Return a client for the configured tracking store and model registry.

    A sqlite store is checked and created or migrated once per process
    (:func:`_initialise_store`); with ``read_only`` an existing database is only checked (no
    lock file, no migration). A database server is connected to once per process
    (:func:`flows.store_faults.check_database`: a wrong password in one line, at once). An
    ``http(s)://`` server gets :data:`HTTP_DEFAULTS`, and an :class:`OutageRetryingClient`
    (a restart of its database is waited out, within :data:`OUTAGE_DELAYS`).
    """
    database = sqlite_path(tracking.uri)
    if read_only and database is not None and database.is_file():
        check_store(tracking.uri)
    elif tracking.uri.startswith("sqlite:"):
        _initialise_store(tracking.uri)
    elif is_database_uri(tracking.uri):
        _reached_database(tracking.uri)
    elif tracking.uri.startswith(("http://", "https://")):
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)
        quiet_run_links()
        return OutageRetryingClient(tracking_uri=tracking.uri, registry_uri=tracking.uri)
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


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
HEADLINE_VIEW = "poem-headline"  # the URL's ?viewStateShareKey=
HEADLINE_COLUMNS = (
    "attributes.`Run Name`",
    "tags.`decision`",
    "tags.`champion`",
    "tags.`challenger`",
    "metrics.`challenger_risk`",
    "metrics.`champion_risk`",
    "metrics.`risk_difference_ucb`",
)


def experiment_ui_tags() -> dict[str, str]:
    """Experiment tags that make MLflow's UI (3.17) open the runs table, not the GenAI view.

    Includes a saved view (:func:`headline_view_url`) of :data:`HEADLINE_COLUMNS`, newest first.
    """
    state = {
        "selectedColumns": list(HEADLINE_COLUMNS),
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
    }
    return {
        EXPERIMENT_KIND_TAG: "custom_model_development",
        f"mlflow.sharedViewState.{HEADLINE_VIEW}": json.dumps(state),
    }


def headline_view_url(ui_url: str, experiment_id: str) -> str:
    """The UI address of the experiment's runs table ("Model training" mode, the saved view)."""
    query = f"workflowType=machine_learning&viewStateShareKey={HEADLINE_VIEW}"
    return f"{ui_url.rstrip('/')}/#/experiments/{experiment_id}/runs?{query}"


def ensure_experiment(client: MlflowClient, tracking: TrackingConfig) -> str:
    """Id of ``tracking.experiment``, created with the explicit artifact location if missing.

    :func:`experiment_ui_tags` missing from the experiment are added (tags set by hand stay).
    """
    tags = experiment_ui_tags()
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is not None:
        for key, value in tags.items():
            if key not in experiment.tags:
                client.set_experiment_tag(experiment.experiment_id, key, value)
        return experiment.experiment_id
    local = urlparse(tracking.artifact_location)
    if local.scheme in ("", "file") and not Path(url2pathname(local.path)).exists():
        Path(url2pathname(local.path)).mkdir(mode=0o700, parents=True, exist_ok=True)  # 0700
    try:
        return client.create_experiment(
            tracking.experiment, artifact_location=tracking.artifact_location, tags=tags
        )
    except MlflowException:  # created concurrently
        experiment = client.get_experiment_by_name(tracking.experiment)
        if experiment is None:
            raise
        return experiment.experiment_id


OWNER_TAGS = ("poem.host", "poem.pid", "poem.pid_start")


def _process_start(pid: int) -> str | None:
    """Start time of process ``pid`` (clock ticks since boot, ``/proc``), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]  # field 22 of proc(5), after "pid (comm)"


def _owner_tags() -> dict[str, str]:
    """Which process owns a RUNNING run: host name, pid and the pid's start time."""
    pid = os.getpid()
    owner = (socket.gethostname(), str(pid), _process_start(pid) or "")
    return dict(zip(OWNER_TAGS, owner, strict=True))


def start_run(
    client: MlflowClient, experiment_id: str, run_name: str, tags: Mapping[str, Any] | None = None
) -> str:
    """Create a parent run (status RUNNING) owned by this process (:func:`reap_stale_runs`)."""
    all_tags = {**{k: redact(v) for k, v in (tags or {}).items()}, **_owner_tags()}
    return client.create_run(experiment_id, run_name=redact(run_name), tags=all_tags).info.run_id


def _owner_gone(tags: Mapping[str, str]) -> bool:
    """True when a run's owner process was on this host and is no longer running."""
    if tags.get("poem.host") != socket.gethostname() or not tags.get("poem.pid", "").isdigit():
        return False
    return _process_start(int(tags["poem.pid"])) != tags.get("poem.pid_start")


def reap_stale_runs(client: MlflowClient, experiment_id: str) -> list[str]:
    """Mark RUNNING runs whose owning process on this host is gone as KILLED; returns their ids.

    Each gets the tag ``poem.stale``; runs of another host or without owner tags are left alone.
    """
    host = socket.gethostname()
    runs = client.search_runs([experiment_id], "attributes.status = 'RUNNING'", max_results=1000)
    reaped = []
    for run in runs:
        tags = run.data.tags
        if not _owner_gone(tags):
            continue  # alive (a concurrent run), or owned elsewhere
        client.set_tag(
            run.info.run_id,
            "poem.stale",
            f"process {tags['poem.pid']} on {host} ended without closing the run",
        )
        client.set_terminated(run.info.run_id, "KILLED")
        reaped.append(run.info.run_id)
    return reaped


def log_params(client: MlflowClient, run_id: str, params: Mapping[str, Any]) -> None:
    """Log flattened params (values stringified, :func:`redact`-ed, truncated to MLflow's limit)."""
    items = [Param(k, redact(v)[:_MAX_PARAM_LENGTH]) for k, v in flatten(params).items()]
    for start in range(0, len(items), _BATCH):
        client.log_batch(run_id, params=items[start : start + _BATCH])


def log_metrics(
    client: MlflowClient, run_id: str, metrics: Mapping[str, Any], step: int = 0
) -> None:
    """Log numeric metrics (booleans as 0/1); non-numeric and non-finite values are skipped."""
    now = get_current_time_millis()
    items = [
        Metric(key, float(value), now, step)  # a bool is an int: 0/1
        for key, value in flatten(metrics).items()
        if isinstance(value, int | float) and math.isfinite(value)
    ]
    for start in range(0, len(items), _BATCH):
        client.log_batch(run_id, metrics=items[start : start + _BATCH])


def log_text(client: MlflowClient, run_id: str, text: str, artifact_file: str) -> None:
    """Store ``text`` (:func:`redact`-ed) as the run artifact ``artifact_file`` (``a/b.md``)."""
    client.log_text(run_id, redact(text), artifact_file)


def log_json(client: MlflowClient, run_id: str, data: Any, artifact_file: str) -> None:
    """Store JSON-serialisable ``data`` (:func:`redact`-ed) as the artifact ``artifact_file``."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str)
    client.log_text(run_id, redact(text), artifact_file)


def log_artifact(
    client: MlflowClient, run_id: str, path: str | Path, artifact_path: str | None = None
) -> None:
    """Upload a file or a whole folder under ``artifact_path``."""
    path = Path(path)
    upload = client.log_artifacts if path.is_dir() else client.log_artifact
    upload(run_id, str(path), artifact_path)


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
    """Mark a run FINISHED, FAILED or KILLED."""
    client.set_terminated(run_id, status)


def run_name(data_path: str | Path, outcome: str | None = None) -> str:
    """A run name that says what ran: ``<data> <UTC date>[ <outcome>]``.

    E.g. ``logs 2026-11-23 promoted v3`` (``outcome`` is filled in when the run ends).
    """
    data = Path(str(data_path).rstrip("/")).name or str(data_path)
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    return f"{data} {date}" + (f" {outcome}" if outcome else "")


NOTE_TAG = "mlflow.note.content"  # the run's description in the MLflow UI


def describe_run(
    client: MlflowClient,
    run_id: str,
    *,
    name: str | None = None,
    description: str | None = None,
    tags: Mapping[str, Any] | None = None,
) -> None:
    """Rename a run, set its description (markdown) and tags (all :func:`redact`-ed)."""
    if name is not None:
        client.update_run(run_id, name=redact(name))
    all_tags = dict(tags or {})
    if description is not None:
        all_tags[NOTE_TAG] = description
    for key, value in all_tags.items():
        client.set_tag(run_id, key, redact(value)[:5000])


def log_dataset_input(
    client: MlflowClient, run_id: str, path: str | Path, fingerprint: str, context: str
) -> None:
    """Record the log as the run's MLflow dataset input (name, source, digest).

    The digest is the first 32 hex digits of :func:`data_fingerprint` (MLflow's column holds
    36); the full fingerprint is the run tag ``data_fingerprint``.
    """
    source = str(Path(path).resolve()) if "://" not in str(path) else str(path)
    dataset = Dataset(
        name=Path(str(path).rstrip("/")).name or source,
        digest=fingerprint[:32],
        source_type="local",
        source=json.dumps({"uri": source}),
        profile=json.dumps({"sha256": fingerprint}),
    )
    tags = [InputTag("mlflow.data.context", context)]
    client.log_inputs(run_id, datasets=[DatasetInput(dataset, tags)])


@contextlib.contextmanager
def tracking_uri_scope(uri: str) -> Iterator[None]:
    """Point MLflow's global tracking and registry URIs at ``uri`` for a block; restore after.

    For APIs that resolve the store from the global URI (``log_model``): an unscoped
    ``mlflow.set_tracking_uri`` exports ``MLFLOW_TRACKING_URI``, which ``load_config`` honours.
    """
    import mlflow

    previous = os.environ.get("MLFLOW_TRACKING_URI"), os.environ.get("MLFLOW_REGISTRY_URI")
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous[0])  # None unsets the global and the variable
        mlflow.set_registry_uri(previous[1])
        if previous[1] is None:
            os.environ.pop("MLFLOW_REGISTRY_URI", None)


def data_fingerprint(path: str | Path) -> str:
    """SHA-256 of exactly the files the log reader reads (:func:`poem.io.logs.log_fingerprint`)."""
    return log_fingerprint(path)


COMPARE_METRICS = (
    "n_rows",
    "validation_ips_risk",
    "challenger_risk",
    "champion_risk",
    "risk_difference_ucb",
    "challenger_effective_sample_size",
)


def compare_metrics(metrics: Mapping[str, float]) -> dict[str, float | None]:
    """The :data:`COMPARE_METRICS` of a run, whatever gate estimator produced them.

    Older releases' ``<role>_<estimator>_risk[_ucb]`` keys are mapped onto today's.
    """
    out: dict[str, float | None] = {k: metrics.get(k) for k in COMPARE_METRICS}
    for key, value in metrics.items():
        role, _, rest = key.partition("_")  # rest: <estimator>_risk[_ucb], estimator may hold _
        if role not in ("challenger", "champion", "difference"):
            continue
        for quantity in ("risk_ucb", "risk"):
            if rest.endswith(f"_{quantity}"):
                # difference_<est>_risk_ucb is today's risk_difference_ucb
                target = f"{role}_{quantity}".replace("difference_risk", "risk_difference")
                if out.get(target) is None:
                    out[target] = value
                break
    return out


def recent_runs(
    client: MlflowClient, tracking: TrackingConfig, n: int = 10
) -> list[dict[str, Any]]:
    """Return the last ``n`` flow runs (parents only), newest first, with metrics and versions.

    A RUNNING run whose process is gone shows as ``KILLED?`` (decision ``killed?``).
    """
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is None:
        return []
    runs = client.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"], max_results=500
    )
    parents = [r for r in runs if PARENT_RUN_TAG not in r.data.tags][:n]
    versions: dict[str, tuple[str, str]] = {}
    with contextlib.suppress(MlflowException):
        for mv in client.search_model_versions(f"name='{tracking.registered_model}'"):
            versions[mv.run_id] = (str(mv.version), mv.tags.get("gate_decision", ""))
    rows = []
    for r in parents:
        version, decision = versions.get(r.info.run_id, ("", ""))
        n_trials = sum(1 for t in runs if t.data.tags.get(PARENT_RUN_TAG) == r.info.run_id)
        status = r.info.status
        if status == "RUNNING" and _owner_gone(r.data.tags):
            status = "KILLED?"  # closed as KILLED by the next retrain on this host
        if status in ("FAILED", "KILLED", "KILLED?"):
            decision = status.lower()
        rows.append(
            {
                "run_id": r.info.run_id,
                "run_name": r.info.run_name,
                "status": status,
                "start_time": r.info.start_time,
                "n_trials": n_trials,
                "version": version,
                "decision": decision or r.data.tags.get("decision", ""),
                **compare_metrics(r.data.metrics),
            }
        )
    return rows
