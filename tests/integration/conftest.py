"""The team topology of docs/team.md ("Running it for a team"), started from the page's blocks.

``team`` runs the page's ``<!-- runnable: team -->`` blocks (PostgreSQL, MLflow and Prefect
servers on PostgreSQL, a Dask scheduler with two workers, a process work pool and its worker,
the deployment; the README links to them) with every port replaced by a free one, in a fresh
folder. Everything they start runs in one session (``start_new_session``); the finalizer kills
every process of that session and its process groups, stops PostgreSQL and removes the folder,
also when a test fails or the start itself fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEAM_MARK = "<!-- runnable: team -->"
PORTS = ("5432", "5000", "4200", "8786")  # PostgreSQL, MLflow, Prefect, Dask in docs/team.md
# one grid point (and 2,000 events a day, tests/integration/test_team.py) keep a run short
SMALL_SEARCH = "search:\n  grid: {solver: [lbfgs], variance_scale: [0.001]}\n"


def team_blocks(text: str) -> list[str]:
    """Bodies of the bash blocks after ``<!-- runnable: team -->``, in the page's order."""
    lines = text.splitlines()
    blocks = []
    for i, line in enumerate(lines):
        if line.strip() == TEAM_MARK:
            assert lines[i + 1].strip() == "```bash", f"docs/team.md line {i + 1}: no bash fence"
            end = next(j for j in range(i + 2, len(lines)) if lines[j].strip() == "```")
            blocks.append("\n".join(lines[i + 2 : end]))
    return blocks


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session_pids(sid: int) -> list[int]:
    """Processes whose session is ``sid`` (``/proc/<pid>/stat`` field 6)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[3]) == sid:
                pids.append(int(entry.name))
    return pids


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(pid), sig)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@dataclass
class Team:
    """A running topology: its folder, ports, environment and the session of its processes."""

    root: Path
    work: Path
    ports: dict[str, int]
    env: dict[str, str]
    sids: list[int] = field(default_factory=list)
    trigger: str = ""  # the block of docs/team.md that runs the deployment now
    started_seconds: float = 0.0  # wall time of the start and deploy blocks

    @property
    def mlflow_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['5000']}"

    @property
    def prefect_api(self) -> str:
        return f"http://127.0.0.1:{self.ports['4200']}/api"

    def localize(self, body: str) -> str:
        """A docs/team.md block with its ports replaced by this topology's free ports."""
        for readme_port, port in self.ports.items():
            body = re.sub(rf"(?<!\d){readme_port}(?!\d)", str(port), body)
        return body

    def bash(self, body: str, timeout: float = 900) -> subprocess.CompletedProcess:
        """Run a docs/team.md block (ports localized) in the work folder; background jobs stay up."""
        script = f"source {REPO / '.ci' / 'env.sh'}\n{self.localize(body)}\n"
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.sids.append(process.pid)  # the session of everything the block starts
        out, err = process.communicate(timeout=timeout)
        done = subprocess.CompletedProcess(process.args, process.returncode, out, err)
        assert done.returncode == 0, (
            f"docs/team.md block failed (exit {done.returncode}):\n{body}\n--- stdout\n"
            f"{out[-3000:]}\n--- stderr\n{err[-3000:]}\n{self.logs()}"
        )
        return done

    def make_day(self, day: str, seed: int, n_events: int = 2000) -> None:
        """Simulate one day of decisions (digits) and add it as ``decisions/date=<day>``."""
        target = self.work / "decisions" / f"date={day}"
        if target.exists():
            return
        out = self.root / f"sim-{day}"
        subprocess.run(
            [sys.executable, "-m", "flows.cli", "make-logs", "--dataset", "digits"]
            + ["--out", str(out), "--n-events", str(n_events), "--seed", str(seed)]
            + ["--start-time", f"{day}T00:00:00"],
            env=self.env,
            cwd=self.work,
            check=True,
            capture_output=True,
            timeout=300,
        )
        shutil.move(out / f"date={day}", target)

    def logs(self, tail: int = 2000) -> str:
        """The end of every server log in the work folder (for failure messages)."""
        parts = []
        for log in sorted(self.work.glob("*.log")):
            parts.append(f"--- {log.name}\n{log.read_text(errors='replace')[-tail:]}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Kill every process the blocks started, stop PostgreSQL, remove the folder."""
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            pids = [p for sid in self.sids for p in _session_pids(sid)]
            _signal_all(pids, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(_session_pids(s) for s in self.sids):
                time.sleep(0.2)  # shutdown poll interval
        for data in self.root.glob("poem-pg.*/data"):
            user = [] if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--"]
            subprocess.run(
                [*user, "pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)


def _chromium() -> str:
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return name
    message = "headless Chromium is not installed (Debian: apt-get install chromium)"
    if os.environ.get("CI") == "true":  # .ci/run installs it: a CI run must not skip the check
        pytest.fail(message)
    pytest.skip(message)


def _render(url: str, screenshot: Path) -> str:
    """The DOM after the page's JavaScript ran (and a screenshot of it)."""
    common = [
        _chromium(),
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1920,1000",
        "--virtual-time-budget=30000",
    ]
    subprocess.run([*common, f"--screenshot={screenshot}", url], capture_output=True, timeout=300)
    done = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=300)
    return done.stdout


@pytest.fixture
def chromium():
    """Render a URL in headless Chromium: ``chromium(url, screenshot)`` returns the DOM.

    Skips when Chromium is missing, except under CI (``.ci/run`` installs it), where it fails.
    """
    _chromium()
    return _render


def _missing_tools() -> list[str]:
    tools = ["initdb", "pg_ctl", "psql", "curl"]
    if os.geteuid() == 0:
        tools.append("runuser")
    missing = [t for t in tools if shutil.which(t) is None]
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            missing.append("the user postgres (PostgreSQL refuses to run as root)")
    return missing


@pytest.fixture(scope="session")
def team():
    """The team topology of docs/team.md, running; stopped and removed at the end (also on failure)."""
    missing = _missing_tools()
    if missing:
        message = f"the team topology needs {', '.join(missing)}"
        if os.environ.get("CI") == "true":  # CI's machines have them (.ci/run): never skip there
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="poem-team-"))
    root.chmod(0o755)  # PostgreSQL's data folder below it belongs to an unprivileged user
    work = root / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(REPO)
    env["TMPDIR"] = str(root)  # mktemp -d in docs/team.md lands here and is removed with it
    team = Team(root, work, {p: _free_port() for p in PORTS}, env)
    blocks = team_blocks((REPO / "docs" / "team.md").read_text())
    assert len(blocks) == 3, "docs/team.md: start, deploy, trigger blocks"

    def interrupted(signum, frame):  # a SIGTERM to pytest still runs the finalizer below
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupted)
    try:
        started = time.perf_counter()
        team.bash(blocks[0])
        (work / "decisions").mkdir()
        team.bash(blocks[1])
        with open(work / "team.yml", "a") as fh:
            fh.write(SMALL_SEARCH)
        team.started_seconds = time.perf_counter() - started
        team.trigger = blocks[2]
        yield team
    finally:
        team.stop()
        signal.signal(signal.SIGTERM, previous)
