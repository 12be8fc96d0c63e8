"""The Dask partition set (DESIGN §8): :class:`ClusterPartitions`.

Optional heavy dependency: ``pip install 'poem-pipeline[dask]'``; nothing else in ``poem``
imports this module, and it never imports ``distributed`` itself (the caller's client does).
It implements the partition-set protocol of :mod:`poem.io.partitions` (``map``, ``fold``) for
objects held in the workers' memory, so every stage of :mod:`poem.partitioned_log` and
:mod:`poem.learners.prepared` runs on a cluster unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["ClusterPartitions"]


@dataclass(frozen=True)
class ClusterPartitions:
    """A partition set whose objects live in a Dask cluster's workers (futures).

    The cluster twin of :class:`poem.io.partitions.LocalPartitions`: ``map`` runs one task
    per partition where its object lives and keeps the results there (or gathers them);
    ``fold`` chains one task per partition, so only the small state travels.

    Attributes
    ----------
    client : distributed.Client
        Client of the cluster.
    items : list of distributed.Future
        One future per partition, in read order.
    """

    client: Any
    items: list

    def __len__(self) -> int:
        return len(self.items)

    def map(
        self,
        fn: Callable,
        *iterables: Iterable,
        gather: bool = False,
        consume: bool = False,
        **kwargs: Any,
    ) -> ClusterPartitions | list:
        """As :meth:`poem.io.partitions.LocalPartitions.map`, one task per partition.

        With ``consume`` this set drops its futures: the scheduler frees each partition as
        soon as its task has run.
        """
        futures = self.client.map(fn, self.items, *iterables, pure=False, **kwargs)
        if consume:
            self.items.clear()
        if not gather:
            return ClusterPartitions(self.client, futures)
        return self.client.gather(futures)

    def fold(
        self, fn: Callable, state: Any, plan: Sequence[tuple[int, dict]], **kwargs: Any
    ) -> Any:
        """As :meth:`poem.io.partitions.LocalPartitions.fold`, one chained task per step."""
        current: Any = state
        for k, extra in plan:
            current = self.client.submit(fn, current, self.items[k], **extra, **kwargs, pure=False)
        return current.result() if hasattr(current, "result") else current
