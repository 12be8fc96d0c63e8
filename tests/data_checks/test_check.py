"""``check_logs`` end to end: read errors, quarantine file, propensity failures, real data."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_checks.check import check_logs
from data_checks.report import raise_for_failures
from poem.exceptions import InvalidLogError
from poem.io.csv import write_csv
from poem.io.parquet import METADATA_KEY, log_to_frame, read_frame, write_log


def _write_frame(frame: pd.DataFrame, path) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(
        table.replace_schema_metadata({METADATA_KEY: json.dumps(frame.attrs[METADATA_KEY])}), path
    )


def _frame(log, **columns):
    frame = log_to_frame(log)
    out = frame.drop(columns=[c for c, v in columns.items() if v is None]).assign(
        **{c: v for c, v in columns.items() if v is not None}
    )
    out.attrs = frame.attrs
    return out


def _corrupt_partition(path):
    bad = path / "date=2026-11-02" / "part-00000.parquet"
    bad.write_bytes(bad.read_bytes()[: bad.stat().st_size // 2])
    return "date=2026-11-02/part-00000.parquet", 0


def _empty_file(path):
    (path / "date=2026-11-03" / "part-00000.parquet").write_bytes(b"")
    return "date=2026-11-03/part-00000.parquet", 0


def _ragged_csv(path):
    lines = path.read_text().splitlines()
    for i in (5, 9, 12):
        lines[i] += ",1"
    path.write_text("\n".join(lines) + "\n")
    return "log.csv: 3 of 240 rows do not have the header's", 3


READ_ERRORS = [
    ("truncated-parquet-in-partition", _corrupt_partition, "parquet"),
    ("empty-parquet-file", _empty_file, "parquet"),
    ("csv-ragged-rows", _ragged_csv, "csv"),
]


@pytest.mark.parametrize(("case", "corrupt", "kind"), READ_ERRORS, ids=[c[0] for c in READ_ERRORS])
def test_unreadable_input_fails_hard_naming_the_file(tmp_path, clean_logs, case, corrupt, kind):
    log = clean_logs["discrete"]
    path = (
        write_log(log, tmp_path / "log")
        if kind == "parquet"
        else write_csv(log, tmp_path / "log.csv")
    )
    name, count = corrupt(path)
    outcome = check_logs(path, out_dir=tmp_path / "out")
    assert outcome.exit_code == 1 and not outcome.report.passed
    failure = outcome.report.hard_failures[0]
    assert name in failure.column + ": " + failure.reason
    assert failure.unexpected_count == count
    assert name.split(":")[0] in outcome.to_text()
    saved = json.loads((tmp_path / "out" / "check_report.json").read_text())
    assert saved["passed"] is False and name.split(":")[0] in json.dumps(saved)


def test_rewards_where_losses_are_declared_fail_hard(tmp_path, clean_logs):
    _write_frame(
        _frame(
            clean_logs["discrete"], reward=log_to_frame(clean_logs["discrete"])["loss"], loss=None
        ),
        tmp_path / "log.parquet",
    )
    outcome = check_logs(tmp_path / "log.parquet")
    assert outcome.exit_code == 1
    assert (
        "loss: column is missing; found 'reward' but the log declares loss bounds [0.0, 1.0]"
        in outcome.to_text()
    )


def test_quarantine_file_reconciles_and_run_passes(tmp_path, gx_context, clean_logs):
    log = clean_logs["discrete"]
    path = write_csv(log, tmp_path / "log.csv")
    frame = pd.read_csv(path)
    frame.loc[[2, 5, 7], "timestamp"] = "not a date"
    frame.loc[[9], "propensity"] = 0.0
    frame.to_csv(path, index=False)
    outcome = check_logs(  # 4 of 240 rows: within a 5 % limit (the default is 1 %)
        path,
        out_dir=tmp_path / "out",
        context=gx_context,
        plots=False,
        max_quarantine_fraction=0.05,
    )
    assert outcome.exit_code == 0, outcome.to_text()
    r = outcome.report
    assert r.n_quarantined == 4 and r.n_kept == 236 and outcome.log.n_rows == 236
    assert r.quarantined_by_reason == {
        "timestamp missing or unparseable": 3,
        "propensity outside (0, 1]": 1,
    }
    quarantined = read_frame(outcome.files["quarantine"])
    assert quarantined["reason"].value_counts().to_dict() == r.quarantined_by_reason
    assert sorted(quarantined["event_id"]) == ["e2", "e5", "e7", "e9"]
    assert "rows: 236 kept + 4 quarantined = 240 input" in outcome.to_text()
    assert "timestamp: 3 of 240 rows: timestamp missing or unparseable" in "\n".join(
        map(str, r.failures)
    )
    with pytest.raises(
        InvalidLogError,
        match=r"propensity: 1 of 240 rows propensity outside \(0, 1\]; first rows: \['e9'\]",
    ):
        raise_for_failures(r, quarantine=False)
    assert raise_for_failures(r) is r


PROPENSITY_FAILURES = [
    (
        "deterministic-logger",
        {"propensity": 1.0, "logging_distribution": None},
        {"near_deterministic": "100.0% of rows have p ≥ 1", "uniform_weight": "far from 1"},
    ),
    (
        "propensities-times-half",
        {"logging_distribution": None},
        {"uniform_weight": "far from 1: propensities are not the logger's"},
    ),
    (
        "inconsistent-logging-distribution",
        {},
        {"logging_distribution": "240 rows whose distribution does not sum to 1"},
    ),
]


@pytest.mark.parametrize(
    ("case", "columns", "expected"), PROPENSITY_FAILURES, ids=[c[0] for c in PROPENSITY_FAILURES]
)
def test_propensity_failures_exit_non_zero(
    tmp_path, gx_context, clean_logs, case, columns, expected
):
    log = clean_logs["discrete"]
    if case == "propensities-times-half":
        columns = {**columns, "propensity": log.propensities * 0.5}
    frame = _frame(log, **columns)
    if case == "inconsistent-logging-distribution":
        frame["logging_distribution"] = pd.Series(
            [list(r * 2) for r in log.logging_distribution], dtype=object
        )
    _write_frame(frame, tmp_path / "log.parquet")
    outcome = check_logs(tmp_path / "log.parquet", context=gx_context)
    assert outcome.report.passed and outcome.exit_code == 1
    for name, text in expected.items():
        check = outcome.propensity.check(name)
        assert check.status == "fail" and text in check.explanation
    assert outcome.report.n_kept + outcome.report.n_quarantined == 240


def test_simulated_digits_log_passes_with_all_outputs(tmp_path, gx_context):
    from poem.datasets import load_dataset
    from poem.simulate import fit_logging_policy, supervised_to_bandit

    data = load_dataset("digits")
    h0 = fit_logging_policy(data.X_train, data.Y_train, family="discrete", random_state=0)
    log = supervised_to_bandit(
        data.X_train[:300],
        data.Y_train[:300],
        h0,
        n_replays=1,
        random_state=0,
        start_time="2026-01-01",
    )
    outcome = check_logs(
        write_log(log, tmp_path / "log"), out_dir=tmp_path / "out", context=gx_context
    )
    assert outcome.exit_code == 0, outcome.to_text()
    assert outcome.propensity.status in ("pass", "warn")
    assert {
        "data_docs",
        "report",
        "propensity_histogram",
        "weight_distribution",
        "action_counts",
    } <= set(outcome.files)
    assert "quarantine" not in outcome.files


@pytest.mark.shared_data
@pytest.mark.parametrize(("family", "position"), [("discrete", 1), ("candidates", None)])
def test_open_bandit_dataset_passes(tmp_path, gx_context, shared_data_dir, family, position):
    from poem.io.obd import read_obd

    if not (shared_data_dir / "obd").is_dir():
        pytest.skip("obd/ absent from the shared data folder")
    log = read_obd(
        shared_data_dir, "random", "all", family=family, position=position, interactions=False
    )
    outcome = check_logs(write_log(log, tmp_path / "obd"), context=gx_context)
    assert outcome.report.passed and outcome.report.failures == (), outcome.to_text()
    assert outcome.exit_code == 0 and outcome.log.n_rows == log.n_rows
    assert (
        outcome.propensity.check("uniform_weight").status == "pass"
    )  # the random logger's propensities are exact
    assert np.isclose(outcome.propensity.check("uniform_weight").value, 1.0)
