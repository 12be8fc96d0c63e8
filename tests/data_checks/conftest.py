"""Fixtures of the data-check tests: one GX context per session and clean logs per family."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit

START = np.datetime64("2026-11-01T00:00:00", "ns")


def make_log(family: str, n: int = 240, seed: int = 0) -> LoggedBandit:
    """A clean log of the family: event ids, timestamps over three days, a logger version."""
    rng = np.random.default_rng(seed)
    ts = START + np.sort(rng.integers(0, 3 * 86400, n)) * np.timedelta64(1, "s")
    common = {
        "timestamps": ts,
        "event_ids": np.array([f"e{i}" for i in range(n)]),
        "logging_model_version": "h0-v1",
    }
    if family == "discrete":
        K = 4
        P = rng.dirichlet(np.full(K, 5.0), n)
        a = (P.cumsum(1) < rng.random(n)[:, None]).sum(1).clip(max=K - 1)
        return LoggedBandit(
            rng.normal(size=(n, 3)),
            a,
            rng.integers(0, 2, n),
            P[np.arange(n), a],
            (0.0, 1.0),
            n_actions=K,
            logging_distribution=P,
            **common,
        )
    if family == "multilabel":
        q = 5
        marg = rng.uniform(0.2, 0.8, (n, q))
        Y = (rng.random((n, q)) < marg).astype(int)
        p = np.prod(np.where(Y == 1, marg, 1 - marg), axis=1)
        X = sp.random(n, 20, density=0.2, random_state=seed, format="csr")
        return LoggedBandit(
            X, Y, rng.integers(0, q + 1, n), p, (0.0, float(q)), family="multilabel", **common
        )
    sizes = rng.integers(2, 5, n)
    a = (rng.random(n) * sizes).astype(int)
    cands = CandidateSets.from_sizes(rng.normal(size=(int(sizes.sum()), 3)), sizes)
    return LoggedBandit(
        None,
        a,
        -rng.integers(0, 2, n),
        1.0 / sizes,
        (-1.0, 0.0),
        family="candidates",
        candidates=cands,
        **common,
    )


@pytest.fixture(scope="session")
def gx_context():
    from data_checks.runner import make_context

    return make_context()


@pytest.fixture(scope="session")
def clean_logs() -> dict[str, LoggedBandit]:
    return {f: make_log(f) for f in ("discrete", "multilabel", "candidates")}


@pytest.fixture(scope="session")
def log_factory():
    """``make_log(family, n=240, seed=0)``."""
    return make_log
