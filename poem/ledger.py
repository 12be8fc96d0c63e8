"""The gate's attempt ledger: repeated attempts on one test window share one α (DESIGN §5).

Every gate attempt against a champion on a test window that overlaps an earlier attempt's
window (a re-run, a new seed, a refit) is one more test of the same rows, so the ledger gives
the k-th attempt

    αₖ = α (1 − q) q^{k−1},  Σₖ αₖ = α,

with q the ``retry_fraction``, so the chance that *any* attempt on the window promotes a
challenger that is not better is at most α (union bound). A disjoint window or a new champion
starts a new ledger. The ledger is plain data (:class:`LedgerEntry`, JSON), stored by the
flows as a tag on the registered model (``flows/ledger.py``).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

__all__ = [
    "Attempt",
    "LedgerEntry",
    "TestWindow",
    "attempt_alpha",
    "entries_from_json",
    "entries_to_json",
    "next_attempt",
    "window_of",
]


@dataclass(frozen=True)
class TestWindow:
    """The rows an attempt tested: a time range, or a digest of the rows when untimed.

    Attributes
    ----------
    start, end : str or None
        First and last timestamp (ISO 8601) of the test rows, when the log has timestamps.
    rows : str or None
        SHA-256 (16 hex) of the rows' event ids (or losses and propensities) when it has none.
    """

    __test__ = False  # not a pytest class

    start: str | None = None
    end: str | None = None
    rows: str | None = None

    def overlaps(self, other: TestWindow) -> bool:
        """True when the two windows may share rows (time ranges intersect, or same rows)."""
        if self.start is not None and other.start is not None:
            return not (self.end < other.start or other.end < self.start)  # type: ignore[operator]
        return self.rows is not None and self.rows == other.rows


def window_of(log: Any) -> TestWindow:
    """The :class:`TestWindow` of a log (``timestamps``, else ``event_ids``, else the values)."""
    stamps = getattr(log, "timestamps", None)
    if stamps is not None and len(stamps):
        values = np.asarray(stamps, dtype="datetime64[ns]")
        return TestWindow(start=str(values.min()), end=str(values.max()))
    digest = hashlib.sha256()
    ids = getattr(log, "event_ids", None)
    if ids is not None:
        digest.update("\n".join(sorted(map(str, ids))).encode())
    else:
        digest.update(np.ascontiguousarray(log.losses, dtype=np.float64).tobytes())
        digest.update(np.ascontiguousarray(log.propensities, dtype=np.float64).tobytes())
    return TestWindow(rows=digest.hexdigest()[:16])


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded gate attempt.

    Attributes
    ----------
    champion : str
        The champion's version (``"logging-policy"`` before any promotion).
    window : TestWindow
        The rows it tested.
    attempt : int
        Its number on that window (1 for the first).
    alpha : float
        The α it was given.
    run_id : str
        Where it ran (the MLflow run id), for audit.
    """

    champion: str
    window: TestWindow
    attempt: int
    alpha: float
    run_id: str = ""


@dataclass(frozen=True)
class Attempt:
    """The attempt a new gate decision is: its number and the α it may spend.

    Attributes
    ----------
    number : int
        1 for the first attempt on the window against this champion.
    alpha : float
        αₖ, i.e. 1 − the confidence level of this decision.
    family_alpha : float
        α shared by all attempts on the window.
    window : TestWindow
        The test window.
    """

    number: int
    alpha: float
    family_alpha: float
    window: TestWindow

    @property
    def confidence_level(self) -> float:
        """1 − αₖ."""
        return 1.0 - self.alpha


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
    champion: str,
    window: TestWindow,
    *,
    alpha: float,
    retry_fraction: float,
) -> Attempt:
    """The next attempt on ``window`` against ``champion`` given the recorded ``entries``.

    Its number is one more than the number of recorded attempts against the same champion
    whose windows overlap ``window`` (so a window overlapping several earlier ones pays for
    all of them).
    """
    number = 1 + sum(e.champion == champion and e.window.overlaps(window) for e in entries)
    return Attempt(number, attempt_alpha(number, alpha, retry_fraction), alpha, window)


def entries_to_json(entries: list[LedgerEntry]) -> str:
    """Compact JSON of the entries (what the registry tag holds)."""
    return json.dumps([asdict(e) for e in entries], separators=(",", ":"), sort_keys=True)


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
        return [LedgerEntry(**{**e, "window": TestWindow(**e["window"])}) for e in json.loads(text)]
    except (TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"gate ledger: cannot read {text[:80]!r} ({exc})") from None
