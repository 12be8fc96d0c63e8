"""A real ``mlflow models serve`` subprocess on 127.0.0.1 serving ``models:/<name>@champion``."""

from __future__ import annotations

import http.client
import json

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from deploy.serve import ModelServer, invocation_body

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serving")]  # one server per run

FEATURES = ["f_a", "f_b", "f_c"]
NAME = "pyfunc-discrete"


@pytest.fixture(scope="module")
def champion(deploy_store, make_policy, register, tmp_path_factory):
    """``pyfunc-discrete`` v1 (session fixture) is the champion, served; v2 is registered for promotion."""
    v2 = make_policy("discrete", seed=1, temperature=0.8, floor=0.05)
    version2 = register(deploy_store, v2, NAME)
    client = MlflowClient(deploy_store["uri"], deploy_store["uri"])
    client.set_registered_model_alias(NAME, "champion", deploy_store["versions"]["discrete"])
    log = tmp_path_factory.mktemp("serve") / "server.log"
    server = ModelServer(f"models:/{NAME}@champion", deploy_store["uri"], log)
    try:
        server.start()
        yield {
            "server": server,
            "client": client,
            "log": log,
            "version2": version2,
            "policies": {"1": deploy_store["policies"]["discrete"], version2: v2},
        }
    finally:
        server.stop()


def _request(n: int = 5, seed: int = 0) -> pd.DataFrame:
    return pd.DataFrame(np.random.default_rng(seed).normal(size=(n, 3)), columns=FEATURES)


def test_valid_requests_return_actions_with_their_served_propensities(champion):
    request = _request()
    status, body = champion["server"].invoke(request, {"seed": 3, "return_distribution": True})
    assert status == 200, body
    rows = body["predictions"]
    assert len(rows) == 5
    policy = champion["policies"]["1"]
    X = request.to_numpy()
    actions = np.array([r["action"] for r in rows])
    propensities = np.array([r["propensity"] for r in rows])
    assert np.all((propensities > 0) & (propensities <= 1))
    np.testing.assert_allclose(propensities, policy.action_probability(X, actions), rtol=1e-12)
    np.testing.assert_allclose(
        np.array([r["distribution"] for r in rows]), policy.predict_proba(X), rtol=1e-12
    )
    assert [r["map_action"] for r in rows] == policy.predict(X).tolist()
    assert {r["model_version"] for r in rows} == {"1"}
    # same seed, same decisions
    again = champion["server"].invoke(request, {"seed": 3})[1]["predictions"]
    assert [r["action"] for r in again] == actions.tolist()


def test_event_ids_are_passed_through_or_generated(champion):
    request = _request(2).assign(event_id=["a-1", "a-2"])
    status, body = champion["server"].invoke(request)
    assert status == 200 and [r["event_id"] for r in body["predictions"]] == ["a-1", "a-2"]
    generated = champion["server"].invoke(_request(2))[1]["predictions"]
    assert len({r["event_id"] for r in generated}) == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"dataframe_split": {"columns": ["f_a", "f_b"], "data": [[0.1, 0.2]]}},
            "missing inputs ['f_c']",
        ),
        (
            {"dataframe_split": {"columns": FEATURES, "data": [[0.1, "abc", 0.3]]}},
            "Failed to convert column f_b",
        ),
        (
            {"dataframe_split": {"columns": FEATURES, "data": [[0.1, None, 0.3]]}},
            "1 feature column(s) contain NaN or infinite values: 'f_b': 1 row(s) (rows 0)",
        ),
        ({"dataframe_split": {"columns": FEATURES, "data": []}}, "the request has no rows"),
        (
            {
                "dataframe_split": {"columns": FEATURES, "data": [[0.1, 0.2, 0.3]]},
                "params": {"seed": -7},
            },
            "param 'seed' must be an integer",
        ),
        (
            {
                "dataframe_split": {"columns": FEATURES, "data": [[0.1, 0.2, 0.3]]},
                "params": {"seed": "x"},
            },
            "Failed to validate type and shape for 'seed'",
        ),
        ({}, "The input must be a JSON dictionary"),
        (
            {
                "dataframe_split": {
                    "columns": FEATURES,
                    "data": [[0.1, 0.2, 0.3], [1e308, -1e308, 0]],
                }
            },
            "1 of 2 request row(s) have feature values so large that the policy's scores overflow "
            "(rows 1",
        ),
        ({"dataframe_split": {"columns": FEATURES, "data": 5}}, "not a valid dataframe"),
    ],
    ids=[
        "missing-column",
        "string",
        "nan",
        "no-rows",
        "bad-seed",
        "seed-type",
        "empty-json",
        "overflow",
        "data-not-a-list",
    ],
)
def test_malformed_requests_get_4xx_with_the_problem_named(champion, body, message):
    status, answer = champion["server"].request("POST", "/invocations", json.dumps(body).encode())
    assert 400 <= status < 500, answer
    assert message in answer["message"]
    assert "Traceback" not in json.dumps(answer)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"dataframe_split": {"columns": ["f_a"], "data": [[' + b"9" * 5000 + b"]]}}",
            "ValueError",
        ),
        (b'{"a": ' + b"[" * 60_000 + b"]" * 60_000 + b"}", "RecursionError"),
    ],
    ids=["4300-digit-int", "nested-60000"],
)
def test_bodies_the_json_parser_rejects_are_400_not_500(champion, body, message):
    status, answer = champion["server"].request("POST", "/invocations", body)
    assert status == 400, answer
    assert "not a valid scoring request" in answer["message"] and message in answer["message"]
    assert champion["server"].invoke(_request(1))[0] == 200  # and the server is still fine


def test_an_unknown_column_is_a_400_naming_it_and_the_expected_ones(champion):
    """Issue 37 item 6: a misspelt ``eventid`` was dropped and a fresh uuid returned."""
    request = _request(2).assign(eventid=["client-1", "client-2"])
    status, answer = champion["server"].invoke(request)
    assert status == 400, answer
    assert answer["message"].startswith(
        "1 unknown request column(s): ['eventid']; expected ['event_id', 'f_a', 'f_b', 'f_c']"
    )
    assert "client-1" not in json.dumps(answer)
    status, answer = champion["server"].invoke(_request(1), {"temperature": 9})  # was dropped
    assert status == 400, answer
    assert (
        answer["message"]
        == "unknown params ['temperature']; allowed: ['return_distribution', 'seed']"
    )


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (
            {"dataframe_split": {"columns": FEATURES, "data": [[0.1, "secret-7731", 0.3]]}},
            "Failed to convert column f_b",
        ),
        (
            {"dataframe_records": [{"f_a": 0.1, "f_b": "secret-7731", "f_c": 0.3}]},
            "Failed to convert column f_b",
        ),
        (
            {"inputs": {"f_a": [0.1], "f_b": ["secret-7731"], "f_c": [0.3]}},
            "could not convert string to float (the value is not shown)",
        ),
        (
            {
                "dataframe_split": {
                    "columns": ["event_id", *FEATURES],
                    "data": [["secret-7731", 0.5, 0.25, 0.125], ["e2", 6.54321e307, 0.25, 0.125]],
                }
            },
            "have feature values so large that the policy's scores overflow (rows 1)",
        ),
    ],
    ids=["split-string", "records-string", "inputs-string", "overflow"],
)
def test_error_bodies_do_not_echo_request_values(champion, body, named):
    """Issue 37 item 6: MLflow's errors quoted the values, or the whole request frame."""
    status, answer = champion["server"].request("POST", "/invocations", json.dumps(body).encode())
    assert status == 400, answer
    text = json.dumps(answer)
    assert "secret-7731" not in text and "6.54321" not in text and "0.125" not in text, text
    assert named in answer["message"], answer


def test_a_body_over_the_limit_is_413_and_too_many_rows_a_400(champion):
    """Issue 37 item 6: a 60 MB body was parsed and answered after 24 s (8 MiB limit now)."""
    row = b"[0.123456789,0.223456789,0.323456789],"
    body = b'{"dataframe_split":{"columns":["f_a","f_b","f_c"],"data":['
    body += row * (9_000_000 // len(row)) + b"[0,0,0]]}}"
    status, answer = champion["server"].request("POST", "/invocations", body)
    assert status == 413, answer
    assert answer["message"].startswith(f"the request body has {len(body):,} bytes, more than ")
    assert "8,388,608" in answer["message"] and "POEM_SERVING_MAX_BODY_BYTES" in answer["message"]
    status, answer = champion["server"].invoke(_request(10_001))
    assert status == 400, answer
    assert answer["message"].startswith(
        "the request has 10,001 rows, more than the 10,000 this server accepts per request"
    )
    assert champion["server"].invoke(_request(10_000))[0] == 200


def test_empty_body_is_a_4xx(champion):
    status, answer = champion["server"].request("POST", "/invocations", b"")
    assert status == 400 and "valid JSON" in answer["message"]


def test_a_request_without_content_type_is_415_naming_the_header(champion):
    conn = http.client.HTTPConnection("127.0.0.1", champion["server"].port, timeout=30)
    try:
        conn.request("POST", "/invocations", body=invocation_body(_request(1)))  # no header
        response = conn.getresponse()
        status, text = response.status, response.read().decode()
    finally:
        conn.close()
    assert status == 415, text
    assert "no Content-Type header" in text and "application/json" in text
    assert champion["server"].invoke(_request(1))[0] == 200


def test_champion_changes_after_promotion_when_the_server_restarts(champion):
    """Runs last in the module: promotes version 2 and restarts the served alias."""
    server = champion["server"]
    request = _request(3)
    before = server.invoke(request, {"return_distribution": True})[1]["predictions"]
    champion["client"].set_registered_model_alias(NAME, "champion", champion["version2"])
    # the running server keeps what it loaded
    assert {r["model_version"] for r in server.invoke(request)[1]["predictions"]} == {"1"}
    server.stop()
    server.start()
    after = server.invoke(request, {"return_distribution": True})[1]["predictions"]
    v2 = champion["version2"]
    assert {r["model_version"] for r in before} == {"1"} and {
        r["model_version"] for r in after
    } == {v2} != {"1"}
    np.testing.assert_allclose(
        [r["distribution"] for r in after],
        champion["policies"][v2].predict_proba(request.to_numpy()),
        rtol=1e-12,
    )
    assert not np.allclose([r["distribution"] for r in after], [r["distribution"] for r in before])


@pytest.fixture(scope="module")
def candidate_server(deploy_store, tmp_path_factory):
    """``pyfunc-candidates`` v1 (α = 0.8, ε = 0.05) served as champion."""
    MlflowClient(deploy_store["uri"], deploy_store["uri"]).set_registered_model_alias(
        "pyfunc-candidates", "champion", deploy_store["versions"]["candidates"]
    )
    server = ModelServer(
        "models:/pyfunc-candidates@champion",
        deploy_store["uri"],
        tmp_path_factory.mktemp("serve-c") / "server.log",
    )
    try:
        yield server.start(), deploy_store["policies"]["candidates"]
    finally:
        server.stop()


def test_candidate_sets_in_long_format(candidate_server):
    server, policy = candidate_server
    rng = np.random.default_rng(4)
    request = pd.DataFrame(rng.normal(size=(5, 3)), columns=FEATURES).assign(
        event_id=["q1", "q1", "q1", "q2", "q2"]
    )
    status, body = server.invoke(request, {"seed": 1})
    assert status == 200, body
    rows = body["predictions"]
    assert [r["event_id"] for r in rows] == ["q1", "q2"]
    assert rows[0]["action"] in (0, 1, 2) and rows[1]["action"] in (0, 1)
    from poem.data import CandidateSets

    sets = CandidateSets.from_sizes(request[FEATURES].to_numpy(), [3, 2])
    expected = policy.action_probability(sets, np.array([r["action"] for r in rows]))
    np.testing.assert_allclose([r["propensity"] for r in rows], expected, rtol=1e-12)
    split = request.assign(event_id=["q1", "q2", "q1", "q2", "q2"])
    status, answer = server.invoke(split)
    assert status == 400 and "not contiguous in column 'event_id'" in answer["message"]
    status, answer = server.invoke(request.drop(columns="event_id"))
    assert status == 400 and "event_id" in answer["message"]
