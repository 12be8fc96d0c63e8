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
from poem.gate import GateRows
from poem.log_rows import PartitionedSplit, partitioned_gate_rows, split_partitioned


@task(name="split-logs", cache_policy=NO_CACHE, on_completion=[stage_done])
def split_logs(source: Any, split: SplitConfig, run: TrackedRun) -> PartitionedSplit:
    """:func:`poem.log_rows.split_partitioned`; log the part sizes and time boundaries."""
    # SplitConfig's fields are split_partitioned's keywords
    parts = split_partitioned(source, **split.model_dump())
    log_params(run.client(), run.run_id, {"split": parts.summary()})
    task_logger().info("split %s", parts.summary())
    return parts


@task(name="gate-inputs", cache_policy=NO_CACHE, on_completion=[stage_done])
def gate_inputs(challenger: Any, champion: Any, split: PartitionedSplit) -> GateRows:
    """The test rows' :class:`~poem.gate.GateRows`, computed where the rows live.

    Losses, propensities, both policies' probabilities of the logged actions, their total
    variation per row and the window (:func:`poem.log_rows.partitioned_gate_rows`), for
    :func:`~flows.tasks.gate.gate_candidate`: the bound runs once on the gathered vectors.
    """
    return partitioned_gate_rows(split.source, split.rows_for("test"), challenger, champion)
