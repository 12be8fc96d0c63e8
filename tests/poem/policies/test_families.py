"""Policy families: gradients, probabilities, sampling, floors, MAP, input checks."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import check_grad
from scipy.stats import chisquare

from poem.data import CandidateSets
from poem.policies import StochasticPolicy, expected_hamming_loss, make_family


def _inputs(family, rng, n=30):
    if family.name == "candidates":
        sizes = rng.integers(1, 6, size=n)
        return CandidateSets.from_sizes(rng.normal(size=(sizes.sum(), family.n_features)), sizes)
    return rng.normal(size=(n, family.n_features))


def _actions(family, inputs, rng):
    if family.name == "discrete":
        return rng.integers(0, family.n_actions, size=inputs.shape[0])
    if family.name == "multilabel":
        return rng.integers(0, 2, size=(inputs.shape[0], family.n_actions))
    return rng.integers(0, inputs.sizes)


FAMILIES = [
    make_family("discrete", 4, 3, fit_intercept=True),
    make_family("multilabel", 4, 5, fit_intercept=True),
    make_family("candidates", 4),
]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_vjp_matches_finite_differences(family, rng):
    raw = _inputs(family, rng)
    inputs = family.prepare(raw)
    actions = _actions(family, raw, rng)
    v = rng.normal(size=family.n_rows(inputs))

    def fun(w):
        return v @ family.log_prob_and_vjp(w.reshape(family.coef_shape), inputs, actions)[0]

    def grad(w):
        return family.log_prob_and_vjp(w.reshape(family.coef_shape), inputs, actions)[1](v).ravel()

    w0 = rng.normal(size=family.coef_shape).ravel()
    assert check_grad(fun, grad, w0) < 1e-5 * max(1.0, np.linalg.norm(grad(w0)))


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_training_log_prob_equals_served_probability_at_defaults(family, rng):
    raw = _inputs(family, rng)
    inputs = family.prepare(raw)
    actions = _actions(family, raw, rng)
    w = rng.normal(size=family.coef_shape)
    log_p, _ = family.log_prob_and_vjp(w, inputs, actions)
    np.testing.assert_allclose(
        np.exp(log_p), family.action_probability(w, inputs, actions), rtol=1e-12
    )


@pytest.mark.parametrize("family", [FAMILIES[0], FAMILIES[2]], ids=lambda f: f.name)
def test_distributions_sum_to_one_with_temperature_and_floor(family, rng):
    raw = _inputs(family, rng)
    inputs = family.prepare(raw)
    w = rng.normal(size=family.coef_shape)
    P = family.predict_proba(w, inputs, temperature=0.5, exploration_floor=0.05)
    sums = P.sum(1) if family.name == "discrete" else np.add.reduceat(P, inputs.offsets[:-1])
    np.testing.assert_allclose(sums, 1.0)
    assert P.min() >= 0.05 - 1e-12


def test_discrete_sampling_frequencies_match_returned_propensities(rng):
    family = make_family("discrete", 2, 4)
    w = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5], [0.2, 0.2]])
    X = np.tile([[0.3, -0.7]], (20000, 1))
    policy = StochasticPolicy(family, w, temperature=2.0, exploration_floor=0.05)
    actions, probs = policy.sample(X, random_state=1)
    expected = policy.predict_proba(X[:1])[0]
    np.testing.assert_allclose(probs, expected[actions])
    counts = np.bincount(actions, minlength=4)
    assert chisquare(counts, expected * 20000).pvalue > 0.001


def test_candidate_sampling_frequencies(rng):
    family = make_family("candidates", 2)
    one_row = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    n = 20000
    cs = CandidateSets.from_sizes(np.tile(one_row, (n, 1)), np.full(n, 3))
    w = np.array([0.8, -0.4])
    actions, probs = family.sample(w, cs, rng, exploration_floor=0.1)
    expected = family.predict_proba(w, cs.take([0]), exploration_floor=0.1)
    np.testing.assert_allclose(probs, expected[actions])
    assert chisquare(np.bincount(actions, minlength=3), expected * n).pvalue > 0.001


def test_multilabel_sampling_and_expected_hamming_loss(rng):
    family = make_family("multilabel", 3, 4)
    w = rng.normal(size=family.coef_shape)
    X = rng.normal(size=(400, 3))
    Ystar = rng.integers(0, 2, size=(400, 4))
    policy = StochasticPolicy(family, w, exploration_floor=0.1)
    sig = policy.predict_proba(X)
    assert sig.min() >= 0.1 and sig.max() <= 0.9
    draws = [policy.sample(X, random_state=s)[0] for s in range(200)]
    mc = np.mean([np.abs(Y - Ystar).sum(1).mean() for Y in draws])
    exact = expected_hamming_loss(sig, Ystar).mean()
    sd = np.std([np.abs(Y - Ystar).sum(1).mean() for Y in draws]) / np.sqrt(200)
    assert abs(mc - exact) < 4 * sd
    Y, prob = policy.sample(X, random_state=0)
    np.testing.assert_allclose(prob, policy.action_probability(X, Y))


def test_map_predictions(rng):
    d = make_family("discrete", 2, 3)
    w = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    np.testing.assert_array_equal(
        d.predict(w, np.array([[2.0, 1.0], [0.0, 3.0], [-2, -2.0]])), [0, 1, 2]
    )
    m = make_family("multilabel", 2, 2)
    np.testing.assert_array_equal(
        m.predict(np.array([[1.0, 0], [0, -1.0]]), np.array([[1.0, 1.0]])), [[1, 0]]
    )
    c = make_family("candidates", 1)
    cs = CandidateSets.from_sizes(np.array([[1.0], [3.0], [2.0], [5.0], [5.0]]), [3, 2])
    np.testing.assert_array_equal(c.predict(np.array([1.0]), cs), [1, 0])


@pytest.mark.parametrize(
    "call, exc, pattern",
    [
        (
            lambda p: p.predict_proba(np.zeros((2, 3))),
            ValueError,
            r"X has 3 features, but the policy was fitted with 2",
        ),
        (
            lambda p: p.predict_proba(sp.csr_matrix(np.zeros((2, 5)))),
            ValueError,
            r"X has 5 features",
        ),
        (
            lambda p: p.with_serving(temperature=0).predict_proba(np.zeros((1, 2))),
            ValueError,
            r"temperature must be > 0",
        ),
        (
            lambda p: p.with_serving(exploration_floor=0.5).predict_proba(np.zeros((1, 2))),
            ValueError,
            r"exploration_floor must be in \[0, 0.333333\]",
        ),
    ],
)
def test_bad_predict_inputs(call, exc, pattern):
    policy = StochasticPolicy(make_family("discrete", 2, 3), np.zeros((3, 2)))
    with pytest.raises(exc, match=pattern):
        call(policy)


def test_unknown_family_and_bad_coef():
    with pytest.raises(
        ValueError,
        match=r"policy must be one of \['candidates', 'discrete', 'multilabel'\], got 'disc'",
    ):
        make_family("disc", 2, 3)
    with pytest.raises(ValueError, match=r"coef must have shape \(3, 2\)"):
        StochasticPolicy(make_family("discrete", 2, 3), np.zeros((2, 2)))


def test_sparse_and_dense_inputs_agree(rng):
    family = make_family("discrete", 4, 3, fit_intercept=True)
    X = rng.normal(size=(10, 4)) * (rng.random((10, 4)) < 0.5)
    w = rng.normal(size=family.coef_shape)
    np.testing.assert_allclose(
        family.predict_proba(w, family.prepare(sp.csr_matrix(X))),
        family.predict_proba(w, family.prepare(X)),
    )


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_stacked_vjp_equals_single_products(family, rng):
    # crm_statistics asks for Σ∇uᵢ and Σuᵢ∇uᵢ in one stacked call
    raw = _inputs(family, rng)
    inputs = family.prepare(raw)
    actions = _actions(family, raw, rng)
    _, vjp = family.log_prob_and_vjp(rng.normal(size=family.coef_shape), inputs, actions)
    V = rng.normal(size=(family.n_rows(inputs), 3))
    stacked = vjp(V)
    assert stacked.shape == (3, *family.coef_shape)
    for j in range(3):
        np.testing.assert_allclose(stacked[j], vjp(V[:, j]), rtol=1e-12, atol=1e-12)
