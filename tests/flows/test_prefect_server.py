"""The temporary Prefect API server dies with the command that started it, even on SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import os, sys, time
from flows.prefect_server import prefect_api
with prefect_api() as url:
    from prefect.settings import PREFECT_API_URL
    assert PREFECT_API_URL.value() == url, (PREFECT_API_URL.value(), url)
    print(url, flush=True)
    time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_sigkill_of_the_command_takes_the_server_and_releases_stdout(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        url = child.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/api"), url
        (server,) = _children(child.pid)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
        rest = child.stdout.read()  # returns only when no process holds the pipe any more
        deadline = time.monotonic() + 10
        while _alive(server) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server), f"Prefect server {server} outlived the command"
        assert rest == ""
    finally:
        if child.poll() is None:
            child.kill()


def test_a_start_up_held_by_another_command_waits_then_says_so_in_one_line(tmp_path, monkeypatch):
    """Two commands in one fresh folder: the second waits for the first's start-up (its lock)."""
    import fcntl

    from flows.prefect_server import PrefectServerError, TemporaryServer

    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect"))
    (tmp_path / "prefect").mkdir()
    with open(tmp_path / "prefect" / ".poem-server-start.lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # the first command is starting its server
        server = TemporaryServer().start()
        assert server.process is None  # nothing spawned while the other start-up runs
        with pytest.raises(PrefectServerError) as info:
            server.wait(timeout=0.5)
    server.stop()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "Prefect's temporary API server cannot start: lock: another command has been starting "
        f"a server on PREFECT_HOME={tmp_path / 'prefect'} for over 0.5 s"
    ), message


def test_a_server_that_cannot_start_names_the_cause_in_one_line(tmp_path, monkeypatch):
    """A corrupt prefect.db (as a full disk or a crash can leave it): exit code 3, and why."""
    from prefect.settings import (
        PREFECT_API_DATABASE_CONNECTION_URL,
        PREFECT_HOME,
        temporary_settings,
    )

    from flows.prefect_server import PrefectServerError, TemporaryServer

    home = tmp_path / "prefect"
    home.mkdir()
    (home / "prefect.db").write_bytes(b"not a database " * 100)
    monkeypatch.setenv("PREFECT_HOME", str(home))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    # the server takes this process's Prefect settings: a test harness active earlier in the
    # session would give it the harness's database instead of the corrupt one
    database = f"sqlite+aiosqlite:///{home / 'prefect.db'}"
    with temporary_settings(
        updates={PREFECT_HOME: str(home), PREFECT_API_DATABASE_CONNECTION_URL: database}
    ):
        server = TemporaryServer().start()
    try:
        with pytest.raises(PrefectServerError) as info:
            server.wait(timeout=300)
    finally:
        server.stop()
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(
        "Prefect's temporary API server exited during start-up (exit code 3): database: the "
        "Prefect database is unusable (sqlalchemy.exc.DatabaseError: (sqlite3.DatabaseError) "
        f"file is not a database); PREFECT_HOME={home}, server output in "
    ), message


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        (
            "ERROR: [Errno 98] error while attempting to bind on address ('127.0.0.1', 4200): "
            "address already in use",
            "port: the port is already in use",
        ),
        (
            "sqlalchemy.exc.OperationalError: (sqlite3.OperationalError) database is locked",
            "lock: another process holds the Prefect database (sqlalchemy.exc.OperationalError: "
            "(sqlite3.OperationalError) database is locked)",
        ),
        (
            "Traceback (most recent call last):\nOSError: [Errno 28] No space left on device",
            "disk: the disk is full (OSError: [Errno 28] No space left on device)",
        ),
        (
            "sqlite3.OperationalError: database or disk is full",
            "disk: the disk is full (sqlite3.OperationalError: database or disk is full)",
        ),
        ("", "no reason in its output"),
    ],
    ids=["port", "lock", "enospc", "sqlite-full", "silent"],
)
def test_start_up_causes_are_classified(output, reason):
    from flows.prefect_server import startup_failure_reason

    assert startup_failure_reason(output) == reason


def test_kill_9_of_the_server_mid_run_stops_the_run_in_one_line(tmp_path, logs_dir, write_config):
    """The server is SIGKILLed while the flow splits the log: exit 1, one line naming the death,
    the MLflow run KILLED, nothing registered (the champion cannot move)."""
    from mlflow import MlflowClient

    config = write_config(logs_dir / "good")
    code = (
        "import os, signal, sys, time\n"
        "from pathlib import Path\n"
        "import flows.tasks.split as split\n"
        "def kill_server(*args, **kwargs):\n"
        "    for stat in Path('/proc').glob('[0-9]*/stat'):\n"
        "        fields = stat.read_text().rsplit(')', 1)[1].split()\n"
        "        if int(fields[1]) == os.getpid():\n"
        "            os.kill(int(stat.parent.name), signal.SIGKILL)\n"
        "    time.sleep(600)  # the run must not wait for this\n"
        "assert callable(split.split_partitioned)  # the function the split task calls\n"
        "split.split_partitioned = kill_server\n"
        "from flows.cli import main\n"
        "sys.exit(main(['retrain', '--config', sys.argv[1]]))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env |= {"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(tmp_path / "prefect")}
    done = subprocess.run(
        [sys.executable, "-c", code, str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=500,  # a hang guard only
    )
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    match = re.fullmatch(
        r"error: Prefect's temporary API server \(pid \d+\) died during the run: killed by "
        r"SIGKILL after [\d.]+s: MLflow run (\w+) is marked KILLED; champion did not move",
        lines[0],
    )
    assert match, done.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert client.get_run(match.group(1)).info.status == "KILLED"
    assert client.search_model_versions() == []


LOST = """
import subprocess, sys, time
from flows.prefect_server import PrefectServerDied, TemporaryServer
server = TemporaryServer()
server.process = subprocess.Popen(["sleep", "600"])  # stands in for the server's process
server.redeliver_after = float(sys.argv[1])
server.watch()
server.process.kill()
t0 = time.monotonic()
for _ in range(1 if sys.argv[2] == "stop" else 2):
    try:
        time.sleep(30)
    except PrefectServerDied as exc:  # lost, as in a __del__: the run goes on
        print(f"{time.monotonic() - t0:.1f} {exc}", flush=True)
if sys.argv[2] == "stop":
    server.stop()  # the run ends its block: no more interrupts, no exit from the watcher
    time.sleep(3 * server.redeliver_after)
    print("stopped", flush=True)
    sys.exit(0)
time.sleep(30)
print("not reached", flush=True)
"""


def _lost(mode: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    return subprocess.run(
        [sys.executable, "-c", LOST, "2", mode],
        cwd=ROOT,
        env=env | {"PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,  # a hang guard only
    )


def test_a_lost_interrupt_is_sent_again_and_a_run_that_ignores_it_exits():
    """The server's death interrupts the main thread at once and again after the grace; a run
    that ignores both exits 1 with one line after twice the grace, not when its task ends."""
    done = _lost("ignore")
    assert done.returncode == 1, done.stderr
    died = r"Prefect's temporary API server \(pid \d+\) died during the run: killed by SIGKILL"
    first, second = done.stdout.splitlines()
    assert re.fullmatch(rf"\d+\.\d {died}", first), done.stdout
    assert re.fullmatch(rf"\d+\.\d {died}", second), done.stdout
    assert float(first.split()[0]) < 1.5  # at once
    assert 2.0 <= float(second.split()[0]) - float(first.split()[0]) < 3.5  # after the grace
    assert re.fullmatch(
        rf"error: {died}; the run did not stop within 4s of it: exiting without closing its "
        r"MLflow run \(shown KILLED\? until the next run on this host marks it KILLED\)",
        done.stderr.strip(),
    ), done.stderr


def test_a_stopped_server_is_not_watched_any_more():
    """After stop() (the run left its block) the watcher neither interrupts nor exits."""
    done = _lost("stop")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2 and lines[1] == "stopped", done.stdout
    assert done.stderr == ""


def test_a_prefect_home_that_cannot_hold_the_lock_is_one_line(tmp_path, monkeypatch):
    from flows.prefect_server import PrefectServerError, TemporaryServer

    (tmp_path / "home").write_text("a file, not a folder")
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "home"))
    with pytest.raises(PrefectServerError) as info:
        TemporaryServer().start()
    assert str(info.value) == (
        "Prefect's temporary API server cannot start: OSError: [Errno 17] File exists: "
        f"'{tmp_path / 'home'}' under PREFECT_HOME={tmp_path / 'home'}"
    )


EARLY = """
import os, sys
from pathlib import Path
import flows.commands.retrain as retrain
from flows.config import ConfigError


def load_config(*args, **kwargs):
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid():
            command = (stat.parent / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
            children.append(f"{stat.parent.name}:{'create_app' in command}")
    print(" ".join(children), flush=True)
    raise ConfigError("invalid config mlflow.yml: a planted mistake")


retrain.load_config = load_config
from flows.cli import main

sys.exit(main(["retrain"]))
"""


def _clean_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "MLFLOW_"))}
    env.pop("PREFECT_SERVER_DATABASE_CONNECTION_URL", None)
    return env | {"PYTHONPATH": str(ROOT), "PREFECT_HOME": str(home)}


@pytest.mark.parametrize("database", [True, False], ids=["existing-database", "new-home"])
def test_retrain_boots_the_server_while_it_reads_the_config_when_its_database_exists(
    tmp_path, database
):
    """The server's ~6 s of start-up overlap the config's validation (it imports the learners);
    a config mistake still exits 2 in one line and stops the server. In a new Prefect home
    (whose first start creates the database) nothing starts before the config is valid."""
    home = tmp_path / "prefect"
    if database:
        home.mkdir()
        (home / "prefect.db").write_bytes(b"")
    done = subprocess.run(
        [sys.executable, "-c", EARLY],
        cwd=tmp_path,
        env=_clean_env(home),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == "error: invalid config mlflow.yml: a planted mistake\n"
    children = done.stdout.split()
    if not database:
        assert children == []
        assert not home.exists()
        return
    (child,) = children
    server, is_prefect = child.split(":")
    assert is_prefect == "True"  # prefect.server.api.server:create_app
    deadline = time.monotonic() + 30  # stop() waited for it; a pid is reaped by init
    while _alive(int(server)) and time.monotonic() < deadline:
        time.sleep(0.1)  # poll interval
    assert not _alive(int(server))


def test_retrain_names_why_the_server_it_booted_early_could_not_start(
    tmp_path, logs_dir, write_config
):
    """A corrupt prefect.db with the early start: exit 1, one line naming the cause."""
    config = write_config(logs_dir / "good")
    home = tmp_path / "prefect"
    home.mkdir()
    (home / "prefect.db").write_bytes(b"not a database " * 100)
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "retrain", "--config", str(config)],
        cwd=tmp_path,
        env=_clean_env(home),
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
    )
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: Prefect's temporary API server exited during start-up (exit code 3): database: "
        "the Prefect database is unusable (sqlalchemy.exc.DatabaseError: (sqlite3.DatabaseError) "
        f"file is not a database); PREFECT_HOME={home}, server output in "
    ), done.stderr


def test_retrain_uses_the_running_server_of_prefect_api_url(
    prefect_harness, tmp_path, logs_dir, write_config
):
    """A fresh shell with PREFECT_API_URL (the team topology): that server runs the flow,
    nothing is started (no start lock, no database in the Prefect home)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    config = write_config(logs_dir / "good")
    home = tmp_path / "prefect"
    done = subprocess.run(
        [sys.executable, "-m", "flows.cli", "retrain", "--config", str(config)],
        cwd=tmp_path,
        env=_clean_env(home) | {"PREFECT_API_URL": url},
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard only
    )
    assert done.returncode == 0, done.stderr
    assert f"    (Prefect API {url})" in done.stdout.splitlines(), done.stdout
    assert not (home / ".poem-server-start.lock").exists()
    assert not (home / "prefect.db").exists()
