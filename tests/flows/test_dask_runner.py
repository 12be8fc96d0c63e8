"""Choosing the task runner from ``dask:``, and the ``retrain`` flow on a 2-worker LocalCluster."""

from __future__ import annotations

import pytest

from flows.config import ConfigError, DaskConfig
from flows.dask_runner import log_size_mib, run_retrain, select_task_runner

pytest.importorskip("prefect_dask", reason="the dask extra is not installed")


def test_runner_by_mode_and_log_size(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"x" * 2**20)
    assert log_size_mib(tmp_path) == pytest.approx(1.0)
    assert select_task_runner(DaskConfig(mode="never"), 10_000.0) is None
    assert select_task_runner(DaskConfig(mode="auto", min_log_mib=2.0), 1.0) is None


def test_cluster_without_prefect_server_is_a_config_error():
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        with pytest.raises(ConfigError, match=r"dask: .*PREFECT_API_URL is not set"):
            select_task_runner(DaskConfig(mode="auto", min_log_mib=0.0), 1.0)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_retrain_on_a_local_cluster_equals_the_thread_pool(
    tmp_path, logs_dir, write_config, monkeypatch
):
    from prefect.settings import PREFECT_TASKS_REFRESH_CACHE, temporary_settings
    from prefect_dask import DaskTaskRunner

    # both runs compute their trials (no cache hit): the flow here, the workers via the env
    monkeypatch.setenv("PREFECT_TASKS_REFRESH_CACHE", "true")

    runner = select_task_runner(DaskConfig(mode="always", n_workers=2), 0.0)
    assert isinstance(runner, DaskTaskRunner)
    assert runner.cluster_kwargs["env"]["PREFECT_API_URL"].startswith("http")

    results = {}
    for mode in ("never", "always"):
        store = tmp_path / mode
        config = write_config(
            logs_dir / "good",
            tracking={
                "uri": f"sqlite:///{store / 'mlflow.db'}",
                "artifact_location": str(store / "mlartifacts"),
                "registered_model": f"poem-{mode}",
                "experiment": f"dask-{mode}",
            },
            dask={"mode": mode, "n_workers": 2, "memory_limit": "2GiB"},
        )
        store.mkdir()
        with temporary_settings(updates={PREFECT_TASKS_REFRESH_CACHE: True}):
            results[mode] = run_retrain(config)
    threads, cluster = results["never"], results["always"]
    assert cluster.decision == threads.decision, "\n".join(
        [
            *threads.reasons,
            "--",
            *cluster.reasons,
            str(threads.best_params),
            str(cluster.best_params),
        ]
    )
    assert cluster.best_params == threads.best_params
    assert cluster.metrics == pytest.approx(threads.metrics, rel=1e-12)
    assert cluster.n_rows == threads.n_rows
