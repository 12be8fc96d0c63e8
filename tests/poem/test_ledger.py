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
    row_keys,
    test_window,
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
    # a re-run, a new seed, a new grid, a new champion: each attempt on an overlapping window
    # spends a smaller part of α; only a disjoint window starts over
    window = TestWindow("2026-01-01T00:00", "2026-01-31T00:00")
    entries: list[LedgerEntry] = []
    spent = []
    for k in range(20):
        attempt = next_attempt(entries, window, alpha=0.05, retry_fraction=0.2)
        spent.append(attempt.alpha)
        entries.append(attempt.entry(f"run{k}", champion=str(k % 3)))
    assert [attempt_alpha(k, 0.05, 0.2) for k in range(1, 21)] == spent
    assert sum(spent) <= 0.05 and attempt.number == 20
    assert attempt.confidence_level == pytest.approx(1 - spent[-1])
    later = TestWindow("2026-02-01T00:00", "2026-02-28T00:00")
    assert next_attempt(entries, later, alpha=0.05, retry_fraction=0.2).number == 1


def test_alpha_and_q_are_pinned_by_the_first_attempt_on_a_window():
    # issue 34, measured item 3: α and q were read from the config at each attempt
    # (--set gate.confidence_level=0.5 on attempt 2 spent 8 %, 12 % in total)
    window = TestWindow(rows="ab", sketch=("00ff",))
    first = next_attempt([], window, alpha=0.05, retry_fraction=0.2)
    entries = [first.entry("r1")]
    with pytest.raises(ValueError) as info:
        next_attempt(entries, window, alpha=0.5, retry_fraction=0.2)
    assert str(info.value) == (
        "gate ledger: attempt 1 on this test window (run r1) pinned alpha = 0.05 and "
        "retry_fraction = 0.2; this attempt asks alpha = 0.5, retry_fraction = 0.2: set "
        "gate.confidence_level: 0.95 and gate.retry_fraction: 0.2 (a window's schedule "
        "cannot change once spent)"
    )
    with pytest.raises(ValueError, match="retry_fraction = 0.5: set"):
        next_attempt(entries, window, alpha=0.05, retry_fraction=0.5)
    assert next_attempt(entries, TestWindow(rows="cd"), alpha=0.5, retry_fraction=0.5).number == 1


def test_each_attempt_draws_fresh_entropy_and_a_given_seed_is_recorded_as_given():
    window = TestWindow(rows="ab")
    a, b = (next_attempt([], window, alpha=0.05, retry_fraction=0.2) for _ in range(2))
    assert a.order_seed != b.order_seed and not a.seed_given
    pinned = next_attempt([], window, alpha=0.05, retry_fraction=0.2, order_seed=7)
    assert pinned.order_seed == 7 and pinned.seed_given
    entry = pinned.entry("r", "3")
    assert entry.order_seed == "7" and entry.seed_given and entry.champion == "3"


def test_ledger_round_trips_through_json():
    window = test_window(np.arange(5, dtype=np.uint64))
    entries = [
        next_attempt([], window, alpha=0.05, retry_fraction=0.2).entry("r1", "logging-policy"),
        LedgerEntry(TestWindow("2026-01-01T00:00", "2026-01-02T00:00"), 2, 0.008, 0.05, 0.2, "r2"),
    ]
    assert entries_from_json(entries_to_json(entries)) == entries
    assert entries_from_json(None) == [] and entries_from_json("") == []
    with pytest.raises(ValueError, match="gate ledger: cannot read"):
        entries_from_json('[{"champion": "1"}]')
    # entries an older gate wrote (keyed by champion, no pins) still read, and still count
    old = '[{"alpha":0.04,"attempt":1,"champion":"1","run_id":"r0","window":{"end":null,"rows":"ab","start":null}}]'
    (legacy,) = entries_from_json(old)
    assert next_attempt([legacy], TestWindow(rows="ab"), alpha=0.05, retry_fraction=0.2).number == 2


def test_the_window_of_a_log_uses_timestamps_and_the_rows(tiny_log):
    untimed = window_of(tiny_log)
    assert untimed.start is None and len(untimed.rows) == 16 and len(untimed.sketch) == 5
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


def test_the_window_is_the_rows_content_in_any_order_and_partial_overlaps_count(synthetic_log):
    # issue 34, measured item 3: the untimed digest hashed the rows in order, so the same
    # rows read in another order, one row dropped, or another split seed / test fraction
    # started a fresh ledger
    n = synthetic_log.n_rows
    rng = np.random.default_rng(0)
    window = window_of(synthetic_log)
    shuffled = window_of(synthetic_log.take(rng.permutation(n)))
    assert shuffled == window  # same rows, another order: the same window
    dropped = window_of(synthetic_log.take(np.arange(1, n)))
    assert dropped.rows != window.rows and dropped.overlaps(window)  # one row fewer: overlaps
    test_25, test_24 = (np.sort(rng.permutation(n)[: int(f * n)]) for f in (0.25, 0.24))
    other_seed = window_of(synthetic_log.take(test_24))  # another split seed and fraction
    assert other_seed.overlaps(window_of(synthetic_log.take(test_25)))
    half = n // 2
    first, second = (
        window_of(synthetic_log.take(np.arange(a, b))) for a, b in ((0, half), (half, n))
    )
    assert not first.overlaps(second)  # disjoint rows: disjoint windows
    ids = LoggedBandit(
        synthetic_log.contexts,
        synthetic_log.actions,
        synthetic_log.losses,
        synthetic_log.propensities,
        synthetic_log.loss_bounds,
        event_ids=np.array([f"e{i}" for i in range(n)]),
    )
    keys = row_keys(ids)
    assert keys.dtype == np.uint64 and np.unique(keys).size == n
    assert window_of(ids.take(np.arange(n)[::-1])) == window_of(ids)


def test_row_keys_are_the_same_for_dense_and_sparse_contexts(tiny_log):
    import scipy.sparse as sp

    sparse = LoggedBandit(
        sp.csr_matrix(tiny_log.contexts),
        tiny_log.actions,
        tiny_log.losses,
        tiny_log.propensities,
        tiny_log.loss_bounds,
    )
    np.testing.assert_array_equal(row_keys(sparse), row_keys(tiny_log))
    other = LoggedBandit(
        tiny_log.contexts,
        tiny_log.actions,
        tiny_log.losses,
        np.minimum(1.0, tiny_log.propensities * 1.01),
        tiny_log.loss_bounds,
    )
    assert not np.any(row_keys(other) == row_keys(tiny_log))  # any value changes the key


def test_the_same_rows_on_another_day_are_another_window(tiny_log):
    # the demo's day 2 replays day 1's images: equal (context, action, loss, propensity)
    # rows shared day 1's sketch keys, so a fresh day's window paid a second attempt's α
    def on(day):
        stamps = np.array([f"{day}T0{i}:00" for i in range(tiny_log.n_rows)], "datetime64[ns]")
        return LoggedBandit(
            tiny_log.contexts,
            tiny_log.actions,
            tiny_log.losses,
            tiny_log.propensities,
            tiny_log.loss_bounds,
            timestamps=stamps,
        )

    day1, day2 = on("2026-01-01"), on("2026-01-02")
    assert not set(row_keys(day1)) & set(row_keys(day2))
    assert not window_of(day1).overlaps(window_of(day2))
    again = day1.take(np.arange(tiny_log.n_rows)[::-1])  # day 1 re-read in another order
    assert window_of(again) == window_of(day1) and window_of(again).overlaps(window_of(day1))
    assert window_of(tiny_log).sketch != window_of(day1).sketch  # untimed: values only
