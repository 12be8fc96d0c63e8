"""The Dask path (poem._dask) on a 2-worker LocalCluster equals the in-memory path."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest
from poem.learners.partitioned import (
    CRMPartition,
    adagrad_partitioned,
    partitions_statistics,
    sequential_epoch,
)

from poem.io.log_format import log_to_table
from poem.io.partitions import log_partitions, read_partition
from poem.learners._lbfgs import lbfgs, lbfgs_statistics
from poem.learners.objective import crm_objective_from_statistics, crm_statistics
from poem.policies import family_from_log

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


@pytest.fixture
def partitioned(family_log, tmp_path):
    from poem._dask import load_partitions

    path = write_row_groups(family_log, tmp_path / "log.parquet")
    return path, load_partitions


def _in_memory(log, family):
    return (
        family.inputs_from_log(log),
        np.asarray(log.actions),
        log.scaled_losses(),
        log.propensities,
    )


def test_partitions_cover_the_log_with_an_empty_one(family_log, tmp_path):
    pieces = log_partitions(write_row_groups(family_log, tmp_path / "log.parquet"))
    assert [p.n_rows for p in pieces] == [7, 0, 18, 1, family_log.n_rows - 26]
    assert read_partition(pieces[1]) is None
    part = read_partition(pieces[2])
    np.testing.assert_array_equal(part.propensities, family_log.propensities[7:25])


@pytest.mark.slow
def test_dask_objective_and_gradient_equal_in_memory(client, partitioned, family_log):
    path, load_partitions = partitioned
    from poem._dask import dask_statistics

    data = load_partitions(client, path, fit_intercept=True)
    family = family_from_log(family_log, fit_intercept=True)
    assert data.n_rows == family_log.n_rows and data.family.coef_shape == family.coef_shape
    assert len(data.partitions) == 5
    distributed.wait(data.partitions)
    workers = client.who_has(data.partitions)
    assert len({w for ws in workers.values() for w in ws}) == 2  # spread over both workers

    clip, kw = 2.5, dict(variance_penalty=0.8, l2_penalty=0.01)
    w = 0.4 * np.random.default_rng(3).normal(size=family.coef_shape)
    full = crm_statistics(w, family, *_in_memory(family_log, family), clip)
    provider = dask_statistics(data, clip)
    reduced = provider(w)
    assert (reduced.n, reduced.n_clipped) == (full.n, full.n_clipped)
    v_full, g_full = crm_objective_from_statistics(full, w, **kw)
    v, g = crm_objective_from_statistics(reduced, w, **kw)
    assert v == pytest.approx(v_full, rel=1e-10)
    np.testing.assert_allclose(g, g_full, rtol=1e-10, atol=1e-14)


@pytest.mark.slow
def test_dask_solvers_equal_in_memory(client, make_log, tmp_path):
    from poem._dask import dask_epoch, dask_statistics, load_partitions

    family_log = make_log("discrete", n=60)
    path = write_row_groups(family_log, tmp_path / "log.parquet")
    data = load_partitions(client, path, fit_intercept=True)
    family = family_from_log(family_log, fit_intercept=True)
    clip, kw = 2.5, dict(variance_penalty=0.8, l2_penalty=0.01)
    provider = dask_statistics(data, clip)
    ref = lbfgs(family, *_in_memory(family_log, family), clip=clip, max_iter=15, tol=1e-8, **kw)
    got = lbfgs_statistics(provider, np.zeros(family.coef_shape), max_iter=15, tol=1e-8, **kw)
    assert got.objective == pytest.approx(ref.objective, rel=1e-8)
    np.testing.assert_allclose(got.coef, ref.coef, rtol=1e-6, atol=1e-8)

    # minibatch AdaGrad: the cluster runs the same epochs as the in-process loop
    pieces = log_partitions(path)
    parts = [
        None if (log := read_partition(p)) is None else CRMPartition.from_log(log, family)
        for p in pieces
    ]
    common = dict(batch_size=5, random_state=0, **kw)
    local = adagrad_partitioned(
        partitions_statistics(family, parts, clip),
        sequential_epoch(family, parts, clip, n_total=family_log.n_rows, **common),
        np.zeros(family.coef_shape),
        learning_rate=0.5,
        max_iter=3,
        **kw,
    )
    remote = adagrad_partitioned(
        provider,
        dask_epoch(data, clip, **common),
        np.zeros(family.coef_shape),
        learning_rate=0.5,
        max_iter=3,
        **kw,
    )
    assert remote.n_iter == local.n_iter
    np.testing.assert_allclose(remote.coef, local.coef, rtol=1e-10, atol=1e-13)


def test_all_empty_log_is_refused(client, make_log, tmp_path):
    from poem._dask import load_partitions

    family_log = make_log("discrete")
    table = log_to_table(family_log).slice(0, 0)
    with pq.ParquetWriter(tmp_path / "e.parquet", table.schema) as writer:
        writer.write_table(table)
        writer.write_table(table)
    with pytest.raises(ValueError, match=r"all 2 partitions of the log are empty \(0 rows\)"):
        load_partitions(client, tmp_path / "e.parquet")
