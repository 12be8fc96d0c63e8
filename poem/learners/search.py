"""Counterfactual hyperparameter search: fit on a training log, score on a validation log (§6).

Every configuration is fitted on the training rows and scored on the held-out validation rows
by the gate's estimators (:func:`run_trial`); with ``temperatures`` each fit is also served at
the validation-chosen serving temperature (:func:`select_temperature`).
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from poem.data import LoggedBandit
from poem.estimators.ips import Estimate
from poem.estimators.marginal import (
    MarginalWeights,
    check_logger,
    marginal_scores,
    marginal_weights,
)
from poem.learners._trials import (
    SCORINGS,
    Trial,
    ess_floor,
    rows_scores,
    select_trial,
    trial_from_model,
    validation_scores,
)
from poem.learners.training_rows import TrainingRows, fit_on_rows
from poem.log_rows import policy_rows, policy_weight_rows

__all__ = [
    "SearchResult",
    "Trial",
    "checked_temperatures",
    "ess_floor",
    "expand_grid",
    "policy_scores",
    "run_trial",
    "search_hyperparameters",
    "select_temperature",
    "select_trial",
    "validation_scores",
]


@dataclass(frozen=True)
class SearchResult:
    """All trials of a grid search and the selected one.

    Attributes
    ----------
    trials : tuple of Trial
        Every configuration, in grid order.
    best_index : int
        Index of the selected trial.
    best_params : dict
        Its hyperparameters.
    """

    trials: tuple[Trial, ...]
    best_index: int
    best_params: dict

    @property
    def best_trial(self) -> Trial:
        """The selected trial."""
        return self.trials[self.best_index]


def run_trial(
    estimator: Any,
    params: Mapping[str, Any],
    train_log: LoggedBandit | TrainingRows,
    validation_log: LoggedBandit | tuple,
    *,
    confidence_level: float = 0.95,
    keep_estimator: bool = False,
    temperatures: Sequence[float] | None = None,
    scoring: str = "ips",
    min_effective_sample_size: float = 0.0,
    logger: Any = None,
) -> Trial:
    r"""Fit ``clone(estimator).set_params(**params)`` on the training rows and score it.

    .. math:: \hat R_{IPS} = \frac{1}{n_v}\sum_i \delta_i r_i, \quad
              \hat R_{SNIPS} = \frac{\sum_i \delta_i r_i}{\sum_i r_i}

    where rᵢ = π_w(yᵢ|xᵢ)/pᵢ on the validation log of n_v rows (paper Eq. 1). With
    ``temperatures`` the fitted policy is scored at each serving temperature and served at the
    one ``scoring`` selects (:func:`select_temperature`; no refit).

    Parameters
    ----------
    estimator : POEM
        Template estimator (not modified).
    params : dict
        Hyperparameters for this trial.
    train_log : LoggedBandit or TrainingRows
        Rows the policy is fitted on: a log, or a split's rows wherever they live
        (:func:`~poem.learners.training_rows.fit_on_rows`).
    validation_log : LoggedBandit or (partition set, rows)
        Held-out rows it is scored on: a log, or a partition set and its local rows per
        partition (:meth:`~poem.log_rows.PartitionedSplit.rows_for`), scored where they live.
    confidence_level : float, default=0.95
        Level of the reported intervals.
    keep_estimator : bool, default=False
        Keep the fitted estimator in ``Trial.estimator``.
    temperatures : sequence of float or None, default=None
        Serving temperatures to choose from on validation (None: the estimator's own).
    scoring : {"ips", "snips", "ips_ucb", "snips_ucb"}, default="ips"
        Criterion of the temperature choice (as :func:`select_trial`).
    min_effective_sample_size : float, default=0.0
        ESS guard of the temperature choice.
    logger : StochasticPolicy or None, default=None
        The logger of the validation rows, for per-label weights (:func:`policy_scores`).

    Returns
    -------
    Trial
        Scores, diagnostics and fit time; non-convergence is recorded in ``converged`` (no
        ConvergenceWarning per trial). With ``temperatures`` the chosen one is in
        ``params["temperature"]`` and the estimator serves at it.
    """
    if temperatures is not None:
        temperatures = checked_temperatures(temperatures)  # before the fit
    model = clone(estimator).set_params(**dict(params))
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit_on_rows(model, train_log)
    seconds = time.perf_counter() - start
    if temperatures is None:
        scores = policy_scores((model.policy_,), validation_log, confidence_level, logger)[0]
        return trial_from_model(
            model, params, scores, seconds=seconds, keep_estimator=keep_estimator
        )
    policies = tuple(model.policy_.with_serving(temperature=t) for t in temperatures)
    return select_temperature(
        model,
        params,
        temperatures,
        policy_scores(policies, validation_log, confidence_level, logger),
        seconds=seconds,
        scoring=scoring,
        min_effective_sample_size=min_effective_sample_size,
        keep_estimator=keep_estimator,
    )


def policy_scores(
    policies: Sequence[Any],
    validation_log: Any,
    confidence_level: float = 0.95,
    logger: Any = None,
) -> list[tuple[Estimate, Estimate]]:
    """:func:`validation_scores` of each policy, in one pass over the validation rows.

    ``validation_log`` is a log, or ``(partition set, rows)`` (:func:`run_trial`). With the
    ``logger`` of a multilabel log's rows, each estimate is the joint one or the one with
    per-label weights mᵢ (:func:`poem.estimators.marginal.marginal_scores`; the logger
    checked on every row), whichever has the smaller standard error.
    """
    if logger is not None:
        return _marginal_policy_scores(policies, validation_log, confidence_level, logger)
    if isinstance(validation_log, tuple):
        rows = policy_rows(*validation_log, tuple(policies))
        return [
            rows_scores(rows.losses, p, rows.propensities, rows.loss_bounds, confidence_level)
            for p in rows.probabilities
        ]
    return [validation_scores(p, validation_log, confidence_level) for p in policies]


def _marginal_policy_scores(policies, validation_log, confidence_level, logger) -> list:
    """:func:`policy_scores` with the per-label weights or the joint ones, whichever varies less.

    For each policy and estimator (IPS, SNIPS) the estimate with the smaller standard error
    (a choice by spread, not by value): per-label weights vary less for policies near the
    logger, joint weights for policies far from it (mostly rᵢ ≈ 0: the same reason as
    :func:`poem.learners.learning_evidence.paired_terms`).
    """
    joint = policy_scores(policies, validation_log, confidence_level)
    if isinstance(validation_log, tuple):
        views = tuple(MarginalWeights(p, logger) for p in policies)
        rows = policy_weight_rows(*validation_log, views)
        losses, weights, bounds = rows.losses, rows.probabilities, rows.loss_bounds
    else:
        base = check_logger(logger, validation_log, "validation rows")
        losses, bounds = validation_log.losses, validation_log.loss_bounds
        weights = [marginal_weights(p, base, validation_log) for p in policies]
    out = []
    for scores, w in zip(joint, weights, strict=True):
        per_label = marginal_scores(losses, w, bounds, confidence_level)
        out.append(tuple(_less_spread(a, b) for a, b in zip(scores, per_label, strict=True)))
    return out


def _less_spread(joint: Estimate, per_label: Estimate) -> Estimate:
    """The estimate with the smaller standard error (the joint one on ties or NaN)."""
    return per_label if per_label.std_error < joint.std_error else joint


def checked_temperatures(temperatures: Sequence[float]) -> list[float]:
    """The temperatures as floats; ValueError unless there is one and each is finite and > 0."""
    values = [float(t) for t in temperatures]
    if not values or not all(math.isfinite(t) and t > 0 for t in values):
        raise ValueError(f"temperatures must be finite values > 0, got {values!r}")
    return values


def select_temperature(
    model: Any,
    params: Mapping[str, Any],
    temperatures: Sequence[float],
    scores: Sequence[tuple[Estimate, Estimate]],
    *,
    seconds: float,
    scoring: str = "ips",
    min_effective_sample_size: float = 0.0,
    keep_estimator: bool = False,
) -> Trial:
    r"""Serve a fitted model at the temperature whose validation score is best.

    The served policy at temperature α is :math:`\pi_{w/\alpha}` (DESIGN §7), the fitted w
    moved along its own direction, which the solver's path from w₀ need not reach. The choice
    is the search's own rule (:func:`select_trial` with the same ``scoring`` and ESS guard) on
    one fit's scores: one validation pass per temperature, no refit.

    Parameters
    ----------
    model : fitted estimator
        With ``policy_`` (:meth:`~poem.policies.StochasticPolicy.with_serving`) and a
        ``temperature`` parameter; set to the chosen temperature in place.
    params : dict
        The trial's hyperparameters.
    temperatures : sequence of float
        Candidate serving temperatures α > 0.
    scores : sequence of (Estimate, Estimate)
        Validation (IPS, SNIPS) scores at each temperature (:func:`validation_scores`).
    seconds : float
        The fit's wall-clock seconds.
    scoring, min_effective_sample_size
        As :func:`select_trial`.
    keep_estimator : bool, default=False
        Keep the model in ``Trial.estimator``.

    Returns
    -------
    Trial
        The trial at the chosen temperature, ``params["temperature"]`` set to it.

    Raises
    ------
    ValueError
        When ``temperatures`` is empty, has a value that is not > 0 and finite, or does not
        match ``scores`` in length.
    """
    temperatures = checked_temperatures(temperatures)
    if len(scores) != len(temperatures):
        raise ValueError(f"{len(scores)} scores for {len(temperatures)} temperatures")
    candidates = [
        trial_from_model(model, {**params, "temperature": t}, s, seconds=seconds)
        for t, s in zip(temperatures, scores, strict=True)
    ]
    best = select_trial(candidates, scoring, min_effective_sample_size=min_effective_sample_size)
    model.set_params(temperature=temperatures[best])
    model.policy_ = model.policy_.with_serving(temperature=temperatures[best])
    return replace(candidates[best], estimator=model if keep_estimator else None)


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Cartesian product of a parameter grid, in key order then value order.

    Parameters
    ----------
    grid : dict of str to list
        Candidate values per hyperparameter.

    Returns
    -------
    list of dict
        One dict per configuration (a single empty dict for an empty grid).

    Raises
    ------
    TypeError
        When a value is a string or not a sequence.
    ValueError
        When a parameter has no candidate values.
    """
    for name, values in grid.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence):
            raise TypeError(f"grid[{name!r}] must be a list of values, got {type(values).__name__}")
        if len(values) == 0:
            raise ValueError(f"grid[{name!r}] has 0 values; give at least one")
    names = list(grid)
    return [
        dict(zip(names, combo, strict=True))
        for combo in itertools.product(*(grid[k] for k in names))
    ]


def search_hyperparameters(
    estimator: Any,
    train_log: LoggedBandit,
    validation_log: LoggedBandit,
    grid: Mapping[str, Sequence[Any]],
    scoring: str = "ips",
    *,
    confidence_level: float = 0.95,
    min_effective_sample_size: float = 0.0,
    keep_estimators: bool = False,
    temperatures: Sequence[float] | None = None,
    logger: Any = None,
) -> SearchResult:
    r"""Fit every configuration of ``grid`` and select by validation risk (paper §6).

    .. math:: \hat\theta = \arg\min_{\theta \in \Theta} \hat R_{IPS}(\pi_{w(\theta)})

    where Θ is the grid and w(θ) the parameters fitted with hyperparameters θ.

    Parameters
    ----------
    estimator : POEM
        Template estimator.
    train_log : LoggedBandit
        Training log.
    validation_log : LoggedBandit
        Validation log.
    grid : dict of str to list
        Candidate values per hyperparameter.
    scoring : {"ips", "snips", "ips_ucb", "snips_ucb"}, default="ips"
        Selection criterion.
    confidence_level : float, default=0.95
        Level of the reported intervals.
    min_effective_sample_size : float, default=0.0
        ESS guard of :func:`select_trial`.
    keep_estimators : bool, default=False
        Keep every fitted estimator in its trial.
    temperatures : sequence of float or None, default=None
        Serving temperatures each fit is scored at (:func:`select_temperature`); the
        selected trial's ``params["temperature"]`` is its chosen one.
    logger : StochasticPolicy or None, default=None
        The policy that logged the (multilabel) validation rows: scores with the per-label
        weights (:func:`policy_scores`); None: the joint weights.

    Returns
    -------
    SearchResult
        Every trial, the selected index and its parameters.

    Raises
    ------
    ValueError
        For an unknown scoring or hyperparameter name.
    """
    if scoring not in SCORINGS:
        raise ValueError(f"scoring must be one of {list(SCORINGS)}, got {scoring!r}")
    configs = expand_grid(grid)
    valid = estimator.get_params()
    if temperatures is not None and "temperature" in configs[0]:
        raise ValueError(
            "grid has 'temperature' and temperatures are given: serving temperatures are "
            "chosen per fit from `temperatures`; drop one of them"
        )
    for name in configs[0]:
        if name not in valid:
            raise ValueError(
                f"grid has unknown hyperparameter {name!r} for {type(estimator).__name__}; "
                f"valid: {sorted(valid)}"
            )
    trials = tuple(
        run_trial(
            estimator,
            p,
            train_log,
            validation_log,
            confidence_level=confidence_level,
            keep_estimator=keep_estimators,
            temperatures=temperatures,
            scoring=scoring,
            min_effective_sample_size=min_effective_sample_size,
            logger=logger,
        )
        for p in configs
    )
    best = select_trial(trials, scoring, min_effective_sample_size=min_effective_sample_size)
    return SearchResult(trials, best, dict(trials[best].params))
