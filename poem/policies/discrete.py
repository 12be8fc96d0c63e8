r"""Softmax policy over K discrete actions: φ(x, y) = x ⊗ e_y (DESIGN §3).

.. math::

    \pi_w(y|x) = \exp(w_y \cdot x / \alpha) / \sum_{k=1}^{K} \exp(w_k \cdot x / \alpha)

served as (1 − Kε) π_w + ε, where α is the temperature and ε the exploration floor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.special import softmax

from poem.policies._base import PolicyFamily, check_serving_params

__all__ = ["DiscreteFamily"]


class DiscreteFamily(PolicyFamily):
    """K-action softmax policy; ``coef`` has shape (K, n_inputs)."""

    name = "discrete"

    @property
    def coef_shape(self) -> tuple[int, ...]:
        """(K, n_inputs)."""
        return (int(self.n_actions), self.n_inputs)

    @staticmethod
    def _scores_t(coef: np.ndarray, X: Any) -> np.ndarray:
        """Scores transposed, shape (K, n), C-contiguous: ``coef @ Xᵀ``, faster for a tall X."""
        if sp.issparse(X):
            return np.ascontiguousarray(np.asarray(X @ coef.T).T)
        return np.asarray(coef @ X.T, order="C")

    def _shifted_scores(self, coef: np.ndarray, X: Any, actions: np.ndarray) -> tuple:
        """Scores minus each row's maximum, (K, n), and the flat index of the logged entries."""
        S = self._scores_t(coef, X)
        S -= S.max(axis=0)
        return S, actions * S.shape[1] + np.arange(S.shape[1])  # flat index of S[yᵢ, i]

    def _vjp(
        self, E: np.ndarray, total: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> Callable[[np.ndarray], np.ndarray]:
        """V ↦ Σᵢ Vᵢⱼ (e_{yᵢ} − πᵢ) ⊗ xᵢ for each column j, with πᵢ = Eᵢ / totalᵢ (never formed)."""

        def vjp(v: np.ndarray) -> np.ndarray:
            V = v.reshape(v.shape[0], -1)  # (n, m)
            X, Ek, tot, acts = inputs, E, total, actions
            if 2 * (V.size - np.count_nonzero(V)) >= V.size:  # maybe half the rows are 0
                nonzero = V[:, 0] != 0
                for j in range(1, V.shape[1]):
                    nonzero |= V[:, j] != 0
                keep = np.flatnonzero(nonzero)
                if keep.size <= V.shape[0] // 2:  # rows with v = 0 add nothing: skip them
                    X = inputs[keep] if sp.issparse(inputs) else np.take(inputs, keep, axis=0)
                    Ek, tot, acts, V = E[:, keep], total[keep], actions[keep], V[keep]
            m, (K, n) = V.shape[1], Ek.shape
            GT = np.empty((m, K, n))  # C order: the flat view below is a view
            np.multiply(Ek[None, :, :], (V.T / -tot)[:, None, :], out=GT)  # −vᵢ πᵢ, transposed
            flat = GT.reshape(m, K * n)
            logged = acts * n + np.arange(n)
            for j in range(m):
                flat[j, logged] += V[:, j]  # + vᵢ e_{yᵢ}; one logged action per row
            out = np.asarray(GT.reshape(m * K, n) @ X).reshape(m, K, -1)  # one pass over X
            return out[0] if v.ndim == 1 else out

        return vjp

    def log_prob_and_vjp(
        self, coef: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """Log π_w(yᵢ|xᵢ) = s_{i,yᵢ} − logsumexp_k s_{ik}; ∇ = (e_{yᵢ} − πᵢ) ⊗ xᵢ."""
        actions = np.asarray(actions, dtype=np.intp)
        E, logged = self._shifted_scores(coef, inputs, actions)
        log_p = E.ravel()[logged]
        np.exp(E, out=E)
        total = E.sum(axis=0)
        log_p -= np.log(total)  # log-softmax, as scipy.special.log_softmax
        return log_p, self._vjp(E, total, inputs, actions)

    def prob_and_vjp(
        self, coef: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """π_w(yᵢ|xᵢ) = E_{i,yᵢ} / Σₖ E_{ik}, no logarithm; VJP as in ``log_prob_and_vjp``."""
        actions = np.asarray(actions, dtype=np.intp)
        E, logged = self._shifted_scores(coef, inputs, actions)
        np.exp(E, out=E)
        total = E.sum(axis=0)
        return E.ravel()[logged] / total, self._vjp(E, total, inputs, actions)

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

    def _logged_index(self, inputs: Any, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.arange(self.n_rows(inputs)), np.asarray(actions, dtype=np.int64)

    def _draw(self, P: np.ndarray, inputs: Any, rng: np.random.Generator) -> tuple:
        """Inverse-CDF sampling per row; returns (actions, their served probabilities)."""
        u = rng.random(P.shape[0])
        actions = np.minimum((np.cumsum(P, axis=1) < u[:, None]).sum(axis=1), P.shape[1] - 1)
        return actions.astype(np.int64), P[np.arange(P.shape[0]), actions]

    def predict(self, coef: np.ndarray, inputs: Any) -> np.ndarray:
        """MAP action per row."""
        return np.argmax(self._scores(coef, inputs), axis=1).astype(np.int64)
