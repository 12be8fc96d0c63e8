"""The CRM objective (Eq. 10/12), its gradient, the majorizer (Prop. 4) and the partition reduce."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import check_grad
from scipy.special import expit, log_expit

from poem.learners.objective import (
    _sigmoid_and_log_prob,
    crm_objective,
    crm_objective_from_statistics,
    crm_statistics,
    majorized_batch_gradient,
    majorized_gradient,
    majorizer_coefficients,
)
from poem.policies import PolicyFamily, family_from_log


def _setup(log, seed=1):
    family = family_from_log(log, fit_intercept=True)
    inputs = family.inputs_from_log(log)
    w = 0.5 * np.random.default_rng(seed).normal(size=family.coef_shape)
    return family, inputs, w


def _weights(family, inputs, log, w):
    log_p, _ = family.log_prob_and_vjp(w, inputs, np.asarray(log.actions))
    return np.exp(log_p) / log.propensities


def _clip_between(r):
    """A clip strictly between two middle weights, so about half the rows are clipped."""
    s = np.sort(r)
    return 0.5 * (s[len(s) // 2] + s[len(s) // 2 + 1])


@pytest.mark.parametrize("centred", [False, True])
@pytest.mark.parametrize("clip_mode", ["inactive", "active"])
def test_gradient_matches_finite_differences(family_log, clip_mode, centred):
    family, inputs, w = _setup(family_log)
    r = _weights(family, inputs, family_log, w)
    clip = np.inf if clip_mode == "inactive" else _clip_between(r)
    args = (
        family,
        inputs,
        np.asarray(family_log.actions),
        family_log.scaled_losses(),
        family_log.propensities,
    )
    center = _setup(family_log, seed=2)[2] if centred else None  # the L2 term μ‖w − c‖²
    kw = dict(clip=clip, variance_penalty=0.7, l2_penalty=0.05, l2_center=center)

    stats = crm_statistics(w, *args, clip)
    assert (stats.n_clipped == 0) if clip_mode == "inactive" else (0 < stats.n_clipped < stats.n)

    def f(x):
        return crm_objective(x.reshape(w.shape), *args, **kw)[0]

    def g(x):
        return crm_objective(x.reshape(w.shape), *args, **kw)[1].ravel()

    err = check_grad(f, g, w.ravel(), epsilon=1e-7)
    assert err <= 1e-5 * max(1.0, np.linalg.norm(g(w.ravel())))
    if centred:  # the centred term is exactly μ‖w − c‖² more than the data terms
        plain = crm_objective(w, *args, clip=clip, variance_penalty=0.7)[0]
        assert f(w.ravel()) == pytest.approx(plain + 0.05 * np.sum((w - center) ** 2), rel=1e-12)


def test_objective_value_by_hand_on_tiny_log(tiny_log):
    """At w = 0 every π = 1/3, so u_i = δ'_i · min(M, 1/(3 p_i)) (Eq. 13)."""
    family = family_from_log(tiny_log, fit_intercept=False)
    inputs = family.inputs_from_log(tiny_log)
    w = np.zeros(family.coef_shape)
    d = tiny_log.losses - 1.0  # bounds [0, 1] -> δ' = δ − 1
    u = d * np.minimum(1.5, 1.0 / (3.0 * tiny_log.propensities))
    lam, n = 2.0, 5
    expected = u.mean() + lam * np.sqrt(u.var(ddof=1) / n)
    value, _ = crm_objective(
        w,
        family,
        inputs,
        tiny_log.actions,
        tiny_log.scaled_losses(),
        tiny_log.propensities,
        clip=1.5,
        variance_penalty=lam,
    )
    assert value == pytest.approx(expected, rel=1e-12)
    # λ = 0 is the clipped IPS risk on scaled losses
    value0, _ = crm_objective(
        w,
        family,
        inputs,
        tiny_log.actions,
        tiny_log.scaled_losses(),
        tiny_log.propensities,
        clip=1.5,
        variance_penalty=0.0,
    )
    assert value0 == pytest.approx(u.mean(), rel=1e-12)


def test_majorizer_gradient_equals_true_gradient_at_w0(family_log):
    family, inputs, w0 = _setup(family_log)
    args = (
        family,
        inputs,
        np.asarray(family_log.actions),
        family_log.scaled_losses(),
        family_log.propensities,
    )
    clip = _clip_between(_weights(family, inputs, family_log, w0))
    stats = crm_statistics(w0, *args, clip)
    center = 0.5 * w0[::-1].copy()
    for c in (None, center):
        _, true_grad = crm_objective_from_statistics(stats, w0, 0.8, 0.1, c)
        maj = majorized_gradient(
            stats,
            w0,
            majorizer_coefficients(stats),
            n_total=stats.n,
            variance_penalty=0.8,
            l2_penalty=0.1,
            l2_center=c,
        )
        np.testing.assert_allclose(maj, true_grad, rtol=1e-10, atol=1e-12)


def test_batch_gradient_in_one_vjp_equals_the_gradient_from_statistics(family_log):
    """AdaGrad's one-VJP step gradient = majorized_gradient of the batch's statistics."""
    family, inputs, w0 = _setup(family_log)
    actions = np.asarray(family_log.actions)
    args = (family, inputs, actions, family_log.scaled_losses(), family_log.propensities)
    clip = _clip_between(_weights(family, inputs, family_log, w0))
    coefficients = majorizer_coefficients(crm_statistics(w0, *args, clip))
    w = w0 + 0.3 * np.random.default_rng(7).normal(size=w0.shape)  # off the majorization point
    rows = np.arange(3, 17)
    batch = (
        family.subset(inputs, rows),
        actions[rows],
        family_log.scaled_losses()[rows],
        family_log.propensities[rows],
    )
    kw = dict(n_total=family_log.n_rows, variance_penalty=0.8, l2_penalty=0.1, l2_center=w0)
    expected = majorized_gradient(crm_statistics(w, family, *batch, clip), w, coefficients, **kw)
    got = majorized_batch_gradient(w, family, *batch, clip, coefficients, **kw)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-13)
    uncentred = majorized_gradient(
        crm_statistics(w, family, *batch, clip), w, coefficients, **{**kw, "l2_center": None}
    )
    np.testing.assert_allclose(expected - uncentred, -0.2 * w0, rtol=1e-10, atol=1e-13)
    assert np.abs(expected).max() > 1e-6  # a non-trivial gradient


def test_majorizer_bounds_the_standard_deviation(family_log):
    """Prop. 4: √V̂(u_w) ≤ A Σu + B Σu² + C for every w, with equality at w₀."""
    family, inputs, w0 = _setup(family_log)
    args = (
        family,
        inputs,
        np.asarray(family_log.actions),
        family_log.scaled_losses(),
        family_log.propensities,
    )
    s0 = crm_statistics(w0, *args, 10.0)
    A, B, C = majorizer_coefficients(s0)
    assert A * s0.sum_u + B * s0.sum_u2 + C == pytest.approx(np.sqrt(s0.variance), rel=1e-10)
    rng = np.random.default_rng(3)
    for _ in range(5):
        s = crm_statistics(w0 + rng.normal(size=w0.shape), *args, 10.0)
        assert np.sqrt(s.variance) <= A * s.sum_u + B * s.sum_u2 + C + 1e-12


def test_majorizer_is_zero_for_constant_u(tiny_log):
    family = family_from_log(tiny_log)
    stats = crm_statistics(
        np.zeros(family.coef_shape),
        family,
        family.inputs_from_log(tiny_log),
        tiny_log.actions,
        np.zeros(5),
        tiny_log.propensities,
        np.inf,
    )
    assert majorizer_coefficients(stats) == (0.0, 0.0, 0.0)


def test_partition_reduce_equals_full_batch(family_log):
    family, inputs, w = _setup(family_log)
    actions, d, p = (
        np.asarray(family_log.actions),
        family_log.scaled_losses(),
        family_log.propensities,
    )
    clip = _clip_between(_weights(family, inputs, family_log, w))
    full = crm_statistics(w, family, inputs, actions, d, p, clip)
    parts = [np.arange(0, 7), np.arange(7, 25), np.arange(25, family_log.n_rows)]
    reduced = sum(
        crm_statistics(w, family, family.subset(inputs, r), actions[r], d[r], p[r], clip)
        for r in parts
    )
    chunked = crm_statistics(w, family, inputs, actions, d, p, clip, chunk_size=9)
    v_full, g_full = crm_objective_from_statistics(full, w, 0.5, 0.01)
    for other in (reduced, chunked):
        assert other.n == full.n and other.n_clipped == full.n_clipped
        v, g = crm_objective_from_statistics(other, w, 0.5, 0.01)
        assert v == pytest.approx(v_full, rel=1e-12)
        np.testing.assert_allclose(g, g_full, rtol=1e-10, atol=1e-13)


def test_sigmoid_and_log_prob_match_expit_and_log_expit_without_overflow():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(50, 7)) * np.array([0.1, 1, 5, 30, 300, 800, 1e4])
    Y = (rng.random((50, 7)) < 0.5).astype(float)
    sig, log_prob = _sigmoid_and_log_prob(S, Y)
    np.testing.assert_allclose(sig, expit(S), rtol=1e-14, atol=1e-300)
    expected = np.sum(log_expit(np.where(Y > 0, S, -S)), axis=1)
    np.testing.assert_allclose(log_prob, expected, rtol=1e-13)
    assert np.all(np.isfinite(log_prob))


def test_adagrad_minibatch_rows_of_csr_are_the_slice():
    X = sp.random(40, 6, density=0.3, format="csr", random_state=1)
    for start, stop in ((0, 7), (7, 40), (39, 40), (10, 10)):
        got = PolicyFamily.row_slice(X, start, stop)
        assert sp.issparse(got) and got.format == "csr" and got.shape == (stop - start, 6)
        np.testing.assert_array_equal(got.toarray(), X[start:stop].toarray())
    dense = X.toarray()
    np.testing.assert_array_equal(PolicyFamily.row_slice(dense, 3, 9), dense[3:9])
