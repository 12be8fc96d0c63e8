"""How arguments travel in ``ClusterPartitions`` (poem._dask): scattered once, never in a graph."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from poem.data import LoggedBandit
from poem.log_rows import _policy_rows, policy_rows

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")
dask = pytest.importorskip("dask")

from poem._dask import SCATTER_BYTES, ClusterPartitions  # noqa: E402 - after the skip
from poem._dask_cluster import local_client  # noqa: E402

pytestmark = pytest.mark.xdist_group("scatter-cluster")  # one LocalCluster (module fixture) per run

N_PARTS, N_ROWS, TAKEN = 4, 30_000, 20_000  # 20,000 row positions: 160 kB per partition
THRESHOLD = "100kB"  # large-graph warning threshold of the tests (default 10 MB)


def _log(k: int) -> LoggedBandit:
    rng = np.random.default_rng(k)
    return LoggedBandit(
        rng.normal(size=(N_ROWS, 3)),
        rng.integers(0, 4, N_ROWS),
        rng.random(N_ROWS),
        rng.uniform(0.1, 1.0, N_ROWS),
        loss_bounds=(0.0, 1.0),
        n_actions=4,
    )


@pytest.fixture(scope="module")
def client():
    c = local_client(n_workers=2, threads_per_worker=1, memory_limit="1GiB")
    yield c
    c.close()


@pytest.fixture(scope="module")
def logs():
    return [_log(k) for k in range(N_PARTS)]


class _Probabilities:
    """A large policy argument: the same π(yᵢ|xᵢ) on every partition's taken rows."""

    def __init__(self, probabilities: np.ndarray) -> None:
        self.probabilities = probabilities

    def log_action_probability_on(self, log: LoggedBandit) -> np.ndarray:
        return self.probabilities


def _rows(k: int) -> np.ndarray:
    return np.sort(np.random.default_rng(100 + k).choice(N_ROWS, TAKEN, replace=False))


def _large_graphs(record: list) -> list[str]:
    return [str(w.message).splitlines()[0] for w in record if "large graph" in str(w.message)]


def test_large_arguments_never_travel_in_the_graph(client, logs):
    items = client.scatter(logs)
    rows = [_rows(k) for k in range(N_PARTS)]
    policy = _Probabilities(np.linspace(0.1, 0.9, TAKEN))  # shared: 160 kB, every task
    assert rows[0].nbytes > SCATTER_BYTES and policy.probabilities.nbytes > SCATTER_BYTES
    with (
        dask.config.set({"distributed.admin.large-graph-warning-threshold": THRESHOLD}),
        warnings.catch_warnings(record=True) as record,
    ):
        warnings.simplefilter("always")
        # the arguments as a plain client.map sends them: a large graph (the test's premise)
        plain = client.map(_policy_rows, items, rows, policies=(policy,), pure=False)
        assert _large_graphs(record), "the plain graph should exceed the threshold"
        del plain
        record.clear()
        parts = ClusterPartitions(client, list(items))
        for _ in range(3):  # e.g. three search trials scoring the same validation rows
            view = policy_rows(parts, rows, (policy,))
    assert _large_graphs(record) == []
    expected = np.concatenate([logs[k].losses[rows[k]] for k in range(N_PARTS)])
    np.testing.assert_array_equal(view.losses, expected)
    np.testing.assert_array_equal(view.probabilities[0], np.tile(policy.probabilities, N_PARTS))

    # each partition's rows were scattered once, to the worker holding that partition
    held = client.has_what()
    where = {key: w for w, keys in held.items() for key in keys}
    scattered = {key: w for key, w in where.items() if str(key).startswith("ndarray-")}
    assert len(scattered) == N_PARTS
    partitions_per_worker = sorted(
        sum(1 for i in items if where[i.key] == w) for w in held if held[w]
    )
    rows_per_worker = sorted(sum(1 for w2 in scattered.values() if w2 == w) for w in held)
    assert sorted(n for n in rows_per_worker if n) == [n for n in partitions_per_worker if n]


def test_consume_forgets_the_scattered_arguments(client, logs):
    items = client.scatter(logs)
    parts = ClusterPartitions(client, list(items))
    rows = [_rows(k) for k in range(N_PARTS)]
    kept = parts.map(_policy_rows, rows, policies=(), consume=True)
    out = kept.map(
        len, gather=True
    )  # losses, propensities, bounds, probabilities, (timestamps, ids, TV)
    assert out == [5] * N_PARTS and len(parts) == 0
    del kept, items
    distributed.wait(client.map(len, [[1]] * 2, pure=False))  # a round trip: releases are sent
    assert _scattered_arrays(client) == 0


def _scattered_arrays(client) -> int:
    return sum(str(k).startswith("ndarray-") for keys in client.has_what().values() for k in keys)


def test_small_arguments_stay_in_the_task(client, logs):
    parts = ClusterPartitions(client, client.scatter(logs[:2]))
    before = _scattered_arrays(client)
    rows = [np.arange(3), np.arange(2)]  # 24 and 16 bytes: no scatter round trip
    view = policy_rows(parts, rows)
    np.testing.assert_array_equal(
        view.propensities, np.concatenate([logs[0].propensities[:3], logs[1].propensities[:2]])
    )
    assert _scattered_arrays(client) == before
