"""The preparations one search shares across threads (a scheduled run's failure, 2026-12-03)."""

from __future__ import annotations

import pickle
import threading
import time
from collections.abc import Mapping

from poem.learners.training_rows import Preparations


def test_each_preparation_is_made_once_while_threads_ask_for_it():
    calls = []

    def make():
        calls.append(1)
        time.sleep(0.05)  # long enough for every other thread to arrive meanwhile
        return "prepared"

    box, got = Preparations(), []
    threads = [
        threading.Thread(target=lambda: got.append(box.get((True, True), make))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == ["prepared"] * 8 and len(calls) == 1
    assert (True, True) in box and (True, False) not in box and len(box) == 1


def test_it_is_opaque_to_an_orchestrator_and_pickles_without_its_lock():
    """Not a Mapping (Prefect walks dicts, dataclasses and mappings in task parameters)."""
    box = Preparations({(True, False): [1, 2]})
    assert not isinstance(box, Mapping | dict | list | tuple)
    again = pickle.loads(pickle.dumps(box))  # a Dask worker's copy, with a lock of its own
    assert again.get((True, False), lambda: None) == [1, 2] and len(again) == 1
    assert again.get((False, False), lambda: "made") == "made" and len(again) == 2
