"""Direct method (DM), doubly robust (DR) and self-normalized DR estimates of a policy's risk.

A loss model δ̂(x, a) (any scikit-learn estimator, :mod:`poem.estimators._loss_model`,
re-exported here) is fitted on the log by K-fold cross-fitting (DESIGN §4.2); its predictions
enter three pure estimators that return the same frozen :class:`~poem.estimators.ips.Estimate`
as IPS/SNIPS. DM/DR need the policy's whole distribution, so they support the discrete and
candidate-set families (not multilabel, whose 2^q actions are not enumerated).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poem.estimators._loss_model import LossPredictions, fit_loss_model, loss_model_features
from poem.estimators.bounds import (
    INTERVAL_METHODS,
    _check_confidence_level,
    _check_option,
    _finite_vector,
    standard_error,
)
from poem.estimators.ips import Estimate, _interval, _losses_and_weights
from poem.estimators.weights import effective_sample_size, importance_weights

__all__ = [
    "DR_ESTIMATORS",
    "LossPredictions",
    "direct_method",
    "doubly_robust",
    "evaluate_policy_dr",
    "fit_loss_model",
    "loss_model_features",
    "self_normalized_doubly_robust",
]

DR_ESTIMATORS = ("dm", "dr", "sndr")


# -- the three estimators (pure functions of per-row arrays) -----------------------------------
def _options(confidence_level: Any, interval: Any, random_state: Any) -> tuple:
    _check_option(interval, "interval", INTERVAL_METHODS)
    return _check_confidence_level(confidence_level), interval, random_state


def _finish(name, value, terms, arrays, statistic, options, ess) -> Estimate:
    """The :class:`Estimate` of ``value`` with the standard error of its per-row ``terms``."""
    level, interval, random_state = options
    value, se, n = float(value), standard_error(terms), terms.size
    lower, upper = _interval(statistic, arrays, value, se, n, level, interval, random_state)
    return Estimate(name, value, se, lower, upper, int(n), level, ess, 0.0, interval)


def direct_method(
    model_values: Any, *, confidence_level: float = 0.95, interval: str = "t", random_state: Any = 0
) -> Estimate:
    r"""Direct-method (DM) estimate of a policy's risk from a loss model.

    .. math::

        \hat R_{DM}(\pi) = \frac{1}{n} \sum_{i=1}^n \hat v_i, \quad
        \hat v_i = \sum_a \pi(a|x_i)\, \hat\delta(x_i, a)

    where δ̂ is the (cross-fitted) loss model, π the target policy and n the number of rows.
    The interval treats δ̂ as fixed (it ignores the model's own estimation error).

    Parameters
    ----------
    model_values : array-like of shape (n_samples,)
        Model-expected loss of the target policy per row, i.e. v̂ᵢ
        (:meth:`LossPredictions.expected_loss`).
    confidence_level, interval, random_state
        As for :func:`~poem.estimators.ips.ips`.

    Returns
    -------
    Estimate
        ``estimator="dm"``; the effective sample size is n (every row counts once).

    Raises
    ------
    ValueError
        If there are fewer than two rows, non-finite values or a bad option.

    References
    ----------
    Dudík, Langford & Li (2011), Doubly robust policy evaluation and learning, ICML,
    arXiv:1103.4601 (the direct method).
    """
    options = _options(confidence_level, interval, random_state)
    v = _finite_vector(model_values, "model_values")
    return _finish("dm", v.mean(), v, (v,), lambda V: V.mean(-1), options, float(v.size))


def _dr_inputs(losses, weights, logged_predictions, model_values):
    d, w = _losses_and_weights(losses, weights)
    q = _finite_vector(logged_predictions, "logged_predictions")
    v = _finite_vector(model_values, "model_values")
    for name, arr in (("logged_predictions", q), ("model_values", v)):
        if arr.size != w.size:
            raise ValueError(f"{name} has {arr.size:,} rows but weights has {w.size:,}")
    return d, w, q, v


def doubly_robust(
    losses: Any,
    weights: Any,
    logged_predictions: Any,
    model_values: Any,
    *,
    confidence_level: float = 0.95,
    interval: str = "t",
    random_state: Any = 0,
) -> Estimate:
    r"""Doubly robust (DR) estimate of a policy's risk.

    .. math::

        \hat R_{DR}(\pi) = \frac{1}{n} \sum_{i=1}^n t_i, \quad
        t_i = \hat v_i + r_i (\delta_i - \hat\delta(x_i, y_i)), \quad
        \mathrm{se} = \sqrt{\hat V(t) / n}

    where v̂ᵢ = Σ_a π(a|xᵢ) δ̂(xᵢ, a) is the model-expected loss of the target policy, rᵢ the
    importance weight, δᵢ the logged loss and δ̂(xᵢ, yᵢ) the model's prediction for the logged
    action. Unbiased when either the propensities or the loss model are correct.

    Parameters
    ----------
    losses, weights : array-like of shape (n_samples,)
        δᵢ and rᵢ ≥ 0, as for :func:`~poem.estimators.ips.ips`.
    logged_predictions : array-like of shape (n_samples,)
        Loss-model prediction for the logged action, i.e. δ̂(xᵢ, yᵢ).
    model_values : array-like of shape (n_samples,)
        Model-expected loss of the target policy, i.e. v̂ᵢ.
    confidence_level, interval, random_state
        As for :func:`direct_method`.

    Returns
    -------
    Estimate
        ``estimator="dr"``; ESS of the weights.

    Raises
    ------
    ValueError
        If lengths differ, there are fewer than two rows, values are non-finite, weights are
        negative or an option is bad.

    References
    ----------
    Dudík, Langford & Li (2011), Doubly robust policy evaluation and learning, ICML,
    arXiv:1103.4601 (the DR estimator).
    """
    options = _options(confidence_level, interval, random_state)
    d, w, q, v = _dr_inputs(losses, weights, logged_predictions, model_values)
    t = v + w * (d - q)  # tᵢ = v̂ᵢ + rᵢ(δᵢ − δ̂ᵢ)
    return _finish("dr", t.mean(), t, (t,), lambda T: T.mean(-1), options, effective_sample_size(w))


def _sndr_statistic(v: np.ndarray, w: np.ndarray, e: np.ndarray) -> np.ndarray:
    total = w.sum(-1)
    ratio = np.where(total > 0, (w * e).sum(-1) / np.where(total > 0, total, 1.0), np.nan)
    return v.mean(-1) + ratio


def self_normalized_doubly_robust(
    losses: Any,
    weights: Any,
    logged_predictions: Any,
    model_values: Any,
    *,
    confidence_level: float = 0.95,
    interval: str = "t",
    random_state: Any = 0,
) -> Estimate:
    r"""Self-normalized doubly robust (SNDR) estimate, with a delta-method interval.

    .. math::

        \hat R_{SNDR}(\pi) = \bar v + \frac{\sum_i r_i e_i}{\sum_i r_i}, \quad
        e_i = \delta_i - \hat\delta(x_i, y_i), \quad
        \psi_i = (\hat v_i - \bar v) + \frac{r_i (e_i - \bar c)}{\bar r}, \quad
        \mathrm{se} = \sqrt{\hat V(\psi) / n}

    where v̂ᵢ is the model-expected loss of the target policy (v̄ its mean), rᵢ the importance
    weight (r̄ its mean), eᵢ the residual of the logged loss δᵢ, c̄ = Σrᵢeᵢ/Σrᵢ the normalised
    correction and ψᵢ the first-order (delta-method) influence terms.

    Parameters
    ----------
    losses, weights, logged_predictions, model_values : array-like of shape (n_samples,)
        δᵢ, rᵢ (not all 0), δ̂(xᵢ, yᵢ) and v̂ᵢ, as for :func:`doubly_robust`.
    confidence_level, interval, random_state
        As for :func:`direct_method`.

    Returns
    -------
    Estimate
        ``estimator="sndr"``; ESS of the weights.

    Raises
    ------
    ValueError
        As :func:`doubly_robust`, and if every weight is 0.

    References
    ----------
    Kallus & Uehara (2019), Intrinsically efficient, stable, and bounded off-policy evaluation
    for reinforcement learning, NeurIPS, arXiv:1906.03735 (self-normalized DR).
    Swaminathan & Joachims (2015), The self-normalized estimator for counterfactual learning,
    NeurIPS 28.
    """
    options = _options(confidence_level, interval, random_state)
    d, w, q, v = _dr_inputs(losses, weights, logged_predictions, model_values)
    if w.sum() == 0:
        raise ValueError(
            "weights are all 0: the target policy puts no probability on any logged action, "
            "so SNDR is undefined"
        )
    e = d - q
    correction = float(np.dot(w, e) / w.sum())
    value = float(v.mean() + correction)
    psi = (v - v.mean()) + w * (e - correction) / w.mean()
    return _finish(
        "sndr", value, psi, (v, w, e), _sndr_statistic, options, effective_sample_size(w)
    )


def evaluate_policy_dr(
    policy: Any,
    log: Any,
    *,
    estimator: str = "dr",
    predictions: LossPredictions | None = None,
    loss_model: Any = None,
    n_folds: int = 5,
    random_state: Any = None,
    confidence_level: float = 0.95,
    interval: str = "t",
) -> Estimate:
    r"""Estimate a stochastic policy's risk on a log with DM, DR or SNDR.

    .. math:: r_i = \pi(y_i|x_i)/p_i, \quad \hat v_i = \sum_a \pi(a|x_i) \hat\delta(x_i, a)

    where π is the policy's served distribution, pᵢ the propensity and δ̂ the cross-fitted
    loss model; then :func:`direct_method`, :func:`doubly_robust` or
    :func:`self_normalized_doubly_robust`.

    Parameters
    ----------
    policy : StochasticPolicy
        Target policy π (discrete or candidate-set family).
    log : LoggedBandit
        Logged feedback.
    estimator : {"dm", "dr", "sndr"}, default="dr"
        Which estimator.
    predictions : LossPredictions or None, default=None
        Reuse already cross-fitted predictions (e.g. to evaluate several policies); fitted
        with :func:`fit_loss_model` when None.
    loss_model, n_folds
        Passed to :func:`fit_loss_model`.
    random_state : int, RandomState instance or None, default=None
        Seed of the folds (and of the bootstrap when ``interval="bootstrap"``).
    confidence_level, interval
        As for :func:`direct_method`.

    Returns
    -------
    Estimate
        The estimate in the log's loss units.

    Raises
    ------
    ValueError
        If ``estimator`` is unknown, or any error of the estimator or the loss model.
    """
    _check_option(estimator, "estimator", DR_ESTIMATORS)
    if predictions is None:
        predictions = fit_loss_model(
            log, loss_model=loss_model, n_folds=n_folds, random_state=random_state
        )
    inputs = log.candidates if log.family == "candidates" else log.contexts
    model_values = predictions.expected_loss(policy.predict_proba(inputs))
    seed = 0 if random_state is None else random_state
    kwargs = {"confidence_level": confidence_level, "interval": interval, "random_state": seed}
    if estimator == "dm":
        return direct_method(model_values, **kwargs)
    weights = importance_weights(policy.log_action_probability_on(log), log.propensities)
    fn = doubly_robust if estimator == "dr" else self_normalized_doubly_robust
    return fn(log.losses, weights, predictions.logged, model_values, **kwargs)
