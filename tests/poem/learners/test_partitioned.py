"""Map-reduce training over partitions equals the in-memory objective, gradient and solvers."""

from __future__ import annotations

import numpy as np
import pytest

from poem.learners._lbfgs import lbfgs, lbfgs_statistics
from poem.learners.objective import crm_objective_from_statistics, crm_statistics
from poem.learners.partitioned import (
    CRMPartition,
    adagrad_partitioned,
    epoch_plan,
    partition_statistics,
    partitions_statistics,
    reduce_statistics,
    sequential_epoch,
)
from poem.policies import family_from_log

BOUNDS = [0, 7, 7, 25, 26]  # uneven partitions, one empty (7:7), one of a single row


def split(log, family, bounds=BOUNDS):
    """Partitions of a log at the given row boundaries (plus the tail)."""
    edges = [*bounds, log.n_rows]
    return [
        CRMPartition.from_log(log.take(np.arange(a, b)), family) if b > a else None
        for a, b in zip(edges[:-1], edges[1:], strict=True)
    ]


def in_memory(log, family):
    return (
        family.inputs_from_log(log),
        np.asarray(log.actions),
        log.scaled_losses(),
        log.propensities,
    )


@pytest.mark.parametrize("clip", [np.inf, 2.5])
def test_reduced_statistics_equal_in_memory(family_log, clip):
    family = family_from_log(family_log, fit_intercept=True)
    w = 0.4 * np.random.default_rng(3).normal(size=family.coef_shape)
    full = crm_statistics(w, family, *in_memory(family_log, family), clip)
    reduced = partitions_statistics(family, split(family_log, family), clip)(w)
    assert (reduced.n, reduced.n_clipped) == (full.n, full.n_clipped)
    v_full, g_full = crm_objective_from_statistics(full, w, 0.8, 0.01)
    v, g = crm_objective_from_statistics(reduced, w, 0.8, 0.01)
    assert v == pytest.approx(v_full, rel=1e-10)
    np.testing.assert_allclose(g, g_full, rtol=1e-10, atol=1e-14)


def test_empty_partition_adds_nothing_and_all_empty_fails(family_log):
    family = family_from_log(family_log)
    w = np.zeros(family.coef_shape)
    empty = partition_statistics(w, family, None, 3.0)
    assert (empty.n, empty.sum_u, empty.n_clipped) == (0, 0.0, 0)
    assert empty.sum_grad_u.shape == family.coef_shape and not empty.sum_grad_u.any()
    with pytest.raises(ValueError, match=r"all 2 partitions are empty \(0 rows\)"):
        reduce_statistics([empty, empty])
    with pytest.raises(ValueError, match=r"0 partitions"):
        reduce_statistics([])


def test_lbfgs_on_reduced_statistics_equals_in_memory_lbfgs(family_log):
    family = family_from_log(family_log, fit_intercept=True)
    kw = dict(variance_penalty=0.5, l2_penalty=0.01, max_iter=40, tol=1e-8)
    ref = lbfgs(family, *in_memory(family_log, family), clip=3.0, **kw)
    provider = partitions_statistics(family, split(family_log, family), 3.0)
    got = lbfgs_statistics(provider, np.zeros(family.coef_shape), **kw)
    assert got.objective == pytest.approx(ref.objective, rel=1e-8)
    np.testing.assert_allclose(got.coef, ref.coef, rtol=1e-6, atol=1e-8)
    assert got.n_clipped == ref.n_clipped


def test_adagrad_over_partitions_decreases_the_objective(family_log):
    family = family_from_log(family_log, fit_intercept=True)
    parts = split(family_log, family)
    provider = partitions_statistics(family, parts, 3.0)
    kw = dict(variance_penalty=0.5, l2_penalty=0.01)
    epoch = sequential_epoch(
        family, parts, 3.0, n_total=family_log.n_rows, batch_size=5, random_state=0, **kw
    )
    res = adagrad_partitioned(
        provider, epoch, np.zeros(family.coef_shape), learning_rate=0.5, max_iter=5, **kw
    )
    start, _ = crm_objective_from_statistics(
        provider(np.zeros(family.coef_shape)), np.zeros(family.coef_shape), **kw
    )
    assert res.objective < start
    value, grad = crm_objective_from_statistics(provider(res.coef), res.coef, **kw)
    assert res.objective == pytest.approx(value, rel=1e-12)
    assert res.gradient_norm == pytest.approx(np.linalg.norm(grad), rel=1e-12)
    # deterministic: the same seed gives the same coefficients
    again = adagrad_partitioned(
        provider, epoch, np.zeros(family.coef_shape), learning_rate=0.5, max_iter=5, **kw
    )
    np.testing.assert_array_equal(again.coef, res.coef)


def test_epoch_plan_is_a_seeded_permutation():
    plan = epoch_plan(6, 0, 1)
    assert sorted(k for k, _ in plan) == list(range(6))
    assert plan == epoch_plan(6, 0, 1) and plan != epoch_plan(6, 0, 2)
