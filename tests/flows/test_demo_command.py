import json

import pytest

import poem.demo
from flows.cli import build_parser, main
from poem.demo import DemoPolicy, DemoResult
from poem.estimators import Estimate


def _estimate(name, value):
    return Estimate(name, value, 0.01, value - 0.02, value + 0.02, 599, 0.95, 500.0, 0.0, "t")


FAKE = DemoResult(
    n_train_log=4792,
    n_test_log=599,
    n_actions=10,
    logging_fraction=0.05,
    n_replays=4,
    solver="lbfgs",
    variance_scale=0.1,
    clip=18.8,
    variance_penalty=8.07,
    n_iter=79,
    converged=True,
    fit_seconds=1.5,
    confidence_level=0.95,
    policies=(
        DemoPolicy("h0", 0.445, 0.102, (_estimate("ips", 0.444), _estimate("snips", 0.443))),
        DemoPolicy("POEM", 0.051, 0.052, (_estimate("ips", 0.063), _estimate("snips", 0.062))),
    ),
)


@pytest.fixture
def calls(monkeypatch):
    seen = []

    def fake_demo(**kwargs):
        seen.append(kwargs)
        return FAKE

    monkeypatch.setattr(poem.demo, "run_digits_demo", fake_demo)
    return seen


def test_demo_passes_arguments_and_prints_the_table(calls, capsys, tmp_path):
    out_json = tmp_path / "demo.json"
    code = main(
        [
            "library-demo",
            "--seed",
            "3",
            "--replays",
            "2",
            "--solver",
            "adagrad",
            "--variance-scale",
            "0.01",
            "--json",
            str(out_json),
        ]
    )
    assert code == 0
    assert calls == [
        {
            "fraction": 0.05,
            "n_replays": 2,
            "temperature": 1.0,
            "solver": "adagrad",
            "variance_scale": 0.01,
            "confidence_level": 0.95,
            "random_state": 3,
        }
    ]
    out = capsys.readouterr().out
    assert "| policy | expected loss | MAP loss | IPS [95% CI] | SNIPS [95% CI] |" in out
    assert "| h0 | 0.445 | 0.102 | 0.444 [0.424, 0.464] | 0.443 [0.423, 0.463] |" in out
    assert "| POEM | 0.051 | 0.052 | 0.063 [0.043, 0.083] | 0.062 [0.042, 0.082] |" in out
    assert "79 iterations, converged" in out
    assert json.loads(out_json.read_text())["policies"][0]["expected_loss"] == 0.445


def test_every_demo_argument_has_help():
    parser = build_parser()
    demo = parser._subparsers._group_actions[0].choices["library-demo"]
    for action in demo._actions:
        assert action.help, f"{action.dest} has no help text"
