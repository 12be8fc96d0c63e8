"""Team-topology server outages (issue 37 item 5): exit codes that agree with the registry.

One topology per module (PostgreSQL, ``mlflow server`` and a Prefect server on it:
``team_servers.TeamServers``); each test runs the real ``retrain`` command and stops or kills a
server when a stage finishes (``team_servers.DRIVER``), then checks the exit code, the last line,
the ``champion`` alias and that no run is left RUNNING, through the tracking server's REST API.

The waits between attempts after an outage are shrunk with ``POEM_OUTAGE_DELAY_SCALE`` (the
same attempts, the same code): to a tenth where the server stays down (the waits only delay the
same error; MLflow's HTTP backoff goes too), to a half where PostgreSQL comes back (the retried
window, ~28 s, still outlasts the restart).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("outages")]

# POEM_OUTAGE_DELAY_SCALE of the retrains: 3, 10, 20 s waits become 0.3, 1, 2 s (a server that
# stays down) or 1.5, 5, 10 s (a PostgreSQL that restarts within them). A killed server also
# gets MLflow's two HTTP retries of each call without their 1 + 2 s backoff and jitter (~30 s of
# a run's calls to a refused port; the same retries, the same error)
SERVER_GONE = {
    "POEM_OUTAGE_DELAY_SCALE": "0.1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "0",
    "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0.1",
}
DATABASE_RESTARTS = {"POEM_OUTAGE_DELAY_SCALE": "0.5"}

_spec = importlib.util.spec_from_file_location(
    "team_servers", Path(__file__).with_name("team_servers.py")
)
team_servers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(team_servers)


@pytest.fixture(scope="module")
def servers():
    missing = team_servers.missing_tools()
    if missing:
        pytest.skip(f"the team servers need {', '.join(missing)}")
    servers = team_servers.TeamServers()  # under TMPDIR, open to the `postgres` user
    try:
        servers.start()
        work = servers.root / "work"
        work.mkdir()
        subprocess.run(
            [sys.executable, "-m", "flows.cli", "make-logs", "--dataset", "digits"]
            + ["--out", str(work / "logs"), "--n-events", "800"],
            env=servers.env,
            cwd=work,
            check=True,
            capture_output=True,
            timeout=300,
        )
        yield servers
    finally:
        servers.stop()


def _config(servers, name: str) -> Path:
    """A config of its own model and experiment on the tracking server (one grid point)."""
    work = servers.root / "work"
    cfg = {
        "tracking": {
            "uri": servers.mlflow_url,
            "artifact_location": f"mlflow-artifacts:/{name}",
            "experiment": name,
            "registered_model": name,
        },
        "data": {"path": str(work / "logs"), "family": "discrete"},
        "checks": {"min_rows": 50},
        "search": {"grid": {"variance_scale": [0.1]}, "max_workers": 1},
        "training": {"params": {"solver": "lbfgs", "max_iter": 20, "random_state": 0}},
        "gate": {"min_ess": 20},
    }
    path = work / f"{name}.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _last(done: subprocess.CompletedProcess) -> str:
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def _outcome(done, servers=None) -> str:
    """The run's exit, output and (given ``servers``) the end of each server's log."""
    text = f"exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr}"
    if servers is not None:
        for log in sorted(servers.root.glob("*.log")) + [servers.pgdir / "log"]:
            if log.is_file():
                text += f"\n--- {log.name}\n{log.read_text(errors='replace')[-3000:]}"
    return text


@pytest.fixture
def half_delays(monkeypatch):
    """``POEM_OUTAGE_DELAY_SCALE=0.5`` in this process (read once: the cache is cleared)."""
    from flows.config import outage_delay_scale

    monkeypatch.setenv("POEM_OUTAGE_DELAY_SCALE", DATABASE_RESTARTS["POEM_OUTAGE_DELAY_SCALE"])
    outage_delay_scale.cache_clear()
    yield
    monkeypatch.undo()
    outage_delay_scale.cache_clear()


def test_a_client_call_waits_out_a_postgres_restart_of_the_tracking_server(servers, half_delays):
    """The tracking server answers 503 while its PostgreSQL restarts (~15 s under load). Old
    code: MLflow's ~3 s of HTTP retries, then "too many 503 error responses" (a write outside a
    retried stage, select-challenger's metrics, failed the run). Now the client waits it out."""
    from flows.config import TrackingConfig
    from flows.tracking import client_for, scaled_delays

    assert scaled_delays((3.0, 10.0, 20.0)) == (1.5, 5.0, 10.0)  # the knob reached the client

    client = client_for(TrackingConfig(uri=servers.mlflow_url, experiment="pg-client-call"))
    experiment = client.create_experiment("pg-client-call")
    run_id = client.create_run(experiment).info.run_id
    servers.stop_postgres()
    back = threading.Timer(12, servers.start_postgres)  # down 12 s, then the start itself
    back.start()
    started = time.monotonic()
    try:
        client.set_tag(run_id, "written", "during the restart")
        waited = time.monotonic() - started
    finally:
        back.join()
        servers.ensure_running()
    assert waited >= 10, waited  # it did meet the outage
    assert client.get_run(run_id).data.tags["written"] == "during the restart"


def test_postgres_restarted_mid_search_is_retried_and_the_run_completes(servers):
    """Old code: exit 1, "PrefectHTTPStatusError: Server error '500 Internal Server Error'",
    the MLflow run left RUNNING. Now: the 500s are retried within the bound, the run ends."""
    config = _config(servers, "pg-mid-search")
    restart = f"{servers.pg_shell('stop')} && (sleep 10; {servers.pg_shell('start')}) &"
    done = servers.retrain(
        servers.root / "work", config, "search-trial", restart, extra_env=DATABASE_RESTARTS
    )
    servers.ensure_running()
    assert done.returncode == 0, _outcome(done, servers)
    assert _last(done) in (
        "decision=promoted champion=1",
        "decision=rejected champion=logging-policy",
    )
    assert [r["status"] for r in servers.runs("pg-mid-search")] == ["FINISHED"]


def test_postgres_restarted_after_registering_is_retried_and_the_version_promoted(servers):
    """Old code: exit 1 "retrain failed" (Prefect's 500) though the version was gated, so a
    scheduler's retry spent another gate attempt. Now the outage is retried: exit 0, promoted,
    one version, the run FINISHED."""
    name = "pg-after-register"
    config = _config(servers, name)
    restart = f"{servers.pg_shell('stop')} && (sleep 10; {servers.pg_shell('start')}) &"
    done = servers.retrain(
        servers.root / "work", config, "register-policy", restart, extra_env=DATABASE_RESTARTS
    )
    servers.ensure_running()
    assert done.returncode == 0, _outcome(done, servers)
    assert _last(done) == "decision=promoted champion=1", _outcome(done, servers)
    assert servers.aliases(name) == {"challenger": "1", "champion": "1"}
    assert [r["status"] for r in servers.runs(name)] == ["FINISHED"]


def test_a_prefect_server_whose_database_is_down_is_named_in_the_error(servers):
    """Old code: "PrefectHTTPStatusError: Server error '500 Internal Server Error' …", never
    naming PostgreSQL. Now the server's readiness check is asked, and the line says so."""
    import httpx

    from flows.commands.retrain import _outage

    servers.stop_postgres()
    try:
        response = httpx.post(f"{servers.prefect_api}/flows/filter", json={}, timeout=30)
        with pytest.raises(httpx.HTTPStatusError) as info:
            response.raise_for_status()
        line = _outage(info.value)
    finally:
        servers.ensure_running()
    assert line == (
        f"the Prefect server at {servers.prefect_api} answered 500 Internal Server Error to "
        "POST /api/flows/filter after its retries: its database is not available (GET "
        '/api/ready: 503 {"message":"Database is not available"}); check the PostgreSQL server '
        "of its PREFECT_API_DATABASE_CONNECTION_URL"
    )


def test_mlflow_server_killed_after_the_promotion_exits_0_with_the_promotion(servers):
    """The champion moved, then the tracking server died. Old code: exit 1 "retrain failed".
    Now: exit 0, the headline and ``decision=promoted champion=1``, one warning line."""
    config = _config(servers, "mlflow-after-promote")
    kill = servers.kill_command("mlflow")
    done = servers.retrain(
        servers.root / "work", config, "promote-policy", kill, extra_env=SERVER_GONE
    )
    servers.ensure_running()
    assert done.returncode == 0, _outcome(done, servers)
    assert _last(done) == "decision=promoted champion=1", _outcome(done, servers)
    assert "PROMOTED: challenger v1" in done.stdout
    assert done.stderr.strip().splitlines()[0].startswith("warning: after the outcome: ")
    assert servers.aliases("mlflow-after-promote")["champion"] == "1"


def test_mlflow_server_killed_before_the_promotion_is_unknown_with_the_command_to_check(
    servers,
):
    """The tracking server dies once the challenger is registered: whether the champion moved
    cannot be read. Old code: exit 1 "retrain failed". Now: exit 3 and the command to check."""
    config = _config(servers, "mlflow-at-promote")
    kill = servers.kill_command("mlflow")
    done = servers.retrain(
        servers.root / "work", config, "register-policy", kill, extra_env=SERVER_GONE
    )
    servers.ensure_running()
    assert done.returncode == 3, _outcome(done, servers)
    last = _last(done)
    assert last.startswith("decision=unknown champion=unknown: the registry could not be read")
    command = last.split("check the alias with ", 1)[1]
    assert command.startswith(f"curl -s '{servers.mlflow_url}/api/2.0/mlflow/")
    answer = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
    assert (
        answer.returncode == 0 and "alias" in answer.stdout.lower() or "error_code" in answer.stdout
    )
