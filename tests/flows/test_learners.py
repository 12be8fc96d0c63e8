"""flows.learners: the learner registry and the ``warm_start: champion`` resolution."""

from __future__ import annotations

import numpy as np
import pytest

from flows.learners import build_learner, resolve_warm_start, same_fits
from poem.data import LoggedBandit
from poem.policies import StochasticPolicy, make_family


@pytest.fixture
def log():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    actions = np.arange(60) % 4
    return LoggedBandit(
        X, actions, rng.uniform(size=60), np.full(60, 0.25), loss_bounds=(0.0, 1.0), n_actions=4
    )


def test_champion_that_fits_the_log_is_the_start(log):
    champion = StochasticPolicy(make_family("discrete", 3, 4, True), np.ones((4, 4)))
    params = resolve_warm_start({"warm_start": "champion", "max_iter": 5}, champion, log)
    assert params["warm_start"] is champion and params["max_iter"] == 5
    est = build_learner(
        "poem",
        {"warm_start": "champion", "solver": "lbfgs", "tol": 1e9},
        champion=champion,
        log=log,
    ).fit(log)
    np.testing.assert_allclose(est.coef_, 1.0)  # converged at w₀ = the champion's coefficients


@pytest.mark.parametrize(
    "champion",
    [
        None,  # before any promotion: the logging policy, whose coefficients are unknown
        StochasticPolicy(make_family("discrete", 5, 4, True), np.ones((4, 6))),  # new schema
        StochasticPolicy(make_family("discrete", 3, 3, True), np.ones((3, 4))),  # other actions
    ],
)
def test_no_or_incompatible_champion_starts_at_zeros(champion, log):
    assert resolve_warm_start({"warm_start": "champion"}, champion, log)["warm_start"] == "zeros"
    est = build_learner("poem", {"warm_start": "champion"}, champion=champion, log=log)
    assert est.warm_start == "zeros"


def test_other_warm_starts_pass_through(log):
    assert resolve_warm_start({"warm_start": "zeros"}, None, log) == {"warm_start": "zeros"}
    assert resolve_warm_start({}, None, log) == {}


def test_same_fits_merges_a_champion_start_without_champion(log):
    grid = [
        {"warm_start": "zeros", "variance_scale": 0.1},
        {"warm_start": "champion", "variance_scale": 0.1},
        {"warm_start": "zeros", "variance_scale": 1.0},
        {"warm_start": "champion", "variance_scale": 1.0},
    ]
    fixed = {"solver": "lbfgs", "warm_start": "champion"}
    assert same_fits(grid, fixed, None, log) == [0, 0, 2, 2]  # zeros == "champion" without one
    champion = StochasticPolicy(make_family("discrete", 3, 4, True), np.ones((4, 4)))
    assert same_fits(grid, fixed, champion, log) == [0, 1, 2, 3]  # a real start: 4 fits
    # no warm_start in the grid: the fixed one; distinct params stay distinct fits
    assert same_fits([{"clip": 5}, {"clip": 5}, {"clip": 9}], fixed, None, log) == [0, 0, 2]
