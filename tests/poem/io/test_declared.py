"""What a log declares before its rows are read (:mod:`poem.io.declared`)."""

import json

import pyarrow.parquet as pq
import pytest

from poem.exceptions import InvalidLogError
from poem.io.declared import declared_min_propensity, gate_min_propensity
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
    assert gate_min_propensity(0.05, 0.1) == 0.1  # rows below either are quarantined
    assert gate_min_propensity(None, 0.02) == 0.02
    assert gate_min_propensity(None, 0.0) is None
    _declare(path, 2.0)
    with pytest.raises(InvalidLogError, match=r"min_propensity: must be in \(0, 1\], got 2.0"):
        declared_min_propensity(path)
