"""The ``poem-pipeline`` front door: --version, init, and retrain's checks before Prefect starts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from flows.cli import main
from flows.config import default_config_path, load_config

REPO = Path(__file__).resolve().parents[2]


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.startswith("poem-pipeline ")


def test_init_writes_the_annotated_default_config(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["init"]) == 0
    written = tmp_path / "mlflow.yml"
    assert written.read_text() == default_config_path().read_text()
    assert "# " in written.read_text() and load_config(written).tracking.experiment
    assert "wrote mlflow.yml" in capsys.readouterr().out
    written.write_text("gate: {min_ess: 5}\n")
    assert main(["init"]) == 2
    assert "mlflow.yml exists; pass --force" in capsys.readouterr().err
    assert written.read_text() == "gate: {min_ess: 5}\n"
    assert main(["init", "--force"]) == 0
    assert written.read_text() == default_config_path().read_text()


def _run_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Run the CLI in a fresh interpreter; report whether Prefect was imported at all."""
    code = (
        "import sys; from flows.cli import main; rc = main(sys.argv[1:]); "
        "print('prefect imported:', 'prefect' in sys.modules); sys.exit(rc)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("args", "config", "message"),
    [
        (
            ["retrain"],
            "search:\n  grid: {variance_scale: [-1]}\n",
            r"^error: invalid config mlflow\.yml: search\.grid\.variance_scale\[0\]: "
            r"variance_scale == -1, must be >= 0",
        ),
        (
            ["retrain", "--logs", "no/such/logs"],
            "",
            r"^error: --logs: no/such/logs does not exist$",
        ),
        (
            ["retrain", "--set", "gate.estimator=ipss"],
            "",
            r"^error: invalid config mlflow\.yml: gate\.estimator: Input should be 'ips', "
            r"'snips' or 'clipped_ips'",
        ),
        (
            ["retrain", "--family", "multilabel", "--loss-bounds", "1", "0"],
            "",
            r"^error: invalid config mlflow\.yml: data\.loss_bounds: bounds must be \[min, max\]",
        ),
    ],
)
def test_retrain_mistakes_exit_2_in_one_line_before_prefect(tmp_path, args, config, message):
    (tmp_path / "mlflow.yml").write_text(config)
    done = _run_cli(args, tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert re.search(message, done.stderr.strip()), done.stderr
    assert done.stdout.strip().splitlines()[-1] == "prefect imported: False"


@pytest.mark.slow
def test_ctrl_c_exits_130_with_the_run_killed(tmp_path, logs_dir, write_config):
    """A KeyboardInterrupt inside the flow (as Ctrl-C raises it): exit 130, run KILLED, one
    message, no traceback; in a fresh interpreter with its own temporary Prefect server."""
    from mlflow import MlflowClient

    config = write_config(logs_dir / "good")
    code = (
        "import sys\n"
        "import flows.tasks.split as split\n"
        "def interrupt(*args, **kwargs):\n"
        "    raise KeyboardInterrupt\n"
        "assert callable(split.split_partitioned)  # the function the split task calls\n"
        "split.split_partitioned = interrupt\n"
        "from flows.cli import main\n"
        "sys.exit(main(['retrain', '--config', sys.argv[1]]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env |= {"PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 130, done.stderr
    match = re.search(r"MLflow run (\w+) is marked KILLED; champion did not move", done.stderr)
    assert match and "Traceback" not in done.stderr, done.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.get_run(match.group(1)).info.status == "KILLED"


@pytest.mark.slow
def test_a_run_whose_checks_fail_prints_the_error_the_report_and_the_run(
    tmp_path, logs_dir, write_config
):
    """Issue 23.3: it printed 84 lines (two Prefect tracebacks, a log-handler error after the
    server stopped, no MLflow run id). Expected: exit 1 and at most 5 stderr lines — the error,
    the report's path and the failed MLflow run; a fresh interpreter, its own Prefect server."""
    config = write_config(logs_dir / "bad-propensity.parquet")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env |= {"PYTHONPATH": str(REPO), "PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "retrain", "--config", str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) <= 5, done.stderr
    assert lines[0].startswith(  # the deciding reason first (issue 36)
        "error: the logs failed their checks; nothing was trained or registered: quarantine: "
        "90 of 900 rows (10.00%)"
    ), done.stderr
    assert lines[1].startswith("  also: propensity: 90 of 900 rows"), done.stderr
    report = re.fullmatch(r"  report: file://(\S+/checks/data_check_report\.json)", lines[2])
    assert report and Path(report.group(1)).is_file(), done.stderr
    run = re.fullmatch(r"  MLflow run (\w+) \(FAILED\): experiment 1 of sqlite:///\S+", lines[3])
    assert run, done.stderr
    for noise in ("Traceback", "Error logging to API", "All connection attempts failed"):
        assert noise not in done.stderr + done.stdout


TEARDOWN = """
import atexit, sys
import flows.commands.retrain as retrain


class Teardown:
    def __del__(self):
        sys.stderr.write("interpreter teardown\\n")


keep = Teardown()  # a module global: freed only by the interpreter's teardown
original = retrain.run


def run(args):
    atexit.register(print, "atexit of a library ran", end="")  # registered by the command
    return original(args)


retrain.run = run
sys.argv = ["poem-pipeline", "retrain", "--logs", "no/such/logs"]
from flows.cli import main

sys.exit(main())
"""


def test_as_a_program_it_exits_after_atexit_without_the_interpreter_teardown(tmp_path):
    """Freeing Prefect's, MLflow's and GX's modules cost 1-2 s of CPU after every retrain:
    as a program (argv None) the CLI exits with its code once the atexit callbacks ran
    (their unflushed output included); main(argv) called in-process never exits."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", TEARDOWN], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == "atexit of a library ran"
    assert done.stderr == "error: --logs: no/such/logs does not exist\n"
