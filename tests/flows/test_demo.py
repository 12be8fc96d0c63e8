"""``poem-pipeline demo``: simulated days, two retrain calls, what it prints (flow faked)."""

from __future__ import annotations

import pytest

import flows.commands.demo as demo
import flows.retrain
from flows.cli import main
from flows.retrain import RetrainResult
from poem.io.logs import read_log


def test_demo_runs_retrain_twice_and_prints_where_to_look(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(demo, "quiet", lambda: None)
    config = tmp_path / "mlflow.yml"
    config.write_text(f"tracking:\n  uri: sqlite:///{tmp_path / 'store.db'}\n")
    calls = []

    def fake_retrain(config_path, logs=None, overrides=None):
        calls.append((logs, overrides))
        first = len(calls) == 1
        return RetrainResult(
            decision="promoted" if first else "rejected",
            challenger_version=str(len(calls)),
            champion_version="1",
            previous_champion_version=None if first else "1",
            reasons=("passed: x",),
            estimator="ips",
            experiment_id="7",
            metrics={
                "challenger_risk": 0.2,
                "champion_risk": 0.4,
                "risk_difference_ucb": -0.1,
            },
        )

    monkeypatch.setattr(flows.retrain, "retrain", fake_retrain)
    assert (
        main(["demo", "--config", str(config), "--out", str(tmp_path / "out"), "--replays", "1"])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert [c.name for c, _ in calls] == ["round-1", "round-2"]
    # issue 36: day 1 is a quick first model, day 2 the config's full search, so day 2's
    # challenger is clearly better; no gate seed is pinned (fresh entropy, as in production)
    assert [o for _, o in calls] == [
        {
            "search.grid.solver": ["lbfgs"],
            "search.grid.warm_start": ["zeros"],
            "training.params.max_iter": 5,
            "search.candidates": {},  # day 1 is POEM alone; day 2 adds the IPW candidate
        },
        None,
    ]
    day1, day2 = (read_log(c) for c, _ in calls)
    # day 2 has twice day 1's traffic (--replays 1: each image once on day 1, twice on day 2)
    assert day2.n_rows == 2 * day1.n_rows > 2000 and day1.n_actions == 10
    assert (
        f"[1/2] retrain on {tmp_path / 'out' / 'logs' / 'round-1'} ({day1.n_rows:,} rows; a quick first "
        "search: L-BFGS from zeros, 5 iterations)" in out
    )
    assert (
        f"[2/2] retrain on {tmp_path / 'out' / 'logs' / 'round-2'} ({day2.n_rows:,} rows; the config's "
        "full search)" in out
    )
    assert day1.timestamps.max() < day2.timestamps.min()
    assert (
        "      PROMOTED: challenger v1 IPS risk 0.2000 vs champion (the logging policy) 0.4000"
        in out
    )
    assert "      REJECTED: challenger v2 IPS risk 0.2000 vs champion v1 0.4000" in out
    assert (
        "      difference n/a, interval [n/a, n/a], upper bound -0.1000; champion is now v1" in out
    )
    # issue 23.3: a rejection moves nothing; its headline said "champion is now v1"
    assert (
        out.count(
            "      difference n/a, interval [n/a, n/a], upper bound -0.1000; champion stays v1"
        )
        == 1
    )
    assert f"  mlflow ui --backend-store-uri sqlite:///{tmp_path / 'store.db'}" in out
    # issue 36.7: MLflow 3.17 opens an experiment in its GenAI overview; the runs table with
    # the headline columns is this address (tests/integration/test_story_ui.py renders it)
    assert (
        "  then open http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
        "&viewStateShareKey=poem-headline" in out
    )
    assert out[-1] == "decision=rejected champion=1"


def test_demo_reports_a_bad_config(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(demo, "quiet", lambda: None)
    (tmp_path / "bad.yml").write_text("tracking:\n  urii: x\n")
    assert main(["demo", "--config", str(tmp_path / "bad.yml")]) == 2
    assert "unknown key 'tracking.urii'" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["demo", "retrain", "compare", "rollback"])
def test_every_argument_has_help(command):
    from flows.cli import build_parser

    sub = build_parser()._subparsers._group_actions[0].choices[command]
    for action in sub._actions:
        assert action.help, (command, action.dest)
