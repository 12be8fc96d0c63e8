"""Decision log: served decisions joined with feedback, the missing-feedback rule, canonical Parquet."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow.exceptions import MlflowException

from deploy.pyfunc import StochasticPolicyModel
from poem.io.decisions import DecisionLog, served_min_propensity
from poem.io.logs import read_log
from poem.io.parquet import read_frame

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

    monkeypatch.setattr("poem.io._folder.pq.write_table", read_only)
    with pytest.raises(OSError, match="Read-only"):
        log.flush(force=True)
    monkeypatch.undo()
    report = log.flush(force=True)  # the next flush writes every row, with its feedback
    assert (report.n_written, report.n_with_feedback, report.n_default_loss) == (4, 2, 2)
    assert report.n_unknown_feedback == 1
    assert sorted(read_frame(tmp_path / "logs")["event_id"]) == ["a0", "a1", "a2", "a3"]


# -- reliability round 2 (issue 24, items 1-5) ---------------------------------------------------
def _discrete_log(path, **kwargs):
    return DecisionLog(path, "discrete", FEATURES, (0.0, 1.0), n_actions=4, **kwargs)


def test_a_write_killed_midway_leaves_no_visible_file(tmp_path, make_policy, monkeypatch):
    """Item 1: the half-written bytes never carry a data file's name; readers skip temp files."""
    log = _discrete_log(tmp_path)
    request, decisions = _serve(
        StochasticPolicyModel(make_policy("discrete"), "1"), "discrete", 4, "k", 0
    )
    log.add_decisions(request, decisions, timestamps=[T0] * 4)
    real_write = pq.write_table

    def killed(table, where, **kwargs):  # the first half of the bytes, then the process dies
        buffer = pa.BufferOutputStream()
        real_write(table, buffer, **kwargs)
        data = buffer.getvalue().to_pybytes()
        if hasattr(where, "write"):
            where.write(data[: len(data) // 2])
        else:
            Path(where).write_bytes(data[: len(data) // 2])
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", killed)
    with pytest.raises(KeyboardInterrupt):
        log.flush(force=True)
    monkeypatch.undo()
    visible = [p for p in tmp_path.rglob("*.parquet")]
    assert visible == []
    # a temporary file left by a SIGKILL (no clean-up ran) is not data, and not reported as such
    folder = tmp_path / "date=2026-03-01"
    folder.mkdir(exist_ok=True)
    (folder / ".part-x.parquet.1234abcd.tmp").write_bytes(b"PAR1 truncated")
    report = log.flush(force=True)  # the rows were still pending: written now, complete
    assert report.n_written == 4
    assert sorted(read_frame(tmp_path)["event_id"]) == ["k0", "k1", "k2", "k3"]


def test_a_flush_failing_on_its_second_date_writes_each_decision_once(
    tmp_path, make_policy, monkeypatch
):
    """Item 2: 100 decisions over two dates, the second write fails, the retry: 100 rows."""
    log = _discrete_log(tmp_path)
    request, decisions = _serve(
        StochasticPolicyModel(make_policy("discrete"), "1"), "discrete", 100, "t", 1
    )
    times = [T0 + pd.Timedelta(minutes=i // 5) for i in range(100)]  # 50 rows each side of midnight
    log.add_decisions(request, decisions, timestamps=times)
    log.add_feedback(decisions["event_id"], np.linspace(0, 1, 100))
    real_write, calls = pq.write_table, []

    def second_fails(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_write(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", second_fails)
    with pytest.raises(OSError, match="No space"):
        log.flush(now=T0)
    monkeypatch.undo()
    retry = log.flush(now=T0)
    assert retry.n_written == 50 and retry.n_pending == 0
    frame = read_frame(tmp_path)
    assert len(frame) == 100 and frame["event_id"].is_unique
    # a process that replays the same decisions after a crash writes nothing twice either
    again = _discrete_log(tmp_path)
    again.add_decisions(request, decisions, timestamps=times)
    again.add_feedback(decisions["event_id"], np.linspace(0, 1, 100))
    replay = again.flush(now=T0)
    assert (replay.n_written, replay.n_already_logged, replay.files) == (0, 100, ())
    assert len(read_frame(tmp_path)) == 100


def test_a_nan_feature_is_refused_when_added_and_the_buffer_keeps_flushing(tmp_path, make_policy):
    """Item 3."""
    model = StochasticPolicyModel(make_policy("discrete"), "1")
    log = _discrete_log(tmp_path)
    good, good_decisions = _serve(model, "discrete", 3, "g", 0)
    log.add_decisions(good, good_decisions, timestamps=[T0] * 3)
    bad, bad_decisions = _serve(model, "discrete", 3, "b", 1)
    bad.loc[1, "f_b"] = np.nan
    with pytest.raises(ValueError, match=r"features \['f_b'\]: 1 of 3 request rows .*\['b1'\]"):
        log.add_decisions(bad, bad_decisions, timestamps=[T0] * 3)
    bad_decisions.loc[2, "action"] = 9  # not one of the 4 actions: refused now, not at flush
    bad.loc[1, "f_b"] = 0.0
    with pytest.raises(ValueError, match=r"decisions refused, nothing added: .*action"):
        log.add_decisions(bad, bad_decisions, timestamps=[T0] * 3)
    report = log.flush(force=True)
    assert report.n_written == 3
    assert sorted(read_frame(tmp_path)["event_id"]) == ["g0", "g1", "g2"]


def test_timestamps_naive_is_utc_offsets_converted_unreadable_and_far_future_refused(
    tmp_path, make_policy
):
    """Item 4."""
    model = StochasticPolicyModel(make_policy("discrete"), "1")
    log = _discrete_log(tmp_path)
    request, decisions = _serve(model, "discrete", 3, "z", 0)
    mixed = ["2026-03-01T23:30:00+02:00", "2026-03-01T21:40:00", "2026-03-01T21:50:00Z"]
    log.add_decisions(request, decisions, timestamps=mixed)
    log.flush(force=True)
    back = read_frame(tmp_path)
    assert back["timestamp"].astype(str).tolist() == [
        "2026-03-01 21:30:00",
        "2026-03-01 21:40:00",
        "2026-03-01 21:50:00",
    ]
    request, decisions = _serve(model, "discrete", 2, "u", 1)
    with pytest.raises(
        ValueError, match=r"timestamp: 1 of 2 decisions have no readable time.*'u1'"
    ):
        log.add_decisions(request, decisions, timestamps=["2026-03-01T10:00:00", "yesterday"])
    with pytest.raises(
        ValueError, match=r"timestamp: 1 of 2 decisions are dated more than 1 day.*'u0'"
    ):
        log.add_decisions(request, decisions, timestamps=["2099-01-01T00:00:00", T0])
    assert log.flush(force=True).n_written == 0
    assert not any(p.name.startswith("date=2099") for p in tmp_path.iterdir())


def test_the_served_minimum_propensity_is_recorded_in_the_metadata(tmp_path, make_policy):
    """For the gate (issue 20): ``min_propensity`` = ε (discrete), ε^q (multilabel)."""
    assert served_min_propensity("discrete", 0.05, 4) == 0.05
    assert served_min_propensity("multilabel", 0.1, 3) == pytest.approx(1e-3)
    assert served_min_propensity("candidates", 0.0) is None
    policy = make_policy("discrete", floor=0.05)
    floor = served_min_propensity("discrete", policy.exploration_floor, 4)
    log = _discrete_log(tmp_path, min_propensity=floor)
    request, decisions = _serve(StochasticPolicyModel(policy, "1"), "discrete", 5, "m", 0)
    log.add_decisions(request, decisions, timestamps=[T0] * 5)
    (file,) = log.flush(force=True).files
    meta = json.loads(pq.read_schema(file).metadata[b"poem"])
    assert meta["min_propensity"] == 0.05
    decisions["propensity"] = 0.01
    decisions["event_id"] = [f"n{i}" for i in range(5)]
    request["event_id"] = decisions["event_id"]
    with pytest.raises(
        ValueError, match=r"5 of 5 decisions below the served policy's min_propensity"
    ):
        log.add_decisions(request, decisions, timestamps=[T0] * 5)
    # a later file served by another policy (another floor): the log guarantees the smaller one
    other = _discrete_log(tmp_path, min_propensity=0.02)
    request, decisions = _serve(StochasticPolicyModel(policy, "2"), "discrete", 2, "o", 1)
    other.add_decisions(request, decisions, timestamps=[T0] * 2)
    other.flush(force=True)
    assert read_frame(tmp_path).attrs["poem"]["min_propensity"] == 0.02
    with pytest.raises(ValueError, match=r"min_propensity must be in \(0, 1\]"):
        _discrete_log(tmp_path, min_propensity=0.0)


@pytest.mark.parametrize("family", ["discrete", "multilabel"])
def test_a_request_repeating_an_event_id_is_refused_naming_it(make_policy, family):
    """Item 5: a 400 (INVALID_PARAMETER_VALUE) naming the id, not a 200 the log refuses later."""
    model = StochasticPolicyModel(make_policy(family), "1")
    request = pd.DataFrame(np.zeros((4, 3)), columns=FEATURES)
    request.insert(0, "event_id", ["e1", "e2", "e1", "e3"])
    with pytest.raises(
        MlflowException, match=r"repeats 1 id\(s\) within the request: \['e1'\]"
    ) as err:
        model.predict(None, request, {"seed": 0})
    assert err.value.error_code == "INVALID_PARAMETER_VALUE"


def test_a_flush_removes_temporary_files_a_killed_write_left_an_hour_ago(tmp_path, make_policy):
    """Repair: stale ``.….parquet.<8 hex>.tmp`` files go; a live writer's (recent) one stays."""
    log = _discrete_log(tmp_path)
    folder = tmp_path / "date=2026-03-01"
    folder.mkdir()
    stale = folder / ".part-1.parquet.0123abcd.tmp"
    fresh = folder / ".part-2.parquet.4567cdef.tmp"
    other = folder / ".notes.tmp"
    for f in (stale, fresh, other):
        f.write_bytes(b"PAR1")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    request, decisions = _serve(
        StochasticPolicyModel(make_policy("discrete"), "1"), "discrete", 2, "s", 0
    )
    log.add_decisions(request, decisions, timestamps=[T0] * 2)
    log.flush(force=True)
    assert not stale.exists() and fresh.exists() and other.exists()


def _one_row_batches(model, n, prefix):
    """``n`` one-row requests (one per served request) and their decisions."""
    return [_serve(model, "discrete", 1, f"{prefix}{i}-", i) for i in range(n)]


def test_one_row_batches_are_checked_against_pending_and_written_exactly_once(
    tmp_path, make_policy
):
    """Issue 37 item 4: ids are checked against every pending batch and every closed one."""
    policy = make_policy("discrete", floor=0.05)
    model = StochasticPolicyModel(policy, "3")
    log = DecisionLog(tmp_path / "logs", "discrete", FEATURES, (0.0, 1.0), n_actions=4)
    batches = _one_row_batches(model, 300, "r")
    for i, (request, decisions) in enumerate(batches):
        log.add_decisions(request, decisions, timestamps=[T0 + pd.Timedelta(seconds=i)])
    # a replay of a pending batch (the first, the middle, the last) is refused, nothing added
    for k in (0, 150, 299):
        with pytest.raises(ValueError, match=r"1 event id\(s\) already recorded, e.g. \['r"):
            log.add_decisions(*batches[k])
    # feedback for pending decisions is accepted once; for unknown ids counted
    first = [b[1]["event_id"].iloc[0] for b in batches[:200]]
    assert log.add_feedback(first, np.full(200, 0.5)) == 200
    assert log.add_feedback(first[:3] + ["nobody"], np.full(4, 0.5)) == 0
    report = log.flush(now=T0)  # the 200 with feedback
    assert (report.n_written, report.n_pending, report.n_duplicate_feedback) == (200, 100, 3)
    assert report.n_unknown_feedback == 1
    with pytest.raises(ValueError, match="already recorded"):  # written: closed for good
        log.add_decisions(*batches[10])
    with pytest.raises(ValueError, match="already recorded"):  # still pending after the flush
        log.add_decisions(*batches[250])
    log.add_decisions(*_serve(model, "discrete", 1, "late-", 7), timestamps=[T0])
    assert log.flush(now=T0, force=True).n_written == 101
    ids = read_log(tmp_path / "logs").event_ids.tolist()
    expected = [b[1]["event_id"].iloc[0] for b in batches] + ["late-0"]
    assert len(ids) == len(set(ids)) == 301 and set(ids) == set(expected)


def test_the_id_check_does_not_visit_the_pending_batches(tmp_path, make_policy, monkeypatch):
    """The work of one call is the same with 10 or 400 pending batches (a set of pending ids).

    Counted, not timed: the old check ran ``Series.isin`` once per pending batch (938 ms a call
    at 500 pending one-row batches).
    """
    model = StochasticPolicyModel(make_policy("discrete", floor=0.05), "3")
    log = DecisionLog(tmp_path / "logs", "discrete", FEATURES, (0.0, 1.0), n_actions=4)
    batches = _one_row_batches(model, 402, "p")
    calls = []
    real_isin = pd.Series.isin

    def counting_isin(self, values):
        calls.append(1)
        return real_isin(self, values)

    monkeypatch.setattr(pd.Series, "isin", counting_isin)
    counts = []
    for i, batch in enumerate(batches):
        calls.clear()
        log.add_decisions(*batch, timestamps=[T0])
        if i in (10, 401):
            counts.append(len(calls))
    assert counts[0] == counts[1] <= 1, counts


def test_the_decision_log_is_owner_only_whatever_the_umask(tmp_path, make_policy):
    """Issue 37 item 8: the log holds request features; it followed the umask (0644 files)."""
    import stat

    model = StochasticPolicyModel(make_policy("discrete", floor=0.05), "3")
    existing = tmp_path / "served"
    existing.mkdir()
    existing.chmod(0o755)
    root = existing / "app" / "logs"
    old = os.umask(0o022)
    try:
        log = DecisionLog(root, "discrete", FEATURES, (0.0, 1.0), n_actions=4)
        log.add_decisions(*_serve(model, "discrete", 3, "m", 0), timestamps=[T0] * 3)
        (written,) = log.flush(now=T0, force=True).files
    finally:
        os.umask(old)

    def mode(path):
        return stat.S_IMODE(os.stat(path).st_mode)

    assert mode(written) == 0o600
    assert mode(Path(written).parent) == mode(root) == mode(root.parent) == 0o700
    assert mode(existing) == 0o755  # folders that existed keep their mode
