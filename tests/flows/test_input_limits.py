"""Issue 37 item 8 (inputs): hostile config text, special files and the modes of the store.

Each case is one line naming the problem, never a traceback: a 200,000-level nested YAML or a
60 KB ``--set`` value (``RecursionError`` before), a 5,000-digit integer (``ValueError``),
``--config /dev/zero`` ("config file not found" before), a named pipe as ``--logs`` (refused
only after Prefect's start before); the store is created owner-only whatever the umask.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from flows.config import ConfigError, TrackingConfig, load_config, parse_overrides

REPO = Path(__file__).resolve().parents[2]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "mlflow.yml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "search:\n  grid: " + "[" * 200_000 + "]" * 200_000 + "\n",
            r"nested more than 50 levels deep at line 2, column 5\d; a config is a few levels",
        ),
        (
            "gate:\n  min_ess: " + "9" * 5000 + "\n",
            r"an integer of 5,000 digits at line 2, column 12; at most 4,300 digits are read",
        ),
        ("gate:\n  min_ess: 0x" + "f" * 5000 + "\n", r"an integer of 5,002 digits"),
        ("data:\n  window_start: 2026-02-30\n", r"holds a value that cannot be read: day is out"),
    ],
    ids=["nested-200000", "int-5000-digits", "hex-5000-digits", "impossible-date"],
)
def test_hostile_yaml_is_one_line_naming_the_place(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_60_kb_set_value_is_one_line():
    with pytest.raises(ConfigError, match=r"^--set search\.grid: nested more than 50 levels"):
        parse_overrides(["search.grid=" + "[" * 30_000 + "]" * 30_000])
    with pytest.raises(ConfigError, match=r"^--set gate\.min_ess: an integer of 5,000 digits"):
        parse_overrides(["gate.min_ess=" + "7" * 5000])
    nested = "{a: " * 40 + "1" + "}" * 40  # deep, but within the limit
    assert parse_overrides([f"search.grid={nested}"])["search.grid"]["a"]["a"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_a_config_that_is_not_a_regular_file_says_what_it_is(tmp_path):
    pipe = tmp_path / "pipe.yml"
    os.mkfifo(pipe)
    cases = {
        "/dev/zero": "is a character device, not a regular file",
        str(pipe): "is a named pipe, not a regular file",
        str(tmp_path): "is a folder, not a regular file",
    }
    for path, message in cases.items():
        with pytest.raises(ConfigError, match=f"^config file {re.escape(path)} {message}"):
            load_config(path)
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "absent.yml")


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    code = (
        "import sys; from flows.cli import main; rc = main(sys.argv[1:]); "
        "print('prefect imported:', 'prefect' in sys.modules); sys.exit(rc)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env |= {"PYTHONPATH": str(REPO), "PREFECT_HOME": str(cwd / "prefect")}
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need POSIX")
def test_retrain_refuses_a_named_pipe_or_a_device_before_prefect(tmp_path):
    (tmp_path / "mlflow.yml").write_text("")
    os.mkfifo(tmp_path / "logs.parquet")
    cases = [
        (["--logs", "logs.parquet"], r"^error: --logs: logs\.parquet is a named pipe: give a log"),
        (["--config", "/dev/zero"], r"^error: .*config file /dev/zero is a character device"),
        (["--set", "gate.min_ess=" + "[" * 30_000], r"^error: .*nested more than 50 levels"),
    ]
    for args, message in cases:
        done = _run_cli(["retrain", *args], tmp_path)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert re.search(message, done.stderr.strip()), done.stderr
        assert done.stdout.strip().splitlines()[-1] == "prefect imported: False", done.stdout


def test_simulate_set_values_are_read_strictly_in_one_line(tmp_path):
    done = _run_cli(["simulate", "--set", "gate.clip=" + "[" * 30_000 + "]" * 30_000], tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert re.search(r"^error: --set gate\.clip: nested more than 50 levels", done.stderr)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_store_is_created_owner_only_whatever_the_umask(tmp_path):
    from flows.tracking import client_for, ensure_experiment, store_lock_path

    tracking = TrackingConfig(
        uri=f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}",
        artifact_location=(tmp_path / "store" / "mlartifacts").as_uri(),
        experiment="modes",
    )
    (tmp_path / "store").mkdir()
    old = os.umask(0o022)
    try:
        client = client_for(tracking)
        ensure_experiment(client, tracking)
    finally:
        os.umask(old)
    assert _mode(tmp_path / "store" / "mlflow.db") == 0o600
    assert _mode(store_lock_path(tracking.uri)) == 0o600  # in the temporary folder
    assert _mode(tmp_path / "store" / "mlartifacts") == 0o700
