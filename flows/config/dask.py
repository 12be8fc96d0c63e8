"""``dask:``: where the log is processed (DESIGN §8)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flows.config._base import Section

__all__ = ["DaskConfig"]


class DaskConfig(Section):
    """Where the log is processed (DESIGN §8): in this process, or on a Dask cluster.

    ``mode``: ``auto`` starts a ``LocalCluster`` when the log's files hold more than
    ``min_log_mib`` MiB, ``always`` always does, ``never`` keeps the thread pool; a
    ``scheduler_address`` (``tcp://host:8786``) uses that cluster instead. ``partitioned``
    chooses between the two cluster routes of :mod:`flows.cluster`.
    """

    mode: Literal["auto", "always", "never"] = "auto"
    min_log_mib: float = Field(2048.0, ge=0)
    scheduler_address: str | None = None
    n_workers: int = Field(2, ge=1)
    threads_per_worker: int = Field(1, ge=1)
    memory_limit: str = "4GiB"
    partitioned: bool = True
