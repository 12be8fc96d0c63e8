"""The address the demo prints opens MLflow's runs table with the decision and both risks.

Issue 36 (measured item 7): the experiment opened in MLflow's GenAI overview, and only the team
section of the README gave the address of the saved view. Here ``poem-pipeline demo`` runs as in
the Quick start (a fresh folder, the store ``sqlite:///mlflow.db`` in it, a small search), then
``mlflow ui`` is started as the demo says (on a free port instead of 5000), headless Chromium
(Debian's ``chromium``; ``.ci/run`` installs it) renders the printed address and the model
version's page, and the test reads the rendered pages. The folder holds no lock file after.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = Path(os.environ.get("POEM_SCREENSHOT_DIR", "/tmp"))
SMALL = """\
tracking:
  uri: sqlite:///mlflow.db
  artifact_location: ./mlartifacts
search:
  grid: {solver: [lbfgs], variance_scale: [0.001, 0.01]}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _environment(work: Path) -> dict[str, str]:
    """``.ci/env.sh`` as the Quick start sources it, with Prefect's home in ``work``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "MLFLOW_"))}
    env["PREFECT_HOME"] = str(work / ".prefect")
    done = subprocess.run(
        ["bash", "-c", "source .ci/env.sh && env -0"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    env = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    return env


@pytest.mark.slow
def test_the_address_the_demo_prints_shows_the_decision_and_risk_columns(tmp_path, chromium):
    work = tmp_path / "clone"
    work.mkdir()
    (work / "mlflow.yml").write_text(SMALL)
    env = _environment(work)
    demo = subprocess.run(
        [sys.executable, "-m", "flows.cli", "demo", "--config", "mlflow.yml", "--replays", "1"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert demo.returncode == 0, demo.stderr
    lines = demo.stdout.splitlines()
    ui = next(line.strip() for line in lines if line.strip().startswith("mlflow ui "))
    address = next(line.strip() for line in lines if line.strip().startswith("then open "))
    assert ui == f"mlflow ui --backend-store-uri sqlite:///{work / 'mlflow.db'}"
    address = address.removeprefix("then open ")
    assert address.startswith("http://127.0.0.1:5000/#/experiments/")
    assert "workflowType=machine_learning" in address  # not the GenAI overview
    assert sorted(p.name for p in work.iterdir() if "lock" in p.name) == []  # issue 36.7

    port = _free_port()
    server = subprocess.Popen(
        [*ui.split(), "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("mlflow ui did not answer within 120 s")
        screenshot = SCREENSHOT_DIR / "poem-demo-runs.png"
        dom = chromium(address.replace("http://127.0.0.1:5000", base), screenshot)
        assert screenshot.stat().st_size > 10_000
        for column in ("decision", "champion", "challenger", "challenger_risk", "champion_risk"):
            assert f">{column}<" in dom, column
        assert "risk_difference_ucb" in dom
        assert ">promoted<" in dom or ">rejected<" in dom  # a run's decision, in its cell
        assert "Error loading shared view state" not in dom
        # the version page leads with its description: the decision and the champion replaced
        dom = chromium(
            f"{base}/#/models/poem-policy/versions/1", SCREENSHOT_DIR / "poem-demo-version.png"
        )
        assert "replaced the logging policy as champion" in dom
        assert "Gate bound (upper confidence bound of the difference)" in dom
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
