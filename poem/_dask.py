"""Dask glue for the map-reduce training of :mod:`poem.learners.partitioned` (DESIGN §8).

Optional heavy dependency: ``pip install 'poem-pipeline[dask]'``; nothing else in ``poem``
imports this module, and it imports ``distributed`` only when a function is called.

The partitions of a Parquet log (:func:`poem.io.partitions.log_partitions`, one per row group)
are read *on the workers* and kept there as prepared :class:`CRMPartition` objects
(:func:`load_partitions`); each L-BFGS evaluation then ships only w to the workers and the
per-partition :class:`~poem.learners.objective.CRMStatistics` back (:func:`dask_statistics`),
reduced on the client — the same J(w) and ∇J(w) as in memory. The minibatch path
(:func:`dask_epoch`) chains one task per partition, so each runs where its rows live and only
the AdaGrad state (w, h) travels.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from poem.io.partitions import LogPartition, log_partitions, read_partition
from poem.learners.objective import CRMStatistics
from poem.learners.partitioned import (
    AdaGradState,
    CRMPartition,
    StatisticsProvider,
    adagrad_partition_pass,
    epoch_plan,
    partition_statistics,
    reduce_statistics,
)
from poem.policies._base import PolicyFamily
from poem.policies.stochastic import family_from_log

__all__ = [
    "ClusterPartitions",
    "DaskPartitions",
    "dask_epoch",
    "dask_statistics",
    "load_partitions",
]


@dataclass(frozen=True)
class DaskPartitions:
    """A log's prepared partitions held in the memory of a Dask cluster's workers.

    Attributes
    ----------
    client : distributed.Client
        Client of the cluster.
    family : PolicyFamily
        Policy family of the log (from its first non-empty partition).
    partitions : list of distributed.Future
        One future per partition, resolving to a :class:`CRMPartition` or None (no rows).
    n_rows : int
        Rows over all partitions.
    """

    client: Any
    family: PolicyFamily
    partitions: list
    n_rows: int


def _prepare(log: Any, family: PolicyFamily) -> CRMPartition | None:
    return None if log is None else CRMPartition.from_log(log, family)


def _family(log: Any, fit_intercept: bool) -> PolicyFamily | None:
    return None if log is None else family_from_log(log, fit_intercept)


def load_partitions(
    client: Any,
    path: str | Path | list[LogPartition],
    *,
    fit_intercept: bool = False,
    family: str | None = None,
    **overrides: Any,
) -> DaskPartitions:
    """Read a Parquet log's partitions on the workers and keep them there, prepared.

    Parameters
    ----------
    client : distributed.Client
        Client of the cluster.
    path : str, Path or list of LogPartition
        The log (file or directory), or its pieces from
        :func:`~poem.io.partitions.log_partitions`.
    fit_intercept : bool, default=False
        Passed to :func:`~poem.policies.family_from_log`.
    family : str or None, default=None
        Expected family.
    **overrides
        Passed to :func:`~poem.io.partitions.read_partition`.

    Returns
    -------
    DaskPartitions

    Raises
    ------
    ValueError
        If every partition is empty.
    """
    pieces = path if isinstance(path, list) else log_partitions(path)
    logs = client.map(read_partition, pieces, family=family, pure=False, **overrides)
    nonempty = [k for k, p in enumerate(pieces) if p.n_rows > 0]
    if not nonempty:
        raise ValueError(f"all {len(pieces)} partitions of the log are empty (0 rows)")
    fam = client.submit(_family, logs[nonempty[0]], fit_intercept).result()
    parts = client.map(_prepare, logs, family=fam, pure=False)
    del logs  # the prepared partitions replace the raw logs in the workers' memory
    return DaskPartitions(client, fam, parts, int(sum(p.n_rows for p in pieces)))


def dask_statistics(
    data: DaskPartitions, clip: float, *, chunk_size: int | None = None
) -> StatisticsProvider:
    """Statistics provider over a cluster: map per partition, reduce on the client."""

    def statistics(coef: np.ndarray) -> CRMStatistics:
        futures = [
            data.client.submit(
                partition_statistics,
                coef,
                data.family,
                part,
                clip,
                chunk_size=chunk_size,
                pure=False,
            )
            for part in data.partitions
        ]
        return reduce_statistics(data.client.gather(futures))

    return statistics


def dask_epoch(
    data: DaskPartitions,
    clip: float,
    *,
    variance_penalty: float,
    l2_penalty: float,
    batch_size: int,
    random_state: int,
) -> Callable[[AdaGradState, tuple[float, float, float], float, int], AdaGradState]:
    """``epoch`` for :func:`~poem.learners.partitioned.adagrad_partitioned` on a cluster.

    One chained task per partition, in the order of
    :func:`~poem.learners.partitioned.epoch_plan` (the in-process order), each scheduled where
    its partition lives.
    """

    def epoch(
        state: AdaGradState, coefficients: tuple[float, float, float], eta: float, number: int
    ) -> AdaGradState:
        current: Any = state
        for k, seed in epoch_plan(len(data.partitions), random_state, number):
            current = data.client.submit(
                adagrad_partition_pass,
                current,
                data.family,
                data.partitions[k],
                clip,
                coefficients,
                n_total=data.n_rows,
                variance_penalty=variance_penalty,
                l2_penalty=l2_penalty,
                learning_rate=eta,
                batch_size=batch_size,
                seed=seed,
                pure=False,
            )
        return current.result() if hasattr(current, "result") else current

    return epoch


SCATTER_BYTES = 2**16
"""Arguments of :class:`ClusterPartitions` larger than this travel by ``Client.scatter``."""


class _Sent:
    """The futures of the arguments a :class:`ClusterPartitions` scattered, by content token.

    A plain object, not a dict: collection walkers (Prefect's parameter resolution) do not
    iterate it while a trial's thread adds to it.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.futures: dict = {}

    def clear(self) -> None:
        """Forget every future (the workers free the data)."""
        with self.lock:
            self.futures = {}


@dataclass(frozen=True)
class ClusterPartitions:
    """A partition set whose objects live in a Dask cluster's workers (futures).

    The cluster twin of :class:`poem.io.partitions.LocalPartitions`: ``map`` runs one task
    per partition where its object lives and keeps the results there (or gathers them);
    ``fold`` chains one task per partition, so only the small state travels.

    Arguments travel as Dask's guides advise ("avoid very large graphs": scatter the data,
    pass futures): an argument of more than :data:`SCATTER_BYTES` is scattered once —
    a per-partition one (e.g. a partition's row positions) to the worker holding that
    partition, a shared one (the same for every task) to every worker — and the tasks
    receive its future, so the task graphs stay a few kilobytes whatever the log's size.
    Scattered arguments are remembered by content (:func:`dask.base.tokenize`): the same
    rows passed again (each search trial scores the same validation rows) are not sent again.
    They stay on the workers as long as this set (a ``consume`` map forgets them).

    Attributes
    ----------
    client : distributed.Client
        Client of the cluster.
    items : list of distributed.Future
        One future per partition, in read order.
    """

    client: Any
    items: list
    _sent: _Sent = field(default_factory=_Sent, init=False, repr=False, compare=False)

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

        With ``consume`` this set drops its futures (and its scattered arguments): the
        scheduler frees each partition as soon as its task has run.
        """
        extra = [self._per_partition(list(it)) for it in iterables]
        futures = self.client.map(
            fn, self.items, *extra, pure=False, **self._shared(kwargs, broadcast=True)
        )
        if consume:
            self.items.clear()
            self._sent.clear()
        if not gather:
            return ClusterPartitions(self.client, futures)
        return self.client.gather(futures)

    def fold(
        self, fn: Callable, state: Any, plan: Sequence[tuple[int, dict]], **kwargs: Any
    ) -> Any:
        """As :meth:`poem.io.partitions.LocalPartitions.fold`, one chained task per step."""
        shared = self._shared(kwargs, broadcast=True)
        (current,) = self._shared({"state": state}, broadcast=False).values()
        for k, extra in plan:
            current = self.client.submit(
                fn, current, self.items[k], **self._shared(extra), **shared, pure=False
            )
        return current.result() if hasattr(current, "result") else current

    # -- how arguments travel ---------------------------------------------------------------
    def _per_partition(self, values: list) -> list:
        """``values[k]`` for partition k: small ones as they are, large ones as futures.

        A large value is scattered to the worker holding partition k (when the scheduler
        knows it), so its task reads both where they are.
        """
        large = [k for k, v in enumerate(values) if _large(v)]
        if not large:
            return values
        places = self._places([self.items[k] for k in large if k < len(self.items)])
        groups: dict = {}
        for k in large:
            item = self.items[k] if k < len(self.items) else None
            groups.setdefault(places.get(getattr(item, "key", None)), []).append(k)
        out = list(values)
        for worker, ks in groups.items():
            futures = self._scatter([values[k] for k in ks], workers=worker)
            for k, future in zip(ks, futures, strict=True):
                out[k] = future
        return out

    def _shared(self, kwargs: dict, *, broadcast: bool = False) -> dict:
        """``kwargs`` with every large value replaced by its (scattered once) future."""
        large = [name for name, v in kwargs.items() if _large(v)]
        if not large:
            return kwargs
        futures = self._scatter([kwargs[n] for n in large], broadcast=broadcast)
        return {**kwargs, **dict(zip(large, futures, strict=True))}

    def _places(self, items: list) -> dict:
        """Key → one worker address holding it, for the items the scheduler has in memory."""
        from distributed import Future

        keys = [i for i in items if isinstance(i, Future)]
        if not keys:
            return {}
        return {key: where[0] for key, where in self.client.who_has(keys).items() if where}

    def _scatter(self, values: list, *, workers: str | None = None, broadcast: bool = False):
        """Futures of ``values``, each scattered once per set (remembered by content)."""
        from dask.base import tokenize

        tokens = [tokenize(v) for v in values]
        with self._sent.lock:
            known = self._sent.futures
            missing = {t: v for t, v in zip(tokens, values, strict=True) if t not in known}
            if missing:
                futures = self.client.scatter(
                    list(missing.values()),
                    workers=None if workers is None else [workers],
                    broadcast=broadcast,
                    hash=False,
                )
                known.update(zip(missing, futures, strict=True))
            return [known[t] for t in tokens]


def _large(value: Any) -> bool:
    """Whether ``value`` travels by scatter: not a future, over :data:`SCATTER_BYTES` pickled."""
    from distributed import Future

    return not isinstance(value, Future) and _nbytes(value) > SCATTER_BYTES


def _nbytes(value: Any) -> int:
    """Bytes ``value`` takes in a message: ``dask.sizeof``, or its pickle for other objects.

    ``sizeof`` knows arrays, frames and containers of them, but counts an arbitrary object
    (e.g. a policy holding arrays) as its bare ``sys.getsizeof``; such an object is measured
    by pickling it, its array buffers out of band (not copied).
    """
    from dask.sizeof import sizeof

    n = int(sizeof(value))
    if n > SCATTER_BYTES or isinstance(value, _MEASURED):
        return n
    buffers: list = []
    try:
        head = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except Exception:  # noqa: BLE001 - not picklable here: Dask's serializer decides
        return n
    return len(head) + sum(b.raw().nbytes for b in buffers)


_MEASURED = (type(None), bool, int, float, complex, str, bytes, np.ndarray, np.generic)
"""Types whose ``dask.sizeof`` is their size in a message."""
