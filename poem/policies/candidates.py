r"""Softmax over each row's own candidate set (paper §7, DESIGN §3, §4.8).

.. math::

    \pi_w(c|i) = \exp(w \cdot \psi_{i,c} / \alpha)
                 / \sum_{c'=1}^{k_i} \exp(w \cdot \psi_{i,c'} / \alpha)

served as (1 − kᵢ ε) π_w + ε, where ψ_{i,c} is the feature vector of candidate c of row i,
kᵢ the size of row i's candidate set, α the temperature and ε the exploration floor.
Inputs are :class:`~poem.data.CandidateSets`; an "abstain" option is just one more candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from poem.data import CandidateSets
from poem.policies._base import PolicyFamily, check_serving_params

__all__ = ["CandidateFamily", "segment_logsumexp"]


def segment_logsumexp(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Compute log Σ_{c in row i} exp(values_c) per row of a ragged layout (rows non-empty)."""
    starts = offsets[:-1]
    sizes = np.diff(offsets)
    m = np.maximum.reduceat(values, starts)
    shifted = np.exp(values - np.repeat(m, sizes))
    return m + np.log(np.add.reduceat(shifted, starts))


class CandidateFamily(PolicyFamily):
    """Linear-softmax policy over ragged candidate sets; ``coef`` has shape (n_features,).

    No intercept: a constant added to every candidate's score cancels in the softmax.
    """

    name = "candidates"

    def __init__(self, n_features: int, n_actions: int | None = None, fit_intercept: bool = False):
        super().__init__(n_features, None, False)

    @property
    def coef_shape(self) -> tuple[int, ...]:
        """(n_features,)."""
        return (self.n_features,)

    @property
    def max_exploration_floor(self) -> float:
        """The floor must satisfy kᵢ ε ≤ 1 for every row; checked per call."""
        return 1.0

    def prepare(self, inputs: Any) -> CandidateSets:
        """Check that inputs are candidate sets with the fitted feature count."""
        if not isinstance(inputs, CandidateSets):
            raise TypeError(
                f"candidate-set policies take CandidateSets, got {type(inputs).__name__}"
            )
        if inputs.n_features != self.n_features:
            raise ValueError(
                f"candidates have {inputs.n_features} features, but the policy was fitted with "
                f"{self.n_features} features"
            )
        if np.any(inputs.sizes < 1):
            raise ValueError(f"{int(np.sum(inputs.sizes < 1))} rows have zero candidates")
        return inputs

    def inputs_from_log(self, log: Any) -> CandidateSets:
        """The log's candidate sets."""
        return self.prepare(log.candidates)

    @staticmethod
    def n_rows(inputs: Any) -> int:
        """Number of rows."""
        return int(inputs.n_rows)

    @staticmethod
    def subset(inputs: Any, rows: np.ndarray) -> CandidateSets:
        """Candidate sets of the given rows."""
        return inputs.take(rows)

    @staticmethod
    def row_slice(inputs: Any, start: int, stop: int) -> CandidateSets:
        """Candidate sets of rows ``start:stop`` (the features are a view)."""
        lo, hi = int(inputs.offsets[start]), int(inputs.offsets[stop])
        return CandidateSets(inputs.features[lo:hi], inputs.offsets[start : stop + 1] - lo)

    def _log_proba(
        self, coef: np.ndarray, inputs: CandidateSets, temperature: float = 1.0
    ) -> np.ndarray:
        s = np.asarray(inputs.features @ coef).reshape(-1) / temperature
        return s - np.repeat(segment_logsumexp(s, inputs.offsets), inputs.sizes)

    def _logged_index(self, inputs: CandidateSets, actions: np.ndarray) -> np.ndarray:
        return inputs.offsets[:-1] + np.asarray(actions, dtype=np.int64)

    def log_prob_and_vjp(
        self, coef: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """Log π = s_{i,yᵢ} − logsumexp_c s_{i,c}; ∇ = ψ_{i,yᵢ} − Σ_c π_{ic} ψ_{i,c}."""
        log_p_all = self._log_proba(coef, inputs)
        idx = self._logged_index(inputs, actions)

        P = np.exp(log_p_all)

        def vjp(v: np.ndarray) -> np.ndarray:
            V = v.reshape(v.shape[0], -1)  # (n, m)
            c = -P[:, None] * np.repeat(V, inputs.sizes, axis=0)  # (n_candidates, m)
            c[idx] += V  # one logged candidate per row: no repeated indexes
            out = np.asarray(inputs.features.T @ c).T  # (m, d)
            return out[0] if v.ndim == 1 else out

        return log_p_all[idx], vjp

    def predict_proba(
        self,
        coef: np.ndarray,
        inputs: Any,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> np.ndarray:
        """Served probabilities of every stacked candidate, shape (n_candidates_total,)."""
        check_serving_params(temperature, exploration_floor, 1.0 / float(inputs.sizes.max()))
        P = np.exp(self._log_proba(coef, inputs, temperature))
        if exploration_floor:
            P = (
                1.0 - np.repeat(inputs.sizes, inputs.sizes) * exploration_floor
            ) * P + exploration_floor
        return P

    def _draw(self, P: np.ndarray, inputs: Any, rng: np.random.Generator) -> tuple:
        """Inverse-CDF sampling within each row's set; returns (indexes, served probabilities)."""
        starts, sizes = inputs.offsets[:-1], inputs.sizes
        cum = np.cumsum(P)
        base = np.repeat(cum[starts] - P[starts], sizes)
        u = np.repeat(rng.random(inputs.n_rows), sizes)
        below = (cum - base < u).astype(np.int64)
        actions = np.minimum(np.add.reduceat(below, starts), sizes - 1)
        return actions, P[starts + actions]

    def predict(self, coef: np.ndarray, inputs: Any) -> np.ndarray:
        """Index of the highest-scoring candidate of each row (first on ties)."""
        s = np.asarray(inputs.features @ coef).reshape(-1)
        starts, sizes = inputs.offsets[:-1], inputs.sizes
        m = np.repeat(np.maximum.reduceat(s, starts), sizes)
        local = np.arange(s.size) - np.repeat(starts, sizes)
        return np.minimum.reduceat(np.where(s >= m, local, np.iinfo(np.int64).max), starts).astype(
            np.int64
        )
