"""The temporary Prefect API server dies with the command that started it, even on SIGKILL."""

from __future__ import annotations

import os
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
