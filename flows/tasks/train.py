"""Prepare the training rows once, refit the selected configuration, return its policy."""

from __future__ import annotations

import warnings
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import TrainingConfig
from flows.learners import LEARNER_KEY, build_learner, trial_learner
from flows.tasks import stage_done, task_logger
from flows.tracking import TrackedRun, log_metrics, log_params
from poem.learners.training_rows import TrainingRows, fit_on_rows, training_rows

_FITTED = ("objective_", "n_iter_", "converged_", "clip_", "variance_penalty_", "clipped_fraction_")


@task(name="prepare-training", cache_policy=NO_CACHE, on_completion=[stage_done])
def prepare_rows(split: Any, training: TrainingConfig) -> tuple[TrainingRows, Any]:
    """The training rows of every trial (:func:`poem.learners.training_rows.training_rows`).

    With ``refit_on: train`` the raw training rows are released once prepared. Returns
    ``(rows, split)``.
    """
    estimator = build_learner(training.learner, training.params)
    return training_rows(split, estimator, release=training.refit_on == "train")


def fit_learner(
    rows: TrainingRows,
    header: Any,
    training: TrainingConfig,
    params: dict,
    champion: Any = None,
    search: Any = None,
) -> Any:
    """The trial's learner with ``params`` fitted on ``rows`` (no logging; :func:`train_policy`).

    ``training.learner``, or the ``search.candidates`` learner ``params`` names
    (:func:`flows.learners.trial_learner`); ``rows`` may also be a LoggedBandit (the
    selection's cross-fitted refits on the evidence training rows).
    """
    name, fixed, overrides = trial_learner(params, training, search)
    estimator = build_learner(name, fixed, overrides, champion=champion, log=header)
    with warnings.catch_warnings(record=True) as caught:  # the fit records ``converged_``
        warnings.simplefilter("always")
        fit_on_rows(estimator, rows)
    for warning in caught:  # to the run's log (Prefect API), not the console of every run
        if warning.category.__name__ == "ConvergenceWarning":  # scikit-learn's
            task_logger().info("%s", warning.message)
        else:
            warnings.warn_explicit(
                warning.message, warning.category, warning.filename, warning.lineno
            )
    return estimator


@task(name="train-policy", cache_policy=NO_CACHE, on_completion=[stage_done])
def train_policy(
    rows: TrainingRows,
    header: Any,
    training: TrainingConfig,
    params: dict,
    run: TrackedRun,
    champion: Any = None,
    fitted: Any = None,
    search: Any = None,
) -> Any:
    """Fit the learner with ``params`` on ``training.refit_on``; log the fitted diagnostics.

    ``champion`` is the start of ``warm_start: champion``; ``fitted``, the same fit on ``rows``
    already made (:func:`~flows.tasks.search.choose_challenger`), is reused when ``refit_on`` is
    ``rows``' part.
    """
    if training.refit_on != rows.part:
        rows, fitted = TrainingRows(rows.split, training.refit_on), None
    if fitted is None:
        fitted = fit_learner(rows, header, training, params, champion, search)
    return record_fit(fitted, training, params, run)


def record_fit(estimator: Any, training: TrainingConfig, params: dict, run: TrackedRun) -> Any:
    """Log the selected params and the fitted diagnostics; return the learned policy."""
    fitted = {
        f"train_{name.rstrip('_')}": getattr(estimator, name)
        for name in _FITTED
        if hasattr(estimator, name)
    }
    client = run.client()
    log_params(client, run.run_id, {"selected": params})
    log_metrics(client, run.run_id, fitted)
    learner = params.get(LEARNER_KEY, training.learner)
    task_logger().info("trained %s with %s: %s", learner, params, fitted)
    return estimator.policy_
