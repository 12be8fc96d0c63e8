"""Small logs of every policy family for the learner tests (seeded, a few dozen rows)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit
from poem.policies.candidates import segment_logsumexp


def make_family_log(family: str, n: int = 40, seed: int = 0, sparse: bool = False) -> LoggedBandit:
    """A random log of the given family with propensities in (0.05, 1)."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.9, size=n)
    if family == "discrete":
        X = rng.normal(size=(n, 3))
        actions = np.arange(n) % 4
        losses = rng.uniform(0.0, 1.0, size=n)
        return LoggedBandit(
            sp.csr_matrix(X) if sparse else X,
            actions,
            losses,
            p,
            loss_bounds=(0.0, 1.0),
            n_actions=4,
        )
    if family == "multilabel":
        X = rng.normal(size=(n, 3))
        Y = (rng.random((n, 5)) < 0.4).astype(int)
        Y[0], Y[1] = 0, 1  # at least two distinct actions
        losses = rng.integers(0, 6, size=n).astype(float)
        return LoggedBandit(X, Y, losses, p, loss_bounds=(0.0, 5.0), family="multilabel")
    sizes = rng.integers(2, 5, size=n)
    features = rng.normal(size=(int(sizes.sum()), 3))
    actions = rng.integers(0, sizes)
    losses = rng.uniform(-1.0, 0.0, size=n)
    return LoggedBandit(
        None,
        actions,
        losses,
        p,
        loss_bounds=(-1.0, 0.0),
        family="candidates",
        candidates=CandidateSets.from_sizes(features, sizes),
    )


@pytest.fixture(params=["discrete", "multilabel", "candidates"])
def family_log(request) -> LoggedBandit:
    return make_family_log(request.param)


@pytest.fixture
def make_log():
    """The :func:`make_family_log` factory (tests call it with their own sizes)."""
    return make_family_log


def make_candidate_problem(n=600, d=5, seed=0):
    """Candidate-set log with known click probabilities σ(θ·ψ − 1) and a weak softmax logger."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 7, size=n)
    F = rng.normal(size=(int(sizes.sum()), d))
    click = 1.0 / (1.0 + np.exp(-(F @ rng.normal(size=d) - 1.0)))
    cs = CandidateSets.from_sizes(F, sizes)
    logits = 0.3 * F @ rng.normal(size=d)
    P = np.exp(logits - np.repeat(segment_logsumexp(logits, cs.offsets), sizes))
    actions = np.array(
        [
            rng.choice(k, p=P[o : o + k] / P[o : o + k].sum())
            for o, k in zip(cs.offsets[:-1], sizes, strict=True)
        ]
    )
    idx = cs.offsets[:-1] + actions
    log = LoggedBandit.from_rewards(
        rewards=(rng.random(n) < click[idx]).astype(float),
        reward_bounds=(0, 1),
        contexts=None,
        actions=actions,
        propensities=P[idx],
        family="candidates",
        candidates=cs,
    )
    return log, click, P


@pytest.fixture(scope="session")
def candidate_problem():
    """(log, click probability of every candidate, logging probabilities): BanditNet and hybrid."""
    return make_candidate_problem()
