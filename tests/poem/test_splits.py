"""Train / validation / test splits (:mod:`poem.splits`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poem.splits import split_log


def test_time_split_orders_parts_by_time(synthetic_log):
    rng = np.random.default_rng(0)
    times = np.datetime64("2026-01-01") + rng.permutation(synthetic_log.n_rows).astype(
        "timedelta64[s]"
    )
    log = replace(synthetic_log, timestamps=times)
    parts = split_log(log, validation_fraction=0.2, test_fraction=0.3)
    assert parts.method == "time"
    assert (parts.train.n_rows, parts.validation.n_rows, parts.test.n_rows) == (1000, 400, 600)
    assert parts.train.timestamps.max() < parts.validation.timestamps.min()
    assert parts.validation.timestamps.max() < parts.test.timestamps.min()
    rows = np.concatenate([parts.train_rows, parts.validation_rows, parts.test_rows])
    np.testing.assert_array_equal(np.sort(rows), np.arange(log.n_rows))
    np.testing.assert_array_equal(parts.test.losses, log.losses[parts.test_rows])
    summary = parts.summary()
    assert summary["n_test"] == 600 and summary["test_start"] > summary["train_end"]


def test_random_split_is_seeded_without_timestamps(synthetic_log):
    a = split_log(synthetic_log, random_state=3)
    b = split_log(synthetic_log, random_state=3)
    c = split_log(synthetic_log, random_state=4)
    assert a.method == "random" and "train_start" not in a.summary()
    np.testing.assert_array_equal(a.test_rows, b.test_rows)
    assert not np.array_equal(a.test_rows, c.test_rows)
    assert (a.train.n_rows, a.validation.n_rows, a.test.n_rows) == (1000, 500, 500)


def test_by_time_false_ignores_timestamps(synthetic_log):
    times = np.datetime64("2026-01-01") + np.arange(synthetic_log.n_rows).astype("timedelta64[s]")
    parts = split_log(replace(synthetic_log, timestamps=times), by_time=False, random_state=0)
    assert parts.method == "random"


def test_refit_log(synthetic_log):
    parts = split_log(synthetic_log, random_state=0)
    assert parts.refit_log("train") is parts.train
    both = parts.refit_log("train+validation")
    assert both.n_rows == 1500
    np.testing.assert_array_equal(
        both.losses,
        synthetic_log.losses[np.sort(np.concatenate([parts.train_rows, parts.validation_rows]))],
    )
    with pytest.raises(
        ValueError, match="refit_on must be 'train' or 'train\\+validation', got 'all'"
    ):
        parts.refit_log("all")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"validation_fraction": 0.0}, r"validation_fraction must be in \(0, 1\), got 0.0"),
        ({"test_fraction": 1.2}, r"test_fraction must be in \(0, 1\), got 1.2"),
        ({"validation_fraction": 0.5, "test_fraction": 0.5}, r"must be < 1, got 1"),
    ],
)
def test_bad_fractions(synthetic_log, kwargs, message):
    with pytest.raises(ValueError, match=message):
        split_log(synthetic_log, **kwargs)


def test_too_few_rows_for_three_parts(tiny_log):
    with pytest.raises(ValueError, match="cannot split 5 rows"):
        split_log(tiny_log, validation_fraction=0.05, test_fraction=0.05)
