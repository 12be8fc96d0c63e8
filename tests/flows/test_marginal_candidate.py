"""The multilabel default candidate poem_marginal: fitted only on rows the champion logged (issue 35)."""

from __future__ import annotations

import numpy as np
import pytest

from flows.config import load_config
from flows.learners import resolve_warm_start
from flows.tasks.search import candidate_grid, selection_logger
from poem.estimators.marginal import logged_by
from poem.io.parquet import write_log
from poem.simulate import fit_logging_policy, supervised_to_bandit

N, D, Q = 3000, 5, 3


def _data(seed: int):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D))
    noise = rng.normal(scale=1.5, size=(N, Q))  # labels a context does not decide
    truth = (X @ np.random.default_rng(99).normal(size=(D, Q)) + noise > 0).astype(int)
    return X, truth


def _log(policy, seed: int, day: str):
    X, truth = _data(seed)
    return supervised_to_bandit(X, truth, policy, n_replays=1, random_state=seed, start_time=day)


class _Rows:  # the in-memory candidate rows (flows.tasks.search.candidate_rows) of a log
    def __init__(self, log):
        self._log = log

    def log(self):
        return self._log


def _config(tmp_path, write_config, path):
    return write_config(
        path,
        data={"family": "multilabel"},
        training={  # a served champion that explores enough for the next day's checks
            "params": {
                "policy": "multilabel",
                "solver": "lbfgs",
                "max_iter": 30,
                "exploration_floor": 0.05,
            }
        },
        search={"candidates": "auto", "grid": {"variance_scale": [0.01]}, "temperatures": [1.0]},
        gate={"min_ess": 20, "confidence_level": 0.6},  # the search is tested, not the gate
    )


def test_logged_by_is_true_only_for_the_policy_that_logged_every_row():
    X, truth = _data(0)
    h0 = fit_logging_policy(X, truth, family="multilabel", fraction=0.05, random_state=0)
    log = _log(h0, 0, "2026-01-01")
    assert logged_by(h0, log)
    assert not logged_by(h0.with_serving(temperature=0.5), log)
    assert not logged_by(h0.with_serving(exploration_floor=0.01), log)
    mixed = log.take(np.arange(N))  # the same rows, one propensity off by 1e-3
    p = np.asarray(mixed.propensities).copy()
    p[7] *= 1.001
    from dataclasses import replace

    assert not logged_by(h0, replace(mixed, propensities=p))
    assert not logged_by(None, log)


def test_candidate_grid_keeps_poem_marginal_only_when_the_champion_logged_the_rows(
    tmp_path, write_config
):
    X, truth = _data(0)
    h0 = fit_logging_policy(X, truth, family="multilabel", fraction=0.05, random_state=0)
    log = _log(h0, 0, "2026-01-01")
    path = write_log(log, tmp_path / "day1")
    cfg = load_config(_config(tmp_path, write_config, path))
    assert list(cfg.search.candidates) == ["poem_marginal"]
    kept = candidate_grid(cfg, h0, log, _Rows(log))
    assert [(name, point) for name, _, point in kept] == [
        ("poem_marginal", {"learner": "poem_marginal", "variance_scale": v})
        for v in (0.0001, 0.001, 0.01)
    ]
    fixed = kept[0][1]
    assert resolve_warm_start(fixed, h0, log)["logging_policy"] is h0
    assert candidate_grid(cfg, None, log, _Rows(log)) == []  # no champion yet
    other = h0.with_serving(temperature=0.5)  # a champion that did not log these rows
    assert candidate_grid(cfg, other, log, _Rows(log)) == []
    # the selection's weights: per label only for the champion's own rows, and not when off
    assert selection_logger(cfg.search, h0, (log, log)) is h0
    assert selection_logger(cfg.search, other, (log, log)) is None
    assert selection_logger(cfg.search, h0, None) is None
    off = load_config(_config(tmp_path, write_config, path), {"search.per_label_weights": False})
    assert selection_logger(off.search, h0, (log, log)) is None


@pytest.mark.slow
def test_a_retrain_fits_poem_marginal_on_the_log_its_champion_served(
    tmp_path, write_config, monkeypatch
):
    """Day 1 (no champion): not searched. Day 2, logged by the day-1 champion: 3 nested runs."""
    from mlflow import MlflowClient

    from flows.registry import load_version_policy, promote
    from flows.retrain import retrain
    from flows.tracking import client_for

    X, truth = _data(0)
    h0 = fit_logging_policy(X, truth, family="multilabel", fraction=0.05, random_state=0)
    day1 = write_log(_log(h0, 0, "2026-01-01"), tmp_path / "day1")
    config = _config(tmp_path, write_config, day1)
    first = retrain(config)
    tracking = load_config(config).tracking
    client = MlflowClient(tracking.uri)
    if first.decision != "promoted":  # the gate is not under test: the operator's --force
        promote(client_for(tracking), tracking, first.challenger_version, force=True)

    def learners(result):
        parent = client.get_run(result.mlflow_run_id)
        children = client.search_runs(
            [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{result.mlflow_run_id}'"
        )
        return sorted(c.data.params["learner"] for c in children)

    assert learners(first) == ["poem"]
    tags = client.get_run(first.mlflow_run_id).data.tags
    assert tags["selection_weights"] == "joint"  # no champion: the logger is not known
    champion = load_version_policy(client_for(tracking), tracking, first.challenger_version)
    day2 = write_log(_log(champion, 1, "2026-01-02"), tmp_path / "day2")
    second = retrain(config, overrides={"data.path": str(day2)})
    searched = learners(second)  # beside the champion's re-temperings
    assert searched.count("poem_marginal") == 3 and searched.count("poem") == 1, searched
    tags = client.get_run(second.mlflow_run_id).data.tags
    assert tags["selection_weights"] == "per-label"  # the champion logged every row
    # the day-1 log again: not the champion's rows, so neither the candidate nor the weights
    third = retrain(config, overrides={"data.path": str(day1)})
    assert learners(third).count("poem_marginal") == 0
    assert client.get_run(third.mlflow_run_id).data.tags["selection_weights"] == "joint"
    assert second.decision in ("promoted", "rejected")
