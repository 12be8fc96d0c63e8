"""Tasks of the ``retrain`` flow on a log held as partitions on a Dask cluster (DESIGN §8).

Same stages, records and outputs as the in-memory tasks; the log never comes to this process:
the check keeps each partition's checked rows in a worker's memory
(:func:`data_checks.partitioned.check_partitioned` with ``keep=True``) and every later stage
maps over them (:mod:`poem.partitioned_log`, :mod:`poem.learners.partitioned_poem`). The gate
runs the in-memory :func:`~flows.tasks.gate.gate_candidate` on per-row vectors computed on
the workers (:func:`gate_inputs`). Only ``learner: poem`` trains on partitions.
"""

from __future__ import annotations

import tempfile
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from data_checks.partitioned import check_partitioned
from flows.config import ChecksConfig, DataConfig, SplitConfig, TrainingConfig
from flows.learners import build_learner, resolve_warm_start
from flows.tasks import stage_done, task_logger
from flows.tasks.load import check_settings
from flows.tasks.propensity import record_propensity_report
from flows.tasks.search import recorded
from flows.tasks.train import record_fit
from flows.tracking import TrackedRun, log_artifact, log_params
from poem.learners.partitioned_poem import fit_prepared, prepare_training, run_trial_partitioned
from poem.learners.search import Trial
from poem.partitioned_log import log_header, policy_rows, split_partitioned

__all__ = [
    "gate_inputs",
    "prepare_partitions",
    "record_propensities",
    "search_trial_partitioned",
    "split_partitions",
    "train_policy_partitioned",
    "validate_partitions",
]


@task(name="validate-logs", cache_policy=NO_CACHE, on_completion=[stage_done])
def validate_partitions(
    data: DataConfig, checks: ChecksConfig, client: Any, run: TrackedRun, restart: bool = False
):
    """Check the log partition by partition; log the quarantine; keep the rows on the workers.

    ``restart`` restarts the workers between the check and the load (a cluster of this run).

    Returns ``(report, propensity_report, kept, header)``: the merged check report, the
    merged propensity report (None when the check failed), the kept rows as a partition set
    and their :class:`~poem.partitioned_log.LogHeader` (None when the check failed).
    """
    with tempfile.TemporaryDirectory(prefix="poem-partitions-") as tmp:
        report, propensity, files, kept = check_partitioned(
            data.path,
            check_settings(checks, data),
            out_dir=tmp,
            client=client,
            keep=True,
            restart=restart,
        )
        if "quarantine" in files:
            log_artifact(run.client(), run.run_id, files["quarantine"], "checks/quarantine")
            task_logger().warning("quarantined %d of %d rows", report.n_quarantined, report.n_rows)
    header = log_header(kept) if report.passed else None
    return report, propensity, kept, header


@task(name="diagnose-propensities", cache_policy=NO_CACHE, on_completion=[stage_done])
def record_propensities(report: Any, run: TrackedRun) -> Any:
    """Log the merged propensity report (no plots: they need the whole log); raise on fail."""
    return record_propensity_report(report, run)


@task(name="split-logs", cache_policy=NO_CACHE, on_completion=[stage_done])
def split_partitions(kept: Any, split: SplitConfig, run: TrackedRun) -> Any:
    """:func:`poem.partitioned_log.split_partitioned`; log the part sizes and time boundaries."""
    parts = split_partitioned(
        kept,
        validation_fraction=split.validation_fraction,
        test_fraction=split.test_fraction,
        by_time=split.by_time,
        random_state=split.random_state,
    )
    log_params(run.client(), run.run_id, {"split": parts.summary()})
    task_logger().info("split %s", parts.summary())
    return parts


def _learner_check(training: TrainingConfig) -> dict:
    if training.learner != "poem":
        raise ValueError(
            f"training.learner: {training.learner!r} cannot train on partitions (only 'poem'); "
            "set dask.partitioned: false to train in memory"
        )
    return dict(training.params)


def _preparation(params: dict) -> dict[str, bool]:
    """The learner params that shape the prepared rows (POEM's defaults: both True)."""
    return {
        "fit_intercept": bool(params.get("fit_intercept", True)),
        "standardize": bool(params.get("standardize", True)),
    }


@task(name="prepare-training", cache_policy=NO_CACHE, on_completion=[stage_done])
def prepare_partitions(split: Any, training: TrainingConfig) -> tuple[Any, Any]:
    """Prepare the training rows where they live (:func:`prepare_training`).

    With ``refit_on: train`` the raw training rows are released (each row held once).
    """
    return prepare_training(
        split, **_preparation(_learner_check(training)), release=training.refit_on == "train"
    )


@task(name="search-trial", cache_policy=NO_CACHE, on_completion=[stage_done])
def search_trial_partitioned(
    prepared: Any,
    split: Any,
    header: Any,
    learner: str,
    fixed_params: dict,
    params: dict,
    confidence_level: float,
    champion: Any = None,
    serving: dict | None = None,
) -> Trial:
    """Fit one configuration on the prepared rows, score it on validation (not cached).

    ``serving``: the serving temperatures each fit is scored at (:func:`serving_choice`).
    """
    estimator = build_learner(learner, fixed_params, champion=champion, log=header)
    resolved = resolve_warm_start(params, champion, header)
    trial = run_trial_partitioned(
        estimator, resolved, prepared, split, confidence_level=confidence_level, **(serving or {})
    )
    return recorded(trial, params)


@task(name="train-policy", cache_policy=NO_CACHE, on_completion=[stage_done])
def train_policy_partitioned(
    prepared: Any,
    split: Any,
    header: Any,
    training: TrainingConfig,
    params: dict,
    run: TrackedRun,
    champion: Any = None,
) -> Any:
    """Refit the selected configuration on ``training.refit_on`` rows; log as ``train_policy``."""
    fixed = _learner_check(training)
    if training.refit_on != "train":
        prepared, _ = prepare_training(split, part=training.refit_on, **_preparation(fixed))
    estimator = build_learner(training.learner, fixed, params, champion=champion, log=header)
    fit_prepared(estimator, prepared)
    return record_fit(estimator, training, params, run)


@task(name="gate-inputs", cache_policy=NO_CACHE, on_completion=[stage_done])
def gate_inputs(challenger: Any, champion: Any, split: Any) -> tuple[Any, Any, Any]:
    """The test rows' losses, propensities and both policies' probabilities, from the workers.

    Returns ``(challenger, champion, test_rows)`` to hand to
    :func:`~flows.tasks.gate.gate_candidate` in place of the policies and the test log
    (:class:`~poem.partitioned_log.FixedProbabilities`, None for the logging policy, and a
    :class:`~poem.partitioned_log.RowsView`).
    """
    policies = (challenger,) if champion is None else (challenger, champion)
    view, probabilities = policy_rows(split.source, split.rows_for("test"), policies)
    return probabilities[0], None if champion is None else probabilities[1], view
