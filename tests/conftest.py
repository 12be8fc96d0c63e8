"""Shared fixtures: ``rng``, ``tiny_log`` (hand-computable), ``synthetic_log`` (known truth),
and ``shared_data_dir`` (``--data-dir``, default ``../shared/data``; tests skip when absent).

Subdirectories keep their own ``conftest.py`` for fixtures only they use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from threadpoolctl import threadpool_limits

from poem.data import LoggedBandit

try:  # pytest >= 9.2 (see pytest_collection_modifyitems)
    from _pytest.nodeid import coerce_node_id
except ImportError:  # older pytest: xdist's own grouping works
    coerce_node_id = None

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_addoption(parser):
    parser.addoption(
        "--data-dir",
        default=str(REPO_ROOT.parent / "shared" / "data"),
        help="folder with the shared data sets (yeast/, tmc2007/, obd/, criteo_testbed_sample/)",
    )


def _start_rank(item: pytest.Item) -> int:
    """0: the README/docs runs and the team topology (minutes each), 1: other ``slow`` tests, 2: rest."""
    group = item.get_closest_marker("xdist_group")
    if item.get_closest_marker("readme") or (group is not None and group.args == ("team",)):
        return 0
    return 1 if item.get_closest_marker("slow") else 2


def pytest_collection_modifyitems(config, items):
    """On an xdist worker (``.ci/test``: ``-n 2 --dist loadgroup --no-loadscope-reorder``): the
    longest tests are handed out first, and ``xdist_group`` marks really group.

    pytest-xdist 3.8 groups by appending ``@<group>`` to ``item._nodeid``; pytest 9.2 keeps the
    node id in ``item._id``, so that assignment is lost and every test was its own unit (the team
    topology started on both workers). The suffix is set here the way pytest 9.2 stores it.
    """
    if not hasattr(config, "workerinput"):
        return
    items.sort(key=_start_rank)  # stable: collection order within a rank
    if config.getvalue("loadgroup") and coerce_node_id is not None:
        for item in items:
            names = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
            if names and "@" not in item.nodeid:
                item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(names)}")


@pytest.fixture(scope="session", autouse=True)
def one_openmp_thread():
    """OpenMP (scikit-learn's gradient boosting) on one thread per test process.

    ``.ci/test`` runs two workers on two cores: a second OpenMP thread per worker only spins
    against the other worker (the boosting propensity test took 92 s instead of 4 s on the
    shared box). Results do not depend on the thread count; BLAS is left alone.
    """
    with threadpool_limits(limits=1, user_api="openmp"):
        yield


@pytest.fixture(scope="session")
def shared_data_dir(request) -> Path:
    path = Path(request.config.getoption("--data-dir"))
    if not path.is_dir():
        pytest.skip(f"shared data folder {path} is absent (pass --data-dir)")
    return path


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)


@pytest.fixture
def tiny_log() -> LoggedBandit:
    """Five rows, two features, three actions; every value chosen by hand.

    Losses in [0, 1]; propensities of the logged actions under the logger.
    """
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [0.5, -1.0], [-1.0, 0.5]])
    actions = np.array([0, 1, 2, 0, 1])
    losses = np.array([0.0, 1.0, 0.5, 0.25, 1.0])
    propensities = np.array([0.5, 0.25, 0.2, 0.5, 0.4])
    return LoggedBandit(X, actions, losses, propensities, loss_bounds=(0.0, 1.0), n_actions=3)


@dataclass(frozen=True)
class SyntheticProblem:
    """A discrete problem whose true expected losses are known for every (x, a)."""

    log: LoggedBandit
    expected_loss: np.ndarray  # (n, K): E[δ | x_i, a]
    logging_probs: np.ndarray  # (n, K): π₀(a | x_i)


def make_synthetic(
    n: int = 2000, n_features: int = 5, n_actions: int = 4, seed: int = 0
) -> SyntheticProblem:
    """Contexts ~ N(0, I); E[δ|x,a] = sigmoid(x·θ_a); Bernoulli losses; softmax logger."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features))
    theta = rng.normal(size=(n_actions, n_features))
    expected = 1.0 / (1.0 + np.exp(-(X @ theta.T)))
    logits = 0.5 * (X @ rng.normal(size=(n_actions, n_features)).T)
    P = np.exp(logits - logits.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    actions = (P.cumsum(1) < rng.random(n)[:, None]).sum(1).clip(max=n_actions - 1)
    rows = np.arange(n)
    losses = (rng.random(n) < expected[rows, actions]).astype(float)
    log = LoggedBandit(
        X,
        actions,
        losses,
        P[rows, actions],
        loss_bounds=(0.0, 1.0),
        n_actions=n_actions,
        event_ids=np.array([f"e{i}" for i in rows]),
    )
    return SyntheticProblem(log, expected, P)


@pytest.fixture
def synthetic_problem() -> SyntheticProblem:
    return make_synthetic()


@pytest.fixture
def synthetic_log(synthetic_problem) -> LoggedBandit:
    return synthetic_problem.log
