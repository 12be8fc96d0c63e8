"""The gate's attempt ledger in the MLflow registry (:mod:`flows.ledger`), real MLflow."""

import json
import threading

import pytest

from flows.config import GateConfig, TrackingConfig
from flows.ledger import LEDGER_MODEL, LEDGER_TAG, read_ledger, record_attempt
from flows.tracking import client_for
from poem.ledger import TestWindow


@pytest.fixture
def tracking(tmp_path):
    return TrackingConfig(
        uri=f"sqlite:///{tmp_path / 'mlflow.db'}", artifact_location=str(tmp_path / "art")
    )


def test_re_runs_on_one_window_cannot_draw_alpha_afresh(tracking):
    client = client_for(tracking)
    gate = GateConfig()
    january = TestWindow("2026-01-01T00:00:00", "2026-01-31T00:00:00")
    assert read_ledger(client, tracking) == []  # nothing recorded yet
    alphas = [
        record_attempt(client, tracking, None, january, gate, f"r{k}").alpha for k in range(3)
    ]
    assert alphas == pytest.approx([0.04, 0.008, 0.0016])
    stored = json.loads(client.get_registered_model(LEDGER_MODEL).tags[f"{LEDGER_TAG}.0000"])
    assert [e["attempt"] for e in stored] == [1, 2, 3] and stored[2]["run_id"] == "r2"
    assert len({e["order_seed"] for e in stored}) == 3  # fresh entropy per attempt, recorded
    # a fresh client (another process, another seed or grid) reads the same ledger
    again = record_attempt(client_for(tracking), tracking, None, january, gate, "r3")
    assert again.number == 4 and again.family_alpha == pytest.approx(0.05)
    # a disjoint window starts over
    february = TestWindow("2026-02-01T00:00:00", "2026-02-28T00:00:00")
    assert record_attempt(client, tracking, None, february, gate, "r4").number == 1


def test_the_ledger_is_keyed_by_the_window_not_by_model_name_or_champion(tracking):
    # issue 34, measured item 3: a new champion version string or --set
    # tracking.registered_model=<new> started a fresh ledger on the same rows, and α was read
    # from the config at each attempt
    client = client_for(tracking)
    window = TestWindow(rows="same-rows", sketch=("0001",))
    gate = GateConfig()
    assert record_attempt(client, tracking, None, window, gate, "r1").number == 1
    assert record_attempt(client, tracking, "7", window, gate, "r2").number == 2  # new champion
    renamed = tracking.model_copy(update={"registered_model": "another-name"})
    assert record_attempt(client, renamed, "7", window, gate, "r3").number == 3
    with pytest.raises(ValueError, match="pinned alpha = 0.05 and retry_fraction = 0.2"):
        record_attempt(client, tracking, None, window, GateConfig(confidence_level=0.5), "r4")
    assert len(read_ledger(client)) == 3  # the refused attempt was not recorded
    pinned = record_attempt(client, tracking, None, window, GateConfig(seed=11), "r5")
    assert pinned.order_seed == 11 and pinned.seed_given and read_ledger(client)[-1].seed_given


def test_concurrent_attempts_on_one_window_each_get_their_own_number(tracking):
    # two retrains recording at once: without the lock both read k − 1 entries and one
    # write is lost (two "attempt k", each spending α_k)
    client_for(tracking).create_registered_model(LEDGER_MODEL)
    window = TestWindow(rows="same-rows")
    start = threading.Barrier(2)
    numbers = []

    def record(worker):
        client = client_for(tracking)
        start.wait()
        for k in range(4):
            attempt = record_attempt(client, tracking, None, window, GateConfig(), f"{worker}{k}")
            numbers.append(attempt.number)

    threads = [threading.Thread(target=record, args=(w,)) for w in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(numbers) == list(range(1, 9))
    assert len(read_ledger(client_for(tracking))) == 8
