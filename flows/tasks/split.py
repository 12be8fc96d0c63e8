"""Split the checked log into train / validation / test (by time when timestamps exist).

The log is a partition set (:mod:`poem.io.partitions`): one partition in memory, or its
partitions on a cluster; the split is row positions per partition
(:func:`poem.log_rows.split_partitioned`), the same rows on every layout.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.config import SplitConfig
from flows.tasks import stage_done, task_logger
from flows.tracking import TrackedRun, log_params
from poem.log_rows import PartitionedSplit, policy_rows, split_partitioned


@task(name="split-logs", cache_policy=NO_CACHE, on_completion=[stage_done])
def split_logs(source: Any, split: SplitConfig, run: TrackedRun) -> PartitionedSplit:
    """:func:`poem.log_rows.split_partitioned`; log the part sizes and time boundaries."""
    # SplitConfig's fields are split_partitioned's keywords
    parts = split_partitioned(source, **split.model_dump())
    log_params(run.client(), run.run_id, {"split": parts.summary()})
    task_logger().info("split %s", parts.summary())
    return parts


@task(name="gate-inputs", cache_policy=NO_CACHE, on_completion=[stage_done])
def gate_inputs(challenger: Any, champion: Any, split: PartitionedSplit) -> tuple[Any, Any, Any]:
    """The test rows' losses, propensities and both policies' probabilities, where they live.

    Returns ``(challenger, champion, test_rows)`` for :func:`~flows.tasks.gate.gate_candidate`
    (:class:`~poem.log_rows.FixedProbabilities`, None for the logging policy, and a
    :class:`~poem.log_rows.RowsView`): the bound runs once on the gathered vectors.
    """
    policies = (challenger,) if champion is None else (challenger, champion)
    view, probabilities = policy_rows(split.source, split.rows_for("test"), policies)
    return probabilities[0], None if champion is None else probabilities[1], view
