"""The scheduled deployment: a missing log folder is refused at deploy time by both routes (served
from this process, or deployed to a team's work pool), and a run with nothing to train on ends
Failed (not Completed with a warning nobody reads)."""

from __future__ import annotations

import pytest

from flows.deployments import ENTRYPOINT, NoCompletePartitionsError, main, scheduled_retrain

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("route", [[], ["--pool", "poem-pool"]], ids=["serve", "work-pool"])
def test_a_missing_logs_folder_is_refused_at_deploy_time(tmp_path, capsys, monkeypatch, route):
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "mlflow.yml"
    config.write_text("data: {path: decisions}\n")
    assert main(["--config", str(config), "--logs", str(tmp_path / "decisons"), *route]) == 2
    fix = " (the decision log writes it; pass --create to create it empty now)\n"
    assert capsys.readouterr() == (
        "",
        f"error: --logs: {tmp_path / 'decisons'} does not exist{fix}",
    )
    assert main(["--config", str(config), *route]) == 2  # data.path of the config: same check
    missing = tmp_path / "decisions"
    assert capsys.readouterr().err == f"error: data.path of {config}: {missing} does not exist{fix}"
    (tmp_path / "file.parquet").write_bytes(b"")
    assert main(["--config", str(config), "--logs", str(tmp_path / "file.parquet"), *route]) == 2
    assert "is not a folder of date= partitions" in capsys.readouterr().err


def test_the_work_pool_route_deploys_the_flow_with_its_schedule_and_parameters(
    prefect_harness, tmp_path, monkeypatch
):
    from prefect import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.settings import PREFECT_API_URL

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())  # for `prefect deploy`
    monkeypatch.chdir(tmp_path)
    (tmp_path / "decisions").mkdir()
    (tmp_path / "team.yml").write_text("data: {path: elsewhere}\n")
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="test-pool", type="process"))
        args = ["--config", "team.yml", "--logs", "decisions", "--pool", "test-pool"]
        assert main([*args, "--cron", "0 3 * * *", "--newest", "2"]) == 0
        deployment = client.read_deployment_by_name("scheduled-retrain/nightly-retrain")
    assert (deployment.entrypoint, deployment.work_pool_name) == (ENTRYPOINT, "test-pool")
    assert deployment.parameters == {
        "config_path": str(tmp_path / "team.yml"),
        "logs": str(tmp_path / "decisions"),
        "newest": 2,
    }
    assert [s.schedule.cron for s in deployment.schedules] == ["0 3 * * *"]


@pytest.mark.parametrize("layout", ["empty", "only-today", "absent"])
def test_a_run_without_a_complete_partition_ends_failed(prefect_harness, tmp_path, layout):
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
