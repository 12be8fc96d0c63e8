"""The gate's attempt ledger (:mod:`poem.ledger`)."""

import numpy as np
import pytest

from poem.data import LoggedBandit
from poem.ledger import (
    LedgerEntry,
    TestWindow,
    attempt_alpha,
    entries_from_json,
    entries_to_json,
    next_attempt,
    window_of,
)


def test_attempt_alphas_sum_to_alpha_and_decrease():
    alphas = [attempt_alpha(k, 0.05, 0.2) for k in range(1, 200)]
    assert alphas[:3] == pytest.approx([0.04, 0.008, 0.0016])
    assert sum(alphas) == pytest.approx(0.05)
    assert attempt_alpha(1, 0.05, 0.5) == pytest.approx(0.025)  # α·2⁻ᵏ
    for bad in ((0, 0.05, 0.2), (1, 1.0, 0.2), (1, 0.05, 1.0)):
        with pytest.raises(ValueError, match="must be"):
            attempt_alpha(*bad)


def test_windows_overlap_by_time_or_by_rows():
    jan = TestWindow("2026-01-01T00:00", "2026-01-31T23:59")
    mid = TestWindow("2026-01-20T00:00", "2026-02-10T00:00")
    feb = TestWindow("2026-02-01T00:00", "2026-02-28T00:00")
    assert jan.overlaps(mid) and mid.overlaps(feb) and not jan.overlaps(feb)
    assert TestWindow(rows="ab").overlaps(TestWindow(rows="ab"))
    assert not TestWindow(rows="ab").overlaps(TestWindow(rows="cd"))
    assert not TestWindow(rows="ab").overlaps(jan)


def test_repeated_attempts_on_one_window_share_alpha():
    # a re-run, a new seed, a new grid: each attempt on an overlapping window against the
    # same champion spends a smaller part of α; a disjoint window or a new champion starts over
    window = TestWindow("2026-01-01T00:00", "2026-01-31T00:00")
    entries: list[LedgerEntry] = []
    spent = []
    for _ in range(20):
        attempt = next_attempt(entries, "3", window, alpha=0.05, retry_fraction=0.2)
        spent.append(attempt.alpha)
        entries.append(LedgerEntry("3", window, attempt.number, attempt.alpha, "run"))
    assert [attempt_alpha(k, 0.05, 0.2) for k in range(1, 21)] == spent
    assert sum(spent) <= 0.05 and attempt.number == 20
    assert attempt.confidence_level == pytest.approx(1 - spent[-1])
    later = TestWindow("2026-02-01T00:00", "2026-02-28T00:00")
    assert next_attempt(entries, "3", later, alpha=0.05, retry_fraction=0.2).number == 1
    assert next_attempt(entries, "4", window, alpha=0.05, retry_fraction=0.2).number == 1


def test_ledger_round_trips_through_json():
    entries = [
        LedgerEntry("logging-policy", TestWindow(rows="ab12"), 1, 0.04, "r1"),
        LedgerEntry("2", TestWindow("2026-01-01T00:00", "2026-01-02T00:00"), 2, 0.008, "r2"),
    ]
    assert entries_from_json(entries_to_json(entries)) == entries
    assert entries_from_json(None) == [] and entries_from_json("") == []
    with pytest.raises(ValueError, match="gate ledger: cannot read"):
        entries_from_json('[{"champion": "1"}]')


def test_the_window_of_a_log_uses_timestamps_else_the_rows(tiny_log):
    untimed = window_of(tiny_log)
    assert untimed.start is None and len(untimed.rows) == 16
    assert window_of(tiny_log) == untimed  # deterministic
    stamps = np.array(["2026-01-03", "2026-01-01", "2026-01-02", "2026-01-05", "2026-01-04"])
    timed = LoggedBandit(
        tiny_log.contexts,
        tiny_log.actions,
        tiny_log.losses,
        tiny_log.propensities,
        tiny_log.loss_bounds,
        timestamps=stamps.astype("datetime64[ns]"),
    )
    window = window_of(timed)
    assert window.start.startswith("2026-01-01") and window.end.startswith("2026-01-05")
