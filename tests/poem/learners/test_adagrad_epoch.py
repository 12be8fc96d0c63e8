"""AdaGrad's epoch (Alg. 1) after the in-place step: the same bits as the textbook loop (issue 35)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poem.learners._adagrad import EpochState, _adagrad_step, partition_epoch
from poem.learners._additive import fit_additive_loss_model
from poem.learners.objective import (
    _l2_gradient,
    majorized_batch_gradient,
    majorizer_coefficients,
)
from poem.learners.prepared import partition_statistics, prepare_log
from tests.poem.learners.conftest import make_family_log


def _textbook_epoch(state, part, family, *, n_total, b, eta, lam, mu, center):
    """The epoch as written before the in-place step (h = h + g², w = w − ηg/√h per step)."""
    perm = state.rng.permutation(part.n_rows)
    X = family.subset(part.inputs, perm)
    a, d, p = part.actions[perm], part.scaled_losses[perm], part.propensities[perm]
    m = None if part.loss_model is None else part.loss_model[perm]
    w, h = state.coef, state.accumulator
    for start in range(0, part.n_rows, b):
        stop = min(part.n_rows, start + b)
        rows = (family.row_slice(X, start, stop), a[start:stop], d[start:stop], p[start:stop])
        g = majorized_batch_gradient(
            w,
            family,
            *rows,
            10.0,
            state.coefficients,
            n_total=n_total,
            variance_penalty=lam,
            l2_penalty=mu,
            l2_center=center,
            loss_model=None if m is None else m[start:stop],
        )
        h = h + g * g
        w = w - eta * g / np.sqrt(np.where(h > 0, h, 1.0))
    return w, h


@pytest.mark.parametrize(
    ("family_name", "dr", "mu", "h0"),
    [
        ("multilabel", True, 0.0, 1.0),
        ("multilabel", False, 0.3, 0.0),
        ("discrete", False, 0.0, 1.0),
    ],
)
def test_epoch_is_bit_identical_to_the_textbook_loop_and_leaves_its_start_intact(
    family_name, dr, mu, h0
):
    log = make_family_log(family_name, n=53, seed=4)
    prepared = prepare_log(log, fit_intercept=True, standardize_features=True)
    family, part = prepared.family, prepared.partitions.items[0]
    if dr:
        part = replace(
            part,
            loss_model=fit_additive_loss_model(part.inputs, part.actions, part.scaled_losses),
        )
    rng = np.random.default_rng(7)
    w0 = rng.normal(size=family.coef_shape) * 0.2
    acc = np.full(family.coef_shape, h0)
    if h0 == 0.0:
        acc[0, :2] = 0.0  # coordinates whose history stays 0 take √h = 1
    coefficients = majorizer_coefficients(
        partition_statistics(part, coef=w0, family=family, clip=10.0)
    )
    center = None if not mu else rng.normal(size=family.coef_shape)
    kw = dict(n_total=part.n_rows, lam=0.7, mu=mu, center=center)
    expected_w, expected_h = _textbook_epoch(
        EpochState(w0, acc, coefficients, np.random.default_rng(11)),
        part,
        family,
        b=8,
        eta=0.05,
        **kw,
    )
    w_start, acc_start = w0.copy(), acc.copy()
    got = partition_epoch(
        EpochState(w0, acc, coefficients, np.random.default_rng(11)),
        part,
        family=family,
        clip=10.0,
        n_total=part.n_rows,
        batch_size=8,
        variance_penalty=0.7,
        l2_penalty=mu,
        l2_center=center,
        learning_rate=0.05,
        majorize_every=None,
        progressive=False,
        chunk_size=None,
    )
    np.testing.assert_array_equal(got.coef, expected_w)  # the same bits, not just close
    np.testing.assert_array_equal(got.accumulator, expected_h)
    assert got.batches == 7  # ⌈53 / 8⌉ minibatches
    np.testing.assert_array_equal(w0, w_start)  # the MM safeguard backtracks from the start
    np.testing.assert_array_equal(acc, acc_start)


def test_adagrad_step_in_place_guards_a_zero_history():
    w = np.array([1.0, 2.0, -3.0])
    h = np.array([0.0, 4.0, 1.0])
    g = np.array([0.0, 3.0, -1.0])
    _adagrad_step(w, h, g, 0.5, False, np.empty(3), np.empty(3))
    np.testing.assert_array_equal(h, [0.0, 13.0, 2.0])
    np.testing.assert_array_equal(w, [1.0, 2.0 - 1.5 / np.sqrt(13.0), -3.0 + 0.5 / np.sqrt(2.0)])


def test_l2_gradient_without_a_penalty_is_a_scalar_zero():
    coef = np.array([[1.0, -2.0]])
    assert _l2_gradient(coef, 0.0, None) == 0.0 and np.isscalar(_l2_gradient(coef, 0.0, coef))
    np.testing.assert_array_equal(_l2_gradient(coef, 0.5, None), coef)
    np.testing.assert_array_equal(_l2_gradient(coef, 0.5, coef), 0 * coef)
