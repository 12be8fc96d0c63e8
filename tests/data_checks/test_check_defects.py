"""Corrupted logs through ``check_logs``: every one ends as a report, never as a traceback.

Row-level defects are quarantined (named column, counts, example ids) and reconcile with the
input; dataset-level ones fail hard with one clear message in ``check_report.json``.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from data_checks.check import check_logs
from poem.io.parquet import METADATA_KEY, log_to_frame, write_log

N = 240


def _write(frame, path, meta=None):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    stored = frame.attrs[METADATA_KEY] if meta is None else meta
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(stored)}), path)
    return path


def _set_list(frame, column, rows, value):
    cells = pa.array(frame[column]).to_pylist()
    for r in rows:
        cells[r] = value(cells[r])
    attrs = frame.attrs
    frame[column] = frame[column].__class__(
        pa.array(cells, type=pa.array(frame[column]).type), dtype=frame[column].dtype
    )
    frame.attrs = attrs
    return frame


def _dense_nan(f):
    f.loc[[3, 8, 20], "x_1"] = [np.nan, np.inf, -np.inf]
    return f


def _subnormal(f):
    f.loc[[4, 6], "propensity"] = 1e-320
    return f


ROW_DEFECTS = [
    ("dense-nan", "discrete", _dense_nan, "x_1", "not finite (NaN or inf)", ["e3", "e8", "e20"]),
    (
        "subnormal-propensity",
        "discrete",
        _subnormal,
        "propensity",
        "below 2.23e-308 (subnormal: the importance weight 1/p overflows)",
        ["e4", "e6"],
    ),
    (
        "ragged-distribution",
        "discrete",
        lambda f: _set_list(f, "logging_distribution", [5], lambda c: c + c),
        "logging_distribution",
        "do not hold 4 probabilities (one per action)",
        ["e5"],
    ),
    (
        "sparse-index-d",
        "multilabel",
        lambda f: _set_list(f, "x_indices", [2, 9], lambda c: [*c[:-1], 20] if c else c),
        "x_indices",
        "hold a feature index outside 0..19",
        ["e2", "e9"],
    ),
    (
        "sparse-index-minus-1",
        "multilabel",
        lambda f: _set_list(f, "x_indices", [11], lambda c: [-1, *c[1:]] if c else c),
        "x_indices",
        "hold a feature index outside 0..19",
        ["e11"],
    ),
    (
        "sparse-length",
        "multilabel",
        lambda f: _set_list(f, "x_values", [4], lambda c: [*c, 1.0]),
        "x_values",
        "do not have as many entries as x_indices",
        ["e4"],
    ),
    (
        "candidate-nan",
        "candidates",
        lambda f: _set_list(f, "candidate_features", [7], lambda c: [np.nan, *c[1:]]),
        "candidate_features",
        "not finite (NaN or inf)",
        ["e7"],
    ),
    (
        "candidate-length",
        "candidates",
        lambda f: _set_list(f, "candidate_features", [1], lambda c: c[:-1]),
        "candidate_features",
        "do not hold n_candidates × 3 values",
        ["e1"],
    ),
]


@pytest.mark.parametrize(
    ("case", "family", "mutate", "column", "reason", "examples"),
    ROW_DEFECTS,
    ids=[c[0] for c in ROW_DEFECTS],
)
def test_row_defects_are_quarantined_and_named(
    tmp_path, gx_context, clean_logs, case, family, mutate, column, reason, examples
):
    log = clean_logs[family]
    if family == "multilabel":  # every row needs a non-zero entry for the index mutations
        log = log.take(np.arange(N))
    frame = mutate(log_to_frame(log))
    path = _write(frame, tmp_path / "log.parquet")
    outcome = check_logs(
        path,
        out_dir=tmp_path / "out",
        context=gx_context,
        plots=False,
        max_quarantine_fraction=0.05,
    )
    r = outcome.report
    assert r.quarantined_by_reason == {reason: len(examples)}, outcome.to_text()
    failure = next(f for f in r.failures if f.column == column)
    assert list(failure.examples) == examples and failure.unexpected_count == len(examples)
    assert r.n_kept + r.n_quarantined == N and outcome.log.n_rows == N - len(examples)
    saved = json.loads((tmp_path / "out" / "check_report.json").read_text())
    assert saved["data_checks"]["quarantined_by_reason"] == {reason: len(examples)}


def _metadata(**over):
    def mutate(frame):
        return frame, {**frame.attrs[METADATA_KEY], **over}

    return mutate


HARD_DEFECTS = [
    ("metadata-json-list", lambda f: (f, [1, 2]), "metadata: the 'poem' metadata is a JSON list"),
    ("unknown-family", _metadata(family="bandit"), "family: 'bandit' is not one of"),
    (
        "negative-n-actions",
        _metadata(n_actions=-3),
        "n_actions: must be an integer >= 2 for the discrete family, got -3",
    ),
    (
        "bounds-string",
        _metadata(loss_bounds="0,1"),
        "loss_bounds: must be two numbers [min, max], got '0,1'",
    ),
    ("bounds-overflow", _metadata(loss_bounds=[0, 1e308]), "loss_bounds: [0.0, 1e+308] overflow"),
    (
        "reward-beside-loss",
        lambda f: (f.assign(reward=1.0), f.attrs[METADATA_KEY]),
        "reward: column is given beside 'loss': ambiguous",
    ),
]


@pytest.mark.parametrize(
    ("case", "mutate", "message"), HARD_DEFECTS, ids=[c[0] for c in HARD_DEFECTS]
)
def test_dataset_defects_fail_with_a_report(tmp_path, clean_logs, case, mutate, message):
    frame, meta = mutate(log_to_frame(clean_logs["discrete"]))
    path = _write(frame, tmp_path / "log.parquet", meta)
    outcome = check_logs(path, out_dir=tmp_path / "out")
    assert outcome.exit_code == 1 and message in outcome.to_text(), outcome.to_text()
    saved = json.loads((tmp_path / "out" / "check_report.json").read_text())
    assert saved["passed"] is False and message in json.dumps(saved, ensure_ascii=False)


def test_list_column_that_holds_text_fails_with_a_report(tmp_path, clean_logs):
    frame = log_to_frame(clean_logs["multilabel"])
    frame["x_indices"] = "[1, 2]"
    outcome = check_logs(_write(frame, tmp_path / "log.parquet"), out_dir=tmp_path / "out")
    assert outcome.exit_code == 1
    assert re.search(
        r"x_indices  240       240  are not lists \(dtype (object|str)\)", outcome.to_text()
    )
    assert "quarantine: 240 of 240 rows (100.00%) failed row-level checks" in outcome.to_text()


def test_unexpected_errors_end_as_a_report(tmp_path, clean_logs, monkeypatch):
    import data_checks.check as check
    import data_checks.partition as partition

    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(partition, "validate_stage", broken)
    path = write_log(clean_logs["discrete"], tmp_path / "log")
    outcome = check.check_logs(path, out_dir=tmp_path / "out")
    assert outcome.exit_code == 1
    assert "unexpected KeyError: 'boom' (please report this)" in outcome.to_text()
    assert (tmp_path / "out" / "check_report.json").exists()


def test_window_without_timestamps_fails_with_a_report(tmp_path, clean_logs):
    from dataclasses import replace

    path = write_log(replace(clean_logs["discrete"], timestamps=None), tmp_path / "log")
    outcome = check_logs(path, window=("2026-11-01", "2026-11-02"), out_dir=tmp_path / "out")
    assert outcome.exit_code == 1
    assert "timestamp: column is missing, but a time window [2026-11-01, 2026-11-02]" in (
        outcome.to_text()
    )


def test_symlinked_partition_is_checked(tmp_path, gx_context, clean_logs):
    path = write_log(clean_logs["discrete"], tmp_path / "log")
    last = sorted(p for p in path.iterdir())[-1]
    moved = path / "archive" / last.name  # inside the log folder (issue 37 item 7)
    moved.parent.mkdir()
    last.rename(moved)
    last.symlink_to(moved, target_is_directory=True)
    outcome = check_logs(path, context=gx_context, plots=False)
    assert outcome.report.n_rows == N and outcome.log.n_rows == N, outcome.to_text()


def test_rows_below_the_declared_min_propensity_are_reported_and_kept(
    tmp_path, gx_context, clean_logs
):
    # the gate bounds every weight by 1/min_propensity (declared in the metadata): a row below
    # the declared floor breaks that bound. Quarantining it would leave a sample conditioned
    # on the well-logged actions that the gate then trusts; check names it and keeps it, and
    # the gate blocks on it (issue 34)
    frame = log_to_frame(clean_logs["discrete"])
    p = frame["propensity"].to_numpy()
    floor = float(np.sort(p)[3])  # three rows below it
    meta = {**frame.attrs[METADATA_KEY], "min_propensity": floor}
    path = _write(frame, tmp_path / "log.parquet", meta)
    outcome = check_logs(
        path,
        out_dir=tmp_path / "out",
        context=gx_context,
        plots=False,
        max_quarantine_fraction=0.05,
    )
    reason = (
        f"propensity below the declared min_propensity {floor:g} (kept: the gate's weight "
        "bound 1/min_propensity assumes none is, so the gate blocks on this log)"
    )
    assert outcome.report.quarantined_by_reason == {}, outcome.to_text()
    failure = next(f for f in outcome.report.failures if f.column == "propensity")
    assert failure.unexpected_count == 3 and failure.level == "warning" and failure.reason == reason
    assert outcome.log.n_rows == len(frame) and outcome.log.propensities.min() < floor
    # the configured floor (checks.min_propensity) is a declaration too: kept, not quarantined
    plain = _write(frame, tmp_path / "plain.parquet", frame.attrs[METADATA_KEY])
    configured = check_logs(plain, context=gx_context, plots=False, min_propensity=floor)
    assert configured.log.n_rows == len(frame) and configured.report.quarantined_by_reason == {}


@pytest.mark.parametrize("bad", [0.0, 1.5, "0.1", True])
def test_a_declared_min_propensity_outside_0_1_fails_naming_the_key(
    tmp_path, gx_context, clean_logs, bad
):
    frame = log_to_frame(clean_logs["discrete"])
    path = _write(
        frame, tmp_path / "log.parquet", {**frame.attrs[METADATA_KEY], "min_propensity": bad}
    )
    outcome = check_logs(path, context=gx_context, plots=False)
    assert not outcome.report.passed
    assert "min_propensity: must be" in outcome.to_text()
