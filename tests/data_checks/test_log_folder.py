"""The log folder as production leaves it (issue 24, items 6-12): through ``check_logs``.

Writer leftovers, stray partition names, bit flips, contradictory metadata, huge declared
widths, pipes and devices, and timestamps from the future: each ends as a named finding in the
report (or a clear refusal), never as a traceback, a hang, a silent skip or a silent accept.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_checks.check import PartitionOptions, check_logs
from data_checks.stages import CheckSettings
from flows.checking import check_settings
from flows.config import ChecksConfig, load_config
from flows.deployments import newest_partitions, stage_partitions
from poem.exceptions import InvalidLogError
from poem.io.logs import log_files, read_log_table
from poem.io.parquet import METADATA_KEY, log_to_frame, skipped_log_files, write_log
from poem.policies import make_family
from poem.policies._base import MAX_COEFFICIENTS

N = 240
ROOT = Path(__file__).resolve().parents[2]


def _check(path, **kwargs):
    return check_logs(path, plots=False, **kwargs)


def _partitioned(tmp_path, log):
    root = tmp_path / "logs"
    write_log(log, root)
    return root, sorted(root.glob("date=*/part-00000.parquet"))


def test_writer_leftovers_are_not_data_and_are_named(tmp_path, clean_logs):
    """Item 6: ``_temporary/`` and hidden copies are skipped by name; ``.PARQUET`` is data."""
    root, parts = _partitioned(tmp_path, clean_logs["discrete"])
    spark = root / "_temporary" / "0" / "task_0"
    spark.mkdir(parents=True)
    shutil.copy(parts[0], spark / "part-00000.parquet")
    shutil.copy(parts[1], parts[1].parent / ".part-00000.parquet")
    upper = parts[2].with_name("part-00001.PARQUET")
    parts[2].rename(upper)
    (root / "_SUCCESS").write_text("")
    outcome = _check(root)
    report = outcome.report
    assert outcome.passed and report.n_rows == N  # every row of the .PARQUET file read once
    assert len(report.skipped_files) == 2
    assert "_temporary/0/task_0/part-00000.parquet (inside _temporary/" in report.skipped_files[0]
    assert report.skipped_files[1].endswith(
        ".part-00000.parquet (names starting with '.' or '_' are not data)"
    )
    assert str(upper) in [str(f) for f in log_files(root)]
    assert "skipped, not data: " in outcome.to_text()
    assert outcome.to_dict()["data_checks"]["skipped_files"] == list(report.skipped_files)


def test_an_invalid_partition_name_is_skipped_by_name(tmp_path, clean_logs, caplog):
    """Item 7: ``date=2026-13-45/`` is named by the check and by the scheduled-retrain picker."""
    root, parts = _partitioned(tmp_path, clean_logs["discrete"])
    stray = root / "date=2026-13-45"
    stray.mkdir()
    shutil.copy(parts[0], stray / "part-00000.parquet")
    with caplog.at_level(logging.WARNING, logger="flows.deployments"):
        picked = newest_partitions(root, 2, today=dt.date(2026, 12, 1))
    assert [p.name for p in picked] == ["date=2026-11-02", "date=2026-11-03"]
    assert "date=2026-13-45" in caplog.text and "is not a valid date" in caplog.text
    outcome = _check(root)
    assert outcome.passed and outcome.report.n_rows == N
    (skipped,) = outcome.report.skipped_files
    assert "date=2026-13-45/part-00000.parquet (partition folder 'date=2026-13-45'" in skipped
    # staging several partitions links only data files (the readers' rule)
    (parts[1].parent / ".part-00000.parquet").write_bytes(b"x")
    staged = stage_partitions(picked, tmp_path / "staged")
    assert sorted(p.name for p in staged.rglob("*.parquet")) == ["part-00000.parquet"] * 2


def test_rows_outside_their_partition_date_are_flagged(tmp_path, clean_logs):
    """Item 7: a file in the wrong ``date=`` folder is a warning naming the folder and rows."""
    root, parts = _partitioned(tmp_path, clean_logs["discrete"])
    n_moved = pq.read_metadata(parts[0]).num_rows
    parts[0].rename(parts[1].parent / "part-00001.parquet")  # 2026-11-01 rows under 11-02
    outcome = _check(root)
    assert outcome.passed  # a warning: the rows are kept
    (warning,) = outcome.report.warnings
    assert warning.column == "timestamp" and warning.unexpected_count == n_moved
    assert "dated outside their partition folder date=2026-11-02" in warning.reason
    assert "date=2026-11-02/part-00001.parquet" in warning.reason
    assert len(warning.examples) == 5


def _flip_losses(path, old=1.0, new=0.0625):
    """Overwrite the stored bytes of ``old`` in the loss column chunk with those of ``new``."""
    meta = pq.read_metadata(path)
    names = [meta.schema.column(j).name for j in range(meta.num_columns)]
    chunk = meta.row_group(0).column(names.index("loss"))
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data = bytearray(path.read_bytes())
    at = data.index(struct.pack("<d", old), start, start + chunk.total_compressed_size)
    data[at : at + 8] = struct.pack("<d", new)
    path.write_bytes(bytes(data))


def test_bit_flips_fail_the_page_checksum(tmp_path, clean_logs):
    """Item 8: the project writes page checksums and verifies them on every read."""
    path = tmp_path / "log.parquet"
    write_log(clean_logs["discrete"], path, partition_by_date=False)
    _flip_losses(path)
    outcome = _check(path)
    assert not outcome.passed
    (failure,) = outcome.report.failures
    assert failure.column == str(path)
    assert "fails its Parquet page checksum" in failure.reason


def test_bit_flips_fail_the_partitioned_check_too(tmp_path, clean_logs):
    path = tmp_path / "log.parquet"
    write_log(clean_logs["discrete"], path, partition_by_date=False)
    _flip_losses(path)
    outcome = _check(path, partitions=PartitionOptions(mode="always", scheduler="sync"))
    assert not outcome.passed
    assert any("checksum" in f.reason.lower() for f in outcome.report.failures)


def test_a_context_column_listed_twice_is_refused_naming_it(tmp_path, clean_logs):
    """Item 9."""
    frame = log_to_frame(clean_logs["discrete"])
    meta = dict(frame.attrs[METADATA_KEY], context_columns=["x_0", "x_0", "x_2"])
    table = pa.Table.from_pandas(frame, preserve_index=False)
    path = tmp_path / "twice.parquet"
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)}), path)
    with pytest.raises(InvalidLogError, match=r"context_columns: lists \['x_0'\] more than once"):
        read_log_table(path)
    outcome = _check(path)
    assert not outcome.passed
    assert "lists ['x_0'] more than once" in outcome.report.failures[0].reason


def test_a_sparse_log_wider_than_training_allows_is_refused_by_check(tmp_path, clean_logs):
    """Item 10: the same limit as training (the policy family refuses that width too)."""
    frame = log_to_frame(clean_logs["multilabel"])
    meta = dict(frame.attrs[METADATA_KEY], n_features=2**31 - 1)
    table = pa.Table.from_pandas(frame, preserve_index=False)
    path = tmp_path / "wide.parquet"
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)}), path)
    outcome = _check(path)
    assert not outcome.passed
    (failure,) = outcome.report.failures
    assert failure.column == "n_features"
    assert "n_features = 2,147,483,647 × n_actions = 5" in failure.reason
    assert f"more than the {MAX_COEFFICIENTS:,} training can hold" in failure.reason
    with pytest.raises(ValueError, match=f"more than the {MAX_COEFFICIENTS:,} training can hold"):
        make_family("multilabel", 2**31 - 1, 5)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_a_named_pipe_or_a_device_is_refused_not_opened(tmp_path, clean_logs):
    """Item 11: never opened (reading a pipe with no writer blocks forever)."""
    pipe = tmp_path / "logs.parquet"
    os.mkfifo(pipe)
    with pytest.raises(InvalidLogError, match="is a named pipe, not a regular file"):
        log_files(pipe)
    outcome = _check(pipe)
    assert "is a named pipe, not a regular file" in outcome.report.failures[0].reason
    csv_pipe = tmp_path / "logs.csv"
    os.mkfifo(csv_pipe)
    with pytest.raises(InvalidLogError, match="is a named pipe, not a regular file"):
        log_files(csv_pipe)
    if os.path.exists("/dev/zero"):
        outcome = _check("/dev/zero")
        assert "is a character device, not a regular file" in outcome.report.failures[0].reason
    root, _ = _partitioned(tmp_path, clean_logs["discrete"])
    os.mkfifo(root / "date=2026-11-02" / "part-00009.parquet")
    (skipped,) = skipped_log_files(root)
    assert "part-00009.parquet (a named pipe, not a regular file)" in str(skipped)
    assert _check(root).passed


def _future_log(log_factory, n_future=11):
    log = log_factory("discrete")
    ts = log.timestamps.copy()
    ts[-n_future:] = np.datetime64("2099-01-01T00:00:00", "ns")
    return replace(log, timestamps=ts)


@pytest.mark.parametrize("partitioned", [False, True])
def test_timestamps_later_than_the_run_clock_warn_or_quarantine(tmp_path, log_factory, partitioned):
    """Item 12: ``checks.future_timestamps``: warn (default, rows kept) or quarantine."""
    path = tmp_path / "future.parquet"
    write_log(_future_log(log_factory), path, partition_by_date=False)
    options = PartitionOptions(mode="always", scheduler="sync") if partitioned else None
    warned = _check(path, partitions=options)
    assert warned.passed and warned.report.n_quarantined == 0
    (warning,) = warned.report.warnings
    assert (warning.column, warning.unexpected_count, warning.element_count) == ("timestamp", 11, N)
    assert "dated later than the run's clock" in warning.reason
    assert warning.examples == tuple(f"e{i}" for i in range(N - 11, N - 6))
    kept = _check(
        path, future_timestamps="quarantine", max_quarantine_fraction=0.1, partitions=options
    )
    assert kept.passed and kept.report.n_quarantined == 11
    (reason,) = kept.report.quarantined_by_reason
    assert "dated later than the run's clock" in reason
    clock = _check(path, now="2100-01-01T00:00:00Z", partitions=options)
    assert clock.report.warnings == ()
    with pytest.raises(
        ValueError, match=r"future_timestamps must be one of \['warn', 'quarantine'\]"
    ):
        CheckSettings(future_timestamps="drop")


def test_the_future_timestamps_key_of_mlflow_yml_reaches_the_check():
    """Item 12: ``checks.future_timestamps`` in mlflow.yml, passed to the stages."""
    assert load_config(ROOT / "mlflow.yml").checks.future_timestamps == "warn"
    settings = check_settings(ChecksConfig(future_timestamps="quarantine"))
    assert settings.future_timestamps == "quarantine"
    with pytest.raises(ValueError, match="future_timestamps"):
        ChecksConfig(future_timestamps="ignore")


def test_symlinks_are_followed_only_inside_the_log_folder(tmp_path, clean_logs):
    """Issue 37 item 7: ``date=2026-01-03 → /`` made check and retrain walk the file system.

    Links inside the log folder are followed; a folder or file link leading outside is not
    followed (never walked, never read) and is named, one line, by the check, the readers,
    the scheduled-retrain picker and the decision log.
    """
    root, parts = _partitioned(tmp_path, clean_logs["discrete"])
    other = tmp_path / "other-job" / "decisions"  # another job's log: its rows must not be read
    other.mkdir(parents=True)
    shutil.copy(parts[0], other / "part-00000.parquet")
    (root / "date=2026-01-03").symlink_to("/", target_is_directory=True)
    (root / "date=2026-01-04").symlink_to(other, target_is_directory=True)
    (root / "date=2026-11-02" / "part-00007.parquet").symlink_to(other / "part-00000.parquet")
    (root / "_hidden").mkdir()
    (root / "_hidden" / "escape").symlink_to("/", target_is_directory=True)
    moved = root / "archive" / "date=2026-11-03"  # a link inside the folder is followed
    moved.parent.mkdir()
    parts[2].parent.rename(moved)
    (root / "date=2026-11-03").symlink_to(moved, target_is_directory=True)

    assert sorted(str(f.relative_to(root)) for f in log_files(root)) == [
        "archive/date=2026-11-03/part-00000.parquet",  # each real folder once
        "date=2026-11-01/part-00000.parquet",
        "date=2026-11-02/part-00000.parquet",
    ]
    real = os.path.realpath(root)
    skipped = [str(s) for s in skipped_log_files(root)]
    assert skipped == [
        f"{root / 'date=2026-01-03'} (a symbolic link to /, outside the log folder "
        f"{real}: not followed)",
        f"{root / 'date=2026-01-04'} (a symbolic link to {other}, outside the log folder "
        f"{real}: not followed)",
        f"{root / 'date=2026-11-02' / 'part-00007.parquet'} (a symbolic link to "
        f"{other / 'part-00000.parquet'}, outside the log folder {real}: not followed)",
    ]
    outcome = _check(root)
    assert outcome.passed and outcome.report.n_rows == N  # no row of the other job
    assert any("date=2026-01-03 (a symbolic link to" in s for s in outcome.report.skipped_files)
    picked = newest_partitions(root, 5, today=dt.date(2026, 12, 1))
    assert [p.name for p in picked] == ["date=2026-11-01", "date=2026-11-02", "date=2026-11-03"]


def test_the_decision_log_never_writes_through_a_link_leading_outside(tmp_path):
    from deploy.pyfunc import StochasticPolicyModel
    from poem.io.decisions import DecisionLog
    from poem.policies import StochasticPolicy

    family = make_family("discrete", 3, 4, True)
    policy = StochasticPolicy(family, np.ones(family.coef_shape), 1.0, 0.05, {})
    model = StochasticPolicyModel(policy, "1")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root = tmp_path / "decisions"
    root.mkdir()
    (root / "date=2026-01-03").symlink_to(elsewhere, target_is_directory=True)
    log = DecisionLog(root, "discrete", ["x_0", "x_1", "x_2"], (0.0, 1.0), n_actions=4)
    request = pd.DataFrame(np.zeros((2, 3)), columns=["x_0", "x_1", "x_2"])
    log.add_decisions(request, model.predict(None, request), timestamps=["2026-01-03T10:00"] * 2)
    with pytest.raises(ValueError, match=r"date=2026-01-03 is a symbolic link to .*elsewhere, "):
        log.flush(now="2026-01-03T10:00", force=True)
    assert list(elsewhere.iterdir()) == [] and log.flush(now="2026-01-03T10:00").n_pending == 2
