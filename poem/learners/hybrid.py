"""Hybrid counterfactual–supervised learner (Li & Joachims; DESIGN §4.8).

A linear score s_{i,c} = w·ψ_{i,c} per candidate serves twice: h = σ(s) predicts the logged
candidate's outcome (a click model), and the policy is the softmax of the scores within each
row's candidate set (:class:`~poem.policies.CandidateFamily`). Training minimises the weighted
cross entropy L(w) of :func:`~poem.learners._hybrid_loss.hybrid_objective`, with yᵢ = −δ'ᵢ
(1 = best outcome) and ωᵢ one of 1 (Eq. 8), 1/pᵢ (Eq. 9), min(M, 1/pᵢ) (Eq. 10) or
min(M, π_w(yᵢ|xᵢ)/pᵢ) (Eq. 12/14, "hybrid").
"""

from __future__ import annotations

import warnings
from numbers import Real

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_scalar
from sklearn.utils.validation import check_is_fitted

from poem.data import LoggedBandit, check_logged_bandit
from poem.learners._hybrid_loss import REGULARIZERS, WEIGHTINGS, hybrid_objective
from poem.learners._lbfgs import lbfgs
from poem.learners._prediction import PolicyPredictionMixin, check_shared_params, store_params
from poem.learners.poem import resolve_clip
from poem.policies._base import check_serving_params
from poem.policies.stochastic import family_from_log

__all__ = ["REGULARIZERS", "WEIGHTINGS", "HybridLearner", "hybrid_objective"]

_MAX_REWEIGHTINGS = 20


class HybridLearner(PolicyPredictionMixin, BaseEstimator):
    """Counterfactual supervised learner: weighted cross entropy + softmax policy over candidates.

    Parameters
    ----------
    policy : {"candidates"}, default="candidates"
        Policy family (the learner needs candidate sets; named as POEM's parameter).
    weighting : str, default="hybrid"
        Row weight ωᵢ: ``"none"`` 1 (plain CE), ``"inverse_propensity"`` 1/pᵢ,
        ``"clipped_inverse_propensity"`` min(M, 1/pᵢ), ``"hybrid"`` min(M, π_w(yᵢ|xᵢ)/pᵢ).
    clip : {"p90/p10", "max/min"}, float or None, default=100.0
        M for the clipped weightings (:func:`poem.learners.poem.resolve_clip`; None = ∞).
    regularizer : {"variance", "tanh_mse"} or None, default=None
        Optional Reg: POEM's √(V̂/n) or the tanh-MSE between 1/π_w and 1/p.
    regularizer_weight : float, default=0.0
        λ ≥ 0.
    weight_gradient : bool, default=True
        Hybrid weighting: differentiate through π_w in ωᵢ. False freezes ωᵢ at the current w and
        re-solves (iterated reweighting, at most 20 rounds) — the paper's "no gradient for π_w".
    l2_penalty : float, default=0.0
        μ ≥ 0.
    max_iter : int, default=200
        L-BFGS-B iterations.
    tol : float, default=1e-6
        L-BFGS-B ``gtol`` and ``ftol``.
    temperature : float, default=1.0
        Serving temperature α of ``policy_``.
    exploration_floor : float, default=0.0
        Serving floor ε of ``policy_``.
    random_state : None, default=None
        Unused (deterministic: L-BFGS-B from w = 0); kept for a uniform learner interface.

    Attributes
    ----------
    coef_, policy_, family_, n_features_in_, converged_, clip_, clipped_fraction_
        As every learner's (:class:`~poem.learners._prediction.PolicyPredictionMixin`);
        ``policy_`` is the softmax of the scores within each candidate set.
    n_iter_ : int
        Solver iterations (summed over reweighting rounds).
    objective_ : float
        Final L(w).
    variance_penalty_ : float
        λ of the variance regularizer (0 without it).
    """

    def __init__(
        self,
        *,
        policy="candidates",
        weighting="hybrid",
        clip=100.0,
        regularizer=None,
        regularizer_weight=0.0,
        weight_gradient=True,
        l2_penalty=0.0,
        max_iter=200,
        tol=1e-6,
        temperature=1.0,
        exploration_floor=0.0,
        random_state=None,
    ):
        store_params(self, locals())

    def _validate_params(self) -> None:
        if self.policy != "candidates":
            raise ValueError(
                f"policy must be 'candidates' (softmax within candidate sets), got {self.policy!r}"
            )
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {list(WEIGHTINGS)}, got {self.weighting!r}")
        if self.regularizer is not None and self.regularizer not in REGULARIZERS:
            raise ValueError(
                f"regularizer must be one of {list(REGULARIZERS)} or None, got {self.regularizer!r}"
            )
        if self.clip is not None and not isinstance(self.clip, str):
            resolve_clip(self.clip, np.ones(1))
        check_scalar(self.regularizer_weight, "regularizer_weight", Real, min_val=0.0)
        check_shared_params(self)
        if not isinstance(self.weight_gradient, bool | np.bool_):
            raise TypeError(
                f"weight_gradient must be a bool, got {type(self.weight_gradient).__name__}"
            )

    def fit(self, log: LoggedBandit) -> HybridLearner:
        """Learn w on a candidate-set log.

        Parameters
        ----------
        log : LoggedBandit
            Candidate-set log.

        Returns
        -------
        self : HybridLearner
            The fitted estimator.

        Raises
        ------
        ValueError
            For invalid hyperparameters or a log that is not of the candidate-set family.
        InvalidLogError
            When the log breaks an invariant or has fewer than two rows.
        """
        self._validate_params()
        if not isinstance(log, LoggedBandit):
            raise TypeError(f"fit expects a LoggedBandit, got {type(log).__name__}")
        check_logged_bandit(log, min_rows=2)
        if log.family != "candidates":
            raise ValueError(f"HybridLearner needs a candidate-set log, got family {log.family!r}")
        family = family_from_log(log)
        check_serving_params(self.temperature, self.exploration_floor, family.max_exploration_floor)
        inputs = family.inputs_from_log(log)
        actions = np.asarray(log.actions, dtype=np.int64)
        scaled = log.scaled_losses()
        clip = resolve_clip(self.clip, log.propensities)
        kwargs = dict(
            weighting=self.weighting,
            clip=clip,
            regularizer=self.regularizer,
            regularizer_weight=float(self.regularizer_weight),
            l2_penalty=float(self.l2_penalty),
        )
        reweight = self.weighting == "hybrid" and not self.weight_gradient
        coef, n_iter, converged = np.zeros(family.coef_shape), 0, False
        for _ in range(_MAX_REWEIGHTINGS if reweight else 1):
            if reweight:  # ωᵢ = min(M, π_w(yᵢ|xᵢ)/pᵢ) frozen at the current w
                r = family.action_probability(coef, inputs, actions) / log.propensities
                kwargs["fixed_weights"] = np.minimum(clip, r)

            def fun(w: np.ndarray) -> tuple[float, np.ndarray]:
                value, grad, _ = hybrid_objective(
                    w, family, inputs, actions, scaled, log.propensities, **kwargs
                )
                return value, grad

            result = lbfgs(fun, coef, self.max_iter, self.tol)
            step = float(np.max(np.abs(result.x - coef)))
            coef, n_iter = result.x, n_iter + int(result.nit)
            converged = result.status == 0 and (not reweight or step <= max(self.tol, 1e-8) ** 0.5)
            if converged:
                break
        value, _, n_clipped = hybrid_objective(
            coef, family, inputs, actions, scaled, log.propensities, **kwargs
        )
        if not converged:
            warnings.warn(
                f"HybridLearner did not converge in {n_iter} iterations ({result.message}); "
                "increase max_iter, raise tol or add l2_penalty.",
                ConvergenceWarning,
                stacklevel=2,
            )
        return self._store_fitted(
            family,
            coef,
            log,
            n_iter=n_iter,
            objective=value,
            converged=converged,
            clip=clip,
            clipped_fraction=n_clipped / log.n_rows,
            variance_penalty=(
                float(self.regularizer_weight) if self.regularizer == "variance" else 0.0
            ),
            metadata={
                "weighting": self.weighting,
                "clip": clip if np.isfinite(clip) else None,
                "regularizer": self.regularizer,
                "regularizer_weight": float(self.regularizer_weight),
                "l2_penalty": float(self.l2_penalty),
            },
        )

    def predict_outcome(self, X):
        """Predicted probability of the best outcome (e.g. a click) of every candidate, σ(w·ψ).

        Parameters
        ----------
        X : CandidateSets
            Candidate vectors.

        Returns
        -------
        ndarray of shape (n_candidates_total,)
            h = σ(s).
        """
        check_is_fitted(self, "coef_")
        inputs = self.family_.prepare(X)
        return expit(np.asarray(inputs.features @ self.coef_).reshape(-1))
