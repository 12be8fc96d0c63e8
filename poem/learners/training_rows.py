"""The rows a learner fits on, and the one route every learner and layout takes to fit.

:func:`fit_on_rows` fits POEM on the rows prepared where they live
(:meth:`~poem.learners.poem.POEM.fit_prepared`) and every other learner — and POEM's doubly
robust objective on several partitions — on the rows taken into one in-memory log. The
search's trials and the refit share one :class:`TrainingRows` (:func:`training_rows`), so the
rows are prepared or taken once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from poem.data import LoggedBandit
from poem.learners.prepared import PreparedTraining, prepare_log, prepare_training
from poem.log_rows import PartitionedSplit

__all__ = ["Preparations", "TrainingRows", "fit_on_rows", "training_rows"]


class Preparations:
    """POEM's preparations of one :class:`TrainingRows`, by ``(fit_intercept, standardize)``.

    An opaque holder, not a dict: trials running in threads fill it while an orchestrator may
    walk another trial's inputs (Prefect resolving task parameters iterates every dict it
    finds; a dict that grows meanwhile failed a scheduled run with "dictionary changed size
    during iteration"). A lock makes each preparation happen once, the other trials waiting
    for it. Pickles without the lock (a Dask worker gets its own).
    """

    def __init__(self, items: dict | None = None) -> None:
        self._items: dict[tuple[bool, bool], PreparedTraining] = dict(items or {})
        self._lock = threading.Lock()

    def get(self, key: tuple[bool, bool], make: Callable[[], PreparedTraining]):
        """The preparation under ``key``, made by ``make()`` on first use."""
        with self._lock:
            if key not in self._items:
                self._items[key] = make()
            return self._items[key]

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def __getstate__(self) -> dict:
        return {"items": dict(self._items)}

    def __setstate__(self, state: dict) -> None:
        self._items, self._lock = dict(state["items"]), threading.Lock()


@dataclass(eq=False)
class TrainingRows:
    """The rows a learner fits on: a part of a split, wherever its partitions live.

    Holds what every trial of a search shares: POEM's preparations and the rows taken into one
    in-memory log (:func:`~poem.log_rows.take_log`).

    Attributes
    ----------
    split : PartitionedSplit
        The split.
    part : {"train", "train+validation"}, default="train"
        The rows (``training.refit_on``).
    prepared : Preparations
        ``(fit_intercept, standardize)`` → :class:`PreparedTraining`, filled on first use
        (or in advance by :func:`prepare_training` with ``release``).
    """

    split: PartitionedSplit
    part: str = "train"
    prepared: Preparations = field(default_factory=Preparations)
    _log: Any = field(default=None, repr=False)

    def log(self) -> LoggedBandit:
        """The rows as one in-memory log (taken once)."""
        if self._log is None:
            self._log = self.split.log(self.part)
        return self._log

    def preparation(self, fit_intercept: bool, standardize: bool) -> PreparedTraining:
        """The rows prepared for POEM: as one log when they are one partition, else in place."""
        key = (bool(fit_intercept), bool(standardize))

        def make() -> PreparedTraining:
            if len(self.split.source) == 1:  # the in-memory preparation (dense or sparse)
                return prepare_log(self.log(), fit_intercept=key[0], standardize_features=key[1])
            return prepare_training(
                self.split, part=self.part, fit_intercept=key[0], standardize=key[1]
            )[0]

        return self.prepared.get(key, make)


def _preparation_key(estimator: Any, split: PartitionedSplit) -> tuple[bool, bool] | None:
    """POEM's preparation settings when it fits these rows in place; None: take the log."""
    if getattr(estimator, "fit_prepared", None) is None:
        return None
    family = split.family
    if len(split.source) > 1 and not estimator.fits_partitions(family):
        return None
    return bool(estimator.fit_intercept), bool(estimator.standardize) and family != "candidates"


def fit_on_rows(estimator: Any, rows: TrainingRows | LoggedBandit) -> Any:
    """Fit ``estimator`` on training rows, prepared in place or taken (module docstring).

    A LoggedBandit is fitted as it is (``estimator.fit``).

    Returns
    -------
    estimator
        Fitted.
    """
    if not isinstance(rows, TrainingRows):
        return estimator.fit(rows)
    key = _preparation_key(estimator, rows.split)
    if key is None:
        return estimator.fit(rows.log())
    return estimator.fit_prepared(rows.preparation(*key))


def training_rows(
    split: PartitionedSplit, estimator: Any, *, part: str = "train", release: bool = False
) -> tuple[TrainingRows, PartitionedSplit]:
    """A split's training rows for ``estimator``'s fits, prepared (or taken) once for all.

    Parameters
    ----------
    split : PartitionedSplit
        The split.
    estimator : estimator
        The learner (its preparation settings; not fitted).
    part : {"train", "train+validation"}, default="train"
        The rows.
    release : bool, default=False
        On several partitions, replace the raw training rows by POEM's prepared ones
        (:func:`prepare_training`; each row then held once): ``split`` is consumed and the
        returned one has ``"train"`` released.

    Returns
    -------
    rows : TrainingRows
    split : PartitionedSplit
        ``split``, or the released one.
    """
    key = _preparation_key(estimator, split)
    if key is None:
        rows = TrainingRows(split, part)
        rows.log()
        return rows, split
    if release and len(split.source) > 1:
        prepared, split = prepare_training(
            split, part=part, fit_intercept=key[0], standardize=key[1], release=True
        )
        return TrainingRows(split, part, Preparations({key: prepared})), split
    rows = TrainingRows(split, part)
    rows.preparation(*key)
    return rows, split
