"""Decision log: served decisions joined with their later feedback, appended as canonical Parquet.

The application hands :class:`DecisionLog` the request it sent and the serving model's response
(``event_id, action, propensity, model_version, timestamp``, ``deploy/pyfunc.py``), later the
observed losses; the log joins them on ``event_id`` and appends the completed rows to a
date-partitioned log in the format of :mod:`poem.io.parquet`
(``date=YYYY-MM-DD/part-<time>-<id>.parquet``), ready for ``check`` and ``retrain``.

Missing feedback: a decision without feedback ``feedback_timeout`` after its time is closed at
the next :meth:`DecisionLog.flush` with ``missing_feedback_loss`` (default the upper loss bound:
silence is never credited), or excluded with ``exclude_missing=True``; every case is counted in
the :class:`FlushReport`. Pending decisions live in memory (``flush(force=True)`` before stopping).

Exactly once, never half: every file is written atomically
(:func:`poem.io._folder.write_parquet_atomic`; a killed writer leaves at most a hidden
``.part-….tmp``, removed by a later flush once an hour old); the event ids already in a ``date=``
folder are never written again (``n_already_logged``), and a flush that fails closes only the
dates already written, so a retried flush or a replay after a crash never duplicates a row.
Bad decisions are refused by :meth:`DecisionLog.add_decisions` before they enter the buffer.
Timestamps with a UTC offset are converted to UTC; naive values are UTC.

Private by default: the log holds request features, so its files are created ``0600`` and the
folders it creates (the log folder, ``date=`` folders) ``0700``, whatever the umask; folders
that already exist keep their mode.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from poem.data import CandidateSets, LoggedBandit
from poem.io._decision_rows import (
    check_future,
    check_propensities,
    feature_matrix,
    ids_on_disk,
    served_min_propensity,
    utc_naive,
)
from poem.io._folder import (
    link_outside,
    make_private_folder,
    remove_stale_temporaries,
    write_parquet_atomic,
)
from poem.io.parquet import METADATA_KEY, log_to_frame

__all__ = ["DecisionLog", "FlushReport", "served_min_propensity"]

logger = logging.getLogger(__name__)

_DECISION_COLUMNS = ("event_id", "action", "propensity", "model_version", "timestamp")


@dataclass(frozen=True)
class FlushReport:
    """Counts of one :meth:`DecisionLog.flush` (and the files it wrote)."""

    n_written: int
    n_with_feedback: int
    n_default_loss: int
    n_excluded: int
    n_pending: int
    n_late_feedback: int
    n_unknown_feedback: int
    n_duplicate_feedback: int
    files: tuple[str, ...] = ()
    n_already_logged: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for JSON, MLflow, Prefect artifacts)."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


@dataclass
class DecisionLog:
    """Join served decisions with feedback and append them as canonical date-partitioned Parquet.

    Parameters
    ----------
    path : str or Path
        Log directory (receives ``date=YYYY-MM-DD/`` partitions).
    family : {"discrete", "multilabel", "candidates"}
        Action structure of the served policy.
    feature_names : sequence of str
        Request feature columns, in the policy's order.
    loss_bounds : tuple of float or None
        Declared loss bounds [δ_min, δ_max] of the feedback; None with ``reward_bounds``.
    n_actions : int or None
        Number of actions K (discrete) or labels q (multilabel); required for those families
        so every file declares the same width.
    feedback_timeout : datetime.timedelta, default=1 hour
        How long after a decision its feedback may arrive.
    missing_feedback_loss : float or None, default=None
        Loss recorded for decisions whose feedback timed out; None here means "use the upper
        loss bound". Set ``exclude_missing=True`` to drop (and count) them instead.
    exclude_missing : bool, default=False
        Exclude timed-out decisions from the log instead of imputing a loss.
    min_propensity : float or None, default=None
        The served policy's guaranteed smallest probability (:func:`served_min_propensity`),
        recorded as ``min_propensity`` in the metadata of every file; decisions served with a
        smaller propensity are refused. None: not recorded.
    max_future : datetime.timedelta or None, default=1 day
        Decisions dated more than this after the wall clock are refused (clock errors would
        otherwise open a ``date=`` partition in the future); None accepts any date.
    reward_bounds : tuple of float or None, default=None
        Declared reward bounds [r_min, r_max] instead of ``loss_bounds``: feedback is given as
        rewards (``add_feedback(ids, rewards=clicks)``) and logged as losses δ = −reward with
        bounds [−r_max, −r_min] (DESIGN §3); a timed-out decision gets the lowest reward.
    action_ids : sequence of str or None, default=None
        The served model's own action ids (``data.action_ids``): responses carry them, the
        log stores action k for ``action_ids[k]`` and records the ids in its metadata.
    """

    path: str | Path
    family: str
    feature_names: tuple[str, ...]
    loss_bounds: tuple[float, float] | None = None
    n_actions: int | None = None
    feedback_timeout: _dt.timedelta = _dt.timedelta(hours=1)
    missing_feedback_loss: float | None = None
    exclude_missing: bool = False
    min_propensity: float | None = None
    max_future: _dt.timedelta | None = _dt.timedelta(days=1)
    reward_bounds: tuple[float, float] | None = None
    action_ids: tuple[str, ...] | None = None
    _pending: list[pd.DataFrame] = field(default_factory=list, init=False, repr=False)
    _pending_ids: set[str] = field(default_factory=set, init=False, repr=False)
    _feedback: dict[str, float] = field(default_factory=dict, init=False, repr=False)
    _closed: set[str] = field(default_factory=set, init=False, repr=False)
    _counts: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _on_disk: dict[str, frozenset] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        self.feature_names = tuple(str(f) for f in self.feature_names)
        self._rewards_to_losses()
        lo, hi = (float(b) for b in self.loss_bounds)
        if not lo < hi:
            raise ValueError(f"loss_bounds must satisfy min < max, got {self.loss_bounds!r}")
        self.loss_bounds = (lo, hi)
        if self.family in ("discrete", "multilabel") and self.n_actions is None:
            raise ValueError(f"n_actions is required for the {self.family} family")
        default = hi if self.missing_feedback_loss is None else float(self.missing_feedback_loss)
        if not lo <= default <= hi:
            raise ValueError(
                f"missing_feedback_loss {default} is outside the loss bounds {self.loss_bounds}"
            )
        self.missing_feedback_loss = default
        if self.min_propensity is not None:
            value = float(self.min_propensity)
            if not 0 < value <= 1:
                raise ValueError(f"min_propensity must be in (0, 1], got {self.min_propensity!r}")
            self.min_propensity = value
        self._reset_counts()

    def _rewards_to_losses(self) -> None:
        """Declared reward bounds become loss bounds [−r_max, −r_min]; action ids a tuple."""
        if (self.loss_bounds is None) == (self.reward_bounds is None):
            raise ValueError("give loss_bounds or reward_bounds (exactly one)")
        if self.reward_bounds is not None:
            r_lo, r_hi = (float(b) for b in self.reward_bounds)
            if not r_lo < r_hi:
                raise ValueError(
                    f"reward_bounds must satisfy min < max, got {self.reward_bounds!r}"
                )
            self.reward_bounds = (r_lo, r_hi)
            self.loss_bounds = (-r_hi, -r_lo)  # DESIGN §3: δ = −reward
        if self.action_ids is not None:
            ids = tuple(str(a) for a in self.action_ids)
            if len(set(ids)) != len(ids) or (self.n_actions or len(ids)) != len(ids):
                raise ValueError(
                    f"action_ids must be {self.n_actions} distinct ids, got {list(ids)[:5]}"
                )
            self.action_ids, self.n_actions = ids, len(ids)

    def _action_numbers(self, actions: pd.Series) -> pd.Series:
        """The response's own action ids as action numbers 0..K−1 (unknown ids refused)."""
        if self.action_ids is None:
            return actions
        index = {a: k for k, a in enumerate(self.action_ids)}
        numbers = actions.astype(str).map(index)
        if numbers.isna().any():
            bad = actions[numbers.isna()].astype(str).unique()[:5].tolist()
            raise ValueError(
                f"decision log: {int(numbers.isna().sum())} action(s) are not among the action "
                f"ids {list(self.action_ids)[:8]}, e.g. {bad}"
            )
        return numbers.astype(np.int64)

    def _reset_counts(self) -> None:
        self._counts = {"late": 0, "unknown": 0, "duplicate": 0}

    # -- input ------------------------------------------------------------------------------------
    def add_decisions(
        self, requests: pd.DataFrame, decisions: pd.DataFrame, *, timestamps: Any = None
    ) -> int:
        """Remember served decisions until their feedback arrives.

        Parameters
        ----------
        requests : DataFrame
            The request sent to the model: feature columns (and ``event_id``, one row per
            candidate, for candidate sets), in the order sent.
        decisions : DataFrame
            The model's response (``event_id, action, propensity, model_version, timestamp``).
        timestamps : array-like or None
            Override of the decision times (simulations); default the served ``timestamp``.
            ISO 8601 text or datetimes; naive values are UTC.

        Returns
        -------
        int
            Number of decisions added.

        Raises
        ------
        ValueError
            Naming the field, the count and example event ids, when columns are missing, a
            feature is NaN or infinite, a propensity is not in (0, 1] (or below
            ``min_propensity``), a timestamp is unreadable or more than ``max_future`` ahead,
            an action is outside the action space, an event id is repeated, or requests and
            decisions do not line up. Nothing is added then, and later flushes are unaffected.
        """
        missing = [c for c in _DECISION_COLUMNS if c not in decisions.columns]
        missing += [c for c in self.feature_names if c not in requests.columns]
        if missing:
            raise ValueError(f"decision log: missing columns {missing}")
        frame = decisions.loc[:, list(_DECISION_COLUMNS)].reset_index(drop=True).copy()
        frame["event_id"] = frame["event_id"].astype(str)
        frame["action"] = self._action_numbers(frame["action"])
        check_propensities(frame, self.min_propensity)
        X = feature_matrix(requests, frame, self.feature_names)
        if self.family == "candidates":
            ids = requests["event_id"].astype(str).to_numpy()
            codes, uniques = pd.factorize(ids, sort=False)
            if list(uniques) != frame["event_id"].tolist():
                raise ValueError(
                    "decision log: candidate requests and decisions list different event ids"
                )
            sizes = np.bincount(codes, minlength=len(uniques))
            bounds = np.concatenate([[0], np.cumsum(sizes)])
            frame["candidates"] = [X[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        else:
            if X.shape[0] != len(frame):
                raise ValueError(
                    f"decision log: {X.shape[0]} request rows but {len(frame)} decisions"
                )
            frame["context"] = list(X)
        frame["timestamp"] = utc_naive(
            frame["timestamp"] if timestamps is None else timestamps, frame["event_id"]
        )
        check_future(frame, self.max_future)
        # membership in two sets: the cost of a call does not grow with the pending batches
        seen = self._pending_ids, self._closed
        known = [any(event_id in ids for ids in seen) for event_id in frame["event_id"]]
        dup = frame["event_id"].duplicated() | np.asarray(known, dtype=bool)
        if dup.any():
            raise ValueError(
                f"decision log: {int(dup.sum())} event id(s) already recorded, e.g. "
                f"{frame.loc[dup, 'event_id'].head(5).tolist()}"
            )
        try:  # the rows must make a valid log now, not at the next flush
            self._log(frame, np.full(len(frame), self.loss_bounds[0]))
        except ValueError as exc:
            raise ValueError(f"decision log: decisions refused, nothing added: {exc}") from None
        self._pending.append(frame)
        self._pending_ids.update(frame["event_id"].tolist())
        return len(frame)

    def add_feedback(self, event_ids: Any, losses: Any = None, *, rewards: Any = None) -> int:
        """Record observed losses (or rewards) of earlier decisions; returns how many are kept.

        Feedback for an event already closed (late), unknown, or seen before (duplicate) is
        ignored and counted in the next :class:`FlushReport`. ``rewards`` (with
        ``reward_bounds``) are recorded as losses δ = −reward.

        Raises
        ------
        ValueError
            If a loss is not finite or outside ``loss_bounds`` (a reward outside
            ``reward_bounds``), or neither or both of ``losses`` and ``rewards`` are given.
        """
        ids = np.asarray(event_ids).astype(str).reshape(-1)
        if (losses is None) == (rewards is None):
            raise ValueError("add_feedback: give losses or rewards (exactly one)")
        if rewards is not None and self.reward_bounds is None:
            raise ValueError("add_feedback: rewards need a DecisionLog with reward_bounds")
        if losses is None:
            losses = -np.asarray(rewards, dtype=np.float64)  # DESIGN §3: δ = −reward
        values = np.asarray(losses, dtype=np.float64).reshape(-1)
        if ids.size != values.size:
            raise ValueError(f"add_feedback: {ids.size} event ids but {values.size} losses")
        lo, hi = self.loss_bounds
        bad = ~np.isfinite(values) | (values < lo) | (values > hi)
        if bad.any():
            raise ValueError(
                f"add_feedback: {int(bad.sum())} loss(es) are not finite or outside the bounds "
                f"[{lo}, {hi}], e.g. event ids {ids[bad][:5].tolist()}"
            )
        pending = self._pending_ids
        accepted = 0
        for event_id, loss in zip(ids.tolist(), values.tolist(), strict=True):
            if event_id in self._closed:
                self._counts["late"] += 1
            elif event_id not in pending:
                self._counts["unknown"] += 1
            elif event_id in self._feedback:
                self._counts["duplicate"] += 1
            else:
                self._feedback[event_id] = float(loss)
                accepted += 1
        return accepted

    # -- output -----------------------------------------------------------------------------------
    def flush(self, now: Any = None, *, force: bool = False) -> FlushReport:
        """Write every decision that has feedback or whose feedback timed out.

        Parameters
        ----------
        now : datetime-like or None
            Current time (UTC; naive values are UTC); default the wall clock. Decisions older
            than ``now - feedback_timeout`` without feedback are closed by the
            missing-feedback rule.
        force : bool, default=False
            Close every pending decision (shutdown, end of a simulation round).

        Returns
        -------
        FlushReport

        Raises
        ------
        OSError
            If a write fails. Decisions of the dates already written are closed (their files
            are complete), every other decision stays pending and the next flush tries again;
            no decision is ever written twice.
        ValueError
            If a ``date=`` folder is a symbolic link leading outside the log folder (nothing is
            written through it; its decisions stay pending, as for a failed write).
        """
        now64 = utc_naive([pd.Timestamp.now(tz="UTC") if now is None else now])[0]
        frame = pd.concat(self._pending, ignore_index=True) if self._pending else None
        self._pending = [frame] if frame is not None and len(frame) else []  # closing: one pass
        counts = dict(self._counts)
        if frame is None or frame.empty:
            self._reset_counts()
            return FlushReport(
                0, 0, 0, 0, 0, counts["late"], counts["unknown"], counts["duplicate"]
            )
        has_feedback = frame["event_id"].isin(self._feedback).to_numpy()
        cutoff = now64 - np.timedelta64(self.feedback_timeout)
        timed_out = ~has_feedback & (force | (frame["timestamp"].to_numpy() <= cutoff))
        done = has_feedback | timed_out
        closing = frame[done]
        losses = np.array(closing["event_id"].map(self._feedback), dtype=np.float64)
        imputed = timed_out[done]
        losses[imputed] = self.missing_feedback_loss
        keep = ~imputed if self.exclude_missing else np.ones(len(closing), dtype=bool)
        rows = closing[keep].reset_index(drop=True)
        files, n_already, written = [], 0, set()
        try:  # date by date: a date is closed once its file is in place
            days = rows["timestamp"].to_numpy(dtype="datetime64[D]")
            for day in np.unique(days):
                part = rows[days == day].reset_index(drop=True)
                on_disk = ids_on_disk(self.path / f"date={day}", self._on_disk)
                fresh = ~part["event_id"].isin(on_disk).to_numpy()
                n_already += int((~fresh).sum())
                if fresh.any():
                    sel = fresh.nonzero()[0]
                    day_losses = losses[keep][days == day][sel]
                    files.append(self._write_day(day, part.iloc[sel], day_losses))
                written.update(part["event_id"].tolist())
        except BaseException:
            self._close(written)
            raise
        self._close(set(closing["event_id"].tolist()))
        self._reset_counts()
        report = FlushReport(
            n_written=int(keep.sum()) - n_already,
            n_with_feedback=int((~imputed).sum()),
            n_default_loss=0 if self.exclude_missing else int(imputed.sum()),
            n_excluded=int(imputed.sum()) if self.exclude_missing else 0,
            n_pending=sum(len(f) for f in self._pending),
            n_late_feedback=counts["late"],
            n_unknown_feedback=counts["unknown"],
            n_duplicate_feedback=counts["duplicate"],
            files=tuple(files),
            n_already_logged=n_already,
        )
        if report.n_default_loss or report.n_excluded:
            logger.warning(
                "decision log: %d decision(s) got no feedback within %s; %s",
                int(imputed.sum()),
                self.feedback_timeout,
                "excluded"
                if self.exclude_missing
                else f"recorded with loss {self.missing_feedback_loss:g}",
            )
        if n_already:
            logger.warning(
                "decision log: %d decision(s) were already in the log (a replay or a retried "
                "flush); not written again",
                n_already,
            )
        return report

    def _close(self, event_ids: set[str]) -> None:
        """Move decisions out of the buffer for good (written, excluded or already logged)."""
        if not event_ids:
            return
        kept = [f[~f["event_id"].isin(event_ids)].reset_index(drop=True) for f in self._pending]
        self._pending = [f for f in kept if len(f)]
        self._pending_ids.difference_update(event_ids)
        self._closed.update(event_ids)
        for event_id in event_ids:
            self._feedback.pop(event_id, None)

    def _log(self, rows: pd.DataFrame, losses: np.ndarray) -> LoggedBandit:
        contexts = candidates = None
        if self.family == "candidates":
            blocks = rows["candidates"].tolist()
            candidates = CandidateSets.from_sizes(np.vstack(blocks), [b.shape[0] for b in blocks])
        else:
            contexts = np.vstack(rows["context"].tolist())
        return LoggedBandit(
            contexts=contexts,
            actions=np.asarray(rows["action"].tolist(), dtype=np.int64),
            losses=losses,
            propensities=rows["propensity"].to_numpy(dtype=np.float64),
            loss_bounds=self.loss_bounds,
            family=self.family,
            n_actions=self.n_actions,
            timestamps=rows["timestamp"].to_numpy(dtype="datetime64[ns]"),
            event_ids=np.asarray(rows["event_id"].tolist(), dtype=object),
            feature_names=self.feature_names,
            action_ids=self.action_ids,
            candidates=candidates,
        )

    def _write_day(self, day: np.datetime64, rows: pd.DataFrame, losses: np.ndarray) -> str:
        """Validate one date's rows as a :class:`LoggedBandit`; write them as one new file."""
        rows = rows.reset_index(drop=True)
        frame = log_to_frame(self._log(rows, np.asarray(losses, dtype=np.float64)))
        meta = dict(frame.attrs[METADATA_KEY])
        if self.min_propensity is not None:
            meta["min_propensity"] = self.min_propensity
        frame["logging_model_version"] = rows["model_version"].astype(str).to_numpy()
        table = pa.Table.from_pandas(frame, preserve_index=False)
        table = table.replace_schema_metadata({METADATA_KEY: json.dumps(meta, sort_keys=True)})
        folder = self.path / f"date={day}"
        if (outside := link_outside(folder, self.path)) is not None:
            raise ValueError(f"decision log: {folder} is {outside}; remove the link")
        make_private_folder(folder)  # request features: owner only (0700 / 0600)
        for stale in remove_stale_temporaries(folder):  # left by a writer killed mid-write
            logger.warning("decision log: removed %s, left by a killed write", stale)
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%S%f")
        target = folder / f"part-{stamp}-{uuid.uuid4().hex[:8]}.parquet"
        write_parquet_atomic(table, target, mode=0o600)
        self._on_disk[str(target)] = frozenset(rows["event_id"].tolist())
        return str(target)
