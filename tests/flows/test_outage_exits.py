"""What ``retrain`` says about the registry when it fails (issue 37 item 5), without servers.

The decision table of :func:`flows.commands.retrain._registry_after` on real stores: a sqlite
store with and without this run's version as champion, and a tracking server nobody listens on
(the registry unreadable). The team-server outages themselves are in
``tests/integration/test_outages.py``.
"""

from __future__ import annotations

import socket
from types import SimpleNamespace

import numpy as np
import pytest

import flows.tasks.track as track
from flows.commands._console import EXIT_FAILED, EXIT_OK, EXIT_UNKNOWN
from flows.commands.retrain import _alias_command, _registry_after, _without_password
from flows.config import PipelineConfig, TrackingConfig
from flows.retrain import RetrainProgress, RetrainResult
from flows.tracking import TrackedRun, client_for, ensure_experiment, start_run


def _planned(version: str = "1") -> RetrainResult:
    return RetrainResult(
        decision="promoted",
        challenger_version=version,
        champion_version=version,
        previous_champion_version=None,
        reasons=("passed: improvement",),
        metrics={"challenger_risk": 0.3, "champion_risk": 0.4},
        estimator="ips",
    )


def _dead_server() -> str:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


@pytest.fixture
def no_waits(monkeypatch):
    monkeypatch.setattr(track, "CLOSE_DELAYS", ())  # one attempt: the server is gone for good
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")


def test_a_failure_after_promote_started_with_the_server_down_is_unknown(no_waits):
    """Old code: exit 1 "retrain failed" whatever the champion became. Now exit 3, and the
    last line gives the command that reads the alias."""
    cfg = PipelineConfig(tracking=TrackingConfig(uri=_dead_server()))
    state = RetrainProgress(tracking=cfg.tracking, run_id="r1", version="4", promoting=True)
    state.planned = _planned("4")
    code, out = _registry_after(cfg, state)
    assert code == EXIT_UNKNOWN == 3
    uri = cfg.tracking.uri
    assert out == [
        "decision=unknown champion=unknown: the registry could not be read after promote-policy "
        f"of v4 started; check the alias with curl -s '{uri}/api/2.0/mlflow/registered-models/"
        "alias?name=poem-policy&alias=champion'"
    ]


def test_a_failure_before_promote_with_the_server_down_says_not_promoted(no_waits):
    cfg = PipelineConfig(tracking=TrackingConfig(uri=_dead_server()))
    state = RetrainProgress(tracking=cfg.tracking, run_id="r1", champion_before="2")
    state.planned = _planned("5")  # registered, promote-policy never started
    assert _registry_after(cfg, state) == (
        EXIT_FAILED,
        ["decision=failed champion=2 (not promoted)"],
    )
    # promote-policy was called but Prefect failed before its body ran: nothing moved
    state = RetrainProgress(tracking=cfg.tracking, run_id="r1", promoting=True)
    state.planned, state.started = _planned("5"), {"register-policy"}
    assert _registry_after(cfg, state) == (
        EXIT_FAILED,
        ["decision=failed champion=logging-policy (not promoted)"],
    )
    early = RetrainProgress(tracking=cfg.tracking)  # no MLflow run: nothing was gated
    assert _registry_after(cfg, early) == (
        EXIT_FAILED,
        ["decision=failed champion=unchanged (not promoted)"],
    )


def test_the_champion_alias_decides_after_a_failure_at_promote(tmp_path, no_waits):
    from flows.registry import log_policy_model, promote, register_version
    from poem.policies import StochasticPolicy, make_family

    tracking = TrackingConfig(
        uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=str(tmp_path / "art")
    )
    cfg = PipelineConfig(tracking=tracking)
    client = client_for(tracking)
    experiment = ensure_experiment(client, tracking)
    run_id = start_run(client, experiment, "a run")
    family = make_family("discrete", 3, 2)

    logged = log_policy_model(
        client, tracking, experiment, run_id, StochasticPolicy(family, np.zeros(family.coef_shape))
    )
    version = register_version(client, tracking, logged, run_id, {})
    state = RetrainProgress(tracking=tracking, run_id=run_id, version=version, promoting=True)
    state.planned = _planned(version)
    assert _registry_after(cfg, state) == (
        EXIT_FAILED,
        ["decision=failed champion=logging-policy (not promoted)"],
    )
    promote(client, tracking, version)  # the alias moved before the failure
    code, out = _registry_after(cfg, state)
    assert code == EXIT_OK
    assert out[0].startswith(f"PROMOTED: challenger v{version} IPS risk 0.3000")
    assert out[-1] == f"decision=promoted champion={version}"


def test_a_failed_run_is_closed_without_prefect_with_its_reason(tmp_path):
    tracking = TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = client_for(tracking)
    experiment = ensure_experiment(client, tracking)
    run = TrackedRun(tracking, experiment, start_run(client, experiment, "a run"))
    reason = "PrefectHTTPStatusError: Server error '500 Internal Server Error'"
    assert track.close_run(run, "FAILED", None, "logs", reason) is None
    closed = client.get_run(run.run_id)
    assert closed.info.status == "FAILED"
    assert closed.data.tags[track.END_REASON_TAG] == reason
    assert closed.data.tags["decision"] == "failed"


def test_the_command_to_check_the_alias_hides_a_password():
    cfg = PipelineConfig(tracking=TrackingConfig(uri="postgresql://poem:s3cret@db:5432/mlflow"))
    assert _without_password(cfg.tracking.uri) == "postgresql://poem:***@db:5432/mlflow"
    command = _alias_command(cfg)
    assert "s3cret" not in command
    assert command == (
        "python -c \"from mlflow import MlflowClient; print(MlflowClient('postgresql://poem:***"
        "@db:5432/mlflow').get_model_version_by_alias('poem-policy', 'champion').version)\""
    )


# -- POEM_OUTAGE_DELAY_SCALE: the waits after a tracking server's outage ---------------------


@pytest.fixture
def delay_scale(monkeypatch):
    """Set ``POEM_OUTAGE_DELAY_SCALE`` for one test (read once per process: cache cleared)."""
    from flows.config import outage_delay_scale

    def set_scale(value: str | None) -> None:
        if value is None:
            monkeypatch.delenv("POEM_OUTAGE_DELAY_SCALE", raising=False)
        else:
            monkeypatch.setenv("POEM_OUTAGE_DELAY_SCALE", value)
        outage_delay_scale.cache_clear()

    yield set_scale
    monkeypatch.undo()
    outage_delay_scale.cache_clear()


@pytest.fixture
def answers_503():
    """A real HTTP server on 127.0.0.1 answering 503 to every request (a tracking server whose
    database is down); yields ``(url, requests)``, the paths it was asked for."""
    import http.server
    import threading

    requests: list[str] = []

    class Unavailable(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            requests.append(self.path.split("?", 1)[0])
            body = b'{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "database down"}'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = _answer

        def log_message(self, *args) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()


def test_the_outage_delay_scale_multiplies_every_wait_and_defaults_to_the_full_waits(delay_scale):
    from flows.tracking import OUTAGE_DELAYS, scaled_delays

    delay_scale(None)
    assert scaled_delays(OUTAGE_DELAYS) == (3.0, 10.0, 20.0)
    assert scaled_delays(track.CLOSE_DELAYS) == (3.0, 10.0, 20.0)
    delay_scale("0.1")
    assert scaled_delays(OUTAGE_DELAYS) == pytest.approx((0.3, 1.0, 2.0))
    delay_scale("0")
    assert scaled_delays(track.CLOSE_DELAYS) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("value", ["lots", "-1", "nan", "inf", "1e400"])
def test_a_bad_outage_delay_scale_is_refused_in_one_line_when_the_config_loads(delay_scale, value):
    from flows.config import ConfigError, load_config

    delay_scale(value)
    message = (
        f"environment variable POEM_OUTAGE_DELAY_SCALE='{value}' must be a number >= 0 (the "
        "factor on the 3, 10 and 20 s waits for a tracking server's outage); unset it for the "
        "full waits"
    )
    with pytest.raises(ConfigError) as info:
        load_config()
    assert str(info.value) == message


def test_a_scaled_client_makes_the_same_attempts_at_a_database_outage(
    delay_scale, answers_503, monkeypatch
):
    """Every call of the client to a server answering 503 is made 1 + 3 times, scaled or not;
    the error is the one a stage's retry condition recognises ("too many 503 error responses")."""
    from mlflow.exceptions import MlflowException

    from flows.tasks import is_transient_io_error
    from flows.tracking import OutageRetryingClient, is_database_outage

    url, requests = answers_503
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # one request per attempt
    delay_scale("0.01")
    client = OutageRetryingClient(tracking_uri=url, registry_uri=url)
    with pytest.raises(MlflowException) as info:
        client.get_experiment("1")
    assert is_database_outage(info.value)
    assert is_transient_io_error(None, None, SimpleNamespace(data=info.value))
    assert requests == ["/api/2.0/mlflow/experiments/get"] * 4


def test_closing_and_reading_the_alias_make_their_attempts_on_the_scaled_waits(
    delay_scale, answers_503, monkeypatch
):
    url, requests = answers_503
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    delay_scale("0.01")
    run = TrackedRun(TrackingConfig(uri=url), "1", "r1")
    error = track.close_run(run, "FAILED", None, "logs", "the reason")
    assert error is not None and "too many 503 error responses" in str(error)
    assert len(requests) == 4  # 1 + one per CLOSE_DELAYS, none retried by the client again
    requests.clear()
    assert track.read_alias(run, "champion") == (False, None)
    assert requests == ["/api/2.0/mlflow/registered-models/alias"] * 4
