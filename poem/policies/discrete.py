r"""Softmax policy over K discrete actions: φ(x, y) = x ⊗ e_y (DESIGN §3).

.. math::

    \pi_w(y|x) = \exp(w_y \cdot x / \alpha) / \sum_{k=1}^{K} \exp(w_k \cdot x / \alpha)

served as (1 − Kε) π_w + ε, where α is the temperature and ε the exploration floor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import log_softmax, softmax

from poem.policies._base import PolicyFamily, check_serving_params

__all__ = ["DiscreteFamily"]


class DiscreteFamily(PolicyFamily):
    """K-action softmax policy; ``coef`` has shape (K, n_inputs)."""

    name = "discrete"

    @property
    def coef_shape(self) -> tuple[int, ...]:
        """(K, n_inputs)."""
        return (int(self.n_actions), self.n_inputs)

    def prepare(self, inputs: Any) -> Any:
        """Validate the feature count and add the intercept column."""
        return self._prepare_matrix(inputs)

    def inputs_from_log(self, log: Any) -> Any:
        """Prepared contexts of the log."""
        return self.prepare(log.contexts)

    def _scores(self, coef: np.ndarray, X: Any) -> np.ndarray:
        return np.asarray(X @ coef.T)

    def log_prob_and_vjp(
        self, coef: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """Log π_w(yᵢ|xᵢ) = s_{i,yᵢ} − logsumexp_k s_{ik}; ∇ = (e_{yᵢ} − πᵢ) ⊗ xᵢ."""
        rows = np.arange(actions.shape[0])
        log_p_all = log_softmax(self._scores(coef, inputs), axis=1)
        log_p = log_p_all[rows, actions]

        P = np.exp(log_p_all)

        def vjp(v: np.ndarray) -> np.ndarray:
            V = v.reshape(v.shape[0], -1)  # (n, m)
            G = -P[:, None, :] * V[:, :, None]  # (n, m, K)
            G[rows, :, actions] += V
            out = np.asarray(inputs.T @ G.reshape(G.shape[0], -1))  # (d, m·K): one pass over X
            out = out.reshape(out.shape[0], V.shape[1], -1).transpose(1, 2, 0)  # (m, K, d)
            return out[0] if v.ndim == 1 else out

        return log_p, vjp

    def predict_proba(
        self,
        coef: np.ndarray,
        inputs: Any,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> np.ndarray:
        """Served distribution, shape (n_samples, K); rows sum to 1."""
        check_serving_params(temperature, exploration_floor, self.max_exploration_floor)
        P = softmax(self._scores(coef, inputs) / temperature, axis=1)
        if exploration_floor:
            P = (1.0 - self.n_actions * exploration_floor) * P + exploration_floor
        return P

    def action_probability(
        self,
        coef: np.ndarray,
        inputs: Any,
        actions: np.ndarray,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> np.ndarray:
        """Served probability of the given actions, shape (n_samples,)."""
        P = self.predict_proba(coef, inputs, temperature, exploration_floor)
        return P[np.arange(P.shape[0]), np.asarray(actions, dtype=np.int64)]

    def sample(
        self,
        coef: np.ndarray,
        inputs: Any,
        rng: np.random.Generator,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Inverse-CDF sampling per row; returns (actions, their served probabilities)."""
        P = self.predict_proba(coef, inputs, temperature, exploration_floor)
        u = rng.random(P.shape[0])
        actions = np.minimum((np.cumsum(P, axis=1) < u[:, None]).sum(axis=1), P.shape[1] - 1)
        return actions.astype(np.int64), P[np.arange(P.shape[0]), actions]

    def predict(self, coef: np.ndarray, inputs: Any) -> np.ndarray:
        """MAP action per row."""
        return np.argmax(self._scores(coef, inputs), axis=1).astype(np.int64)
