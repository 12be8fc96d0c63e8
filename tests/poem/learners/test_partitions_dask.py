"""The partition-set protocol on a 2-worker LocalCluster gives the local partitions' results."""

from __future__ import annotations

import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
from sklearn.exceptions import ConvergenceWarning

from poem.io.log_format import log_to_table
from poem.io.partitions import LocalPartitions, log_partitions, read_partition
from poem.learners.poem import POEM
from poem.learners.training_rows import TrainingRows, fit_on_rows
from poem.log_rows import policy_rows, split_partitioned

distributed = pytest.importorskip("distributed", reason="the dask extra is not installed")

BOUNDS = [0, 7, 7, 25, 26]  # row groups: 7, 0 (empty), 18, 1 and the rest


def write_row_groups(log, path, bounds=BOUNDS):
    """One Parquet file whose row groups are the given slices of the log."""
    table = log_to_table(log)
    edges = [*bounds, log.n_rows]
    with pq.ParquetWriter(path, table.schema) as writer:
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            writer.write_table(table.slice(a, b - a))
    return path


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def test_partitions_cover_the_log_with_an_empty_one(family_log, tmp_path):
    pieces = log_partitions(write_row_groups(family_log, tmp_path / "log.parquet"))
    assert [p.n_rows for p in pieces] == [7, 0, 18, 1, family_log.n_rows - 26]
    assert read_partition(pieces[1]) is None
    part = read_partition(pieces[2])
    np.testing.assert_array_equal(part.propensities, family_log.propensities[7:25])


@pytest.mark.slow
@pytest.mark.xdist_group("learners-cluster")  # one LocalCluster (module fixture) per run
@pytest.mark.parametrize("solver", ["lbfgs", "adagrad"])
def test_cluster_partitions_fit_and_score_as_local_ones(client, make_log, tmp_path, solver):
    from poem._dask import ClusterPartitions

    log = make_log("discrete", n=80, seed=2)
    pieces = log_partitions(write_row_groups(log, tmp_path / "log.parquet"))
    remote = ClusterPartitions(client, client.map(read_partition, pieces, pure=False))
    local = LocalPartitions([read_partition(p) for p in pieces])
    distributed.wait(remote.items)
    workers = client.who_has(remote.items)
    assert len({w for ws in workers.values() for w in ws}) == 2  # spread over both workers
    params = dict(solver=solver, variance_penalty=0.5, max_iter=15, tol=1e-8, random_state=0)
    fits, scores = [], []
    for source in (local, remote):
        split = split_partitioned(source, random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model = fit_on_rows(POEM(**params, batch_size=5), TrainingRows(split))
        fits.append(model)
        view = policy_rows(split.source, split.rows_for("test"), (model.policy_,))
        scores.append(view.probabilities[0])
    a, b = fits  # the same partitions, the same folds: the same iterates
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(scores[1], scores[0], rtol=1e-10, atol=1e-15)
