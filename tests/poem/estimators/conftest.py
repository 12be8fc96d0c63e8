"""A re-sampleable bandit simulation on the synthetic problem (fixed contexts, known truth)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest


@dataclass(frozen=True)
class Simulation:
    """Fixed contexts with known E[δ|x,a] and logger π₀; draws fresh logs on demand."""

    expected_loss: np.ndarray  # (n, K)
    logging_probs: np.ndarray  # (n, K)

    @property
    def n(self) -> int:
        return self.expected_loss.shape[0]

    def risk(self, target_probs: np.ndarray) -> float:
        """True risk on these contexts: (1/n) Σᵢ Σₐ π(a|xᵢ) E[δ|xᵢ,a]."""
        return float(np.mean(np.sum(target_probs * self.expected_loss, axis=1)))

    def draw(self, n_logs: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``n_logs`` independent logs: actions, losses and propensities, each (n_logs, n)."""
        rng = np.random.default_rng(seed)
        cdf = np.cumsum(self.logging_probs, axis=1)
        u = rng.random((n_logs, self.n, 1))
        actions = np.minimum((cdf[None] < u).sum(axis=2), self.logging_probs.shape[1] - 1)
        rows = np.arange(self.n)[None]
        losses = (rng.random((n_logs, self.n)) < self.expected_loss[rows, actions]).astype(float)
        return actions, losses, self.logging_probs[rows, actions]

    def softmax_policy(self, beta: float) -> np.ndarray:
        """π(a|x) ∝ exp(−β E[δ|x,a]): β > 0 better than uniform, β < 0 worse."""
        logits = -beta * self.expected_loss
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        return p / p.sum(axis=1, keepdims=True)

    def weights(
        self, target_probs: np.ndarray, actions: np.ndarray, propensities: np.ndarray
    ) -> np.ndarray:
        return target_probs[np.arange(self.n), actions] / propensities


@pytest.fixture
def simulation(synthetic_problem) -> Simulation:
    # 200 contexts whose logger explores every action with probability >= 0.05, so weights stay
    # <= 20 and n = 200 is enough for the t-interval's normal approximation.
    P = synthetic_problem.logging_probs
    rows = np.flatnonzero(P.min(axis=1) >= 0.05)[:200]
    return Simulation(synthetic_problem.expected_loss[rows], P[rows])
