"""What every learner shares: delegation to the fitted ``policy_`` and the common checks."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.utils import check_scalar
from sklearn.utils.validation import check_is_fitted

from poem.policies.stochastic import StochasticPolicy

__all__ = ["PolicyPredictionMixin", "check_shared_params", "store_params"]


def store_params(estimator: Any, params: dict[str, Any]) -> None:
    """Set every ``__init__`` argument as the attribute of its name, unchanged.

    ``__init__`` calls ``store_params(self, locals())``: scikit-learn's convention (no logic, no
    validation in ``__init__``), so ``get_params`` and ``clone`` see the arguments as given.
    """
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


def check_shared_params(estimator: Any) -> None:
    """Check the hyperparameters every learner has (``check_scalar`` errors name each one).

    ``l2_penalty`` ≥ 0, ``max_iter`` ≥ 1, ``tol`` ≥ 0, ``temperature`` > 0 and
    ``exploration_floor`` ≥ 0.
    """
    check_scalar(estimator.l2_penalty, "l2_penalty", Real, min_val=0.0)
    check_scalar(estimator.max_iter, "max_iter", Integral, min_val=1)
    check_scalar(estimator.tol, "tol", Real, min_val=0.0)
    check_scalar(
        estimator.temperature, "temperature", Real, min_val=0.0, include_boundaries="neither"
    )
    check_scalar(estimator.exploration_floor, "exploration_floor", Real, min_val=0.0)


class PolicyPredictionMixin:
    """``predict_proba``, ``predict`` and ``sample`` of a learner whose fit sets ``policy_``.

    ``policy_`` is a :class:`~poem.policies.StochasticPolicy` carrying the serving temperature
    and exploration floor, so these methods return exactly what a served policy would.

    Attributes
    ----------
    coef_ : ndarray of shape ``family_.coef_shape``
        Learned parameters w (raw feature space).
    policy_ : StochasticPolicy
        The learned policy with the serving temperature α and floor ε.
    family_ : PolicyFamily
        Action structure of the training log.
    n_features_in_ : int
        Number of raw features.
    n_iter_ : int
        Solver epochs or iterations.
    objective_ : float
        Training objective at the solution.
    converged_ : bool
        Whether the solver met its tolerance.
    clip_ : float
        Resolved clip M (``inf`` for none).
    clipped_fraction_ : float
        Fraction of training rows whose weight reached M at the solution.
    variance_penalty_ : float
        Resolved variance penalty λ (0 without a variance term); the search reports it.
    """

    def validate_params(self) -> Any:
        """Check the hyperparameters as ``fit`` does, without data; return ``self``.

        The pipeline calls it for every configured value, so a bad one fails before data is read.

        Returns
        -------
        self
            The unchanged estimator.

        Raises
        ------
        ValueError, TypeError
            For an invalid hyperparameter; the message names it and the allowed values.
        """
        self._validate_params()
        return self

    def _store_fitted(
        self,
        family,
        coef,
        log,
        *,
        n_iter,
        objective,
        converged,
        clip,
        clipped_fraction,
        variance_penalty,
        metadata,
    ) -> Any:
        """Set the fitted attributes every learner has and the served ``policy_``; return ``self``.

        ``metadata`` is the policy's, after ``"learner"`` (the class name).
        """
        self.family_ = family
        self.coef_ = coef
        self.n_features_in_ = int(log.n_features)
        self.n_iter_ = int(n_iter)
        self.objective_ = float(objective)
        self.converged_ = bool(converged)
        self.clip_ = clip
        self.clipped_fraction_ = clipped_fraction
        self.variance_penalty_ = variance_penalty
        self.policy_ = StochasticPolicy(
            family,
            coef,
            temperature=float(self.temperature),
            exploration_floor=float(self.exploration_floor),
            metadata={"learner": type(self).__name__, **metadata},
        )
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        """Return the served distribution π(·|x).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), or CandidateSets
            Contexts xᵢ (candidate vectors for the candidate-set family).

        Returns
        -------
        ndarray
            Discrete: shape (n_samples, K), rows sum to 1; multilabel: per-label marginals
            (n_samples, q); candidate sets: one probability per stacked candidate.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        """
        check_is_fitted(self, "policy_")
        return self.policy_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        """Return the MAP actions argmax_y π_w(y|x) (paper Eq. 11).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), or CandidateSets
            Contexts xᵢ.

        Returns
        -------
        ndarray
            Action ids, label vectors or candidate indexes.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        """
        check_is_fitted(self, "policy_")
        return self.policy_.predict(X)

    def sample(self, X: Any, random_state: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Draw yᵢ ~ π(·|xᵢ); return them with their served probabilities (the next propensities).

        Parameters
        ----------
        X : array-like or sparse matrix of shape (n_samples, n_features), or CandidateSets
            Contexts xᵢ.
        random_state : int, RandomState instance, Generator or None, default=None
            Seed of the draws.

        Returns
        -------
        actions : ndarray
            Sampled actions.
        probabilities : ndarray of shape (n_samples,)
            π(yᵢ|xᵢ) of each sampled action under the served distribution.

        Raises
        ------
        sklearn.exceptions.NotFittedError
            Before ``fit``.
        """
        check_is_fitted(self, "policy_")
        return self.policy_.sample(X, random_state)
