"""Choosing the task runner from ``dask:``, and the ``retrain`` flow on a 2-worker LocalCluster."""

from __future__ import annotations

import logging
import warnings

import pytest

from flows.cluster import data_client, log_size_mib, select_task_runner, use_partitions
from flows.config import ConfigError, DaskConfig
from flows.retrain import run_retrain

pytest.importorskip("prefect_dask", reason="the dask extra is not installed")


def test_runner_by_mode_and_log_size(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"x" * 2**20)
    assert log_size_mib(tmp_path) == pytest.approx(1.0)
    assert select_task_runner(DaskConfig(mode="never"), 10_000.0) is None
    assert select_task_runner(DaskConfig(mode="auto", min_log_mib=2.0), 1.0) is None


def test_partitioned_path_by_config_and_format(tmp_path):
    (tmp_path / "a.parquet").write_bytes(b"x" * 2**20)
    (tmp_path / "a.csv").write_bytes(b"x")
    always = DaskConfig(mode="always")
    assert use_partitions(always, tmp_path) and use_partitions(always, tmp_path / "a.parquet")
    assert not use_partitions(always, tmp_path / "a.csv")  # CSV logs are read whole
    assert not use_partitions(DaskConfig(mode="always", partitioned=False), tmp_path)
    assert not use_partitions(DaskConfig(mode="auto", min_log_mib=2.0), tmp_path)
    assert use_partitions(DaskConfig(mode="never", scheduler_address="tcp://h:1"), tmp_path)


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
            gate={"min_ess": 20, "seed": 0},  # one draw replayed on both paths
            tracking={
                "uri": f"sqlite:///{store / 'mlflow.db'}",
                "artifact_location": str(store / "mlartifacts"),
                "registered_model": f"poem-{mode}",
                "experiment": f"dask-{mode}",
            },
            dask={"mode": mode, "n_workers": 2, "memory_limit": "2GiB", "partitioned": False},
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


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_retrain_on_partitions_equals_in_memory(tmp_path, digits_log, write_config):
    """Validate, split, search, train and gate on partitions: same outcome as in memory."""
    import pyarrow.parquet as pq

    from poem.io.log_format import log_to_table

    table = log_to_table(digits_log)
    path = tmp_path / "log.parquet"
    edges = [0, 100, 100, 437, 438, table.num_rows]  # uneven row groups, one empty
    with pq.ParquetWriter(path, table.schema) as writer:
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            writer.write_table(table.slice(a, b - a))
    results = {}
    for mode in ("never", "always"):
        store = tmp_path / mode
        store.mkdir()
        config = write_config(
            path,
            gate={"min_ess": 20, "seed": 0},  # one draw replayed on both paths
            tracking={
                "uri": f"sqlite:///{store / 'mlflow.db'}",
                "artifact_location": str(store / "mlartifacts"),
                "registered_model": f"poem-{mode}",
                "experiment": f"partitions-{mode}",
            },
            search={"grid": {"variance_scale": [0.0, 0.01, 0.1]}, "max_workers": 2},
            dask={"mode": mode, "n_workers": 2, "memory_limit": "2GiB"},
        )
        results[mode] = run_retrain(config)
    memory, partitions = results["never"], results["always"]
    assert partitions.decision == memory.decision, partitions.reasons
    assert partitions.best_params == memory.best_params
    assert memory.best_params["temperature"] in (1.0, 0.5, 0.25, 0.125, 0.0625)  # chosen per fit
    assert partitions.n_rows == memory.n_rows == digits_log.n_rows
    assert partitions.metrics.keys() == memory.metrics.keys()
    for key, value in memory.metrics.items():
        assert partitions.metrics[key] == pytest.approx(value, rel=1e-10, abs=1e-12), key

    # a second round against each path's champion v1, fits pinned near w = 0 (μ = 10⁶): both
    # paths select the champion re-tempered (scored on the workers / in memory) and agree
    assert memory.decision == "promoted", memory.reasons
    again = {}
    for mode in ("never", "always"):
        store = tmp_path / mode
        config = write_config(
            path,
            gate={"min_ess": 20, "seed": 0},  # one draw replayed on both paths
            tracking={
                "uri": f"sqlite:///{store / 'mlflow.db'}",
                "artifact_location": str(store / "mlartifacts"),
                "registered_model": f"poem-{mode}",
                "experiment": f"partitions-{mode}",
            },
            search={"grid": {"variance_scale": [0.0, 0.01, 0.1]}, "max_workers": 2},
            dask={"mode": mode, "n_workers": 2, "memory_limit": "2GiB"},
            training={
                "params": {
                    "solver": "lbfgs",
                    "variance_penalty": "calibrated",
                    "max_iter": 40,
                    "random_state": 0,
                    "l2_penalty": 1.0e6,
                }
            },
        )
        again[mode] = run_retrain(config)
    memory, partitions = again["never"], again["always"]
    assert memory.challenger_kind == partitions.challenger_kind == "champion_retempered"
    assert partitions.best_params == memory.best_params
    assert partitions.decision == memory.decision and partitions.previous_champion_version == "1"
    for key, value in memory.metrics.items():
        assert partitions.metrics[key] == pytest.approx(value, rel=1e-8, abs=1e-10), key


def test_data_client_logs_to_the_file_not_the_terminal(tmp_path, capfd):
    """Dask's INFO lines and warnings (this process's and the workers') go to the log file."""
    import dask
    import numpy as np

    log_file = tmp_path / "dask.log"
    distributed_logger = logging.getLogger("distributed")
    handlers, propagate = distributed_logger.handlers[:], distributed_logger.propagate
    warnings.simplefilter("ignore")  # as the CLI leaves the filters (quiet())
    big = np.zeros(200_000)  # 1.6 MB argument: a large graph at a 1 MB threshold
    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": "1MB"}),
        data_client(
            DaskConfig(mode="always", n_workers=2, memory_limit="1GiB"), log_file=log_file
        ) as client,
    ):
        worker_log = logging.getLogger("distributed.worker").warning
        # a worker's records reach the client before the task's result (one ordered stream)
        client.submit(worker_log, "poem-test: a worker's warning", pure=False).result()
        client.submit(warnings.warn, "poem-test: warnings.warn on a worker", pure=False).result()
        assert client.submit(len, big, pure=False).result() == big.size
        with pytest.raises(ValueError, match="invalid literal for int"):
            client.submit(int, "x", pure=False).result()  # a task's error reaches the caller
    out, err = capfd.readouterr()
    assert "distributed" not in out + err and "poem-test" not in out + err, out + err
    content = log_file.read_text()
    assert "INFO distributed.scheduler: Register worker" in content
    assert "WARNING distributed.worker [worker tcp://" in content
    assert "poem-test: a worker's warning" in content
    assert "UserWarning: poem-test: warnings.warn on a worker" in content
    assert "distributed.warnings: UserWarning: Sending large graph of size" in content
    # the process's logging is as before the block
    assert distributed_logger.handlers == handlers
    assert distributed_logger.propagate == propagate
