"""Request parsing of the serving pyfunc, without MLflow: values, and every bad input named."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from poem.io.requests import (
    InvalidRequestError,
    check_score_range,
    check_served_propensities,
    group_candidates,
    parse_event_ids,
    parse_features,
    parse_params,
)

NAMES = ["a", "b", "c"]


def test_features_are_taken_by_name_in_policy_order():
    frame = pd.DataFrame({"event_id": ["r0", "r1"], "c": [3.0, 6.0], "a": [1, 4], "b": [2.0, 5.0]})
    np.testing.assert_array_equal(parse_features(frame, NAMES), [[1, 2, 3], [4, 5, 6]])
    assert parse_features(frame, NAMES).dtype == np.float64


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (
            pd.DataFrame({"a": [1.0]}),
            r"2 of 3 feature columns are missing from the request: \['b', 'c'\]",
        ),
        (
            pd.DataFrame({"a": [1.0, 2, 3], "b": ["x", "2", "y"], "c": [0.0, 0, 0]}),
            r"column 'b' has 2 non-numeric value\(s\) \(rows 0, 2\)",
        ),
        (
            pd.DataFrame({"a": [1.0, np.nan, 3], "b": [1.0, 2, np.inf], "c": [0.0, 0, 0]}),
            r"2 feature column\(s\) contain NaN or infinite values: 'a': 1 row\(s\) \(rows 1\); "
            r"'b': 1 row\(s\) \(rows 2\)",
        ),
    ],
    ids=["missing", "non-numeric", "nan-inf"],
)
def test_bad_feature_columns_are_named_with_counts_and_rows(frame, message):
    with pytest.raises(InvalidRequestError, match=message):
        parse_features(frame, NAMES)


def test_event_ids_are_strings_optional_unless_required():
    assert parse_event_ids(pd.DataFrame({"a": [1.0]}), required=False) is None
    ids = parse_event_ids(pd.DataFrame({"event_id": [7, "x"]}), required=False)
    assert ids.tolist() == ["7", "x"]
    with pytest.raises(InvalidRequestError, match=r"candidate-set requests need an 'event_id'"):
        parse_event_ids(pd.DataFrame({"a": [1.0]}), required=True)
    with pytest.raises(
        InvalidRequestError, match=r"'event_id' has 2 empty value\(s\) \(rows 0, 2\)"
    ):
        parse_event_ids(pd.DataFrame({"event_id": [None, "r", ""]}), required=False)


def test_candidate_rows_group_into_sets_in_request_order():
    X = np.arange(10.0).reshape(5, 2)
    sets, ids = group_candidates(X, np.array(["q", "q", "p", "p", "p"]), exploration_floor=0.1)
    assert ids.tolist() == ["q", "p"]
    assert sets.offsets.tolist() == [0, 2, 5]
    with pytest.raises(InvalidRequestError, match=r"1 request\(s\) are not contiguous .*\['q'\]"):
        group_candidates(X, np.array(["q", "p", "q", "r", "r"]), exploration_floor=0.0)
    with pytest.raises(
        InvalidRequestError, match=r"1 request\(s\) have more than 2 candidates, .*ε=0.4.*\['p'\]"
    ):
        group_candidates(X, np.array(["q", "q", "p", "p", "p"]), exploration_floor=0.4)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (None, (None, False)),
        ({"seed": -1}, (None, False)),
        ({"seed": 3, "return_distribution": True}, (3, True)),
    ],
)
def test_params_defaults_and_values(params, expected):
    assert parse_params(params) == expected


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"temperature": 2}, r"unknown params \['temperature'\]"),
        ({"seed": -2}, r"param 'seed' must be an integer ≥ 0 \(or -1 for unseeded\), got -2"),
        ({"seed": True}, r"param 'seed' must be an integer .* got True"),
        ({"seed": 1.5}, r"param 'seed' must be an integer .* got 1.5"),
        ({"return_distribution": "yes"}, r"'return_distribution' must be a boolean, got 'yes'"),
    ],
)
def test_bad_params_are_named(params, message):
    with pytest.raises(InvalidRequestError, match=message):
        parse_params(params)


def test_rows_whose_scores_could_overflow_are_rejected_by_position():
    coef = np.array([[1.0, -2.0], [0.5, 0.5]])
    X = np.array([[1.0, 2.0], [1e308, -1e308], [3.0, 1e300]])
    check_score_range(X[:1], coef, temperature=1.0)  # ordinary values pass
    with pytest.raises(InvalidRequestError, match=r"2 of 3 request row\(s\) .* \(rows 1, 2\)"):
        check_score_range(X, coef, temperature=1.0)
    with pytest.raises(InvalidRequestError, match=r"1 of 1 request row"):
        check_score_range(np.array([[1e298, 0.0]]), coef, temperature=1e-3)  # α amplifies


@pytest.mark.parametrize("bad", [np.nan, 0.0, np.inf, 1.5, -0.1])
def test_served_propensities_must_be_finite_and_in_0_1(bad):
    ok = np.array([0.2, 1.0])
    np.testing.assert_array_equal(check_served_propensities(ok), ok)
    with pytest.raises(InvalidRequestError, match=r"1 of 3 request\(s\) .* \(rows 2\)"):
        check_served_propensities(np.array([0.2, 1.0, bad]))
