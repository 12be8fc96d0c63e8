"""``poem-pipeline make-logs`` and ``poem-pipeline check`` through the CLI entry point."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from flows.cli import build_parser, main

COMMANDS = Path(__file__).resolve().parents[2] / "flows" / "commands"


@pytest.fixture(scope="module")
def digits_logs(tmp_path_factory):
    out = tmp_path_factory.mktemp("logs") / "digits"
    assert (
        main(
            [
                "make-logs",
                "--dataset",
                "digits",
                "--out",
                str(out),
                "--n-events",
                "600",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    return out


def test_make_logs_writes_date_partitions(digits_logs, capsys):
    files = sorted(p.relative_to(digits_logs).as_posix() for p in digits_logs.rglob("*.parquet"))
    assert files == ["date=2026-01-01/part-00000.parquet"]
    from poem.io.logs import read_log

    log = read_log(digits_logs)
    assert log.n_rows == 600 and log.family == "discrete" and log.n_actions == 10
    assert log.logging_distribution.shape == (600, 10) and log.event_ids[0] == "e0"


def test_check_passes_and_writes_outputs(digits_logs, tmp_path, capsys):
    assert main(["check", str(digits_logs), "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "600 rows, suite poem_discrete_log" in text and "-> PASSED" in text
    assert "rows: 600 kept + 0 quarantined = 600 input" in text
    assert "uniform_weight" in text and "suggested clip M" in text
    report = json.loads((tmp_path / "check_report.json").read_text())
    assert report["passed"] and report["data_checks"]["n_rows"] == 600
    assert {"propensity_histogram", "weight_distribution", "action_counts", "data_docs"} <= set(
        report["files"]
    )
    assert (tmp_path / "data_docs" / "index.html").exists()


def test_check_exits_non_zero_on_hard_failure(digits_logs, tmp_path, capsys):
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(next(digits_logs.rglob("*.parquet")).read_bytes()[:200])
    assert main(["check", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] is False
    assert report["data_checks"]["failures"][0]["column"] == str(bad)


def test_make_logs_yeast(shared_data_dir, tmp_path):
    out = tmp_path / "yeast.parquet"
    args = [
        "make-logs",
        "--dataset",
        "yeast",
        "--out",
        str(out),
        "--n-events",
        "300",
        "--no-partition",
        "--data-dir",
        str(shared_data_dir),
        "--logger-temperature",
        "0.5",
    ]
    assert main(args) == 0
    from poem.io.logs import read_log

    log = read_log(out)
    assert (
        log.n_rows == 300
        and log.family == "multilabel"
        and log.n_actions == 14
        and log.loss_bounds == (0.0, 14.0)
    )
    assert main(["check", str(out)]) == 0  # the multilabel suite (y_0..y_13) passes


def test_every_argument_has_help_and_commands_do_not_import_numpy():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for name in ("make-logs", "check"):
        assert all(a.help for a in sub.choices[name]._actions)
    for module in ("make_logs.py", "check.py"):
        tree = ast.parse((COMMANDS / module).read_text())
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        imported |= {
            node.module.split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }
        assert "numpy" not in imported and "pandas" not in imported


@pytest.mark.shared_data
def test_make_logs_converts_the_open_bandit_dataset(shared_data_dir, tmp_path, capsys):
    if not (shared_data_dir / "obd").is_dir():
        pytest.skip("obd/ absent from the shared data folder")
    out = tmp_path / "obd"
    args = ["make-logs", "--dataset", "obd", "--data-dir", str(shared_data_dir), "--out", str(out)]
    assert main([*args, "--position", "1", "--n-events", "500"]) == 0
    assert "wrote 500 discrete events of the Open Bandit Dataset (random/all, 80 actions)" in (
        capsys.readouterr().out
    )
    from poem.io.logs import read_log

    log = read_log(out)
    assert log.n_rows == 500 and log.loss_bounds == (-1.0, 0.0) and log.n_actions == 80
    assert main(["make-logs", "--dataset", "obd", "--out", str(tmp_path / "x")]) == 2
    assert "--dataset obd needs --data-dir" in capsys.readouterr().out


def _with_metadata(source: Path, path: Path, text: str) -> Path:
    """``source``'s rows with ``text`` stored as the Parquet key ``poem``."""
    import pyarrow.parquet as pq

    table = pq.read_table(source)
    pq.write_table(table.replace_schema_metadata({"poem": text}), path)
    return path


@pytest.mark.parametrize("partitions", ["never", "always"])
def test_metadata_errors_name_the_key_not_every_row(digits_logs, tmp_path, capsys, partitions):
    """Issue 24.20: n_actions 10¹² is one error naming n_actions (it quarantined all 600
    rows); metadata that is not JSON says so (it said "cannot be read as Parquet")."""
    import pyarrow.parquet as pq

    source = next(digits_logs.rglob("*.parquet"))
    meta = json.loads(pq.read_schema(source).metadata[b"poem"])
    huge = _with_metadata(
        source, tmp_path / "huge.parquet", json.dumps(meta | {"n_actions": 10**12})
    )
    broken = _with_metadata(source, tmp_path / "broken.parquet", json.dumps(meta)[:-5])
    args = ["--partitions", partitions, "--scheduler", "sync"]
    assert main(["check", str(huge), *args]) == 1
    text = capsys.readouterr().out
    # 10¹² actions × 64 features exceeds what training can hold: one error, naming n_actions
    assert "HARD FAILURE n_features: n_features = 64 × n_actions = 1,000,000,000,000" in text, text
    assert "quarantined 600" not in text
    wrong = _with_metadata(
        source, tmp_path / "wrong.parquet", json.dumps(meta | {"n_actions": 1000})
    )
    assert main(["check", str(wrong), *args]) == 1
    text = capsys.readouterr().out
    assert (
        "n_actions: declares 1,000 actions but every row's logging_distribution "
        "holds 10 probabilities (one per action); declare n_actions: 10" in text
    ), text
    assert "quarantined 600" not in text
    assert main(["check", str(broken), *args]) == 1
    text = capsys.readouterr().out
    assert "its 'poem' metadata is not valid JSON (" in text and "as Parquet" not in text, text


def test_check_and_retrain_share_exit_codes_and_the_quarantine_default(
    digits_logs, tmp_path, capsys, monkeypatch
):
    """Issue 23.3: a missing file was 1 from check and 2 from retrain; check allowed 5 %
    quarantined rows where retrain (mlflow.yml) allowed 1 %: 3 % passed one and failed the other."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["check", "no/such/log.parquet"]) == 2
    assert capsys.readouterr().err == "error: no/such/log.parquet does not exist\n"
    assert main(["retrain", "--logs", "no/such/log.parquet"]) == 2
    assert capsys.readouterr().err == "error: --logs: no/such/log.parquet does not exist\n"

    source = next(digits_logs.rglob("*.parquet"))
    table = pq.read_table(source)
    frame = table.to_pandas()
    frame.loc[frame.index[:18], "propensity"] = 1.5  # 3 % of 600 rows
    bad = tmp_path / "three-percent.parquet"
    pq.write_table(
        pa.Table.from_pandas(pd.DataFrame(frame), preserve_index=False).replace_schema_metadata(
            table.schema.metadata
        ),
        bad,
    )
    assert main(["check", str(bad)]) == 1  # the packaged config: checks.max_quarantine_fraction
    assert "more than the allowed 1.00%" in capsys.readouterr().out
    (tmp_path / "mlflow.yml").write_text("checks:\n  max_quarantine_fraction: 0.05\n")
    assert main(["check", str(bad)]) == 0  # ./mlflow.yml, as retrain reads it
    assert "rows: 582 kept + 18 quarantined = 600 input" in capsys.readouterr().out
    assert main(["check", str(bad), "--max-quarantine-fraction", "0.02"]) == 1
