"""The gate's attempt ledger: every attempt on one test window shares one α (DESIGN §5).

Every gate attempt on a test window that overlaps an earlier attempt's window (a re-run, a new
seed, a refit, a new champion, the rows read in another order, one row dropped, another split
seed or test fraction) is one more test of the same rows, so the ledger gives the k-th attempt

    αₖ = α (1 − q) q^{k−1},  Σₖ αₖ = α,

with q the ``retry_fraction``, so the chance that *any* attempt on the window promotes a
challenger that is not better is at most α (union bound). α and q are pinned by the first
attempt on a window: a later attempt asking for others is refused (:func:`next_attempt`).

The ledger is keyed by the window's *content*, never by a model name or a champion version:
a timed window is its time range; an untimed one the order-free digest of its rows' keys
(:func:`row_keys`: event ids where present, else a hash of each row's values) and a
bottom-k sketch of them, so that windows sharing rows overlap (:meth:`TestWindow.overlaps`).
Each attempt also carries the entropy its random order and coin are drawn from
(:func:`~poem.estimators.improvement.draw_entropy`), so the decision can be replayed and no
draw escapes the ledger. The ledger is plain data (:class:`LedgerEntry`, JSON), stored by the
flows (``flows/ledger.py``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from poem.estimators.improvement import draw_entropy

__all__ = [
    "SKETCH_SIZE",
    "Attempt",
    "LedgerEntry",
    "TestWindow",
    "attempt_alpha",
    "attempt_entropy",
    "attempt_reasons",
    "entries_from_json",
    "entries_to_json",
    "next_attempt",
    "row_keys",
    "test_window",
    "window_of",
]

SKETCH_SIZE = 32  # smallest row keys kept per untimed window (bottom-k sketch)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_SALTS = {"loss": 1, "propensity": 2, "action": 3, "context": 4, "candidate": 5, "time": 6}


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser of each uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = np.asarray(x, dtype=np.uint64) + _GOLDEN
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _bits(values: Any) -> np.ndarray:
    return np.ascontiguousarray(values, dtype=np.float64).view(np.uint64)


def _matrix_keys(matrix: Any, salt: int, offsets: np.ndarray | None = None) -> np.ndarray:
    """Σ over a row's non-zero entries (j, v) of mix(bits(v) ⊕ mix(salt·2³² + j)), per row."""
    with np.errstate(over="ignore"):
        if sp.issparse(matrix):
            m = sp.csr_matrix(matrix)
            m.sum_duplicates()
            m.eliminate_zeros()
            n = m.shape[0]
            rows = np.repeat(np.arange(n), np.diff(m.indptr))
            salt_j = _mix(np.uint64(salt << 32) + m.indices.astype(np.uint64))
            out = np.zeros(n, dtype=np.uint64)
            np.add.at(out, rows, _mix(_bits(m.data) ^ salt_j))
        else:  # one column at a time: O(n) extra memory
            dense = np.asarray(matrix, dtype=np.float64)
            dense = dense.reshape(dense.shape[0], -1)
            out = np.zeros(dense.shape[0], dtype=np.uint64)
            for j in range(dense.shape[1]):
                column = dense[:, j]
                nz = column != 0
                salt_j = _mix(np.uint64((salt << 32) + j))
                out[nz] += _mix(_bits(column[nz]) ^ salt_j)
        if offsets is not None:  # stacked candidate rows → one key per log row
            seg = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
            per_row = np.zeros(offsets.size - 1, dtype=np.uint64)
            np.add.at(per_row, seg, _mix(out ^ _mix(np.uint64(salt))))
            return per_row
    return out


def row_keys(log: Any) -> np.ndarray:
    """A 64-bit key per row: its event id where the log has them, else a hash of its values.

    The value hash combines the row's loss, propensity, action, context (or candidate
    features) and timestamp where the log has them, so equal rows (in any log, read in any
    order) get equal keys and different rows different ones (up to 2⁻⁶⁴ collisions). Equal
    values at another time are another event: a day that replays yesterday's contexts is
    not yesterday's window.

    Parameters
    ----------
    log : LoggedBandit
        The rows.

    Returns
    -------
    ndarray of uint64, shape (n_samples,)
    """
    ids = getattr(log, "event_ids", None)
    if ids is not None:
        return np.array(
            [
                int.from_bytes(hashlib.blake2b(str(i).encode(), digest_size=8).digest(), "little")
                for i in np.asarray(ids, dtype=object)
            ],
            dtype=np.uint64,
        )
    losses = np.asarray(log.losses, dtype=np.float64)
    with np.errstate(over="ignore"):
        key = _mix(_bits(losses) ^ _mix(np.uint64(_SALTS["loss"])))
        key = key + _mix(_bits(log.propensities) ^ _mix(np.uint64(_SALTS["propensity"])))
        actions = np.asarray(log.actions, dtype=np.float64).reshape(losses.size, -1)
        key = key + _matrix_keys(actions + 1.0, _SALTS["action"])  # + 1: action 0 counts
        contexts = getattr(log, "contexts", None)
        if contexts is not None:
            key = key + _matrix_keys(contexts, _SALTS["context"])
        candidates = getattr(log, "candidates", None)
        if candidates is not None:
            key = key + _matrix_keys(
                candidates.features, _SALTS["candidate"], np.asarray(candidates.offsets)
            )
        timestamps = getattr(log, "timestamps", None)
        if (
            timestamps is not None
        ):  # the same context, action and loss at another time: another event
            ns = np.asarray(timestamps, dtype="datetime64[ns]").view(np.int64).view(np.uint64)
            key = key + _mix(ns ^ _mix(np.uint64(_SALTS["time"])))
        return _mix(key)


@dataclass(frozen=True)
class TestWindow:
    """The rows an attempt tested: a time range, and the order-free digest of their keys.

    Attributes
    ----------
    start, end : str or None
        First and last timestamp (ISO 8601) of the test rows, when the log has timestamps.
    rows : str or None
        SHA-256 (16 hex) of the sorted row keys (:func:`row_keys`): the same rows give the
        same digest in any order.
    sketch : tuple of str
        The (up to) :data:`SKETCH_SIZE` smallest distinct row keys (16 hex each): two
        windows sharing a fraction J of their rows share a sketch key with probability about
        1 − (1 − J)^k (k = 32: 96 % at J = 5 %, > 99.99 % at J = 25 %).
    """

    __test__ = False  # not a pytest class

    start: str | None = None
    end: str | None = None
    rows: str | None = None
    sketch: tuple[str, ...] = ()

    def overlaps(self, other: TestWindow) -> bool:
        """True when the two windows may share rows.

        Time ranges that intersect, the same digest, or a common sketch key.
        """
        if self.start is not None and other.start is not None:
            if not (self.end < other.start or other.end < self.start):  # type: ignore[operator]
                return True
        if self.rows is not None and self.rows == other.rows:
            return True
        return bool(set(self.sketch) & set(other.sketch))


def test_window(keys: Any, timestamps: Any = None) -> TestWindow:
    """The :class:`TestWindow` of rows with these :func:`row_keys` (and timestamps)."""
    k = np.sort(np.asarray(keys, dtype=np.uint64))
    digest = hashlib.sha256(np.ascontiguousarray(k, dtype="<u8").tobytes()).hexdigest()[:16]
    sketch = tuple(f"{int(v):016x}" for v in np.unique(k)[:SKETCH_SIZE])
    start = end = None
    if timestamps is not None and len(timestamps):
        values = np.asarray(timestamps, dtype="datetime64[ns]")
        start, end = str(values.min()), str(values.max())
    return TestWindow(start, end, digest, sketch)


test_window.__test__ = False  # type: ignore[attr-defined]  # not a pytest test


def window_of(log: Any) -> TestWindow:
    """The :class:`TestWindow` of a log: its timestamps and its :func:`row_keys`."""
    return test_window(row_keys(log), getattr(log, "timestamps", None))


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded gate attempt.

    Attributes
    ----------
    window : TestWindow
        The rows it tested.
    attempt : int
        Its number on that window (1 for the first).
    alpha : float
        The αₖ it was given.
    family_alpha : float or None
        The α of the window (pinned by its first attempt).
    retry_fraction : float or None
        The q of the window (pinned by its first attempt).
    run_id : str
        Where it ran (the MLflow run id), for audit.
    champion : str
        The champion it was gated against (audit only: not part of the key).
    order_seed : str
        The entropy of its random order and coin (decimal), for replay.
    seed_given : bool
        True when the seed was given (a replay), not drawn fresh.
    """

    window: TestWindow
    attempt: int
    alpha: float
    family_alpha: float | None = None
    retry_fraction: float | None = None
    run_id: str = ""
    champion: str = ""
    order_seed: str = ""
    seed_given: bool = False


@dataclass(frozen=True)
class Attempt:
    """The attempt a new gate decision is: its number, the α it may spend, its randomness.

    Attributes
    ----------
    number : int
        1 for the first attempt on the window.
    alpha : float
        αₖ, i.e. 1 − the confidence level of this decision.
    family_alpha : float
        α shared by all attempts on the window.
    window : TestWindow
        The test window.
    retry_fraction : float or None, default=None
        q of the window's schedule.
    order_seed : int or None, default=None
        The entropy this attempt's order and coin are drawn from (None: drawn by the gate).
    seed_given : bool, default=False
        True when ``order_seed`` was given (a replay of that draw), not drawn fresh.
    """

    number: int
    alpha: float
    family_alpha: float
    window: TestWindow
    retry_fraction: float | None = None
    order_seed: int | None = None
    seed_given: bool = False

    @property
    def confidence_level(self) -> float:
        """1 − αₖ."""
        return 1.0 - self.alpha

    def entry(self, run_id: str = "", champion: str = "") -> LedgerEntry:
        """The :class:`LedgerEntry` recording this attempt."""
        return LedgerEntry(
            self.window,
            self.number,
            self.alpha,
            self.family_alpha,
            self.retry_fraction,
            run_id,
            champion,
            "" if self.order_seed is None else str(self.order_seed),
            self.seed_given,
        )


def attempt_alpha(number: int, alpha: float, retry_fraction: float) -> float:
    r"""αₖ = α (1 − q) q^{k−1}: the α of attempt k (Σₖ αₖ = α).

    Raises
    ------
    ValueError
        If ``number`` < 1, ``alpha`` not in (0, 1) or ``retry_fraction`` not in (0, 1).
    """
    if not (isinstance(number, (int, np.integer)) and number >= 1):
        raise ValueError(f"attempt number must be an integer >= 1, got {number!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    if not 0.0 < retry_fraction < 1.0:
        raise ValueError(f"retry_fraction must be in (0, 1), got {retry_fraction!r}")
    return alpha * (1.0 - retry_fraction) * retry_fraction ** (int(number) - 1)


def next_attempt(
    entries: list[LedgerEntry],
    window: TestWindow,
    *,
    alpha: float,
    retry_fraction: float,
    order_seed: int | None = None,
) -> Attempt:
    """The next attempt on ``window`` given the recorded ``entries``, with its randomness.

    Its number is one more than the number of recorded attempts whose windows overlap
    ``window`` (so a window overlapping several earlier ones pays for all of them), whatever
    the champion. The order's entropy is drawn fresh (:func:`draw_entropy`) unless
    ``order_seed`` is given (then recorded as given: a replay, not a fresh draw).

    Raises
    ------
    ValueError
        When an overlapping attempt pinned another α or q (one line naming both and the
        settings that match the window's first attempt).
    """
    earlier = [e for e in entries if e.window.overlaps(window)]
    for e in earlier:
        pinned = (e.family_alpha, e.retry_fraction)
        if None in pinned:
            continue
        if not (np.isclose(pinned[0], alpha, rtol=1e-9) and np.isclose(pinned[1], retry_fraction)):
            raise ValueError(
                f"gate ledger: attempt {e.attempt} on this test window (run {e.run_id or '?'}) "
                f"pinned alpha = {pinned[0]:g} and retry_fraction = {pinned[1]:g}; this attempt "
                f"asks alpha = {alpha:g}, retry_fraction = {retry_fraction:g}: set "
                f"gate.confidence_level: {1 - pinned[0]:g} and gate.retry_fraction: "
                f"{pinned[1]:g} (a window's schedule cannot change once spent)"
            )
    number = 1 + len(earlier)
    seed_given = order_seed is not None
    seed = draw_entropy() if order_seed is None else int(order_seed)
    return Attempt(
        number,
        attempt_alpha(number, alpha, retry_fraction),
        alpha,
        window,
        retry_fraction,
        seed,
        seed_given,
    )


def entries_to_json(entries: list[LedgerEntry]) -> str:
    """Compact JSON of the entries (what the ledger's tags hold)."""
    return json.dumps([asdict(e) for e in entries], separators=(",", ":"), sort_keys=True)


def _entry(raw: dict) -> LedgerEntry:
    window = dict(raw["window"])
    window["sketch"] = tuple(window.get("sketch", ()))
    return LedgerEntry(**{**raw, "window": TestWindow(**window)})


def entries_from_json(text: str | None) -> list[LedgerEntry]:
    """Entries from :func:`entries_to_json` text (None or empty: none).

    Raises
    ------
    ValueError
        When the text is not a ledger (naming what is wrong).
    """
    if not text:
        return []
    try:
        return [_entry(e) for e in json.loads(text)]
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"gate ledger: cannot read {text[:80]!r} ({exc})") from None


def attempt_entropy(attempt: Attempt | None, order_seed: int | None) -> tuple[int, bool]:
    """The entropy a gate decision draws its order (and coin) from, and whether it was given.

    The ``attempt``'s own (fresh, or recorded as given), else ``order_seed`` (a replay), else
    a fresh draw (:func:`~poem.estimators.improvement.draw_entropy`).

    Raises
    ------
    ValueError
        When both are given (the attempt carries its own entropy).
    """
    if attempt is not None and order_seed is not None:
        raise ValueError(
            "order_seed: the attempt carries its own entropy; pass the seed to "
            "poem.ledger.next_attempt(order_seed=...) instead"
        )
    if attempt is not None and attempt.order_seed is not None:
        return int(attempt.order_seed), bool(attempt.seed_given)
    if order_seed is not None:
        return int(order_seed), True
    return draw_entropy(), False


def attempt_reasons(
    seed: int, given: bool, attempt: Attempt | None, level: float
) -> tuple[str, ...]:
    """The decision's reasons about its randomness and the α it spent (one sentence each).

    A given seed is a replay; an ``attempt`` names its number and αₖ; without one the
    decision says it spent the full α = 1 − ``level`` outside any ledger.
    """
    reasons: tuple[str, ...] = ()
    if given:
        reasons += (
            f"order seed given ({seed}): this decision replays that draw; the level holds "
            "over fresh draws, so a pinned seed is a replay, not a fresh attempt",
        )
    if attempt is not None:
        return reasons + (
            f"attempt {attempt.number} on this test window: alpha = {attempt.alpha:.4g} of "
            f"the window's {attempt.family_alpha:.4g}",
        )
    return reasons + (
        f"no attempt ledger: this decision spent the full alpha = {1 - level:.4g} outside "
        "any ledger (repeated calls on these rows each spend it again)",
    )
