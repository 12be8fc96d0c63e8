"""The closed loop on digits (serve → log → check → retrain → gate), scheduled retraining, and the CLI."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from flows.cli import main as cli_main
from flows.deployments import newest_partitions, scheduled_retrain, stage_partitions

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SMALL_GRID = {"search": {"grid": {"variance_scale": [0.0, 0.01], "clip": ["p90/p10"]}}}
NOISE = 0.02  # a rejected or promoted challenger may not raise the champion's true loss by more than this


@pytest.fixture(scope="module")
def loop(prefect_harness, tmp_path_factory):
    from flows.closed_loop import run_closed_loop

    workdir = tmp_path_factory.mktemp("closed-loop")
    return run_closed_loop(
        REPO / "mlflow.yml",
        workdir,
        dataset="digits",
        rounds=3,
        n_replays=1,
        seed=0,
        config_overrides=SMALL_GRID,
    )


def test_the_champion_improves_over_round_0_and_never_gets_worse(loop):
    losses = loop.champion_losses()
    assert len(loop.rounds) == 4 and loop.rounds[0].decision == "registered as champion"
    assert 0.35 < losses[0] == loop.logging_true_loss < 0.55  # h0 on 5% of the labels
    assert loop.skyline_true_loss < 0.2
    for before, after in zip(losses, losses[1:], strict=False):
        assert after <= before + NOISE, losses
    assert losses[-1] < losses[0] - 0.1, losses
    for r in loop.rounds[1:]:
        assert r.n_logged == 1198 and r.n_default_loss == 0
        assert r.served_version == loop.rounds[r.round - 1].champion_version
        assert r.decision in ("promoted", "rejected")
        assert r.difference_lower <= r.difference <= r.difference_upper
        # the gate promotes exactly when the interval's upper end is below 0 (min_improvement 0)
        assert (r.decision == "promoted") == (r.champion_version == r.challenger_version)
    assert "| round | served" in loop.to_markdown()


def test_each_round_log_passes_check_and_is_what_retrain_trained_on(loop):
    from mlflow import MlflowClient

    from data_checks.check import check_logs
    from flows.tracking import data_fingerprint
    from poem.io.logs import read_log

    root = Path(loop.workdir) / "logs"
    partitions = sorted(p.name for p in root.iterdir())
    assert partitions == ["date=2026-01-02", "date=2026-01-03", "date=2026-01-04"]
    outcome = check_logs(root / partitions[0])
    assert outcome.exit_code == 0, outcome.to_text()
    log = read_log(root)  # the whole decision log reads as one canonical log
    assert log.n_rows == 3 * 1198 and log.family == "discrete"
    assert log.logging_model_version == ";".join(
        sorted({r.served_version for r in loop.rounds[1:]})
    )
    uri = f"sqlite:///{Path(loop.workdir) / 'mlflow.db'}"
    client = MlflowClient(uri, uri)
    for r, part in zip(loop.rounds[1:], partitions, strict=True):
        tags = client.get_model_version(loop.registered_model, r.challenger_version).tags
        assert tags["data_fingerprint"] == data_fingerprint(root / part)
        assert tags["gate_decision"] == r.decision
    champion = client.get_model_version_by_alias(loop.registered_model, "champion")
    assert str(champion.version) == loop.rounds[-1].champion_version


def test_scheduled_retrain_skips_partitions_already_trained_on(loop):
    result = scheduled_retrain(
        str(Path(loop.workdir) / "simulate.yml"),
        str(Path(loop.workdir) / "logs"),
        newest=1,
        include_today=True,
    )
    assert result == {
        "status": "skipped",
        "reason": f"already trained as version {loop.rounds[-1].challenger_version}",
        "partitions": ["date=2026-01-04"],
    }


def test_newest_partitions_skip_today_and_stage_several(tmp_path):
    for day in ("2026-05-01", "2026-05-03", "2026-05-04", "2026-05-02"):
        (tmp_path / f"date={day}").mkdir()
        (tmp_path / f"date={day}" / "part-1.parquet").write_bytes(day.encode())
    (tmp_path / "date=2026-04-30").mkdir()  # empty: ignored
    (tmp_path / "notes").mkdir()
    today = dt.date(2026, 5, 4)
    assert [p.name for p in newest_partitions(tmp_path, 2, today=today)] == [
        "date=2026-05-02",
        "date=2026-05-03",
    ]
    assert [p.name for p in newest_partitions(tmp_path, 1, today=today, include_today=True)] == [
        "date=2026-05-04"
    ]
    assert newest_partitions(tmp_path / "absent", 1) == []
    with pytest.raises(ValueError, match="newest must be >= 1"):
        newest_partitions(tmp_path, 0)
    parts = newest_partitions(tmp_path, 3, today=today)
    staged = stage_partitions(parts, tmp_path / "staged")
    assert sorted(p.relative_to(staged).as_posix() for p in staged.rglob("*.parquet")) == [
        "date=2026-05-01/part-1.parquet",
        "date=2026-05-02/part-1.parquet",
        "date=2026-05-03/part-1.parquet",
    ]
    assert stage_partitions(parts[:1], tmp_path / "unused") == parts[0]


def test_simulate_command_rejects_bad_arguments(tmp_path, capsys):
    assert cli_main(["simulate", "--dataset", "yeast"]) == 2
    assert "--dataset yeast needs --data-dir" in capsys.readouterr().err
    (tmp_path / "keep.txt").write_text("x")
    assert cli_main(["simulate", "--output", str(tmp_path)]) == 2
    assert "is not empty; pass --overwrite" in capsys.readouterr().err
    assert cli_main(["simulate", "--output", str(tmp_path), "--overwrite"]) == 2
    assert "not deleting it" in capsys.readouterr().err and (tmp_path / "keep.txt").exists()
    assert cli_main(["simulate", "--set", "gate.min_ess"]) == 2
    assert "--set expects SECTION.KEY=VALUE" in capsys.readouterr().err
