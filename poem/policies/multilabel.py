r"""Factorized multilabel policy, φ(x, y) = x ⊗ y (paper §5, DESIGN §4.7).

.. math:: \pi_w(y|x) = \prod_{l=1}^{q} \sigma_l^{y_l} (1 - \sigma_l)^{1 - y_l},
          \quad \sigma_l = \sigma(w_l \cdot x / \alpha)

where q is the number of labels, α the temperature and σ the logistic function. The log
partition function factorizes: log Z(x) = Σ_l log(1 + exp(w_l·x)). The exploration floor ε
is applied per label, σ'_l = (1 − 2ε) σ_l + ε, so every label bit keeps probability ≥ ε.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy.special import expit, log_expit

from poem.policies._base import PolicyFamily, check_serving_params

__all__ = ["MultilabelFamily", "expected_hamming_loss"]


class MultilabelFamily(PolicyFamily):
    """Per-label logistic policy; ``coef`` has shape (q, n_inputs)."""

    name = "multilabel"

    @property
    def coef_shape(self) -> tuple[int, ...]:
        """(q, n_inputs)."""
        return (int(self.n_actions), self.n_inputs)

    @property
    def max_exploration_floor(self) -> float:
        """Per-label floor, at most 1/2."""
        return 0.5

    def log_prob_and_vjp(
        self, coef: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """Log π = Σ_l [y_l log σ_l + (1 − y_l) log(1 − σ_l)]; ∇_{w_l} = (y_l − σ_l) x (§4.7)."""
        S = self._scores(coef, inputs)
        Y = np.asarray(actions, dtype=np.float64)
        log_sig = log_expit(S)
        log_p = np.sum(log_sig - (1.0 - Y) * S, axis=1)  # log(1 − σ) = log σ − s
        R = Y - np.exp(log_sig)  # y_l − σ_l

        def vjp(v: np.ndarray) -> np.ndarray:
            V = v.reshape(v.shape[0], -1)  # (n, m)
            G = R[:, None, :] * V[:, :, None]  # (n, m, q)
            out = np.asarray(inputs.T @ G.reshape(G.shape[0], -1))  # (d, m·q): one pass over X
            out = out.reshape(out.shape[0], V.shape[1], -1).transpose(1, 2, 0)  # (m, q, d)
            return out[0] if v.ndim == 1 else out

        return log_p, vjp

    def predict_proba(
        self,
        coef: np.ndarray,
        inputs: Any,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> np.ndarray:
        """Served per-label marginals σ'_l, shape (n_samples, q) (labels are independent)."""
        check_serving_params(temperature, exploration_floor, self.max_exploration_floor)
        sig = expit(self._scores(coef, inputs) / temperature)
        if exploration_floor:
            sig = (1.0 - 2.0 * exploration_floor) * sig + exploration_floor
        return sig

    def action_probability(
        self,
        coef: np.ndarray,
        inputs: Any,
        actions: np.ndarray,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> np.ndarray:
        """Joint served probability Π_l σ'_l^{y_l}(1 − σ'_l)^{1−y_l}, shape (n_samples,)."""
        Y = np.asarray(actions, dtype=np.float64)
        if exploration_floor == 0.0:
            check_serving_params(temperature, exploration_floor, self.max_exploration_floor)
            S = self._scores(coef, inputs) / temperature
            return np.exp(np.sum(Y * log_expit(S) + (1.0 - Y) * log_expit(-S), axis=1))
        sig = self.predict_proba(coef, inputs, temperature, exploration_floor)
        return np.exp(np.sum(Y * np.log(sig) + (1.0 - Y) * np.log1p(-sig), axis=1))

    def _draw(self, sig: np.ndarray, inputs: Any, rng: np.random.Generator) -> tuple:
        """Independent Bernoulli draw per label; returns (bit vectors, joint probabilities)."""
        Y = (rng.random(sig.shape) < sig).astype(np.int64)
        prob = np.exp(np.sum(np.where(Y == 1, np.log(sig), np.log1p(-sig)), axis=1))
        return Y, prob

    def predict(self, coef: np.ndarray, inputs: Any) -> np.ndarray:
        """MAP labels y_l = [w_l · x > 0] (paper Eq. 11)."""
        return (self._scores(coef, inputs) > 0).astype(np.int64)


def expected_hamming_loss(marginals: np.ndarray, labels: np.ndarray) -> np.ndarray:
    r"""Expected Hamming loss of a factorized policy against true labels (DESIGN §4.7).

    .. math::

        E_{y \sim \pi}[\Delta(y^*, y)] = \sum_l y^*_l (1 - \sigma_l) + (1 - y^*_l) \sigma_l

    where σ_l is the policy's probability of label l and y* the true label vector.

    Parameters
    ----------
    marginals : array-like of shape (n_samples, n_labels)
        Per-label probabilities σ_l (``predict_proba`` of the multilabel family), or 0/1
        predictions for a deterministic predictor.
    labels : array-like of shape (n_samples, n_labels)
        True label vectors y*.

    Returns
    -------
    ndarray of shape (n_samples,)
        Expected number of wrongly assigned labels per row.
    """
    sig = np.asarray(marginals, dtype=np.float64)
    Y = np.asarray(labels, dtype=np.float64)
    return np.sum(Y * (1.0 - sig) + (1.0 - Y) * sig, axis=1)
