"""The registry protocol under concurrency and kills, against a real MLflow sqlite store."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from flows.config import TrackingConfig
from flows.integrity import verify_model_version
from flows.registry import (
    IncompatibleChampionError,
    LoggedPolicy,
    PromotionConflict,
    PromotionRefused,
    RollbackError,
    alias_version,
    check_champion_compatible,
    load_version_policy,
    log_policy_model,
    promote,
    register_version,
    repair_promotions,
    rollback,
)
from flows.registry_lock import RegistryLockTimeout, lock_name
from flows.tracking import (
    client_for,
    ensure_experiment,
    reap_stale_runs,
    start_run,
    tracking_uri_scope,
)
from poem.io.artifact import ArtifactError
from poem.policies import StochasticPolicy, make_family

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def empty_store(tmp_path_factory) -> Path:
    """A migrated, empty sqlite store, created once (creation takes seconds on a busy box)."""
    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    client_for(TrackingConfig(uri=f"sqlite:///{path}"))
    return path


@pytest.fixture
def tracking(tmp_path, monkeypatch, empty_store) -> TrackingConfig:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    shutil.copyfile(empty_store, tmp_path / "mlflow.db")
    return TrackingConfig(
        uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        artifact_location=(tmp_path / "mlartifacts").as_uri(),
        experiment="registry",
    )


@pytest.fixture
def store(tracking):
    """A client, an experiment, and ``add(tags, n_features=3) -> version`` registering a policy."""
    client = client_for(tracking)
    experiment_id = ensure_experiment(client, tracking)

    def add(tags: dict, status: str = "FINISHED", real: bool = False) -> str:
        """Register a version: a real logged model, or (fast) a placeholder source."""
        run_id = start_run(client, experiment_id, "unit")
        if real:
            family = make_family("discrete", 3, 2)
            policy = StochasticPolicy(family, np.full(family.coef_shape, 0.5))
            logged = log_policy_model(client, tracking, experiment_id, run_id, policy)
        else:
            placeholder = {"policy_family": "discrete", "n_features": "3", "n_actions": "2"}
            logged = LoggedPolicy(
                "file:///nonexistent/model", None, "file:///nonexistent", placeholder
            )
        version = register_version(client, tracking, logged, run_id, tags)
        client.set_terminated(run_id, status)
        return version

    return client, experiment_id, add


def gated(against: str = "logging-policy") -> dict:
    return {"gate_decision": "promoted", "gated_against": against, "promotion": "pending"}


REJECTED = {"gate_decision": "rejected", "gate_reasons": "failed: improvement"}


def _aliases(client, tracking):
    return {
        a: alias_version(client, tracking, a)
        for a in ("champion", "previous-champion", "challenger")
    }


def test_concurrent_first_use_of_a_fresh_store_does_not_corrupt_it(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    start = time.time() + 8  # every process imports mlflow first, then they start together
    code = (
        "import sys, time\n"
        "from flows.config import TrackingConfig\n"
        "from flows.tracking import client_for, ensure_experiment\n"
        f"while time.time() < {start}: time.sleep(0.001)\n"
        f"t = TrackingConfig(uri={uri!r}, experiment='race')\n"
        "ensure_experiment(client_for(t), t)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [
        subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=180)[0].strip() for p in procs]
    assert outputs == ["ok", "ok"], outputs
    client = client_for(TrackingConfig(uri=uri))
    assert [e.name for e in client.search_experiments() if e.name == "race"] == ["race"]


def test_promote_is_a_compare_and_set_on_the_champion(store, tracking):
    client, _, add = store
    v1, v2 = add(gated()), add(gated())  # both gated against the logging policy
    assert promote(client, tracking, v1) is None
    with pytest.raises(PromotionConflict, match=r"gated against logging-policy but .* is now 1"):
        promote(client, tracking, v2)  # the lost update of two concurrent runs
    assert _aliases(client, tracking)["champion"] == "1"
    assert client.get_model_version("poem-policy", v2).tags["promotion"] == "superseded"
    assert client.get_model_version("poem-policy", v1).tags["promotion"] == "done"
    v3 = add(gated(against="1"))
    assert promote(client, tracking, v3) == "1"
    assert _aliases(client, tracking) == {
        "champion": "3",
        "previous-champion": "1",
        "challenger": "3",
    }
    assert client.get_model_version("poem-policy", v3).tags["replaced_champion"] == "1"


def test_a_rejected_version_is_never_promoted(store, tracking):
    client, _, add = store
    v1 = add(REJECTED)
    with pytest.raises(PromotionRefused, match=r"version 1 .* rejected by the gate"):
        promote(client, tracking, v1)
    assert _aliases(client, tracking)["champion"] is None


def test_repair_finishes_a_promotion_killed_after_the_commit_point(store, tracking):
    client, _, add = store
    v1 = add(gated(), real=True)  # rollback verifies its files
    promote(client, tracking, v1)
    v2 = add(gated(against="1"))
    # killed right after moving the alias: replaced tag set, previous-champion not yet moved
    client.set_model_version_tag("poem-policy", v2, "replaced_champion", "1")
    client.set_registered_model_alias("poem-policy", "champion", v2)
    assert repair_promotions(client, tracking) == ["2"]
    assert _aliases(client, tracking)["previous-champion"] == "1"
    assert client.get_model_version("poem-policy", v2).tags["promotion"] == "done"
    assert rollback(client, tracking).champion == "1"


def test_repair_closes_a_promotion_killed_before_the_commit_point(store, tracking):
    client, _, add = store
    v1 = add(gated())
    promote(client, tracking, v1)
    v2 = add(gated(against="1"), status="KILLED")
    running = add(gated(against="1"), status="RUNNING")  # a live concurrent run: left alone
    client.set_registered_model_alias("poem-policy", "previous-champion", v1)  # old bug state
    assert repair_promotions(client, tracking) == [v2]
    tags = client.get_model_version("poem-policy", v2).tags
    assert tags["promotion"] == "interrupted" and tags["gate_decision"] == "promoted"
    assert client.get_model_version("poem-policy", running).tags["promotion"] == "pending"
    aliases = _aliases(client, tracking)
    assert aliases["champion"] == "1" and aliases["previous-champion"] is None


def test_rollback_refuses_a_rejected_version_and_says_the_direction(store, tracking):
    client, _, add = store
    v1 = add(gated(), real=True)
    promote(client, tracking, v1)
    v2 = add(REJECTED, real=True)
    v3 = add(gated(against="1"), real=True)
    promote(client, tracking, v3)
    with pytest.raises(RollbackError, match=r"version 2 .* rejected by the gate.*--force"):
        rollback(client, tracking, "2")
    assert _aliases(client, tracking)["champion"] == "3"
    with pytest.raises(RollbackError, match=r"no version '9'"):
        rollback(client, tracking, "9")
    result = rollback(client, tracking, v2, force=True)
    assert (result.demoted, result.champion, result.direction) == ("3", "2", "back")
    result = rollback(client, tracking, v3)
    assert (result.demoted, result.champion, result.direction) == ("2", "3", "forward")
    aliases = _aliases(client, tracking)
    assert aliases["champion"] == "3" and aliases["previous-champion"] == "1"


def test_rollback_command_refuses_a_rejected_version(store, tracking, tmp_path, capsys):
    import yaml

    from flows.cli import main

    client, _, add = store
    promote(client, tracking, add(gated(), real=True))
    add(REJECTED, real=True)
    config = tmp_path / "mlflow.yml"
    config.write_text(yaml.safe_dump({"tracking": tracking.model_dump()}))
    assert main(["rollback", "--config", str(config), "--to", "2"]) == 1
    assert "rejected by the gate" in capsys.readouterr().err
    assert main(["rollback", "--config", str(config), "--to", "2", "--force"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["poem-policy: champion moved forward from version 1 to version 2", "champion=2"]


def test_stale_running_runs_are_closed_as_killed(store, tracking):
    client, experiment_id, _ = store
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = start_run(client, experiment_id, "killed")
    client.set_tag(stale, "poem.pid", str(dead.pid))  # its owner process is gone
    alive = start_run(client, experiment_id, "this process")
    from flows.tracking import recent_runs

    status = {r["run_id"]: r["status"] for r in recent_runs(client, tracking)}
    assert (status[stale], status[alive]) == ("KILLED?", "RUNNING")  # compare, before reaping
    assert reap_stale_runs(client, experiment_id) == [stale]
    assert client.get_run(stale).info.status == "KILLED"
    assert "ended without closing the run" in client.get_run(stale).data.tags["poem.stale"]
    assert client.get_run(alive).info.status == "RUNNING"
    decisions = {r["run_id"]: r["decision"] for r in recent_runs(client, tracking)}
    assert decisions[stale] == "killed"  # and `compare` shows it so


def test_incompatible_champion_is_found_from_its_tags(store, tracking):
    client, _, add = store
    assert check_champion_compatible(client, tracking, "discrete", 3) is None
    promote(client, tracking, add(gated()))
    assert check_champion_compatible(client, tracking, "discrete", 3) == "1"
    with pytest.raises(
        IncompatibleChampionError,
        match=r"version 1\) is a discrete policy over 3 features, "
        r"but the log is discrete with 4 features",
    ):
        check_champion_compatible(client, tracking, "discrete", 4)
    with pytest.raises(IncompatibleChampionError, match=r"the log is multilabel"):
        check_champion_compatible(client, tracking, "multilabel", 3)


def _model_folder(client, version: str) -> Path:
    from urllib.parse import urlparse

    mv = client.get_model_version("poem-policy", version)
    return Path(urlparse(mv.tags["model_location"]).path)


def test_registered_digests_catch_edits_in_the_artifact_store(store, tracking, tmp_path):
    client, _, add = store
    version = add(gated(), real=True)
    assert "MLFLOW_TRACKING_URI" not in os.environ  # logging the model leaves no override behind
    assert load_version_policy(client, tracking, version).temperature == 1.0
    assert verify_model_version(client, tracking, version, tmp_path / "ok").is_dir()
    folder = _model_folder(client, version)
    spec_path = folder / "artifacts" / "policy" / "policy.json"
    spec = json.loads(spec_path.read_text())
    spec["temperature"] = 9.0
    spec_path.write_text(json.dumps(spec))
    with pytest.raises(ArtifactError, match="modified after registration"):
        load_version_policy(client, tracking, version)
    import mlflow

    with tracking_uri_scope(tracking.uri):  # the served model checks the registry's digest too
        with pytest.raises(Exception, match="cannot load the served policy.*after registration"):
            mlflow.pyfunc.load_model(f"models:/poem-policy/{version}")

    other = add(gated(), real=True)
    code = _model_folder(client, other) / "code" / "poem" / "__init__.py"
    code.write_text(code.read_text() + "\nimport os  # injected\n")
    with pytest.raises(ArtifactError, match=r"model code .* differs .* refusing to import it"):
        verify_model_version(client, tracking, other, tmp_path / "bad")


def test_compare_metrics_maps_older_estimator_specific_keys():
    from flows.tracking import compare_metrics

    new = {"challenger_risk": 0.2, "champion_risk": 0.4, "risk_difference_ucb": -0.1}
    assert compare_metrics(new)["risk_difference_ucb"] == -0.1
    old = {
        "challenger_snips_risk": 0.3,
        "champion_snips_risk": 0.5,
        "difference_clipped_ips_risk_ucb": -0.05,
    }
    got = compare_metrics(old)
    assert (got["challenger_risk"], got["champion_risk"]) == (0.3, 0.5)
    assert got["risk_difference_ucb"] == -0.05


def test_promotion_waits_for_the_registry_lock_held_by_another_machine(store, tracking):
    """The compare-and-set is serialized in the registry itself, not by a file of this host."""
    client, _, add = store
    v1 = add(gated())
    holder = {"poem.host": "other-host", "poem.pid": "4242", "poem.pid_start": "1"}
    client.create_registered_model(lock_name("poem-policy"), tags=holder)  # a live holder
    with pytest.raises(RegistryLockTimeout, match=r"held by process 4242 on host other-host"):
        promote(client, tracking, v1, lock_timeout=0.3)
    assert _aliases(client, tracking)["champion"] is None
    client.delete_registered_model(lock_name("poem-policy"))  # the holder released it
    assert promote(client, tracking, v1) is None
    assert _aliases(client, tracking)["champion"] == "1"
    with pytest.raises(Exception, match="RESOURCE_DOES_NOT_EXIST|not found"):
        client.get_registered_model(lock_name("poem-policy"))  # released after promoting


def test_a_lock_released_while_the_store_words_already_exists_is_taken(store, tracking):
    """MLflow's create re-reads the model after the unique constraint fails, to word its
    error; when the holder releases in between, the waiter gets RESOURCE_DOES_NOT_EXIST (seen
    with two concurrent retrains on a PostgreSQL-backed server): that means "free", not an
    error."""
    from mlflow.exceptions import MlflowException

    client, _, add = store
    v1 = add(gated())
    name = lock_name("poem-policy")
    client.create_registered_model(name, tags={"poem.host": "other-host", "poem.pid": "1"})

    class Racing(type(client)):
        raced = False

        def create_registered_model(self, model, *args, **kwargs):
            if model == name and not Racing.raced:  # the interleaving, replayed in order:
                Racing.raced = True
                with pytest.raises(MlflowException, match="already exists"):
                    super().create_registered_model(model, *args, **kwargs)  # the insert fails
                self.delete_registered_model(model)  # the holder releases
                self.get_registered_model(model)  # the store's re-read: RESOURCE_DOES_NOT_EXIST
            return super().create_registered_model(model, *args, **kwargs)

    racing = Racing(tracking.uri, tracking.uri)
    with pytest.raises(MlflowException, match="not found"):
        Racing(tracking.uri, tracking.uri).get_registered_model(name + ".absent")
    assert promote(racing, tracking, v1, lock_timeout=5) is None
    assert Racing.raced and _aliases(client, tracking)["champion"] == "1"


def test_a_lock_left_by_a_killed_process_of_this_host_is_broken(store, tracking):
    client, _, add = store
    v1 = add(gated())
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holder = {"poem.host": socket.gethostname(), "poem.pid": str(dead.pid), "poem.pid_start": "1"}
    client.create_registered_model(lock_name("poem-policy"), tags=holder)
    assert promote(client, tracking, v1, lock_timeout=5) is None
    assert _aliases(client, tracking)["champion"] == "1"


# issue 37 item 1: a champion replaced without being compared to it


def test_a_deleted_champion_is_never_replaced_by_a_gate_against_the_logger(store, tracking):
    """It gated the next challenger against the logging policy and promoted it."""
    from flows.registry import ChampionMissingError

    client, _, add = store
    promote(client, tracking, add(gated()))
    promote(client, tracking, add(gated(against="1")))
    client.delete_model_version("poem-policy", "2")  # MLflow drops the champion alias with it
    assert alias_version(client, tracking, "champion") is None
    with pytest.raises(ChampionMissingError) as info:
        check_champion_compatible(client, tracking, "discrete", 3)
    assert str(info.value) == (
        "'poem-policy' had a 'champion' (version 2 was the last 'champion') but none "
        "resolves now; refusing to gate against the logging policy. Restore one "
        "(poem-pipeline rollback --to N), or retrain --start-over-from-logger (recorded on "
        "the new version)"
    )
    v3 = add(gated())  # gated against the logging policy (a run that raced the deletion)
    with pytest.raises(PromotionConflict, match=r"had a 'champion' \(version 2 was the last"):
        promote(client, tracking, v3)
    assert alias_version(client, tracking, "champion") is None
    assert client.get_model_version("poem-policy", v3).tags["promotion"] == "superseded"

    start_over = tracking.model_copy(update={"start_over_from_logger": True})
    assert check_champion_compatible(client, start_over, "discrete", 3) is None
    v4 = add({**gated(), "started_over_from_logger": "tracking.start_over_from_logger: …"})
    assert promote(client, start_over, v4) is None
    assert alias_version(client, tracking, "champion") == v4


def test_a_champion_alias_naming_a_missing_version_is_refused(store, tracking):
    import sqlite3

    from flows.registry import ChampionMissingError, champion_history

    client, _, add = store
    add(REJECTED)  # versions, none ever champion: the logging policy is the champion
    assert champion_history(client, tracking) is None
    assert check_champion_compatible(client, tracking, "discrete", 3) is None
    database = tracking.uri.removeprefix("sqlite:///")
    with sqlite3.connect(database) as db:  # what a hand-edited or half-restored store holds
        db.execute(
            "INSERT INTO registered_model_aliases (alias, version, name) "
            "VALUES ('champion', 9, 'poem-policy')"
        )
    with pytest.raises(ChampionMissingError, match=r"alias points at version 9, which does not"):
        check_champion_compatible(client, tracking, "discrete", 3)


# issue 37 item 2: rollback and champion load verify files and code


def _rollback_config(tracking, tmp_path) -> Path:
    import yaml

    config = tmp_path / "mlflow.yml"
    config.write_text(yaml.safe_dump({"tracking": tracking.model_dump()}))
    return config


def test_rollback_refuses_a_deleted_or_edited_model(store, tracking, tmp_path, capsys):
    """It exited 0 and moved champion onto a version serving then failed on, or ran edited
    code from."""
    from flows.cli import main

    client, _, add = store
    v1 = add(gated(), real=True)
    promote(client, tracking, v1)
    v2 = add(gated(against="1"), real=True)
    promote(client, tracking, v2)
    config = _rollback_config(tracking, tmp_path)
    code_file = _model_folder(client, v1) / "pyfunc.py"
    code_file.write_text(code_file.read_text() + "\nimport os  # injected\n")
    capsys.readouterr()
    assert main(["rollback", "--config", str(config)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "error: the rollback target (version 1 of 'poem-policy'): model code pyfunc.py in "
    )
    assert line.endswith(
        "refusing to import it. Restore the folder from a backup, or use "
        "another version; 'champion' did not move"
    )
    shutil.rmtree(_model_folder(client, v1))
    assert main(["rollback", "--config", str(config)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"error: the rollback target (version 1 of 'poem-policy') has no model files: "
        f"{_model_folder(client, v1)} is missing; restore it from a backup, or move 'champion' "
        "to another version (poem-pipeline rollback --to N); 'champion' did not move"
    )
    assert _aliases(client, tracking)["champion"] == "2"


def test_the_champion_is_verified_before_it_is_loaded(store, tracking):
    """retrain gated against a champion whose pyfunc.py was edited, and exited 0."""
    client, _, add = store
    version = add(gated(), real=True)
    promote(client, tracking, version)
    assert load_version_policy(client, tracking, version).temperature == 1.0
    mlmodel = _model_folder(client, version) / "MLmodel"
    mlmodel.write_text(mlmodel.read_text().replace("streamable: false", "streamable: true"))
    from flows.tasks.gate import load_champion

    with pytest.raises(ArtifactError) as info:
        load_champion.fn(tracking)  # the flow's load-champion task, before the gate
    assert str(info.value).startswith(
        "the champion (version 1 of 'poem-policy'): model code MLmodel in file://"
    )
    assert len(str(info.value).splitlines()) == 1


def test_rollback_makes_a_version_champion_again_after_the_champion_was_deleted(
    store, tracking, tmp_path, capsys
):
    from flows.cli import main

    client, _, add = store
    promote(client, tracking, add(gated(), real=True))
    promote(client, tracking, add(gated(against="1")))
    client.delete_model_version("poem-policy", "2")
    config = _rollback_config(tracking, tmp_path)
    capsys.readouterr()
    assert main(["rollback", "--config", str(config), "--to", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "poem-policy: champion set to version 1 (no version was champion)",
        "champion=1",
    ]
    assert check_champion_compatible(client, tracking, "discrete", 3) == "1"


# issue 37 item 8: rollback on a corrupt store


def test_rollback_on_a_corrupt_store_is_one_line(tracking, tmp_path, capsys):
    """It printed a traceback."""
    from flows.cli import main

    config = _rollback_config(tracking, tmp_path)
    database = Path(tracking.uri.removeprefix("sqlite:///"))
    data = bytearray(database.read_bytes())
    data[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    database.write_bytes(bytes(data))
    assert main(["rollback", "--config", str(config)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: the tracking store {database} is corrupt (sqlite quick_check")


def test_a_failed_model_upload_leaves_no_model_folder(store, tracking):
    """Issue 37 item 8: MLflow marks a model FAILED itself when its upload fails (a full disk),
    and the clean-up deleted only PENDING ones: the half-written folder stayed."""
    from flows.store_faults import discard_unfinished_models

    client, experiment_id, _ = store
    run_id = start_run(client, experiment_id, "failed upload")
    model = client.create_logged_model(experiment_id, name="policy", source_run_id=run_id)
    folder = Path(model.artifact_location.removeprefix("file://"))
    (folder / "code").mkdir(parents=True)
    (folder / "code" / "half-written.py").write_bytes(b"\0" * 4096)
    client.finalize_logged_model(model.model_id, "FAILED")  # what log_model does on an error
    ready = client.create_logged_model(experiment_id, name="policy", source_run_id=run_id)
    Path(ready.artifact_location.removeprefix("file://")).mkdir(parents=True)
    client.finalize_logged_model(ready.model_id, "READY")
    assert discard_unfinished_models(client, experiment_id, run_id) == [model.model_id]
    assert not folder.parent.exists()
    assert Path(ready.artifact_location.removeprefix("file://")).is_dir()
    assert str(client.get_logged_model(model.model_id).status).endswith("FAILED")


# issue 37 item 2: the documented serving path verifies before it serves


def test_serve_refuses_an_edited_or_deleted_champion(store, tracking, tmp_path, capsys):
    """``mlflow models serve -m models:/poem-policy@champion`` ran an edited pyfunc.py."""
    from deploy.serve import free_port
    from flows.cli import main

    client, _, add = store
    promote(client, tracking, add(gated(), real=True))
    config = _rollback_config(tracking, tmp_path)
    code_file = _model_folder(client, "1") / "pyfunc.py"
    code_file.write_text(code_file.read_text() + "\nimport os  # injected\n")
    port = free_port()
    capsys.readouterr()
    assert main(["serve", "--config", str(config), "--port", str(port)]) == 1
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert line.startswith("error: the champion (version 1 of 'poem-policy'): model code ")
    assert "pyfunc.py in file://" in line and line.endswith("; nothing is served")
    assert "serving" not in captured.out
    shutil.rmtree(_model_folder(client, "1"))
    assert main(["serve", "--config", str(config), "--port", str(port)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: the champion (version 1 of 'poem-policy') has no model files")
    with socket.socket() as s:  # nothing was started on the port
        s.bind(("127.0.0.1", port))


@pytest.mark.slow
def test_serve_serves_the_verified_champion_and_stops_with_it(store, tracking, tmp_path):
    import http.client
    import signal

    import pandas as pd

    from deploy.serve import free_port, invocation_body

    client, _, add = store
    promote(client, tracking, add(gated(), real=True))
    config = _rollback_config(tracking, tmp_path)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve", "--config", str(config)]
        + ["--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read()
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                conn.request("GET", "/ping")
                if conn.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.5)
        frame = pd.DataFrame({"x_0": [0.1], "x_1": [0.2], "x_2": [0.3]})
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request(
            "POST",
            "/invocations",
            invocation_body(frame),
            {"Content-Type": "application/json"},
        )
        response = conn.getresponse()
        assert response.status == 200
        (prediction,) = json.loads(response.read())["predictions"]
        assert prediction["model_version"] == "1"
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    first = server.stdout.readline().strip()
    assert first == (
        f"serving version 1 of 'poem-policy' (files, code and policy verified) on "
        f"http://127.0.0.1:{port}"
    )
    with pytest.raises(ConnectionRefusedError):  # the scoring server stopped with the command
        socket.create_connection(("127.0.0.1", port), timeout=5)
