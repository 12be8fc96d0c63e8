"""Feature standardization inside POEM (folded back exactly) and warm starts."""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from poem.learners import POEM
from poem.learners._scaling import fit_feature_scaling, standardize
from poem.policies import StochasticPolicy, make_family


def _fit(est, log):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(log)


@pytest.mark.parametrize(("sparse", "intercept"), [(False, True), (False, False), (True, True)])
def test_fold_back_gives_the_same_scores(sparse, intercept):
    rng = np.random.default_rng(0)
    X = rng.normal(loc=3.0, scale=[0.01, 1.0, 50.0], size=(30, 3))
    X = np.where(rng.random(X.shape) < (0.8 if sparse else 0.3), 0.0, X)
    family = make_family("multilabel", 3, 2, intercept)
    inputs = family.prepare(sp.csr_matrix(X) if sparse else X)
    Z, scaling = standardize(inputs, 3, intercept)
    assert sp.issparse(Z) == sparse and scaling.centred == (intercept and not sparse)
    coef = rng.normal(size=family.coef_shape)
    raw = scaling.to_raw(coef)
    np.testing.assert_allclose(np.asarray(inputs @ raw.T), np.asarray(Z @ coef.T), atol=1e-9)
    np.testing.assert_allclose(scaling.from_raw(raw), coef, atol=1e-12)
    Z = np.asarray(Z[:, :3].toarray() if sparse else Z[:, :3])
    spread = Z.std(axis=0) if scaling.centred else np.sqrt(np.mean(Z**2, axis=0))
    # sd (centred) or root mean square 1/√d: a standardized row has mean squared norm 1
    np.testing.assert_allclose(spread, 1.0 / np.sqrt(3), rtol=1e-9)


def test_constant_columns_keep_unit_scale_and_dense_like_sparse_is_centred():
    X = np.hstack([np.zeros((10, 1)), np.arange(10.0)[:, None] + 100.0])
    scaling = fit_feature_scaling(np.hstack([X, np.ones((10, 1))]), 2, True)
    assert scaling.scale[0] == 1.0 and scaling.mean[1] == pytest.approx(104.5)
    assert scaling.scale[1] == pytest.approx(np.arange(10.0).std())  # d' = 1 varying column
    X[:2, 0] = 1.0
    Z, scaling = standardize(sp.csr_matrix(np.hstack([X, np.ones((10, 1))])), 2, True)
    assert not sp.issparse(Z) and scaling.centred  # 12 of 20 features non-zero: dense


def test_standardized_poem_is_invariant_to_feature_units(make_log):
    log = make_log("multilabel", n=120, seed=3)
    rescaled = dataclasses.replace(log, contexts=log.contexts * [1e-3, 1.0, 1e3] + [5.0, -2.0, 0])
    params = dict(policy="multilabel", variance_penalty=0.2, max_iter=5, random_state=0)
    a, b = _fit(POEM(**params), log), _fit(POEM(**params), rescaled)
    np.testing.assert_allclose(
        a.predict_proba(log.contexts), b.predict_proba(rescaled.contexts), atol=1e-6
    )
    assert a.objective_ == pytest.approx(b.objective_, rel=1e-6)
    # without standardization the same η sees very different feature scales
    c = _fit(POEM(standardize=False, **params), rescaled)
    assert np.abs(c.predict_proba(rescaled.contexts) - a.predict_proba(log.contexts)).max() > 1e-3


@pytest.mark.parametrize("solver", ["adagrad", "lbfgs"])
def test_warm_start_from_a_policy_starts_at_its_distribution(solver, make_log):
    log = make_log("multilabel", n=150, seed=4)
    family = make_family("multilabel", 3, 5, True)
    start = StochasticPolicy(family, np.full(family.coef_shape, 0.3), temperature=2.0)
    est = POEM(policy="multilabel", solver=solver, warm_start=start, max_iter=1, random_state=0)
    fitted = _fit(est, log)
    assert fitted.policy_.metadata["warm_start"] == "given"
    # a zero-step fit (huge tol: converged at w₀) returns w₀ = coef / temperature
    at_start = _fit(
        POEM(policy="multilabel", solver=solver, warm_start=start, tol=1e9, max_iter=1), log
    )
    np.testing.assert_allclose(at_start.coef_, 0.15, atol=1e-12)
    cold = _fit(POEM(policy="multilabel", solver=solver, tol=1e9, max_iter=1), log)
    np.testing.assert_allclose(cold.coef_, 0.0, atol=1e-12)
    # a fitted estimator and the raw array are accepted too
    again = _fit(POEM(policy="multilabel", solver=solver, warm_start=fitted, max_iter=1), log)
    assert again.coef_.shape == (5, 4)
    arr = _fit(
        POEM(policy="multilabel", solver=solver, warm_start=start.coef, tol=1e9, max_iter=1), log
    )
    np.testing.assert_allclose(arr.coef_, 0.3, atol=1e-12)


def test_warm_start_without_intercept_gets_a_zero_intercept(make_log):
    log = make_log("multilabel", n=60, seed=5)
    start = StochasticPolicy(make_family("multilabel", 3, 5, False), np.ones((5, 3)))
    est = _fit(POEM(policy="multilabel", warm_start=start, tol=1e9, max_iter=1), log)
    np.testing.assert_allclose(est.coef_, np.hstack([np.ones((5, 3)), np.zeros((5, 1))]))


@pytest.mark.parametrize(
    ("warm_start", "exc", "regex"),
    [
        ("champion", ValueError, r"warm_start must be 'zeros', an array.*got 'champion'"),
        (np.zeros((5, 3)), ValueError, r"warm_start array must have shape \(5, 4\).*got \(5, 3\)"),
        (np.full((5, 4), np.nan), ValueError, r"warm_start array contains non-finite values"),
        (
            StochasticPolicy(make_family("multilabel", 3, 6, True), np.zeros((6, 4))),
            ValueError,
            r"incompatible with the log: .* = \('multilabel', 3, 6\), the log has "
            r"\('multilabel', 3, 5\)",
        ),
    ],
)
def test_bad_warm_starts(warm_start, exc, regex, make_log):
    log = make_log("multilabel", n=40, seed=6)
    with pytest.raises(exc, match=regex):
        POEM(policy="multilabel", warm_start=warm_start).fit(log)
