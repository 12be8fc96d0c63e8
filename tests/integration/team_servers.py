"""The team topology's three servers, without Dask or a work pool, for outage tests.

:class:`TeamServers` runs PostgreSQL (``initdb``/``pg_ctl``, as the unprivileged ``postgres``
user when this process is root), ``mlflow server`` and ``prefect server start`` on it, each on a
free 127.0.0.1 port in a fresh folder, and can stop, kill and restart each of them while a
``retrain`` runs. :data:`DRIVER` is that ``retrain``: the real CLI in a child process that, when
the stage named by ``POEM_OUTAGE_AT`` finishes (a handler on the ``flows.progress`` logger, one
record per finished task), runs ``POEM_OUTAGE_COMMAND`` (a shell command that stops a server)
and waits for it before the flow goes on. ``benchmarks/fault_injection.py`` uses the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# the child: the real `poem-pipeline retrain`, with one outage when a stage finishes
DRIVER = r"""
import logging, os, subprocess, sys
point, command = os.environ.get("POEM_OUTAGE_AT", ""), os.environ.get("POEM_OUTAGE_COMMAND", "")
done = []

class Outage(logging.Handler):
    def emit(self, record):
        if not done and record.getMessage().split(" ")[0] == point:
            done.append(point)
            subprocess.run(command, shell=True, check=False)

if point and command:
    progress = logging.getLogger("flows.progress")
    progress.addHandler(Outage())
    progress.setLevel(logging.INFO)

from flows.cli import main
sys.exit(main(["retrain", *sys.argv[1:]]))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres() -> list[str]:
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


def missing_tools() -> list[str]:
    """What this machine lacks to run the servers (empty: everything is there)."""
    tools = ["initdb", "pg_ctl", "psql"] + (["runuser"] if os.geteuid() == 0 else [])
    return [t for t in tools if shutil.which(t) is None]


def _wait_http(url: str, timeout: float, process: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited ({process.returncode}) before {url}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        time.sleep(0.3)  # readiness poll interval
    raise TimeoutError(f"{url} did not answer within {timeout:g} s")


class TeamServers:
    """PostgreSQL, ``mlflow server`` and a Prefect server on it, in ``root`` (a fresh folder)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root or tempfile.mkdtemp(prefix="poem-outages-"))
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)  # the PostgreSQL data folder below belongs to `postgres`
        self.pgdir = self.root / "pg"
        self.ports = {"pg": free_port(), "mlflow": free_port(), "prefect": free_port()}
        self.processes: dict[str, subprocess.Popen] = {}
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_"))}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env["PYTHONPATH"] = str(REPO)
        env |= {
            "PREFECT_HOME": str(self.root / ".prefect"),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "DO_NOT_TRACK": "true",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            # no job runner and its seven huey consumers beside `mlflow server` (.ci/env.sh)
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
            "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
        }
        self.env = env

    # -- URLs ------------------------------------------------------------------------------
    @property
    def mlflow_url(self) -> str:
        return f"http://127.0.0.1:{self.ports['mlflow']}"

    @property
    def prefect_api(self) -> str:
        return f"http://127.0.0.1:{self.ports['prefect']}/api"

    def database(self, name: str, driver: str = "postgresql") -> str:
        return f"{driver}://postgres@127.0.0.1:{self.ports['pg']}/{name}"

    # -- PostgreSQL ------------------------------------------------------------------------
    def pg_command(self, action: str) -> list[str]:
        """``pg_ctl`` start/stop of the cluster (stop: fast, the way an outage looks)."""
        data = str(self.pgdir / "data")
        if action == "start":
            options = f"-p {self.ports['pg']} -k {self.pgdir} -c listen_addresses=127.0.0.1"
            args = ["-o", options, "-l", str(self.pgdir / "log"), "-w", "start"]
        elif action == "status":
            args = ["status"]
        else:
            args = ["-m", "fast", "-w", "stop"]
        return [*_as_postgres(), "pg_ctl", "-D", data, *args]

    def pg_shell(self, action: str) -> str:
        return " ".join(map(_quote, self.pg_command(action)))

    def start_postgres(self) -> None:
        self.pgdir.mkdir(exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.pgdir, "postgres")
        if not (self.pgdir / "data").exists():
            subprocess.run(
                [*_as_postgres(), "initdb", "-D", str(self.pgdir / "data"), "-A", "trust"]
                + ["-U", "postgres", "--no-sync"],
                check=True,
                capture_output=True,
                cwd=self.pgdir,
            )
            self._pg("start")
            for name in ("mlflow", "prefect"):
                subprocess.run(
                    ["psql", "-q", "-h", "127.0.0.1", "-p", str(self.ports["pg"]), "-U"]
                    + ["postgres", "-c", f"CREATE DATABASE {name}"],
                    check=True,
                    capture_output=True,
                )
        else:
            self._pg("start")

    def _pg(self, action: str) -> None:
        subprocess.run(self.pg_command(action), check=True, capture_output=True, cwd=self.pgdir)

    def stop_postgres(self) -> None:
        self._pg("stop")

    # -- MLflow and Prefect ----------------------------------------------------------------
    def start_mlflow(self) -> None:
        command = ["mlflow", "server", "--backend-store-uri", self.database("mlflow")]
        command += ["--host", "127.0.0.1", "--port", str(self.ports["mlflow"]), "--workers", "1"]
        command += ["--artifacts-destination", str(self.root / "artifacts")]
        self._spawn("mlflow", command, {})
        # a fresh database's migrations took over 180 s at load average 25 (2 cores)
        _wait_http(f"{self.mlflow_url}/health", 300, self.processes["mlflow"])

    def start_prefect(self) -> None:
        command = ["prefect", "server", "start", "--host", "127.0.0.1"]
        command += ["--port", str(self.ports["prefect"]), "--no-services"]
        url = self.database("prefect", "postgresql+asyncpg")
        self._spawn("prefect", command, {"PREFECT_API_DATABASE_CONNECTION_URL": url})
        _wait_http(f"{self.prefect_api}/health", 180, self.processes["prefect"])

    def _spawn(self, name: str, command: list[str], extra: dict[str, str]) -> None:
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - the child holds it
        self.processes[name] = subprocess.Popen(
            command,
            env={**self.env, **extra},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.root,
        )
        log.close()

    def kill_command(self, name: str) -> str:
        """A shell command that SIGKILLs server ``name`` and every process of its group."""
        return f"kill -9 -{self.processes[name].pid}"  # dash: no "--" before a process group

    def kill(self, name: str) -> None:
        process = self.processes.get(name)
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def start(self) -> TeamServers:
        self.start_postgres()
        self.start_mlflow()
        self.start_prefect()
        return self

    def ensure_running(self) -> None:
        """Bring back whatever a test stopped or killed."""
        if subprocess.run(self.pg_command("status"), capture_output=True).returncode != 0:
            with contextlib.suppress(subprocess.CalledProcessError):
                self._pg("start")
        for name, starter in (("mlflow", self.start_mlflow), ("prefect", self.start_prefect)):
            process = self.processes.get(name)
            if process is None or process.poll() is not None:
                starter()

    def stop(self) -> None:
        """Kill both servers, stop PostgreSQL, remove the folder."""
        for name in list(self.processes):
            self.kill(name)
        with contextlib.suppress(Exception):
            subprocess.run(
                [*_as_postgres(), "pg_ctl", "-D", str(self.pgdir / "data")]
                + ["-m", "immediate", "-w", "stop"],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(self.root, ignore_errors=True)

    # -- the registry and the runs, through the REST API ----------------------------------
    def rest(self, path: str, **query: str) -> dict:
        url = f"{self.mlflow_url}{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=30) as response:
            return json.load(response)

    def aliases(self, model: str) -> dict[str, str]:
        try:
            found = self.rest("/api/2.0/mlflow/registered-models/get", name=model)
        except urllib.error.HTTPError:
            return {}
        return {a["alias"]: a["version"] for a in found["registered_model"].get("aliases", [])}

    def runs(self, experiment: str) -> list[dict]:
        """Parent runs of ``experiment``: ``run_id``, ``status``, ``tags``."""
        try:
            found = self.rest("/api/2.0/mlflow/experiments/get-by-name", experiment_name=experiment)
        except urllib.error.HTTPError:
            return []
        request = urllib.request.Request(
            f"{self.mlflow_url}/api/2.0/mlflow/runs/search",
            data=json.dumps(
                {"experiment_ids": [found["experiment"]["experiment_id"]], "max_results": 1000}
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            runs = json.load(response).get("runs", [])
        out = []
        for run in runs:
            tags = {t["key"]: t["value"] for t in run["data"].get("tags", [])}
            if "mlflow.parentRunId" in tags:
                continue
            out.append(
                {"run_id": run["info"]["run_id"], "status": run["info"]["status"], "tags": tags}
            )
        return out

    # -- a retrain with one outage ---------------------------------------------------------
    def retrain(
        self,
        work: Path,
        config: Path,
        at: str = "",
        command: str = "",
        *args: str,
        timeout: float = 600,
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess:
        """Run ``retrain --config config`` (the child :data:`DRIVER`), an outage at ``at``.

        ``extra_env`` is added to the child's environment (the tests' ``POEM_OUTAGE_DELAY_SCALE``).
        """
        env = {**self.env, "PREFECT_API_URL": self.prefect_api, **(extra_env or {})}
        env |= {"POEM_OUTAGE_AT": at, "POEM_OUTAGE_COMMAND": command}
        env |= {"PREFECT_LOGGING_LEVEL": "WARNING", "MLFLOW_LOGGING_LEVEL": "WARNING"}
        return subprocess.run(
            [sys.executable, "-c", DRIVER, "--config", str(config), *args],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
