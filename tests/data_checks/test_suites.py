"""The suites are built in code, are pure, and take their thresholds as parameters."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from data_checks.report import DataCheckReport, ExpectationFailure, raise_for_failures
from data_checks.suites import build_log_suite, default_parameters, suite_columns
from poem.exceptions import InvalidLogError
from poem.io.parquet import LogMetadata


@pytest.mark.parametrize(
    ("family", "n_labels", "columns"),
    [
        ("discrete", None, {"event_id", "timestamp", "action", "loss", "propensity"}),
        ("multilabel", 3, {"event_id", "timestamp", "y_0", "y_1", "y_2", "loss", "propensity"}),
        (
            "candidates",
            None,
            {"event_id", "timestamp", "action", "n_candidates", "loss", "propensity"},
        ),
    ],
)
def test_suite_columns_and_parameters(family, n_labels, columns):
    suite = build_log_suite(family, n_labels=n_labels)
    assert suite.name == f"poem_{family}_log"
    assert suite_columns(suite) == columns
    text = json.dumps([e.configuration.to_json_dict() for e in suite.expectations])
    for name in (
        "min_rows",
        "min_propensity",
        "max_propensity",
        "loss_min",
        "loss_max",
        "window_start",
        "window_end",
    ):
        assert f'{{"$PARAMETER": "{name}"}}' in text
    assert ('"max_action"' in text) is (family == "discrete")
    levels = {e.meta["level"] for e in suite.expectations}
    assert levels == {"dataset", "row"}


def test_suite_without_timestamp_does_not_require_it():
    assert "timestamp" not in suite_columns(build_log_suite("discrete", has_timestamp=False))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"family": "bandit"}, r"family must be one of .* got 'bandit'"),
        (
            {"family": "multilabel"},
            r"n_labels must be a positive integer for the multilabel family, got None",
        ),
    ],
)
def test_bad_suite_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        build_log_suite(**kwargs)


def test_default_parameters_come_from_metadata():
    params = default_parameters(
        LogMetadata("discrete", n_actions=10, loss_bounds=(-1.0, 0.0)),
        window=("2026-01-01", "2026-02-01"),
        min_propensity=1e-6,
    )
    assert params["loss_min"] == -1.0 and params["loss_max"] == 0.0 and params["max_action"] == 9
    assert params["window_start"] == datetime(2026, 1, 1) and params["min_propensity"] == 1e-6
    aware = default_parameters(
        LogMetadata("discrete", loss_bounds=(0, 1)), window=("2026-01-01T02:00+02:00", None)
    )
    assert aware["window_start"] == datetime(2026, 1, 1) and aware["window_end"] == datetime(
        2262, 4, 11
    )
    with pytest.raises(ValueError, match="declares no loss bounds"):
        default_parameters(LogMetadata("discrete"))


def test_report_serialises_and_raises_hard_failures():
    row = ExpectationFailure(
        "propensity",
        "expect_column_values_to_be_between",
        "row",
        "propensity outside (0, 1]",
        3,
        100,
        ("e1", "e2", "e3"),
    )
    report = DataCheckReport(
        "poem_discrete_log",
        100,
        15,
        (row,),
        n_quarantined=3,
        quarantined_by_reason={"propensity outside (0, 1]": 3},
        max_quarantine_fraction=0.05,
    )
    assert report.passed and report.n_kept == 97
    data = json.loads(report.to_json())
    assert data["failures"][0]["examples"] == ["e1", "e2", "e3"] and data["n_quarantined"] == 3
    md = report.to_markdown()
    assert "| row | propensity | propensity outside (0, 1] | 3 | 100 | e1, e2, e3 |" in md
    assert "97 kept + 3 quarantined = 100 input" in md
    strict = DataCheckReport(
        "s",
        100,
        15,
        (row,),
        n_quarantined=3,
        quarantined_by_reason={"x": 3},
        max_quarantine_fraction=0.01,
    )
    with pytest.raises(
        InvalidLogError,
        match=r"^quarantine: 3 of 100 rows \(3.00%\) failed row-level checks, more than "
        r"the allowed 1.00%$",
    ) as info:
        raise_for_failures(strict)
    assert info.value.columns == ("quarantine",)
    missing = ExpectationFailure(
        "loss", "expect_column_to_exist", "dataset", "column is missing", 0, 100
    )
    with pytest.raises(InvalidLogError, match=r"^loss: column is missing$"):
        raise_for_failures(DataCheckReport("s", 100, 15, (missing,)))
