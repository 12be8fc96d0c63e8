r"""A log as a partition set: its train/validation/test split, per-row views, taken rows.

Every stage sees a log as a *partition set* (:mod:`poem.io.partitions`) of
:class:`~poem.data.LoggedBandit` partitions (None when empty): a log in memory is one
partition (:func:`as_partitions`), a Parquet log on a cluster one per row group
(:class:`poem._dask.ClusterPartitions`). What travels to the client:

- **split** (:func:`split_partitioned`): each partition's row count and timestamps; the client
  splits the concatenation (:func:`poem.splits.split_rows`), so the rows are those of one
  partition;
- **scores** (:func:`policy_rows`) and **gate** (:func:`partitioned_gate_rows`): per row, the
  loss, the propensity and each policy's probability of the logged action (for the gate also
  the policies' total variation and the row's key), computed where the rows live; the client
  runs the in-memory functions on them, hence the same decision and metrics;
- **take** (:func:`take_log`, :func:`sample_log`): the rows themselves as one in-memory log,
  for the learners without an additive form.

Training on the split's rows is :mod:`poem.learners.prepared`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from poem.data import _OPTIONAL_ROWS, CandidateSets, LoggedBandit
from poem.gate import GateRows, gate_rows
from poem.io.partitions import LocalPartitions
from poem.ledger import row_keys, test_window
from poem.splits import split_rows, split_summary

__all__ = [
    "LogHeader",
    "PartitionedSplit",
    "PolicyRows",
    "as_partitions",
    "concat_logs",
    "kept_rows",
    "log_header",
    "partitioned_gate_rows",
    "policy_rows",
    "policy_weight_rows",
    "release_rows",
    "sample_log",
    "split_partitioned",
    "take_log",
    "take_rows",
]

PARTS = ("train", "validation", "test")


# -- split ---------------------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class PartitionedSplit:
    """Train / validation / test rows of a partitioned log (row positions per partition).

    Attributes
    ----------
    source : partition set
        The log's partitions (:class:`~poem.data.LoggedBandit` or None each).
    rows : dict
        ``"train"``, ``"validation"``, ``"test"`` → one sorted array of local row positions
        per partition.
    method : {"time", "random"}
        How rows were assigned.
    counts : dict
        Row counts, method and time boundaries (returned by :meth:`summary`).
    released : tuple of str, default=()
        Parts whose rows the partitions no longer hold (:func:`release_rows`).
    family : str or None, default=None
        The log's policy family.
    """

    source: Any
    rows: dict
    method: str
    counts: dict
    released: tuple = ()
    family: str | None = None

    def summary(self) -> dict[str, Any]:
        """Row counts, method and time boundaries (:func:`poem.splits.split_summary`)."""
        return dict(self.counts)

    def rows_for(self, part: str) -> list[np.ndarray]:
        """Local rows of ``part``: a split name, or ``"train+validation"`` (refit_on).

        Raises
        ------
        ValueError
            For any other name.
        """
        needed = ("train", "validation") if part == "train+validation" else (part,)
        if gone := [p for p in needed if p in self.released]:
            raise ValueError(f"the {gone[0]} rows of this split were released from memory")
        if part in PARTS:
            return self.rows[part]
        if part == "train+validation":
            return [
                np.sort(np.concatenate([a, b]))
                for a, b in zip(self.rows["train"], self.rows["validation"], strict=True)
            ]
        raise ValueError(f"part must be one of {[*PARTS, 'train+validation']}, got {part!r}")

    def n_rows(self, part: str) -> int:
        """Rows of ``part`` over all partitions."""
        return int(sum(r.size for r in self.rows_for(part)))

    def log(self, part: str) -> LoggedBandit:
        """The rows of ``part`` (as :meth:`rows_for`) as one in-memory log (:func:`take_log`)."""
        return take_log(self.source, self.rows_for(part))


def _split_key(log: Any) -> tuple[int, Any, Any]:
    return (0, None, None) if log is None else (log.n_rows, log.timestamps, log.family)


def split_partitioned(
    source: Any,
    *,
    validation_fraction: float = 0.25,
    test_fraction: float = 0.25,
    by_time: bool = True,
    random_state: Any = None,
) -> PartitionedSplit:
    """Split a partition set: :func:`poem.splits.split_rows` of its concatenated partitions.

    The rows come back as local row positions per partition. A log in memory is split as one
    partition: ``split_partitioned(as_partitions(log))``, then :meth:`PartitionedSplit.log`.

    Parameters
    ----------
    source : partition set
        The log's partitions, in read order.
    validation_fraction, test_fraction, by_time, random_state
        As for :func:`~poem.splits.split_rows`.

    Returns
    -------
    PartitionedSplit
        The same rows on every layout of the same log.

    Raises
    ------
    ValueError
        As :func:`~poem.splits.split_rows`.
    """
    keys = source.map(_split_key, gather=True)
    sizes = [k[0] for k in keys]
    stamps = [k[1] for k in keys if k[0]]
    timestamps = None if any(t is None for t in stamps) or not stamps else np.concatenate(stamps)
    method, *parts = split_rows(
        sum(sizes),
        timestamps,
        validation_fraction=validation_fraction,
        test_fraction=test_fraction,
        by_time=by_time,
        random_state=random_state,
    )
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    rows = {}
    for name, global_rows in zip(PARTS, parts, strict=True):
        cut = np.searchsorted(global_rows, offsets)
        rows[name] = [global_rows[cut[k] : cut[k + 1]] - offsets[k] for k in range(len(sizes))]
    family = next((k[2] for k in keys if k[0]), None)
    summary = split_summary(method, parts, timestamps)
    return PartitionedSplit(source, rows, method, summary, family=family)


@dataclass(frozen=True)
class LogHeader:
    """The shape of a partitioned log (what the flow checks a champion and a warm start by).

    Attributes
    ----------
    family : str
        Policy family.
    n_features, n_actions : int
        Feature and action counts.
    n_rows : int
        Rows over all partitions.
    """

    family: str
    n_features: int
    n_actions: int
    n_rows: int


def _header(log: Any) -> tuple | None:
    return None if log is None else (log.family, log.n_features, log.n_actions, log.n_rows)


def log_header(source: Any) -> LogHeader:
    """:class:`LogHeader` of a partition set (the first non-empty partition's shape).

    Raises
    ------
    ValueError
        When every partition is empty.
    """
    heads = [h for h in source.map(_header, gather=True) if h is not None]
    if not heads:
        raise ValueError(f"all {len(source)} partitions of the log are empty (0 rows)")
    return LogHeader(*heads[0][:3], int(sum(h[3] for h in heads)))


# -- per-row vectors for the estimators and the gate ---------------------------------------------
@dataclass(frozen=True)
class PolicyRows:
    """Per-row vectors of some rows and each policy's π(yᵢ|xᵢ) on them (log order).

    Attributes
    ----------
    losses : ndarray of shape (n_samples,)
        δᵢ.
    propensities : ndarray of shape (n_samples,)
        Logged pᵢ.
    loss_bounds : tuple of float
        Declared (δ_min, δ_max).
    probabilities : tuple of ndarray of shape (n_samples,)
        One per policy given to :func:`policy_rows`: π(yᵢ|xᵢ).
    timestamps : ndarray or None, default=None
        The rows' timestamps, when the log has them.
    """

    losses: np.ndarray
    propensities: np.ndarray
    loss_bounds: tuple[float, float]
    probabilities: tuple[np.ndarray, ...]
    timestamps: Any = None

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.losses.shape[0])


def _policy_rows(
    log: Any, rows: np.ndarray, *, policies: tuple, method: str = "log_action_probability_on"
) -> tuple | None:
    """One partition's rows and each policy's ``<method>(rows)`` (probabilities or weights)."""
    if log is None or rows.size == 0:
        return None
    part = log.take(rows)
    values = tuple(getattr(p, method)(part) for p in policies)
    return np.asarray(part.losses), part.propensities, part.loss_bounds, values, part.timestamps


def _gate_rows(log: Any, rows: np.ndarray, *, challenger: Any, champion: Any) -> Any:
    if log is None or rows.size == 0:
        return None
    part = log.take(rows)
    return gate_rows(challenger, champion, part), row_keys(part), part.timestamps


def _stack(values: list) -> Any:
    """Row-wise concatenation of arrays or sparse matrices (None when any is None)."""
    if any(v is None for v in values):
        return None
    if sp.issparse(values[0]):
        return sp.vstack(values, format="csr")
    return np.concatenate([np.asarray(v) for v in values])


def policy_rows(source: Any, rows: list[np.ndarray], policies: tuple = ()) -> PolicyRows:
    """Losses, propensities and each policy's probabilities of the given rows, in log order.

    Parameters
    ----------
    source : partition set
        The log's partitions.
    rows : list of ndarray
        Local row positions per partition (:meth:`PartitionedSplit.rows_for`).
    policies : tuple of StochasticPolicy, default=()
        Policies whose π(yᵢ|xᵢ) to compute on the workers.

    Returns
    -------
    PolicyRows
        The rows' vectors, with one probability vector per policy (for
        :func:`poem.estimators.ips.evaluate_rows`).

    Raises
    ------
    ValueError
        When no row is selected.
    """
    pieces = source.map(_policy_rows, rows, policies=tuple(policies), gather=True)
    return _joined_rows(pieces, len(policies))


def _joined_rows(pieces: list, n_vectors: int) -> PolicyRows:
    """The partitions' ``(losses, propensities, bounds, vectors, timestamps)`` in log order."""
    pieces = [p for p in pieces if p]
    if not pieces:
        raise ValueError("no rows selected in any of the partitions (0 rows)")
    return PolicyRows(
        np.concatenate([p[0] for p in pieces]),
        np.concatenate([p[1] for p in pieces]),
        pieces[0][2],
        tuple(np.concatenate([p[3][j] for p in pieces]) for j in range(n_vectors)),
        _stack([p[4] for p in pieces]),
    )


def policy_weight_rows(source: Any, rows: list[np.ndarray], views: tuple) -> PolicyRows:
    """:func:`policy_rows` with each view's weights ``view.weights_on(part)`` for probabilities.

    ``views`` are e.g. :class:`poem.estimators.marginal.MarginalWeights` (the per-label weights
    mᵢ, checked against the logger on every partition where its rows live).
    """
    pieces = source.map(_policy_rows, rows, policies=tuple(views), method="weights_on", gather=True)
    return _joined_rows(pieces, len(views))


def partitioned_gate_rows(
    source: Any, rows: list[np.ndarray], challenger: Any, champion: Any
) -> GateRows:
    """The :class:`~poem.gate.GateRows` of the given rows, computed where they live, in log order.

    Each partition computes its rows' losses, propensities, both policies' probabilities of
    the logged actions, U(x) ≥ TV(x) (:func:`poem.gate.policy_total_variation`) and row keys
    (:func:`poem.ledger.row_keys`); the client concatenates them, and the window
    (:func:`poem.ledger.test_window`) is the same as the same rows' in memory.

    Raises
    ------
    ValueError
        When no row is selected.
    """
    pieces = source.map(_gate_rows, rows, challenger=challenger, champion=champion, gather=True)
    pieces = [p for p in pieces if p]
    if not pieces:
        raise ValueError("no rows selected in any of the partitions (0 rows)")
    parts = [p[0] for p in pieces]

    def joined(name: str) -> Any:
        return _stack([getattr(g, name) for g in parts])

    stamps = _stack([p[2] for p in pieces])
    return GateRows(
        joined("losses"),
        joined("propensities"),
        joined("challenger_probabilities"),
        None if champion is None else joined("champion_probabilities"),
        parts[0].loss_bounds,
        None if champion is None else joined("total_variation"),
        test_window(np.concatenate([p[1] for p in pieces]), stamps),
    )


def kept_rows(split: PartitionedSplit, part: str) -> list[np.ndarray]:
    """Per partition, the local rows of every part but ``part`` (sorted)."""
    others = [p for p in PARTS if p != part]
    return [
        np.sort(np.concatenate([split.rows[p][k] for p in others]))
        for k in range(len(split.rows[part]))
    ]


def take_rows(log: Any, rows: np.ndarray) -> Any:
    """``log.take(rows)`` (the log itself when every row is kept; None when no row is)."""
    if log is None or rows.size == 0:
        return None
    return log if rows.size == log.n_rows else log.take(rows)


def release_rows(split: PartitionedSplit, part: str, source: Any = None) -> PartitionedSplit:
    """The split with ``part``'s rows dropped from the partitions (to free memory).

    Parameters
    ----------
    split : PartitionedSplit
        The split; its ``source`` is consumed (left empty) when ``source`` is None.
    part : {"train", "validation", "test"}
        The part to drop (e.g. ``"train"`` once its rows are prepared for training).
    source : partition set or None, default=None
        The partitions already reduced to :func:`kept_rows`; None reduces ``split.source``.

    Returns
    -------
    PartitionedSplit
        Same rows for the other parts (positions renumbered), ``part`` in ``released``.
    """
    keep = kept_rows(split, part)
    if source is None:
        source = split.source.map(take_rows, keep, consume=True)
    rows = {
        p: [
            np.zeros(0, np.int64) if p == part else np.searchsorted(keep[k], split.rows[p][k])
            for k in range(len(keep))
        ]
        for p in PARTS
    }
    return replace(split, source=source, rows=rows, released=(*split.released, part))


def as_partitions(log: LoggedBandit) -> LocalPartitions:
    """A log in memory as a partition set: one partition."""
    return LocalPartitions([log])


def concat_logs(logs: list) -> LoggedBandit:
    """One :class:`~poem.data.LoggedBandit` of partitions' logs, in order (None skipped).

    Raises
    ------
    ValueError
        When every log is None (no rows).
    """
    logs = [log for log in logs if log is not None]
    if not logs:
        raise ValueError("no rows selected in any of the partitions (0 rows)")
    if len(logs) == 1:
        return logs[0]

    first = logs[0]
    candidates = None
    if first.candidates is not None:
        sets = [log.candidates for log in logs]
        features = _stack([c.features for c in sets])
        candidates = CandidateSets.from_sizes(features, np.concatenate([c.sizes for c in sets]))
    columns = ("contexts", "actions", "losses", "propensities", *_OPTIONAL_ROWS)
    joined = {name: _stack([getattr(log, name) for log in logs]) for name in columns}
    return replace(first, candidates=candidates, **joined)


def take_log(source: Any, rows: list[np.ndarray]) -> LoggedBandit:
    """The given rows of a partition set as one in-memory log, in log order.

    For the learners without an additive form: they fit on it as on any log.
    """
    return concat_logs(source.map(take_rows, rows, gather=True))


def sample_log(
    split: PartitionedSplit, part: str, max_rows: int, random_state: int = 0
) -> LoggedBandit:
    """At most ``max_rows`` rows of ``part``, uniformly without replacement, as one log.

    Every row when the part has no more (a log in memory is then its part whole); the
    kept rows stay in log order. Raises ValueError as :meth:`PartitionedSplit.rows_for`.
    """
    rows = split.rows_for(part)
    sizes = [r.size for r in rows]
    total = int(sum(sizes))
    if total > max_rows:
        keep = np.zeros(total, dtype=bool)
        keep[np.random.default_rng(random_state).choice(total, int(max_rows), replace=False)] = True
        rows = [r[k] for r, k in zip(rows, np.split(keep, np.cumsum(sizes)[:-1]), strict=True)]
    return take_log(split.source, rows)
