"""Table-driven bad inputs through the GX suites: hard failure or quarantined rows with a reason.

Every case asserts that the message names the column and the count, and that kept +
quarantined rows equal the input rows, per reason.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from data_checks.quarantine import split_quarantine
from data_checks.runner import validate_frame
from data_checks.suites import build_log_suite, default_parameters
from poem.io.parquet import frame_metadata, log_to_frame


def _set(column, rows, value):
    def mutate(frame):
        values = frame[column].to_numpy(copy=True)
        if values.dtype.kind in "iu" and (isinstance(value, float) or value is None):
            values = values.astype(np.float64)
        new = np.datetime64("NaT") if values.dtype.kind == "M" and value is None else value
        values[rows] = new
        return frame.assign(**{column: values})

    return mutate


def _strings_in_propensity(frame):
    values = frame["propensity"].astype(str).to_numpy(dtype=object)
    values[:3] = "n/a"
    return frame.assign(propensity=pd.array(values, dtype="str"))


def _duplicate_id(frame):
    ids = frame["event_id"].to_numpy(copy=True)
    ids[21] = ids[20]
    return frame.assign(event_id=ids)


WINDOW = ("2026-10-01", "2026-12-01")


def _chain(*mutations):
    def mutate(frame):
        for m in mutations:
            frame = m(frame)
        return frame

    return mutate


# (id, family, mutation, expected outcome, regexes on the failures text naming column and count).
# Kinds that fail the same expectation share one frame (disjoint rows) to keep GX runs few.
CASES = [
    (
        "missing-column",
        "discrete",
        lambda f: f.drop(columns="propensity"),
        "hard",
        [r"propensity: column is missing"],
    ),
    (
        "wrong-dtype",
        "discrete",
        _strings_in_propensity,
        "hard",
        [
            r"propensity: has the wrong type: 3 values are not numbers \(observed str\); "
            r"first event ids: \['e0', 'e1', 'e2'\]"
        ],
    ),
    (
        "action-float-dtype",
        "discrete",
        _set("action", [0], 1.5),
        "hard",
        [r"action: has the wrong type \(observed float64\)"],
    ),
    (
        "propensity-nan-inf-zero-negative-above-one",
        "discrete",
        _chain(
            _set("propensity", [1, 2, 3], np.nan),
            _set("propensity", [4], np.inf),
            _set("propensity", [5, 6], 0.0),
            _set("propensity", [7], -0.2),
            _set("propensity", [8, 9, 10], 1.5),
        ),
        "quarantine",
        [
            r"propensity: 3 of 240 rows: propensity missing \(NaN\); first event ids: "
            r"\['e1', 'e2', 'e3'\]",
            r"propensity: 7 of 240 rows: propensity outside \(0, 1\]; first event ids: "
            r"\['e4', 'e5', 'e6', 'e7', 'e8'\]",
        ],
    ),
    (
        "loss-nan-inf-out-of-bounds-reward-values",
        "discrete",
        _chain(
            _set("loss", [11, 12], np.nan),
            _set("loss", [13], np.inf),
            _set("loss", [14, 15], 2.0),
            _set("loss", [16, 17, 18, 19], -1.0),
        ),
        "quarantine",
        [
            r"loss: 2 of 240 rows: loss missing \(NaN\)",
            r"loss: 7 of 240 rows: loss outside the declared bounds \[0, 1\] \(or "
            r"infinite\); first event ids: \['e13', 'e14'",
        ],
    ),
    (
        "duplicate-and-missing-event-ids",
        "discrete",
        _chain(_duplicate_id, _set("event_id", [22], None)),
        "quarantine",
        [
            r"event_id: 2 of 240 rows: event_id duplicated; first event ids: \['e20', 'e20'\]",
            r"event_id: 1 of 240 rows: event_id missing",
        ],
    ),
    (
        "empty-table",
        "discrete",
        lambda f: f.iloc[:0],
        "hard",
        [r"rows: the table has 0 rows; at least 1 needed"],
    ),
    (
        "timestamps-missing-or-outside-window",
        "discrete",
        _chain(
            _set("timestamp", [23, 24], None),
            _set("timestamp", [25, 26, 27], np.datetime64("2027-01-01", "ns")),
        ),
        "quarantine",
        [
            r"timestamp: 2 of 240 rows: timestamp missing or unparseable",
            r"timestamp: 3 of 240 rows: timestamp outside the window \[2026-10-01 "
            r"00:00:00, 2026-12-01 00:00:00\]",
        ],
    ),
    (
        "action-out-of-range",
        "discrete",
        _chain(_set("action", [28], 4), _set("action", [29], -1)),
        "quarantine",
        [r"action: 2 of 240 rows: action outside 0..3; first event ids: \['e28', 'e29'\]"],
    ),
    (
        "multilabel-missing-or-non-binary-label",
        "multilabel",
        _chain(_set("y_2", [0, 1], None), _set("y_1", [3], 2)),
        "quarantine",
        [
            r"y_2: 2 of 240 rows: y_2 missing \(multilabel vector of the wrong width\)",
            r"y_1: 1 of 240 rows: y_1 not 0/1",
        ],
    ),
    (
        "multilabel-extra-label-column",
        "multilabel",
        lambda f: f.assign(y_5=0),
        "hard",
        [r"action: multilabel vector has 6 label columns, expected 5 \(extra: y_5\)"],
    ),
    (
        "multilabel-missing-label-column",
        "multilabel",
        lambda f: f.drop(columns="y_4"),
        "hard",
        [r"y_4: column is missing"],
    ),
    (
        "candidates-zero-outside-negative",
        "candidates",
        _chain(
            lambda f: _set("action", [2], int(f["n_candidates"][2]))(f),
            _set("n_candidates", [0, 1], 0),
            _set("action", [5], -1),
        ),
        "quarantine",
        [
            r"n_candidates: 2 of 240 rows: zero candidates; first event ids: \['e0', 'e1'\]",
            r"action: [23] of 240 rows: logged candidate index outside the row's set; "
            r"first event ids: \[('e0', 'e1', )?'e2'\]",
            r"action: 1 of 240 rows: negative candidate index; first event ids: \['e5'\]",
        ],
    ),
    (
        "too-many-quarantined",
        "discrete",
        _set("propensity", list(range(0, 240, 3)), 0.0),
        "hard",
        [
            r"quarantine: 80 of 240 rows \(33.33%\) failed row-level checks, more than "
            r"the allowed 25.00%"
        ],
    ),
]


def _validate(gx_context, frame, family, **kwargs):
    meta = frame_metadata(frame)
    suite = build_log_suite(family, n_labels=meta.n_actions if family == "multilabel" else None)
    params = default_parameters(meta, window=WINDOW)
    return validate_frame(frame, suite, params, context=gx_context, **kwargs)


@pytest.mark.parametrize(
    ("case", "family", "mutate", "outcome", "patterns"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_input_is_reported(gx_context, clean_logs, case, family, mutate, outcome, patterns):
    clean = log_to_frame(clean_logs[family])
    frame = mutate(clean)
    frame.attrs = clean.attrs
    report = _validate(gx_context, frame, family, max_quarantine_fraction=0.25)
    text = "\n".join(str(f) for f in report.failures + report.hard_failures)
    for pattern in patterns:
        assert re.search(pattern, text), f"{pattern!r} not in:\n{text}"
    assert report.passed is (outcome != "hard")
    kept, quarantined = split_quarantine(frame, report) if report.n_rows else (frame, frame)
    assert len(kept) + len(quarantined) == len(frame) == report.n_kept + report.n_quarantined
    assert (
        quarantined["reason"].value_counts().to_dict() == report.quarantined_by_reason
        if len(quarantined)
        else True
    )
    assert sum(report.quarantined_by_reason.values()) == report.n_quarantined
    if outcome == "quarantine":
        assert report.n_quarantined >= 1
        for pattern in patterns:
            failure = next(f for f in report.failures if re.search(pattern, str(f)))
            assert failure.unexpected_count >= 1 and failure.level == "row"
            assert {e for e in failure.examples if e is not None} <= set(
                quarantined["event_id"].dropna()
            )
    elif case != "too-many-quarantined":
        assert report.n_quarantined == 0 and any(f.level == "dataset" for f in report.failures)


def test_extra_unknown_column_is_allowed_and_reported(gx_context, clean_logs):
    clean = log_to_frame(clean_logs["discrete"])
    frame = clean.assign(campaign="men")
    frame.attrs = clean.attrs
    report = _validate(gx_context, frame, "discrete")
    assert report.passed and report.failures == ()
    assert report.extra_columns == ("campaign",)
    assert "Extra columns (allowed, not checked): campaign" in report.to_markdown()


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_each_suite_passes_a_clean_frame(gx_context, clean_logs, family, tmp_path):
    frame = log_to_frame(clean_logs[family])
    report = _validate(
        gx_context, frame, family, docs_dir=tmp_path / "docs" if family == "discrete" else None
    )
    assert report.passed and report.failures == () and report.n_quarantined == 0
    assert report.n_rows == 240 and report.extra_columns == ()
    if family == "discrete":
        assert (tmp_path / "docs" / "index.html").read_text().lower().count("<html") >= 1


def test_rows_failing_two_checks_are_counted_once(gx_context, clean_logs):
    clean = log_to_frame(clean_logs["discrete"])
    frame = _set("loss", [3, 4], np.nan)(_set("propensity", [3], 0.0)(clean))
    frame.attrs = clean.attrs
    report = _validate(gx_context, frame, "discrete")
    assert report.n_quarantined == 2 and sum(report.quarantined_by_reason.values()) == 2
    kept, quarantined = split_quarantine(frame, report)
    assert list(quarantined["event_id"]) == ["e3", "e4"] and len(kept) == 238


def test_duplicates_given_equal_the_suites_uniqueness_on_one_frame(gx_context, clean_logs):
    # the partitioned check replaces GX's per-frame uniqueness by the whole log's duplicated
    # rows (data_checks.stages.duplicated_rows): on one frame both agree, null ids included
    frame = log_to_frame(clean_logs["discrete"])
    frame["event_id"] = frame["event_id"].astype(object)
    frame.loc[[3, 7, 9], "event_id"] = None
    frame.loc[20, "event_id"] = frame.loc[30, "event_id"]
    frame.loc[[40, 41, 42], "event_id"] = "e99"
    ids = frame["event_id"]
    dups = np.flatnonzero(np.array(ids.notna() & ids.duplicated(keep=False), dtype=bool))
    gx = _validate(gx_context, frame, "discrete")
    given = _validate(gx_context, frame, "discrete", duplicates=dups)
    assert gx.failures == given.failures and gx.quarantined_by_reason == given.quarantined_by_reason
    (f,) = [f for f in given.failures if f.reason == "event_id duplicated"]
    assert (f.unexpected_count, f.examples) == (6, ("e30", "e30", "e99", "e99", "e99"))
    np.testing.assert_array_equal(gx.row_reasons[0], given.row_reasons[0])
