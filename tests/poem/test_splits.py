"""Train / validation / test splits (:mod:`poem.splits`, :func:`poem.log_rows.split_partitioned`)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poem.log_rows import as_partitions, split_partitioned


def split_log(log, **kwargs):
    """The split of a log in memory: one partition."""
    return split_partitioned(as_partitions(log), **kwargs)


def test_time_split_orders_parts_by_time(synthetic_log):
    rng = np.random.default_rng(0)
    times = np.datetime64("2026-01-01") + rng.permutation(synthetic_log.n_rows).astype(
        "timedelta64[s]"
    )
    log = replace(synthetic_log, timestamps=times)
    split = split_log(log, validation_fraction=0.2, test_fraction=0.3)
    train, validation, test = (split.log(p) for p in ("train", "validation", "test"))
    assert split.method == "time"
    assert (train.n_rows, validation.n_rows, test.n_rows) == (1000, 400, 600)
    assert train.timestamps.max() < validation.timestamps.min()
    assert validation.timestamps.max() < test.timestamps.min()
    rows = np.concatenate([split.rows_for(p)[0] for p in ("train", "validation", "test")])
    np.testing.assert_array_equal(np.sort(rows), np.arange(log.n_rows))
    np.testing.assert_array_equal(test.losses, log.losses[split.rows_for("test")[0]])
    summary = split.summary()
    assert summary["n_test"] == 600 and summary["test_start"] > summary["train_end"]


def test_random_split_is_seeded_without_timestamps(synthetic_log):
    a = split_log(synthetic_log, random_state=3)
    b = split_log(synthetic_log, random_state=3)
    c = split_log(synthetic_log, random_state=4)
    assert a.method == "random" and "train_start" not in a.summary()
    np.testing.assert_array_equal(a.rows_for("test")[0], b.rows_for("test")[0])
    assert not np.array_equal(a.rows_for("test")[0], c.rows_for("test")[0])
    assert [a.n_rows(p) for p in ("train", "validation", "test")] == [1000, 500, 500]


def test_by_time_false_ignores_timestamps(synthetic_log):
    times = np.datetime64("2026-01-01") + np.arange(synthetic_log.n_rows).astype("timedelta64[s]")
    split = split_log(replace(synthetic_log, timestamps=times), by_time=False, random_state=0)
    assert split.method == "random"


def test_refit_rows(synthetic_log):
    split = split_log(synthetic_log, random_state=0)
    both = split.log("train+validation")
    assert both.n_rows == 1500
    rows = np.sort(np.concatenate([split.rows_for("train")[0], split.rows_for("validation")[0]]))
    np.testing.assert_array_equal(both.losses, synthetic_log.losses[rows])
    with pytest.raises(ValueError, match="part must be one of .*, got 'all'"):
        split.log("all")


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
