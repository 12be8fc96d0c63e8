"""The tracking store misbehaving (issue 24, items 13, 14, 17, 18): corrupt, full, read-only, or
missing the champion's files. Real sqlite stores; full and read-only disks are real tmpfs mounts
(root only, as in CI; skipped otherwise)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
from pathlib import Path
from urllib.parse import urlparse

import pytest

from flows.cli import main
from flows.config import load_config
from flows.store_faults import is_permanent_store_error
from flows.tracking import client_for, ensure_experiment, start_run

MODEL = "poem-policy"


def _corrupt_runs_index(database: Path) -> None:
    """Overwrite the page of the runs table's primary-key index: reads still work, the
    file is damaged (what the issue's harness found: "malformed" yet used)."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        (root,) = db.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_runs_1'"
        ).fetchone()
        size = db.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(database.read_bytes())
    data[(root - 1) * size + 8 : root * size] = b"\xff" * (size - 8)
    database.write_bytes(bytes(data))


def _store_with_a_run(config: Path) -> str:
    tracking = load_config(config).tracking
    client = client_for(tracking)
    run_id = start_run(client, ensure_experiment(client, tracking), "a run")
    client.set_terminated(run_id, "FAILED")
    return run_id


def test_a_corrupt_store_is_refused_before_anything_is_written(
    tmp_path, logs_dir, write_config, capsys
):
    config = write_config(logs_dir / "good")
    _store_with_a_run(config)
    database = tmp_path / "mlflow.db"
    _corrupt_runs_index(database)
    before = database.read_bytes()
    capsys.readouterr()  # MLflow's lines while the test created the store
    assert main(["retrain", "--config", str(config)]) == 1  # exited 0 and registered v1
    captured = capsys.readouterr()
    assert len(captured.err.splitlines()) == 1, captured.err
    (line,) = captured.err.splitlines()
    assert line.startswith(f"error: the tracking store {database} is corrupt (sqlite quick_check: ")
    assert line.endswith(
        "nothing was written to it. Restore it from a backup, or set tracking.uri to a new store"
    )
    assert "retrain on" not in captured.out  # refused before the flow (and Prefect) started
    assert main(["compare", "--config", str(config)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "is corrupt (sqlite quick_check: " in line
    assert database.read_bytes() == before


@contextlib.contextmanager
def _tmpfs(folder: Path, size: str):
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)])
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_compare_reads_a_read_only_store(tmp_path, logs_dir, write_config, capsys):
    """It crashed with OSError: [Errno 30] Read-only file system: '…/mlflow.db.lock'."""
    config = write_config(logs_dir / "good")
    run_id = _store_with_a_run(config)
    view = tmp_path / "read-only"
    view.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root (CI runs as root)")
    subprocess.run(["mount", "--bind", str(tmp_path), str(view)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(view)], check=True)
        config.write_text(
            config.read_text().replace(str(tmp_path / "mlflow.db"), str(view / "mlflow.db"))
        )
        capsys.readouterr()
        assert main(["compare", "--config", str(config)]) == 0
        out = capsys.readouterr().out
        assert run_id[:8] in out and "failed" in out
        assert out.splitlines()[-1] == "aliases: champion=-, previous-champion=-, challenger=-"
    finally:
        subprocess.run(["umount", "-l", str(view)], check=False)


def _free_all_but(folder: Path, keep: int) -> None:
    stat = os.statvfs(folder)
    with open(folder / "filler", "wb") as fh:
        fh.write(b"\0" * (stat.f_bavail * stat.f_frsize - keep))


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_a_full_disk_fails_once_and_leaves_no_half_written_model(
    tmp_path, logs_dir, write_config, monkeypatch
):
    """Store and artifacts on a 16 MiB tmpfs; after v1, 400 KiB stay free: the model's upload
    (~800 KiB) fills the disk. Expected: not retried (one logged model, not one per attempt),
    the half-written folder removed, the model FAILED, the run FAILED, champion still v1."""
    from flows.retrain import retrain

    with _tmpfs(tmp_path / "disk", "16m") as disk:
        config = write_config(
            logs_dir / "good",
            tracking={
                "uri": f"sqlite:///{disk / 'mlflow.db'}",
                "artifact_location": str(disk / "mlartifacts"),
            },
        )
        assert retrain(config).champion_version == "1"
        _free_all_but(disk, 400 << 10)
        with pytest.raises(Exception) as info:  # noqa: PT011 - the disk decides which layer
            retrain(config, overrides={"search.grid.variance_scale": [0.01]})
        assert is_permanent_store_error(info.value), info.value
        assert ("database or disk is full" in str(info.value)) or (
            "No space left on device" in str(info.value)
        )
        failed_run = info.value.mlflow_run_id
        client = client_for(load_config(config).tracking)
        assert client.get_run(failed_run).info.status == "FAILED"
        experiment = client.get_experiment_by_name("test").experiment_id
        models = client.search_logged_models(
            [experiment], filter_string=f"source_run_id = '{failed_run}'"
        )
        assert [str(m.status).split(".")[-1] for m in models] == ["FAILED"]  # one attempt
        assert not Path(urlparse(models[0].artifact_location).path).parent.exists()
        assert [str(v.version) for v in client.search_model_versions(f"name='{MODEL}'")] == ["1"]
        assert str(client.get_model_version_by_alias(MODEL, "champion").version) == "1"


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_a_deleted_champion_folder_fails_before_training(tmp_path, logs_dir, write_config):
    """It failed after 119 s at load time; expected: before training, one line naming the
    champion version and the missing path."""
    import shutil

    from flows.integrity import MissingModelError
    from flows.retrain import retrain

    config = write_config(logs_dir / "good")
    assert retrain(config).champion_version == "1"
    client = client_for(load_config(config).tracking)  # the store retrain used (env included)
    location = client.get_model_version(MODEL, "1").tags["model_location"]
    folder = Path(urlparse(location).path)
    shutil.rmtree(folder)
    with pytest.raises(MissingModelError) as info:
        retrain(config, logs=logs_dir / "noise")
    assert str(info.value) == (
        f"the champion (version 1 of 'poem-policy') has no model files: {folder} is missing; "
        "restore it from a backup, or move 'champion' to another version "
        "(poem-pipeline rollback --to N)"
    )
    run = client.get_run(info.value.mlflow_run_id)
    assert run.info.status == "FAILED" and "validation_ips_risk" not in run.data.metrics
    experiment = client.get_experiment_by_name("test").experiment_id
    trials = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{run.info.run_id}'")
    assert trials == []  # no search, no training


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_a_deleted_champion_is_refused_until_retrain_starts_over_from_the_logger(
    tmp_path, logs_dir, write_config, capsys
):
    """Issue 37 item 1: after ``delete_model_version`` of the champion (MLflow drops the
    alias), retrain exited 0 "PROMOTED … vs champion (the logging policy)"."""
    config = write_config(logs_dir / "good")
    assert main(["retrain", "--config", str(config)]) == 0
    client = client_for(load_config(config).tracking)
    client.delete_model_version(MODEL, "1")
    capsys.readouterr()
    assert main(["retrain", "--config", str(config)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "error: retrain failed: ChampionMissingError: "
        "'poem-policy' had a 'champion' (version 1 was the last 'champion') but none "
        "resolves now; refusing to gate against the logging policy. Restore one "
        "(poem-pipeline rollback --to N), or retrain --start-over-from-logger (recorded on "
        "the new version)"
    )
    assert [str(v.version) for v in client.search_model_versions(f"name='{MODEL}'")] == []
    assert main(["retrain", "--config", str(config), "--start-over-from-logger"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "decision=promoted champion=2"
    tags = client.get_model_version(MODEL, "2").tags
    assert tags["gated_against"] == "logging-policy"
    assert tags["started_over_from_logger"] == (
        "tracking.start_over_from_logger: version 1 was the last 'champion'"
    )
