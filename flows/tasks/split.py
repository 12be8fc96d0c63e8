"""Split the validated log into train / validation / test (by time when timestamps exist)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import SplitConfig
from flows.tasks import stage_done, task_logger
from flows.tracking import TrackedRun, log_params
from poem.data import LoggedBandit
from poem.splits import LogSplit, split_log


@task(name="split-logs", cache_policy=NO_CACHE, on_completion=[stage_done])
def split_logs(log: LoggedBandit, split: SplitConfig, run: TrackedRun) -> LogSplit:
    """Call :func:`poem.splits.split_log` and log the part sizes and time boundaries."""
    parts = split_log(
        log,
        validation_fraction=split.validation_fraction,
        test_fraction=split.test_fraction,
        by_time=split.by_time,
        random_state=split.random_state,
    )
    log_params(run.client(), run.run_id, {"split": parts.summary()})
    task_logger().info("split %s", parts.summary())
    return parts
