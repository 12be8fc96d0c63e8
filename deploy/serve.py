"""Run ``mlflow models serve`` as a subprocess on 127.0.0.1 and talk to it (tests, benchmarks).

The command::

    mlflow models serve -m "models:/poem-policy@champion" --env-manager local -h 127.0.0.1 -p PORT

serves what the artifact store holds, unchecked (tests and benchmarks of the scoring server).
The documented serving path is ``poem-pipeline serve`` (:mod:`flows.commands.serve`): it
verifies the version's files and code digests first (:func:`flows.integrity.verify_model_version`)
and serves the verified local folder.

``--env-manager local`` serves from the current environment (no virtualenv build, works
offline). The scoring server execs ``uvicorn`` from ``PATH``, so the interpreter's ``bin/`` is
prepended (ECOSYSTEM §3). The server gets its own process group, which :meth:`ModelServer.stop`
terminates by id — only the processes this object started.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["ModelServer", "free_port", "invocation_body"]


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def invocation_body(frame: Any, params: dict[str, Any] | None = None) -> bytes:
    """JSON body of ``POST /invocations`` for a DataFrame (``dataframe_split`` orient)."""
    split = frame.to_dict(orient="split", index=False)  # full precision (to_json keeps 10 digits)
    payload: dict[str, Any] = {
        "dataframe_split": {"columns": split["columns"], "data": split["data"]}
    }
    if params:
        payload["params"] = params
    return json.dumps(payload).encode()


class ModelServer:
    """``mlflow models serve`` of one model URI, as a context manager.

    Parameters
    ----------
    model_uri : str
        E.g. ``"models:/poem-policy@champion"``.
    tracking_uri : str
        Tracking / registry URI used to resolve ``models:/`` URIs.
    log_file : str or Path
        Where the server's stdout and stderr go.
    port : int or None
        Port; a free one when None.
    startup_timeout : float, default=120
        Seconds to wait for ``/ping``.
    """

    def __init__(
        self,
        model_uri: str,
        tracking_uri: str,
        log_file: str | Path,
        port: int | None = None,
        startup_timeout: float = 120.0,
    ):
        self.model_uri = model_uri
        self.tracking_uri = tracking_uri
        self.log_file = Path(log_file)
        self.port = port or free_port()
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen | None = None

    def start(self) -> ModelServer:
        """Start the server and block until ``GET /ping`` answers 200.

        Raises
        ------
        RuntimeError
            If the server exits or is not ready within ``startup_timeout`` (log tail included).
        """
        bin_dir = str(Path(sys.executable).parent)
        env = {
            **os.environ,
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
            "MLFLOW_TRACKING_URI": self.tracking_uri,
            "MLFLOW_REGISTRY_URI": self.tracking_uri,
        }
        cmd = [str(Path(bin_dir) / "mlflow"), "models", "serve", "-m", self.model_uri]
        cmd += ["--env-manager", "local", "-h", "127.0.0.1", "-p", str(self.port)]
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            self.process = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"mlflow models serve exited with {self.process.returncode}:\n{self._tail()}"
                )
            with contextlib.suppress(OSError):
                if self.request("GET", "/ping", timeout=2.0)[0] == 200:
                    return self
            time.sleep(0.25)  # readiness poll interval
        self.stop()
        raise RuntimeError(
            f"mlflow models serve not ready after {self.startup_timeout:g} s:\n{self._tail()}"
        )

    def _tail(self, n: int = 3000) -> str:
        return self.log_file.read_text(errors="replace")[-n:] if self.log_file.exists() else ""

    def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        timeout: float = 30.0,
        connection: http.client.HTTPConnection | None = None,
    ) -> tuple[int, Any]:
        """One HTTP request; returns (status, decoded JSON or text)."""
        conn = connection or http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            raw = resp.read().decode()
        finally:
            if connection is None:
                conn.close()
        try:
            return resp.status, json.loads(raw)
        except json.JSONDecodeError:
            return resp.status, raw

    def invoke(
        self, frame: Any, params: dict[str, Any] | None = None, **kwargs: Any
    ) -> tuple[int, Any]:
        """``POST /invocations`` with a DataFrame; returns (status, JSON)."""
        return self.request("POST", "/invocations", invocation_body(frame, params), **kwargs)

    def stop(self) -> None:
        """Terminate the server's process group and wait until every process in it has exited.

        SIGTERM first; SIGKILL for whatever is left after 15 s (a lingering ``uvicorn`` child
        would keep answering on the port after a restart).
        """
        if self.process is None:
            return
        pgid = self.process.pid
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                self.process.poll()  # reap the parent
                try:
                    os.killpg(pgid, 0)
                except ProcessLookupError:
                    self.process.wait()
                    return
                time.sleep(0.1)  # shutdown poll interval
        self.process.wait(timeout=5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
