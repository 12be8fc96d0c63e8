"""The scheduled deployment: a missing log folder is refused at deploy time, and a run with
nothing to train on ends Failed (not Completed with a warning nobody reads)."""

from __future__ import annotations

import pytest

from deploy.deployments import NoCompletePartitionsError, main, scheduled_retrain

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory):
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    with temporary_settings(
        updates={PREFECT_LOCAL_STORAGE_PATH: tmp_path_factory.mktemp("prefect-storage")}
    ):
        with prefect_test_harness(server_startup_timeout=90):
            yield


def test_a_missing_logs_folder_is_refused_at_deploy_time(tmp_path, capsys):
    config = tmp_path / "mlflow.yml"
    config.write_text("data: {path: decisions}\n")
    assert main(["--config", str(config), "--logs", str(tmp_path / "decisons")]) == 2
    assert capsys.readouterr().err == f"error: --logs: {tmp_path / 'decisons'} does not exist\n"
    (tmp_path / "file.parquet").write_bytes(b"")
    assert main(["--config", str(config), "--logs", str(tmp_path / "file.parquet")]) == 2
    assert "is not a folder of date= partitions" in capsys.readouterr().err


@pytest.mark.parametrize("layout", ["empty", "only-today", "absent"])
def test_a_run_without_a_complete_partition_ends_failed(prefect_server, tmp_path, layout):
    import datetime as dt

    root = tmp_path / "decisions"
    if layout != "absent":
        root.mkdir()
    if layout == "only-today":
        today = dt.datetime.now(dt.UTC).date().isoformat()
        (root / f"date={today}").mkdir()
        (root / f"date={today}" / "part-0.parquet").write_bytes(b"")
    state = scheduled_retrain(str(tmp_path / "mlflow.yml"), str(root), return_state=True)
    assert state.is_failed(), state
    with pytest.raises(NoCompletePartitionsError) as info:
        state.result()
    what = "does not exist" if layout == "absent" else "holds no complete date= partition"
    assert str(info.value) == (
        f"{root} {what} (today's UTC partition counts only with include_today=true); "
        "nothing was retrained"
    )
