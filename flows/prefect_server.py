"""A temporary Prefect API server that cannot outlive the command that started it.

Without ``PREFECT_API_URL`` Prefect starts its own temporary server (``SubprocessASGIServer``)
as a child that shares the command's terminal, stdout and process group. That has two
consequences:

- after ``kill -9`` of the command the server keeps running (~250 MB) and keeps the
  command's stdout open, so ``poem-pipeline retrain … | tail -1`` never returns;
- Ctrl-C reaches the server first, and the flow then fails talking to a dead API.

:func:`prefect_api` starts the same server (``uvicorn … prefect.server.api.server:create_app``)
the way a child should be started: in its own session (no terminal signals), with stdin and
stdout closed, and with ``PR_SET_PDEATHSIG`` so the kernel kills it when the command dies for
any reason, SIGKILL included. It points Prefect at it for the duration of the block.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

__all__ = ["prefect_api"]

_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int) -> None:
    """``preexec_fn``: SIGKILL this child when its parent exits (Linux ``prctl``)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, process: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the Prefect API server exited with code {process.returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        time.sleep(0.1)  # readiness poll interval
    raise RuntimeError(f"the Prefect API server at {url} was not ready after {timeout:g} s")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def prefect_api(log_file: str | Path | None = None) -> Iterator[str | None]:
    """Use the configured Prefect API, or run a temporary one tied to this process.

    Parameters
    ----------
    log_file : str or Path or None
        Where the temporary server's output goes (default: discarded).

    Yields
    ------
    str or None
        The temporary server's API URL, or None when ``PREFECT_API_URL`` is already set
        (a persistent server, or the test harness): nothing is started then.

    Raises
    ------
    RuntimeError
        If the server exits or is not healthy within
        ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``.
    """
    import prefect
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
        get_current_settings,
        temporary_settings,
    )

    if PREFECT_API_URL.value():
        yield None
        return
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "uvicorn",
        "--app-dir",
        str(Path(prefect.__file__).resolve().parent.parent),
        "--factory",
        "prefect.server.api.server:create_app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "error",
        "--lifespan",
        "on",
    ]
    env = {  # as prefect.server.api.server.SubprocessASGIServer sets them
        **os.environ,
        "PREFECT_UI_ENABLED": "0",
        "PREFECT__SERVER_EPHEMERAL": "1",
        "PREFECT__SERVER_FINAL": "1",
        **get_current_settings().to_environment_variables(exclude_unset=True),
    }
    parent = os.getpid()
    with contextlib.ExitStack() as stack:
        out = (
            stack.enter_context(open(log_file, "ab"))
            if log_file is not None
            else subprocess.DEVNULL
        )
        process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: _die_with_parent(parent),  # noqa: PLW1509 - main thread only
        )
        stack.callback(_stop, process)
        url = f"http://127.0.0.1:{port}/api"
        _wait_healthy(url, process, float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
        with temporary_settings(updates={PREFECT_API_URL: url}):
            yield url
