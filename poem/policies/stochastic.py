"""A fitted stochastic policy: a family, its parameters and the serving knobs (α, ε).

This is the one object the learners produce, the gate evaluates, the artifact store saves
(:mod:`poem.io.artifact`) and the serving model samples from.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.utils import check_random_state

from poem.policies._base import PolicyFamily
from poem.policies.candidates import CandidateFamily
from poem.policies.discrete import DiscreteFamily
from poem.policies.multilabel import MultilabelFamily

__all__ = ["StochasticPolicy", "family_from_log", "make_family"]

_FAMILIES: dict[str, type[PolicyFamily]] = {
    "discrete": DiscreteFamily,
    "multilabel": MultilabelFamily,
    "candidates": CandidateFamily,
}


def make_family(
    name: str, n_features: int, n_actions: int | None = None, fit_intercept: bool = False
) -> PolicyFamily:
    """Build a policy family by name.

    Raises
    ------
    ValueError
        If ``name`` is not one of ``"discrete"``, ``"multilabel"``, ``"candidates"``.
    """
    if name not in _FAMILIES:
        raise ValueError(f"policy must be one of {sorted(_FAMILIES)}, got {name!r}")
    return _FAMILIES[name](n_features, n_actions, fit_intercept)


def family_from_log(log: Any, fit_intercept: bool = False) -> PolicyFamily:
    """The policy family matching a :class:`~poem.data.LoggedBandit`'s action structure."""
    return make_family(log.family, log.n_features, log.n_actions, fit_intercept)


@dataclass(frozen=True, eq=False)
class StochasticPolicy:
    """A softmax policy π_w with serving temperature α and exploration floor ε.

    Parameters
    ----------
    family : PolicyFamily
        Action structure.
    coef : ndarray of shape ``family.coef_shape``
        Parameters w.
    temperature : float, default=1.0
        Temperature α: scores are divided by α before the softmax.
    exploration_floor : float, default=0.0
        Floor ε: every action keeps probability ≥ ε (per label for multilabel).
    metadata : dict, default={}
        JSON-serialisable extras (feature names, action ids, hyperparameters).
    """

    family: PolicyFamily
    coef: np.ndarray
    temperature: float = 1.0
    exploration_floor: float = 0.0
    metadata: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        coef = np.asarray(self.coef, dtype=np.float64)
        if coef.shape != self.family.coef_shape:
            raise ValueError(f"coef must have shape {self.family.coef_shape}, got {coef.shape}")
        if not np.all(np.isfinite(coef)):
            raise ValueError("coef contains non-finite values")
        coef.setflags(write=False)
        object.__setattr__(self, "coef", coef)
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "exploration_floor", float(self.exploration_floor))

    @classmethod
    def uniform(cls, family: PolicyFamily, **kwargs: Any) -> StochasticPolicy:
        """The uniform policy (w = 0)."""
        return cls(family, np.zeros(family.coef_shape), **kwargs)

    def with_serving(
        self, *, temperature: float | None = None, exploration_floor: float | None = None
    ) -> StochasticPolicy:
        """Copy with other serving knobs."""
        return StochasticPolicy(
            self.family,
            self.coef,
            self.temperature if temperature is None else temperature,
            self.exploration_floor if exploration_floor is None else exploration_floor,
            dict(self.metadata),
        )

    def digest(self) -> str:
        """SHA-256 (hex) of what the served distribution depends on: family, w, α and ε.

        Two policies with the same digest serve the same probabilities; the metadata (names,
        hyperparameters) is not included, so a retrain that reproduces w reproduces the digest.
        """
        h = hashlib.sha256(json.dumps(self.family.spec(), sort_keys=True).encode())
        h.update(np.ascontiguousarray(self.coef, dtype="<f8").tobytes())
        h.update(np.array([self.temperature, self.exploration_floor], dtype="<f8").tobytes())
        return h.hexdigest()

    def _kw(self) -> dict[str, float]:
        return {"temperature": self.temperature, "exploration_floor": self.exploration_floor}

    def predict_proba(self, X: Any) -> np.ndarray:
        """Served distribution for raw inputs (see the family's ``predict_proba``)."""
        return self.family.predict_proba(self.coef, self.family.prepare(X), **self._kw())

    def action_probability(self, X: Any, actions: Any) -> np.ndarray:
        """π(yᵢ|xᵢ) of given actions under the served distribution."""
        return self.family.action_probability(
            self.coef, self.family.prepare(X), np.asarray(actions), **self._kw()
        )

    def log_action_probability_on(self, log: Any) -> np.ndarray:
        """π(yᵢ|xᵢ) of a log's actions under the served distribution."""
        return self.family.action_probability(
            self.coef, self.family.inputs_from_log(log), log.actions, **self._kw()
        )

    def sample(self, X: Any, random_state: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Draw actions; return them and their served probabilities (next log's propensities)."""
        rng = (
            np.random.default_rng(check_random_state(random_state).randint(2**31 - 1))
            if not isinstance(random_state, np.random.Generator)
            else random_state
        )
        return self.family.sample(self.coef, self.family.prepare(X), rng, **self._kw())

    def predict(self, X: Any) -> np.ndarray:
        """MAP actions."""
        return self.family.predict(self.coef, self.family.prepare(X))
