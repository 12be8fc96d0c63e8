"""Decision log: served decisions joined with feedback, the missing-feedback rule, canonical Parquet."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pandas as pd
import pytest

from deploy.pyfunc import StochasticPolicyModel
from poem.io.decisions import DecisionLog
from poem.io.parquet import read_frame, read_log

FEATURES = ["f_a", "f_b", "f_c"]
T0 = pd.Timestamp("2026-03-01T23:50:00Z")


def _serve(model, family, n, prefix, seed):
    rng = np.random.default_rng(seed)
    if family == "candidates":
        request = pd.DataFrame(rng.normal(size=(2 * n, 3)), columns=FEATURES)
        request.insert(0, "event_id", np.repeat([f"{prefix}{i}" for i in range(n)], 2))
    else:
        request = pd.DataFrame(rng.normal(size=(n, 3)), columns=FEATURES)
        request.insert(0, "event_id", [f"{prefix}{i}" for i in range(n)])
    return request, model.predict(None, request, {"seed": seed})


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_joined_decisions_round_trip_as_a_canonical_log(tmp_path, make_policy, family):
    policy = make_policy(family, temperature=0.9, floor=0.05)
    model = StochasticPolicyModel(policy, "4")
    log = DecisionLog(
        tmp_path / "logs", family, FEATURES, (0.0, 3.0), n_actions=policy.family.n_actions
    )
    request, decisions = _serve(model, family, 6, "a", 1)
    times = [T0 + pd.Timedelta(minutes=3 * i) for i in range(6)]  # crosses midnight after row 3
    log.add_decisions(request, decisions, timestamps=times)
    assert log.add_feedback(decisions["event_id"], [0.0, 1.0, 2.0, 3.0, 0.5, 1.5]) == 6
    report = log.flush(now=T0)
    assert (report.n_written, report.n_with_feedback, report.n_default_loss, report.n_pending) == (
        6,
        6,
        0,
        0,
    )
    assert sorted(p.split("/")[-2] for p in report.files) == ["date=2026-03-01", "date=2026-03-02"]
    back = read_log(tmp_path / "logs")
    assert back.family == family and back.n_rows == 6
    assert back.event_ids.tolist() == [f"a{i}" for i in range(6)]
    np.testing.assert_allclose(back.losses, [0.0, 1.0, 2.0, 3.0, 0.5, 1.5])
    np.testing.assert_allclose(back.propensities, decisions["propensity"].to_numpy())
    np.testing.assert_array_equal(back.actions, np.array(decisions["action"].tolist()))
    assert back.logging_model_version == "4"
    assert back.feature_names == tuple(FEATURES)
    # the logged propensity is the policy's probability of the logged action in the logged context
    inputs = back.candidates if family == "candidates" else back.contexts
    np.testing.assert_allclose(
        policy.action_probability(inputs, back.actions), back.propensities, rtol=1e-12
    )


def test_missing_feedback_gets_the_default_loss_after_the_timeout_and_is_counted(
    tmp_path, make_policy
):
    model = StochasticPolicyModel(make_policy("discrete"), "1")
    log = DecisionLog(
        tmp_path,
        "discrete",
        FEATURES,
        (0.0, 1.0),
        n_actions=4,
        feedback_timeout=dt.timedelta(minutes=30),
    )
    request, decisions = _serve(model, "discrete", 4, "e", 2)
    log.add_decisions(request, decisions, timestamps=[T0] * 2 + [T0 + pd.Timedelta(minutes=20)] * 2)
    log.add_feedback(["e0"], [0.0])
    log.add_feedback(["e0", "nope"], [1.0, 0.0])  # duplicate, unknown
    first = log.flush(now=T0 + pd.Timedelta(minutes=35))  # e1 timed out; e2, e3 still within 30 min
    assert (first.n_written, first.n_with_feedback, first.n_default_loss, first.n_pending) == (
        2,
        1,
        1,
        2,
    )
    assert (first.n_duplicate_feedback, first.n_unknown_feedback) == (1, 1)
    log.add_feedback(["e1", "e2"], [0.0, 0.0])  # e1 arrives late: ignored and counted
    second = log.flush(now=T0 + pd.Timedelta(minutes=35), force=True)
    assert (
        second.n_written,
        second.n_with_feedback,
        second.n_default_loss,
        second.n_late_feedback,
    ) == (2, 1, 1, 1)
    losses = dict(zip(read_frame(tmp_path)["event_id"], read_frame(tmp_path)["loss"], strict=True))
    assert losses == {"e0": 0.0, "e1": 1.0, "e2": 0.0, "e3": 1.0}  # default = upper loss bound


def test_missing_feedback_can_be_excluded_but_still_counted(tmp_path, make_policy):
    model = StochasticPolicyModel(make_policy("discrete"), "1")
    log = DecisionLog(tmp_path, "discrete", FEATURES, (0.0, 1.0), n_actions=4, exclude_missing=True)
    request, decisions = _serve(model, "discrete", 3, "x", 3)
    log.add_decisions(request, decisions, timestamps=[T0] * 3)
    log.add_feedback(["x2"], [0.0])
    report = log.flush(force=True)
    assert (report.n_written, report.n_excluded, report.n_default_loss) == (1, 2, 0)
    assert read_frame(tmp_path)["event_id"].tolist() == ["x2"]


def test_invalid_input_is_rejected_with_the_reason(tmp_path, make_policy):
    model = StochasticPolicyModel(make_policy("discrete"), "1")
    log = DecisionLog(tmp_path, "discrete", FEATURES, (0.0, 1.0), n_actions=4)
    request, decisions = _serve(model, "discrete", 3, "d", 4)
    log.add_decisions(request, decisions)
    with pytest.raises(ValueError, match=r"3 event id\(s\) already recorded"):
        log.add_decisions(request, decisions)
    with pytest.raises(
        ValueError, match=r"1 loss\(es\) are not finite or outside the bounds \[0.0, 1.0\]"
    ):
        log.add_feedback(["d0", "d1"], [0.5, 2.0])
    with pytest.raises(ValueError, match=r"missing columns \['propensity'\]"):
        log.add_decisions(request, decisions.drop(columns="propensity"))
    with pytest.raises(ValueError, match="n_actions is required"):
        DecisionLog(tmp_path, "discrete", FEATURES, (0.0, 1.0))
    with pytest.raises(ValueError, match="outside the loss bounds"):
        DecisionLog(
            tmp_path, "discrete", FEATURES, (0.0, 1.0), n_actions=4, missing_feedback_loss=2.0
        )


@pytest.mark.parametrize("bad", [0.0, np.nan, 1.5, "x"])
def test_a_decision_without_a_valid_propensity_is_rejected_when_added(tmp_path, make_policy, bad):
    policy = make_policy("discrete")
    log = DecisionLog(tmp_path, "discrete", FEATURES, (0.0, 1.0), n_actions=4)
    request, decisions = _serve(StochasticPolicyModel(policy, "1"), "discrete", 3, "a", 0)
    decisions = decisions.astype({"propensity": object})
    decisions.loc[2, "propensity"] = bad
    with pytest.raises(ValueError, match=r"propensity: 1 of 3 decisions .*\['a2'\]"):
        log.add_decisions(request, decisions, timestamps=[T0] * 3)
    assert log.flush(force=True).n_written == 0  # nothing of the bad batch was kept


def test_a_failed_write_leaves_every_row_pending(tmp_path, make_policy, monkeypatch):
    policy = make_policy("discrete")
    log = DecisionLog(tmp_path / "logs", "discrete", FEATURES, (0.0, 1.0), n_actions=4)
    request, decisions = _serve(StochasticPolicyModel(policy, "1"), "discrete", 4, "a", 0)
    log.add_decisions(request, decisions, timestamps=[T0] * 4)
    log.add_feedback(["a0", "a1", "zz"], [0.0, 1.0, 0.5])  # one unknown id, counted once

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr("poem.io.decisions.pq.write_table", read_only)
    with pytest.raises(OSError, match="Read-only"):
        log.flush(force=True)
    monkeypatch.undo()
    report = log.flush(force=True)  # the next flush writes every row, with its feedback
    assert (report.n_written, report.n_with_feedback, report.n_default_loss) == (4, 2, 2)
    assert report.n_unknown_feedback == 1
    assert sorted(read_frame(tmp_path / "logs")["event_id"]) == ["a0", "a1", "a2", "a3"]
