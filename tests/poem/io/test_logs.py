"""The front door :func:`poem.io.logs.read_log_table`: one read, one metadata, one conversion."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit
from poem.exceptions import InvalidLogError
from poem.io.csv import metadata_path, write_csv
from poem.io.log_format import METADATA_KEY, frame_to_log, log_to_frame
from poem.io.logs import log_files, log_fingerprint, read_log, read_log_table
from poem.io.parquet import write_log

N = 30


def _discrete(n: int = N, **over) -> LoggedBandit:
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(3), n)
    a = rng.integers(0, 3, n)
    kw = {
        "contexts": rng.normal(size=(n, 4)),
        "actions": a,
        "losses": rng.random(n),
        "propensities": P[np.arange(n), a],
        "loss_bounds": (0, 1),
        "n_actions": 3,
        "timestamps": np.datetime64("2026-11-01", "ns")
        + np.arange(n) * np.timedelta64(3 * 3600, "s"),
        "event_ids": np.array([f"e{i}" for i in range(n)]),
        "logging_distribution": P,
    }
    return LoggedBandit(**{**kw, **over})


def _write(frame, meta, path):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    raw = meta if isinstance(meta, str) else json.dumps(meta)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: raw}), path)
    return path


def test_symlinked_partition_is_read_and_fingerprinted(tmp_path):
    """A link to a partition inside the log folder (issue 37 item 7: never outside it)."""
    log = _discrete()
    path = write_log(log, tmp_path / "log")  # 30 rows over four days
    days = sorted(p.name for p in path.iterdir())
    moved = path / "archive" / days[-1]
    moved.parent.mkdir()
    (path / days[-1]).rename(moved)
    (path / days[-1]).symlink_to(moved, target_is_directory=True)
    table = read_log_table(path)
    assert table.n_rows == N and len(table.files) == len(days)
    before = log_fingerprint(path)
    part = moved / "part-00000.parquet"
    part.write_bytes(part.read_bytes() + b"\0")  # bytes of the linked partition are covered
    assert log_fingerprint(path) != before


def test_symlink_loop_is_read_once(tmp_path):
    path = write_log(_discrete(), tmp_path / "log")
    (path / "loop").symlink_to(path, target_is_directory=True)
    assert read_log_table(path).n_rows == N


def test_csv_files_are_the_csv_and_its_metadata(tmp_path):
    path = write_csv(_discrete(), tmp_path / "log.csv")
    assert log_files(path) == [path, metadata_path(path)]
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        log_files(tmp_path / "nope.csv")


def test_rewards_are_converted_once(tmp_path):
    log = _discrete()
    frame = log_to_frame(log).rename(columns={"loss": "reward"})
    meta = {**frame.attrs[METADATA_KEY], "loss_bounds": None, "reward_bounds": [0, 1]}
    frame["reward"] = 1 - frame["reward"]
    table = read_log_table(_write(frame, meta, tmp_path / "r.parquet"))
    assert "reward" not in table.frame.columns
    assert table.meta.loss_bounds == (-1.0, 0.0) and table.meta.reward_bounds is None
    np.testing.assert_allclose(table.to_log().losses, log.losses - 1)
    # converting a converted table again is a no-op
    np.testing.assert_allclose(frame_to_log(table.frame).losses, log.losses - 1)


def test_reward_beside_loss_is_ambiguous(tmp_path):
    frame = log_to_frame(_discrete()).assign(reward=0.0)
    path = _write(frame, frame.attrs[METADATA_KEY], tmp_path / "both.parquet")
    with pytest.raises(InvalidLogError, match=r"reward: column is given beside 'loss': ambiguous"):
        read_log_table(path, reward_bounds=(0, 1))


def test_window_without_timestamps_is_an_error(tmp_path):
    path = write_log(_discrete(timestamps=None), tmp_path / "log")
    assert read_log_table(path).n_rows == N
    with pytest.raises(
        InvalidLogError, match=r"timestamp: column is missing, but a time window \[2026-01-01"
    ):
        read_log_table(path, window=("2026-01-01", "2026-02-01"))


def test_plain_csv_with_text_timestamps(tmp_path):
    path = write_csv(_discrete(), tmp_path / "log.csv")
    metadata_path(path).unlink()
    table = read_log_table(path, family="discrete", loss_bounds=(0, 1), n_actions=3)
    assert str(table.frame["timestamp"].dtype) == "datetime64[ns]"
    assert table.to_log().n_rows == N


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ([1, 2], r"metadata: the 'poem' metadata is a JSON list, expected a JSON object"),
        ({"family": "bandit"}, r"family: 'bandit' is not one of \['discrete', 'multilabel'"),
        ({"n_actions": -3}, r"n_actions: must be an integer >= 2 for the discrete family, got -3"),
        ({"loss_bounds": "0,1"}, r"loss_bounds: must be two numbers \[min, max\], got '0,1'"),
        ({"loss_bounds": [0, 1e308]}, r"loss_bounds: \[0.0, 1e\+308\] overflow"),
        ({"loss_bounds": [1, 0]}, r"loss_bounds: must have min < max, got \[1.0, 0.0\]"),
    ],
    ids=[
        "json-list",
        "unknown-family",
        "negative-n-actions",
        "bounds-string",
        "bounds-1e308",
        "bounds-reversed",
    ],
)
def test_bad_metadata_is_named(tmp_path, meta, message):
    frame = log_to_frame(_discrete())
    stored = meta if isinstance(meta, list) else {**frame.attrs[METADATA_KEY], **meta}
    path = _write(frame, stored, tmp_path / "m.parquet")
    with pytest.raises(InvalidLogError, match=message):
        read_log_table(path)


def test_partitions_with_columns_in_another_order_are_one_log(tmp_path):
    path = write_log(_discrete(), tmp_path / "log")
    last = sorted(path.rglob("*.parquet"))[-1]
    table = pq.read_table(last)
    pq.write_table(table.select(list(reversed(table.schema.names))), last)
    back = read_log(path)
    assert back.n_rows == N


def test_partitions_with_other_metadata_name_the_key(tmp_path):
    path = write_log(_discrete(), tmp_path / "log")
    last = sorted(path.rglob("*.parquet"))[-1]
    table = pq.read_table(last)
    meta = json.loads(table.schema.metadata[METADATA_KEY.encode()])
    raw = json.dumps({**meta, "n_actions": 4})
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: raw}), last)
    with pytest.raises(InvalidLogError, match=r"declared metadata differs: n_actions 4 vs 3$"):
        read_log_table(path)


def _sparse_frame():
    x = sp.random(N, 6, density=0.4, random_state=0, format="csr")
    return log_to_frame(_discrete(contexts=x))


def _set_list(frame, column, row, value):
    cells = pa.array(frame[column]).to_pylist()
    cells[row] = value
    frame[column] = frame[column].__class__(
        pa.array(cells, type=pa.array(frame[column]).type), dtype=frame[column].dtype
    )
    return frame


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda f: _set_list(f, "x_indices", 3, [0, 6]),
            r"x_indices: 1 of 30 rows hold a feature index outside 0\.\.5; first rows: \['e3'\]",
        ),
        (
            lambda f: _set_list(f, "x_indices", 4, [-1, 2]),
            r"x_indices: 1 of 30 rows hold a feature index outside 0\.\.5; first rows: \['e4'\]",
        ),
        (
            lambda f: _set_list(f, "x_values", 5, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]),
            r"x_values: 1 of 30 rows do not have as many entries as x_indices",
        ),
        (
            lambda f: _set_list(f, "logging_distribution", 2, [0.5, 0.5]),
            r"logging_distribution: 1 of 30 rows do not hold 3 probabilities",
        ),
    ],
    ids=["index-d", "index-minus-1", "values-length", "ragged-distribution"],
)
def test_sparse_and_list_defects_are_our_errors(mutate, message):
    frame = _sparse_frame()
    attrs = frame.attrs
    frame = mutate(frame)
    frame.attrs = attrs
    with pytest.raises(InvalidLogError, match=message):
        frame_to_log(frame)


def _candidates_frame():
    rng = np.random.default_rng(1)
    return log_to_frame(
        LoggedBandit(
            None,
            rng.integers(0, 2, N),
            rng.random(N),
            np.full(N, 0.5),
            (0, 1),
            family="candidates",
            candidates=CandidateSets.from_sizes(rng.normal(size=(2 * N, 3)), np.full(N, 2)),
            event_ids=np.arange(N),
        )
    )


@pytest.mark.parametrize(
    ("row", "value", "message"),
    [
        (7, [0.0] * 5, r"candidate_features: 1 of 30 rows do not hold n_candidates × 3 values"),
        (8, [0.0, np.nan, 0, 0, 0, 0], r"candidate_features: 1 of 30 rows not finite.*\[8\]"),
    ],
    ids=["length", "nan"],
)
def test_candidate_defects_are_our_errors(row, value, message):
    frame = _candidates_frame()
    attrs = frame.attrs
    frame = _set_list(frame, "candidate_features", row, value)
    frame.attrs = attrs
    with pytest.raises(InvalidLogError, match=message):
        frame_to_log(frame)


def test_dense_nan_names_the_column(tmp_path):
    frame = log_to_frame(_discrete())
    frame.loc[[2, 9], "x_3"] = np.nan
    with pytest.raises(InvalidLogError, match=r"x_3: 2 of 30 rows not finite.*\['e2', 'e9'\]"):
        frame_to_log(frame)


def test_a_huge_event_id_costs_its_size_not_n_times_it(tmp_path):
    n = 200
    ids = np.array([f"e{i}" for i in range(n)], dtype=object)
    ids[7] = "x" * 1_000_000  # one 1 MB id: a "<U1000000" array would need 800 MB
    path = write_log(_discrete(n, event_ids=ids), tmp_path / "log")
    tracemalloc.start()
    try:
        log = read_log(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert log.event_ids.dtype == object and len(log.event_ids[7]) == 1_000_000
    assert peak < 100e6, f"peak {peak / 1e6:.0f} MB"


def test_overwrite_unlinks_symlinked_partitions_without_emptying_them(tmp_path):
    path = write_log(_discrete(), tmp_path / "log")
    last = sorted(path.iterdir())[-1]
    moved = tmp_path / "archive" / last.name
    moved.parent.mkdir()
    last.rename(moved)
    last.symlink_to(moved, target_is_directory=True)
    # the link leads outside the log folder: not followed (issue 37 item 7), its file not counted
    with pytest.raises(FileExistsError, match=r"already holds a log \(3 Parquet file\(s\)\)"):
        write_log(_discrete(5), path)
    write_log(_discrete(5), path, overwrite=True)
    assert read_log(path).n_rows == 5 and not last.exists()
    assert (moved / "part-00000.parquet").exists()  # the archive is untouched
