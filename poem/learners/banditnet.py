"""BanditNet: SNIPS learning via the loss translation δ − λ (Joachims, Swaminathan, de Rijke 2018).

The self-normalized risk Σ δᵢ rᵢ / Σ rᵢ is not a sum over rows; for a fixed weights' mean
S = (1/n) Σ rᵢ, the Lagrangian of "minimise IPS subject to (1/n) Σ rᵢ = S" is, up to a
constant, the IPS risk of the translated losses δ − λ (:func:`translated_ips_objective`).
"""

from __future__ import annotations

import warnings
from numbers import Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state, check_scalar

from poem.data import LoggedBandit, check_logged_bandit, scale_losses
from poem.estimators.ips import snips
from poem.estimators.weights import importance_weights
from poem.learners._lbfgs import lbfgs
from poem.learners._prediction import PolicyPredictionMixin, check_shared_params, store_params
from poem.learners.objective import crm_objective_from_statistics, crm_statistics
from poem.policies._base import check_serving_params
from poem.policies.stochastic import StochasticPolicy, family_from_log

__all__ = ["BanditNet", "translated_ips_objective"]

POLICIES = ("discrete", "multilabel", "candidates")


def translated_ips_objective(
    coef: np.ndarray,
    family: Any,
    inputs: Any,
    actions: np.ndarray,
    scaled_losses: np.ndarray,
    propensities: np.ndarray,
    loss_translation: float,
    l2_penalty: float = 0.0,
) -> tuple[float, np.ndarray]:
    r"""BanditNet's translated IPS objective and its gradient.

    .. math::

        J_\lambda(w) = \frac{1}{n}\sum_i (\delta'_i - \lambda') r_i + \mu\lVert w\rVert^2,
        \quad r_i = \pi_w(y_i|x_i)/p_i

    where δ'ᵢ are the scaled losses, λ' the translation (scaled units), pᵢ the propensities and
    μ the L2 penalty.

    Parameters
    ----------
    coef, family, inputs, actions, scaled_losses, propensities
        w, the family and the rows, as :func:`~poem.learners.objective.crm_statistics`'s.
    loss_translation : float
        λ' in scaled units.
    l2_penalty : float, default=0.0
        μ.

    Returns
    -------
    value : float
        J_λ(w).
    grad : ndarray
        ∇J_λ(w).

    References
    ----------
    Joachims, Swaminathan & de Rijke (2018), Deep learning with logged bandit feedback, ICLR,
    §3 (the translated objective and the equivalence with SNIPS at fixed S).
    """
    translated = scaled_losses - loss_translation  # δ' − λ'
    stats = crm_statistics(coef, family, inputs, actions, translated, propensities, np.inf)
    return crm_objective_from_statistics(stats, coef, 0.0, l2_penalty)


class BanditNet(PolicyPredictionMixin, BaseEstimator):
    r"""BanditNet: translated-IPS learning with a λ search scored by held-out SNIPS.

    .. math:: \hat w_\lambda = \arg\min_w J_\lambda(w), \qquad
              \hat\lambda = \arg\min_\lambda \hat R_{SNIPS}(\pi_{\hat w_\lambda})

    where J_λ is :func:`translated_ips_objective` on the training rows and R̂_SNIPS the SNIPS
    risk on the held-out rows; ``coef_`` is ŵ_λ̂ (on all rows with ``refit`` or a single λ).

    Parameters
    ----------
    policy : {"discrete", "multilabel", "candidates"}, default="discrete"
        Policy family; must equal the log's family.
    loss_translations : sequence of float or None, default=None
        Candidate translations λ in the log's loss units. None: 11 evenly spaced values from
        δ_min to δ_max. With one value no validation split is made.
    validation_fraction : float, default=0.25
        Share of rows held out to score each λ by SNIPS (in (0, 1)).
    refit : bool, default=True
        Refit the selected λ on all rows.
    l2_penalty : float, default=0.0
        μ ≥ 0.
    max_iter : int, default=200
        L-BFGS-B iterations per λ.
    tol : float, default=1e-6
        L-BFGS-B ``gtol`` and ``ftol``.
    fit_intercept : bool, default=True
        Append a constant feature (discrete and multilabel families).
    temperature : float, default=1.0
        Serving temperature α of ``policy_``.
    exploration_floor : float, default=0.0
        Serving floor ε of ``policy_``.
    random_state : int, RandomState instance or None, default=None
        Seed of the validation split.

    Attributes
    ----------
    coef_, policy_, family_, n_features_in_, n_iter_, converged_
        As every learner's (:class:`~poem.learners._prediction.PolicyPredictionMixin`), of the
        final fit.
    objective_ : float
        Final J_λ(w) (scaled units).
    clip_, clipped_fraction_, variance_penalty_ : float
        ∞, 0 and 0 (no clip, no variance term).
    loss_translation_ : float
        Selected λ (loss units).
    search_results_ : tuple of dict
        Per λ: ``loss_translation``, ``snips_risk`` (validation), ``mean_weight`` S (training
        rows), ``objective``, ``n_iter``, ``converged``.
    """

    def __init__(
        self,
        *,
        policy="discrete",
        loss_translations=None,
        validation_fraction=0.25,
        refit=True,
        l2_penalty=0.0,
        max_iter=200,
        tol=1e-6,
        fit_intercept=True,
        temperature=1.0,
        exploration_floor=0.0,
        random_state=None,
    ):
        store_params(self, locals())

    def _validate_params(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {list(POLICIES)}, got {self.policy!r}")
        if self.loss_translations is not None:
            grid = np.asarray(self.loss_translations, dtype=float).reshape(-1)
            if grid.size == 0 or not np.all(np.isfinite(grid)):
                raise ValueError(
                    "loss_translations must be a non-empty list of finite numbers, "
                    f"got {self.loss_translations!r}"
                )
        check_scalar(
            self.validation_fraction,
            "validation_fraction",
            Real,
            min_val=0.0,
            max_val=1.0,
            include_boundaries="neither",
        )
        check_shared_params(self)
        for name in ("refit", "fit_intercept"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")

    def _solve(self, family, log, translation):
        inputs = family.inputs_from_log(log)
        actions = np.asarray(log.actions)
        scaled = log.scaled_losses()
        shift = float(scale_losses(translation, log.loss_bounds))  # λ' in scaled units

        def fun(flat):
            w = flat.reshape(family.coef_shape)
            value, grad = translated_ips_objective(
                w, family, inputs, actions, scaled, log.propensities, shift, float(self.l2_penalty)
            )
            return value, grad.ravel()

        result = lbfgs(fun, np.zeros(int(np.prod(family.coef_shape))), self.max_iter, self.tol)
        return result.x.reshape(family.coef_shape), result

    def fit(self, log: LoggedBandit) -> BanditNet:
        """Search λ on held-out SNIPS and learn w.

        Parameters
        ----------
        log : LoggedBandit
            Training log of the ``policy`` family.

        Returns
        -------
        self : BanditNet
            The fitted estimator.

        Raises
        ------
        ValueError
            For invalid hyperparameters, a family mismatch, or too few rows to hold out.
        InvalidLogError
            When the log breaks an invariant.
        """
        self._validate_params()
        if not isinstance(log, LoggedBandit):
            raise TypeError(f"fit expects a LoggedBandit, got {type(log).__name__}")
        check_logged_bandit(log, min_rows=2, min_distinct_actions=2)
        if log.family != self.policy:
            raise ValueError(
                f"policy={self.policy!r} but the log's family is {log.family!r}; "
                f"set policy={log.family!r}"
            )
        family = family_from_log(log, fit_intercept=bool(self.fit_intercept))
        check_serving_params(self.temperature, self.exploration_floor, family.max_exploration_floor)
        lo, hi = log.loss_bounds
        grid = (
            np.linspace(lo, hi, 11)
            if self.loss_translations is None
            else np.asarray(self.loss_translations, dtype=float).reshape(-1)
        )
        results = []
        if grid.size == 1:
            best = float(grid[0])
        else:
            rng = check_random_state(self.random_state)
            order = rng.permutation(log.n_rows)
            n_val = int(round(float(self.validation_fraction) * log.n_rows))
            if n_val < 2 or log.n_rows - n_val < 2:
                raise ValueError(
                    f"validation_fraction={self.validation_fraction} leaves {n_val} validation and "
                    f"{log.n_rows - n_val} training rows of {log.n_rows}; both need at least 2"
                )
            train, val = log.take(np.sort(order[n_val:])), log.take(np.sort(order[:n_val]))
            for translation in grid:
                w, res = self._solve(family, train, float(translation))
                policy = StochasticPolicy(family, w)
                weights = importance_weights(
                    policy.log_action_probability_on(val), val.propensities
                )
                mean_weight = float(
                    np.mean(policy.log_action_probability_on(train) / train.propensities)
                )
                results.append(
                    {
                        "loss_translation": float(translation),
                        "snips_risk": snips(val.losses, weights).value,
                        "mean_weight": mean_weight,
                        "objective": float(res.fun),
                        "n_iter": int(res.nit),
                        "converged": bool(res.status == 0),
                    }
                )
            best = results[int(np.argmin([r["snips_risk"] for r in results]))]["loss_translation"]
        if grid.size == 1 or self.refit:
            w, res = self._solve(family, log, best)
        if not res.status == 0:
            warnings.warn(
                f"BanditNet did not converge in {res.nit} iterations ({res.message}); "
                "increase max_iter, raise tol or add l2_penalty.",
                ConvergenceWarning,
                stacklevel=2,
            )
        self.loss_translation_ = float(best)
        self.search_results_ = tuple(results)
        return self._store_fitted(
            family,
            w,
            log,
            n_iter=res.nit,
            objective=res.fun,
            converged=res.status == 0,
            clip=float("inf"),  # no clipping: BanditNet controls variance through λ, not M
            clipped_fraction=0.0,
            variance_penalty=0.0,
            metadata={
                "loss_translation": float(best),
                "l2_penalty": float(self.l2_penalty),
                "feature_names": log.feature_names,
            },
        )
