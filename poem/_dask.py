"""The Dask partition set (DESIGN §8): :class:`ClusterPartitions`.

Optional heavy dependency: ``pip install 'poem-pipeline[dask]'``; nothing else in ``poem``
imports this module, and it imports ``distributed`` only inside the methods that need it
(the caller's client brings the cluster). Every stage of :mod:`poem.log_rows` and
:mod:`poem.learners.prepared` runs on a cluster unchanged.
"""

from __future__ import annotations

import pickle
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ClusterPartitions", "SCATTER_BYTES"]


SCATTER_BYTES = 2**16
"""Arguments of :class:`ClusterPartitions` larger than this travel by ``Client.scatter``."""


class _Sent:
    """The futures of the arguments a :class:`ClusterPartitions` scattered, by content token.

    Not a dict, so that collection walkers (Prefect's parameters) do not iterate it.
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

    An argument of more than :data:`SCATTER_BYTES` is scattered once (a per-partition one to
    the worker holding that partition, a shared one to every worker) and the tasks receive
    its future, so the task graphs stay small whatever the log's size. Scattered arguments
    are remembered by content (:func:`dask.base.tokenize`), so the same rows passed again are
    not sent again; they stay on the workers as long as this set (a ``consume`` map forgets
    them).

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
        """``values[k]`` for partition k; large ones as futures on the worker holding it."""
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

    ``sizeof`` counts an arbitrary object (e.g. a policy holding arrays) as its bare
    ``sys.getsizeof``; such an object is pickled, its array buffers out of band (not copied).
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
