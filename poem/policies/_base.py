"""The interface every policy family implements (DESIGN §3).

A family knows the structure of the action space and computes, for a flat
parameter array ``coef`` of shape :attr:`PolicyFamily.coef_shape`:

- ``log_prob_and_vjp``: log π_w(yᵢ|xᵢ) and a vector–Jacobian product
  v ↦ Σᵢ vᵢ ∇_w log π_w(yᵢ|xᵢ) (never a dense n×d Jacobian); ``prob_and_vjp`` gives
  π_w(yᵢ|xᵢ) itself with the same product (the CRM pass needs no logarithm);
- ``row_slice``: contiguous rows as a view (the CRM pass works in cache-sized blocks);
- ``action_probability``, ``predict_proba``, ``sample`` and ``predict`` (MAP) under the
  *served* distribution: temperature α and exploration floor ε applied.

Learners only talk to this interface, so one objective serves every family.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import scipy.sparse as sp

__all__ = ["MAX_COEFFICIENTS", "PolicyFamily", "check_policy_size", "check_serving_params"]

# Largest parameter array w a family may have: 2**25 float64 = 256 MiB per copy, of which the
# solvers hold a few dozen. The log checks refuse wider logs with this same limit.
MAX_COEFFICIENTS = 2**25


def check_policy_size(n_features: int, n_actions: int | None = None) -> int:
    """Number of coefficients of a policy over ``n_features`` (+ intercept) and ``n_actions``.

    Raises
    ------
    ValueError
        When it exceeds :data:`MAX_COEFFICIENTS` (training would need tens of GiB).
    """
    n_coef = (int(n_features) + 1) * max(1, int(n_actions or 1))
    if n_coef > MAX_COEFFICIENTS:
        raise ValueError(
            f"n_features = {int(n_features):,}"
            + (f" × n_actions = {int(n_actions):,}" if n_actions else "")
            + f" gives a policy of {n_coef:,} coefficients, more than the {MAX_COEFFICIENTS:,} "
            "training can hold in memory; hash or select the features into fewer dimensions"
        )
    return n_coef


def check_serving_params(temperature: float, exploration_floor: float, max_floor: float) -> None:
    """Validate temperature α > 0 and floor ε ∈ [0, max_floor].

    Raises
    ------
    ValueError
        If either value is out of range.
    """
    if not (np.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be > 0, got {temperature!r}")
    if not (np.isfinite(exploration_floor) and 0 <= exploration_floor <= max_floor):
        raise ValueError(
            f"exploration_floor must be in [0, {max_floor:g}] for this action space, "
            f"got {exploration_floor!r}"
        )


class PolicyFamily(ABC):
    """Structure of an action space and the softmax policy over it.

    Parameters
    ----------
    n_features : int
        Number of raw input features (before the optional intercept column).
    n_actions : int or None
        Number of actions K (discrete) or labels q (multilabel); None for candidate sets.
    fit_intercept : bool
        Whether a constant feature is appended to every context.
    """

    name: ClassVar[str]

    def __init__(self, n_features: int, n_actions: int | None = None, fit_intercept: bool = False):
        self.n_features = int(n_features)
        self.n_actions = None if n_actions is None else int(n_actions)
        self.fit_intercept = bool(fit_intercept)
        check_policy_size(self.n_features, self.n_actions)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(n_features={self.n_features}, n_actions={self.n_actions}, "
            f"fit_intercept={self.fit_intercept})"
        )

    def spec(self) -> dict[str, Any]:
        """JSON-serialisable description (used by the policy artifact)."""
        return {
            "family": self.name,
            "n_features": self.n_features,
            "n_actions": self.n_actions,
            "fit_intercept": self.fit_intercept,
        }

    # -- structure ------------------------------------------------------------------------------
    @property
    def n_inputs(self) -> int:
        """Feature dimension seen by the parameters (intercept included)."""
        return self.n_features + int(self.fit_intercept)

    @property
    @abstractmethod
    def coef_shape(self) -> tuple[int, ...]:
        """Shape of the parameter array w."""

    @property
    def max_exploration_floor(self) -> float:
        """Largest admissible exploration floor ε (uniform policy)."""
        return 1.0 / float(self.n_actions)

    def prepare(self, inputs: Any) -> Any:
        """Validate raw inputs (feature count) and add the intercept column if configured.

        Raises
        ------
        ValueError
            If the number of features differs from ``n_features``.
        """
        if sp.issparse(inputs):
            X = sp.csr_matrix(inputs, dtype=np.float64)
        else:
            X = np.asarray(inputs, dtype=np.float64)
            if X.ndim != 2:
                raise ValueError(f"X must be 2-dimensional, got shape {X.shape}")
        if X.shape[1] != self.n_features:
            raise ValueError(
                f"X has {X.shape[1]} features, but the policy was fitted with "
                f"{self.n_features} features"
            )
        if self.fit_intercept:
            ones = np.ones((X.shape[0], 1))
            X = (
                sp.hstack([X, sp.csr_matrix(ones)], format="csr")
                if sp.issparse(X)
                else np.hstack([X, ones])
            )
        return X

    def inputs_from_log(self, log: Any) -> Any:
        """Prepared inputs of a :class:`~poem.data.LoggedBandit`."""
        return self.prepare(log.contexts)

    @staticmethod
    def n_rows(inputs: Any) -> int:
        """Number of rows of prepared inputs."""
        return int(inputs.shape[0])

    @staticmethod
    def row_slice(inputs: Any, start: int, stop: int) -> Any:
        """Contiguous rows ``start:stop`` of prepared inputs (a view for arrays and CSR)."""
        if sp.issparse(inputs):  # scipy's row slicing copies; share data and indices instead
            lo, hi = int(inputs.indptr[start]), int(inputs.indptr[stop])
            return sp.csr_matrix(
                (inputs.data[lo:hi], inputs.indices[lo:hi], inputs.indptr[start : stop + 1] - lo),
                shape=(stop - start, inputs.shape[1]),
            )
        return inputs[start:stop]

    @staticmethod
    def subset(inputs: Any, rows: np.ndarray) -> Any:
        """Rows of prepared inputs (minibatches)."""
        return inputs[rows]

    # -- math ------------------------------------------------------------------------------------
    def _scores(self, coef: np.ndarray, X: Any) -> np.ndarray:
        """Scores X wᵀ of prepared inputs, shape (n_samples, coef.shape[0])."""
        return np.asarray(X @ coef.T)

    @abstractmethod
    def log_prob_and_vjp(
        self, coef: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """Training log-probabilities (α = 1, ε = 0) and their vector–Jacobian product.

        Returns
        -------
        log_prob : ndarray of shape (n_samples,)
            log π_w(yᵢ|xᵢ).
        vjp : callable
            ``vjp(v)`` returns Σᵢ vᵢ ∇_w log π_w(yᵢ|xᵢ), an array of shape ``coef_shape``; for
            ``v`` of shape (n_samples, m) it returns the m products stacked, shape
            ``(m, *coef_shape)``, from one pass over the inputs.
        """

    def prob_and_vjp(
        self, coef: np.ndarray, inputs: Any, actions: np.ndarray
    ) -> tuple[np.ndarray, Callable[[np.ndarray], np.ndarray]]:
        """Training probabilities π_w(yᵢ|xᵢ) (α = 1, ε = 0) and the VJP of their logarithm.

        What the CRM statistics need (the weight rᵢ = πᵢ / pᵢ, never log π); families override
        it when they can skip the logarithm. Defaults to ``exp`` of :meth:`log_prob_and_vjp`.
        """
        log_p, vjp = self.log_prob_and_vjp(coef, inputs, actions)
        return np.exp(log_p), vjp

    def _logged_index(self, inputs: Any, actions: np.ndarray) -> Any:
        """Index of each row's action in :meth:`predict_proba`'s output."""
        raise NotImplementedError(f"{type(self).__name__} has no flat action index")

    def action_probability(
        self,
        coef: np.ndarray,
        inputs: Any,
        actions: np.ndarray,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> np.ndarray:
        """π(yᵢ|xᵢ) of the given actions under the served distribution, shape (n_samples,).

        Defaults to the entries of :meth:`predict_proba` at :meth:`_logged_index`.
        """
        P = self.predict_proba(coef, inputs, temperature, exploration_floor)
        return P[self._logged_index(inputs, actions)]

    @abstractmethod
    def predict_proba(
        self,
        coef: np.ndarray,
        inputs: Any,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> np.ndarray:
        """Served distribution: (n, K) discrete, marginals (n, q) multilabel, flat candidates."""

    def sample(
        self,
        coef: np.ndarray,
        inputs: Any,
        rng: np.random.Generator,
        temperature: float = 1.0,
        exploration_floor: float = 0.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draw yᵢ ~ π(·|xᵢ); return the actions and their served probabilities."""
        P = self.predict_proba(coef, inputs, temperature, exploration_floor)
        return self._draw(P, inputs, rng)

    @abstractmethod
    def _draw(self, P: np.ndarray, inputs: Any, rng: np.random.Generator) -> tuple:
        """:meth:`sample` from the served distribution ``P`` (:meth:`predict_proba`'s output)."""

    @abstractmethod
    def predict(self, coef: np.ndarray, inputs: Any) -> np.ndarray:
        """MAP actions argmax_y π_w(y|x) (independent of temperature and floor)."""
