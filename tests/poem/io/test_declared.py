"""What a log declares before its rows are read (:mod:`poem.io.declared`)."""

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from poem.exceptions import InvalidLogError
from poem.io.declared import declared_min_propensity, gate_min_propensity
from poem.io.logs import read_log_table
from poem.io.parquet import METADATA_KEY, write_log


def _declare(path, value):
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[METADATA_KEY.encode()])
    meta["min_propensity"] = value
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)}), path)


def test_declared_floor_is_read_from_the_files_and_combined_with_the_config(tmp_path, tiny_log):
    path = write_log(tiny_log, tmp_path / "log.parquet", partition_by_date=False)
    assert declared_min_propensity(path) is None  # nothing declared: no bound
    _declare(path, 0.05)
    assert declared_min_propensity(path) == 0.05
    assert gate_min_propensity(0.05, 0.0) == 0.05
    assert gate_min_propensity(0.05, 0.1) == 0.1  # rows below either block the gate
    assert gate_min_propensity(None, 0.02) == 0.02
    assert gate_min_propensity(None, 0.0) is None
    _declare(path, 2.0)
    with pytest.raises(InvalidLogError, match=r"min_propensity: must be in \(0, 1\], got 2.0"):
        declared_min_propensity(path)


@pytest.mark.parametrize(("floors", "expected"), [((0.05, 0.02), 0.02), ((0.05, None), None)])
def test_the_declared_floor_is_the_one_reading_the_log_resolves(
    tmp_path, tiny_log, floors, expected
):
    # one combination of the files' floors (poem.io.parquet._combined_metadata), not two
    half = tiny_log.n_rows // 2
    for name, rows, floor in zip(
        ("a", "b"), (slice(0, half), slice(half, None)), floors, strict=True
    ):
        part = tiny_log.take(np.arange(tiny_log.n_rows)[rows])
        path = write_log(part, tmp_path / "log" / f"{name}.parquet", partition_by_date=False)
        if floor is not None:
            _declare(path, floor)
    assert declared_min_propensity(tmp_path / "log") == expected
    assert read_log_table(tmp_path / "log").meta.min_propensity == expected
