"""Canonical Parquet / CSV logs: exact round trips for every family, and clear read errors."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit
from poem.exceptions import InvalidLogError
from poem.io.csv import metadata_path, read_csv_frame, write_csv
from poem.io.logs import read_log, read_log_table
from poem.io.parquet import (
    METADATA_KEY,
    frame_to_log,
    list_log_files,
    log_to_frame,
    read_frame,
    write_log,
)


def _logs() -> dict[str, LoggedBandit]:
    rng = np.random.default_rng(0)
    n = 40
    ts = np.datetime64("2026-11-01", "ns") + np.sort(
        rng.integers(0, 3 * 86400, n)
    ) * np.timedelta64(1, "s")
    P = rng.dirichlet(np.ones(3), n)
    a = rng.integers(0, 3, n)
    return {
        "discrete": LoggedBandit(
            rng.normal(size=(n, 4)),
            a,
            rng.random(n),
            P[np.arange(n), a],
            (0, 1),
            n_actions=3,
            timestamps=ts,
            event_ids=np.array([f"e{i}" for i in range(n)]),
            logging_model_version="v1",
            logging_distribution=P,
            feature_names=list("abcd"),
        ),
        "multilabel_sparse": LoggedBandit(
            sp.random(n, 30, density=0.1, random_state=0, format="csr"),
            rng.integers(0, 2, (n, 5)),
            rng.integers(0, 6, n),
            rng.random(n) * 0.9 + 0.1,
            (0, 5),
            family="multilabel",
            timestamps=ts,
        ),
        "candidates_dense": LoggedBandit(
            None,
            rng.integers(0, 2, n),
            rng.random(n),
            np.full(n, 0.5),
            (0, 1),
            family="candidates",
            candidates=CandidateSets.from_sizes(rng.normal(size=(3 * n, 2)), np.full(n, 3)),
            event_ids=np.arange(n) * 7,
        ),
        "candidates_sparse": LoggedBandit(
            rng.normal(size=(n, 2)),
            np.zeros(n, int),
            -rng.random(n),
            np.full(n, 0.5),
            (-1, 0),
            family="candidates",
            candidates=CandidateSets.from_sizes(
                sp.random(2 * n, 6, density=0.3, random_state=1, format="csr"),
                rng.integers(1, 3, n) * 0 + 2,
            ),
        ),
    }


LOGS = _logs()


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if sp.issparse(a):
        return (
            sp.issparse(b)
            and a.shape == b.shape
            and (a != b).nnz == 0
            and np.array_equal(a.indices, b.indices)
            and np.array_equal(a.indptr, b.indptr)
        )
    if isinstance(a, CandidateSets):
        return _same(a.features, b.features) and np.array_equal(a.offsets, b.offsets)
    if isinstance(a, np.ndarray):
        return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    return a == b


def _differences(log: LoggedBandit, back: LoggedBandit) -> list[str]:
    return [f for f in log.__dataclass_fields__ if not _same(getattr(log, f), getattr(back, f))]


@pytest.mark.parametrize("name", sorted(LOGS))
@pytest.mark.parametrize("partition", [True, False])
def test_parquet_round_trip_is_exact(tmp_path, name, partition):
    log = LOGS[name]
    path = write_log(
        log, tmp_path / ("log" if partition else "log.parquet"), partition_by_date=partition
    )
    assert _differences(log, read_log(path)) == []


@pytest.mark.parametrize("name", sorted(LOGS))
def test_frame_and_csv_round_trips_are_exact(tmp_path, name):
    log = LOGS[name]
    assert _differences(log, frame_to_log(log_to_frame(log))) == []
    path = write_csv(log, tmp_path / "log.csv")
    assert metadata_path(path).exists()
    assert _differences(log, read_log(path)) == []


def test_partitions_are_named_by_date_and_declare_bounds(tmp_path):
    path = write_log(LOGS["discrete"], tmp_path / "log")
    files = [p.relative_to(path).as_posix() for p in list_log_files(path)]
    assert files == [f"date=2026-11-0{d}/part-00000.parquet" for d in (1, 2, 3)]
    meta = json.loads(pq.read_schema(path / files[0]).metadata[METADATA_KEY.encode()])
    assert (
        meta["loss_bounds"] == [0.0, 1.0]
        and meta["family"] == "discrete"
        and meta["n_actions"] == 3
    )
    frame = read_frame(path)
    assert list(frame.columns[:6]) == ["event_id", "timestamp", "x_0", "x_1", "x_2", "x_3"]
    assert {"action", "loss", "propensity", "logging_model_version", "logging_distribution"} <= set(
        frame.columns
    )


def test_unsorted_timestamps_come_back_grouped_by_date(tmp_path):
    log = LOGS["discrete"].take(np.arange(40)[::-1])  # newest first
    back = read_log(write_log(log, tmp_path / "log"))
    assert np.all(np.diff(back.timestamps.astype("datetime64[D]").astype(int)) >= 0)
    order = np.argsort(log.timestamps.astype("datetime64[D]"), kind="stable")
    assert np.array_equal(back.event_ids, log.event_ids[order])


def test_rewards_are_converted_once(tmp_path):
    frame = log_to_frame(LOGS["discrete"]).rename(columns={"loss": "reward"})
    frame.attrs[METADATA_KEY] = {
        **frame.attrs[METADATA_KEY],
        "loss_bounds": None,
        "reward_bounds": [0, 1],
    }
    log = frame_to_log(frame)
    assert log.loss_bounds == (-1.0, 0.0)
    np.testing.assert_array_equal(log.losses, -LOGS["discrete"].losses)


@pytest.mark.parametrize(
    ("mutate", "column", "message"),
    [
        (lambda f: f.drop(columns="propensity"), "propensity", r"propensity: column is missing"),
        (
            lambda f: f.rename(columns={"loss": "reward"}),
            "loss",
            r"loss: column is missing; found 'reward' but the log declares loss bounds "
            r"\[0.0, 1.0\]",
        ),
        (
            lambda f: f.assign(propensity=["x"] * 3 + [str(v) for v in f.propensity[3:]]),
            "propensity",
            r"propensity: 3 of 40 rows are not numbers.*\['e0', 'e1', 'e2'\]",
        ),
        (
            lambda f: f.assign(propensity=np.r_[[0.0, 1.5], f.propensity[2:]]),
            "propensity",
            r"propensity: 2 of 40 rows outside \(0, 1\]",
        ),
    ],
    ids=["missing-column", "reward-for-loss", "strings-in-propensity", "propensity-range"],
)
def test_frame_to_log_names_column_and_count(mutate, column, message):
    frame = mutate(log_to_frame(LOGS["discrete"]))
    with pytest.raises(InvalidLogError, match=message) as info:
        frame_to_log(frame)
    assert column in info.value.columns


def test_bad_file_in_partition_directory_is_named(tmp_path):
    path = write_log(LOGS["discrete"], tmp_path / "log")
    bad = path / "date=2026-11-02" / "part-00000.parquet"
    bad.write_bytes(bad.read_bytes()[:100])  # truncated
    with pytest.raises(
        InvalidLogError, match=r"date=2026-11-02/part-00000.parquet: cannot be read as Parquet"
    ):
        read_frame(path)


def test_mismatched_schema_in_partition_directory_is_named(tmp_path):
    path = write_log(LOGS["discrete"], tmp_path / "log")
    other = path / "date=2026-11-03" / "part-00000.parquet"
    table = pq.read_table(other)
    pq.write_table(table.drop_columns(["propensity"]), other)
    with pytest.raises(
        InvalidLogError,
        match=r"date=2026-11-03/part-00000.parquet.*missing columns \['propensity'\]",
    ):
        read_frame(path)


def test_empty_inputs_are_named(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidLogError, match=r"empty: contains no \*.parquet files"):
        read_frame(tmp_path / "empty")
    (tmp_path / "zero.parquet").write_bytes(b"")
    with pytest.raises(InvalidLogError, match=r"zero.parquet: cannot be read as Parquet"):
        read_frame(tmp_path / "zero.parquet")
    (tmp_path / "zero.csv").write_text("")
    with pytest.raises(InvalidLogError, match=r"zero.csv: is empty"):
        read_csv_frame(tmp_path / "zero.csv")
    with pytest.raises(FileNotFoundError, match="nope.parquet"):
        read_frame(tmp_path / "nope.parquet")


def test_ragged_csv_rows_are_counted(tmp_path):
    path = write_csv(LOGS["discrete"], tmp_path / "log.csv")
    lines = path.read_text().splitlines()
    lines[3] += ",extra"
    lines[7] = lines[7] + ',"x,y",z'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(
        InvalidLogError,
        match=r"log.csv: 2 of 40 rows do not have the header's 11 fields.*; first rows: \[4, 8\]",
    ):
        read_csv_frame(path)


def test_csv_without_metadata_needs_family_and_bounds(tmp_path):
    path = write_csv(LOGS["discrete"], tmp_path / "log.csv")
    metadata_path(path).unlink()
    with pytest.raises(ValueError, match="family must be given"):
        read_log_table(path)
    log = read_log(path, family="discrete", loss_bounds=(0, 1), n_actions=3)
    np.testing.assert_array_equal(log.propensities, LOGS["discrete"].propensities)
    assert log.n_actions == 3 and log.contexts.shape == (40, 4)


def test_unparseable_csv_timestamps_become_missing(tmp_path):
    path = write_csv(LOGS["discrete"], tmp_path / "log.csv")
    frame = pd.read_csv(path)
    frame.loc[[2, 5], "timestamp"] = "yesterday"
    frame.to_csv(path, index=False)
    parsed = read_log_table(path).frame
    assert parsed["timestamp"].isna().sum() == 2
    with pytest.raises(InvalidLogError, match=r"timestamp: 2 of 40 rows missing \(NaT\)"):
        frame_to_log(parsed)


def test_write_log_refuses_to_mix_with_an_existing_log(tmp_path):
    path = write_log(LOGS["discrete"], tmp_path / "log")
    with pytest.raises(FileExistsError, match=r"log already holds a log \(3 Parquet file\(s\)\)"):
        write_log(LOGS["discrete"].take(np.arange(5)), path)
    write_log(LOGS["discrete"].take(np.arange(5)), path, overwrite=True)
    assert read_log(path).n_rows == 5 and len(list_log_files(path)) == 1
