"""Two ``retrain`` runs at once against a PostgreSQL-backed MLflow tracking server, N times.

Starts its own PostgreSQL (in a temporary folder, loopback only; as root through ``runuser``
as the user ``postgres``, which PostgreSQL requires), ``mlflow server`` on it, and one
``prefect server start``; simulates two days of digits logs; then, per round, starts two
``poem-pipeline retrain`` processes at the same instant on a fresh registered model (both are
gated against the logging policy, so both would promote without the compare-and-set). After
each round the registry is read through the server's REST API and checked:

- at most one promotion per champion generation (``gated_against`` value);
- every promoted version was gated against the champion it replaced (``replaced_champion``);
- the other version is ``promotion=superseded`` and its command said ``PromotionConflict``.

Prints one line per round and a summary; everything started is stopped and removed at the
end. Usage (from the repository, activated venv; minutes on two cores)::

    nice -n 10 python benchmarks/concurrent_promotion.py --rounds 5

A retrain's promotion is a few milliseconds at the end of a minute of work, so two retrains
rarely promote in the same instant. ``--stress N`` (instead of retrains) makes them: two
processes, each with its own temporary folder (as two machines: a file lock of one is not
seen by the other), in each of N rounds read the champion at the same instant, register a
version gated against it, and call :func:`flows.registry.promote` at the same instant.
``--code DIR`` runs the stress processes on another checkout of the project (e.g. an older
commit, extracted with ``git archive``) to compare protocols::

    nice -n 10 python benchmarks/concurrent_promotion.py --stress 20
"""

from __future__ import annotations

import argparse
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
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = """\
tracking:
  uri: {mlflow}
  artifact_location: mlflow-artifacts:/poem-race
  experiment: poem-race
search:
  grid: {{solver: [lbfgs], variance_scale: [0.001]}}
dask:
  mode: never
"""


STRESS_WORKER = """
import sys, time
import flows.registry as registry
from flows.config import TrackingConfig
from flows.tracking import client_for, ensure_experiment

uri, model, start, rounds, step = sys.argv[1:6]
start, rounds, step = float(start), int(rounds), float(step)
tracking = TrackingConfig(uri=uri, experiment="poem-race", registered_model=model,
                          artifact_location="mlflow-artifacts:/poem-race")
client = client_for(tracking)
experiment_id = ensure_experiment(client, tracking)
run_id = client.create_run(experiment_id).info.run_id
print("code", registry.__file__, flush=True)
for r in range(rounds):
    while time.time() < start + r * step:
        time.sleep(0.001)
    champion = registry.alias_version(client, tracking, "champion") or "logging-policy"
    model_id = client.create_logged_model(experiment_id, name="policy").model_id
    logged = registry.LoggedPolicy(f"models:/{model_id}", model_id, "mlflow-artifacts:/none", {})
    tags = {"gated_against": champion, "gate_decision": "promoted", "promotion": "pending"}
    version = registry.register_version(client, tracking, logged, run_id, tags)
    while time.time() < start + (r + 0.5) * step:
        time.sleep(0.001)
    try:
        registry.promote(client, tracking, version)
        print("promoted", version, flush=True)
    except registry.PromotionConflict:
        print("conflict", version, flush=True)
    except Exception as exc:  # e.g. both inserted the alias at once: the race itself
        print("error", version, type(exc).__name__, str(exc)[:120], flush=True)
"""


def stress(mlflow: str, root: Path, env: dict[str, str], rounds: int, code: Path) -> int:
    """Two processes promote at the same instants, ``rounds`` times; returns the failures."""
    model, step = "poem-stress", 3.0
    start = time.time() + 20  # both import MLflow first
    procs = []
    for i in range(2):
        machine = root / f"machine-{i}"  # its own temp folder: its own file locks
        machine.mkdir()
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", STRESS_WORKER, mlflow, model, str(start), str(rounds)]
                + [str(step)],
                cwd=root,
                env={**env, "TMPDIR": str(machine), "PYTHONPATH": str(code)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = [p.communicate()[0] for p in procs]
    tags, champion = registry(mlflow, model)
    found = problems(tags)
    promotions = sum(out.count("promoted ") for out in outputs)
    conflicts = sum(out.count("conflict ") for out in outputs)
    errors = sum(out.count("error ") for out in outputs)
    print("\n".join(line for out in outputs for line in out.splitlines() if "code" in line))
    print(
        f"stress: {rounds} rounds x 2 processes: {promotions} promotions, {conflicts} conflicts, "
        f"{errors} errors, "
        f"{len(tags)} versions, champion v{champion}; "
        + (
            "every promotion alone in its generation and gated against the champion it replaced"
            if not found
            else f"{len(found)} VIOLATIONS: " + "; ".join(found[:5])
        )
    )
    if any(p.returncode for p in procs):
        print("\n".join(out[-2000:] for out in outputs))
    return int(bool(found)) + errors + sum(p.returncode != 0 for p in procs)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(url, timeout=5):
                return
        time.sleep(1)
    raise RuntimeError(f"{url} not ready after {timeout:g} s")


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def registry(mlflow: str, model: str) -> tuple[dict[str, dict[str, str]], str | None]:
    """Version -> tags, and the champion, of ``model`` through the REST API."""
    query = urllib.parse.urlencode({"filter": f"name='{model}'"})
    found = get(f"{mlflow}/api/2.0/mlflow/model-versions/search?{query}")
    tags = {
        mv["version"]: {t["key"]: t["value"] for t in mv.get("tags", [])}
        for mv in found.get("model_versions", [])
    }
    query = urllib.parse.urlencode({"name": model})
    aliases = get(f"{mlflow}/api/2.0/mlflow/registered-models/get?{query}")["registered_model"]
    champion = {a["alias"]: a["version"] for a in aliases.get("aliases", [])}.get("champion")
    return tags, champion


def problems(tags: dict[str, dict[str, str]]) -> list[str]:
    found, per_generation = [], {}
    for version, t in tags.items():
        if t.get("promotion") != "done":
            continue
        replaced = t.get("replaced_champion", "logging-policy")
        if t.get("gated_against") != replaced:
            found.append(f"v{version} gated against {t.get('gated_against')}, replaced {replaced}")
        per_generation.setdefault(t.get("gated_against"), []).append(version)
    found += [f"{vs} all promoted over {g}" for g, vs in per_generation.items() if len(vs) > 1]
    return found


class Services:
    """Processes started here (each in its own session) and PostgreSQL; stopped in ``close``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[subprocess.Popen] = []
        self.pg_data: Path | None = None
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []

    def start(self, name: str, command: list[str], env: dict[str, str]) -> None:
        log = open(self.root / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        self.processes.append(
            subprocess.Popen(
                command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def postgres(self) -> int:
        folder = Path(tempfile.mkdtemp(prefix="pg-", dir=self.root))
        if self.as_postgres:
            shutil.chown(folder, "postgres")
        self.pg_data, port = folder / "data", free_port()
        run = [*self.as_postgres, "initdb", "-D", str(self.pg_data), "-A", "trust"]
        subprocess.run([*run, "-U", "postgres", "--no-sync"], check=True, capture_output=True)
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
        subprocess.run(
            [*self.as_postgres, "pg_ctl", "-D", str(self.pg_data), "-o", options]
            + ["-l", str(folder / "log"), "-w", "start"],
            check=True,
            capture_output=True,
        )
        subprocess.run(
            ["psql", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres"]
            + ["-c", "CREATE DATABASE mlflow"],
            check=True,
            capture_output=True,
        )
        return port

    def close(self) -> None:
        for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
            for p in self.processes:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(p.poll() is None for p in self.processes):
                time.sleep(0.2)
        if self.pg_data is not None:
            subprocess.run(
                [*self.as_postgres, "pg_ctl", "-D", str(self.pg_data), "-m", "immediate", "stop"],
                capture_output=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="concurrent pairs (default: 5)")
    parser.add_argument("--n-events", type=int, default=2000, help="events per day (default: 2000)")
    parser.add_argument(
        "--stress", type=int, default=0, help="promotion rounds instead of retrains (default: off)"
    )
    parser.add_argument(
        "--code", type=Path, default=REPO, help="project checkout the stress processes import"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="poem-race-"))
    root.chmod(0o755)  # PostgreSQL's folder below it belongs to the user postgres
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "PREFECT_"))}
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        "PREFECT_HOME": str(root / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "true",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_LOGGING_LEVEL": "CRITICAL",
    }
    services = Services(root)
    failures = 0
    try:
        t0 = time.perf_counter()
        pg_port, mlflow_port, prefect_port = services.postgres(), free_port(), free_port()
        mlflow = f"http://127.0.0.1:{mlflow_port}"
        services.start(
            "mlflow",
            ["mlflow", "server", "--backend-store-uri"]
            + [f"postgresql://postgres@127.0.0.1:{pg_port}/mlflow", "--host", "127.0.0.1"]
            + ["--port", str(mlflow_port), "--workers", "1"]
            + ["--artifacts-destination", str(root / "artifacts")],
            env,
        )
        if args.stress:
            wait_http(f"{mlflow}/health")
            print(f"server up in {time.perf_counter() - t0:.0f}s", flush=True)
            failures = stress(mlflow, root, env, args.stress, args.code.resolve())
            return 1 if failures else 0
        services.start(
            "prefect",
            ["prefect", "server", "start", "--host", "127.0.0.1", "--port", str(prefect_port)]
            + ["--no-ui"],
            env,
        )
        env["PREFECT_API_URL"] = f"http://127.0.0.1:{prefect_port}/api"
        days = []
        for seed, day in enumerate(("2026-01-01", "2026-01-02"), start=1):
            out = root / f"logs-{day}"
            subprocess.run(
                [sys.executable, "-m", "flows.cli", "make-logs", "--dataset", "digits"]
                + ["--out", str(out), "--n-events", str(args.n_events), "--seed", str(seed)]
                + ["--start-time", f"{day}T00:00:00"],
                env=env,
                check=True,
                capture_output=True,
            )
            days.append(out)
        wait_http(f"{mlflow}/health")
        wait_http(f"{env['PREFECT_API_URL']}/health")
        config = root / "race.yml"
        config.write_text(CONFIG.format(mlflow=mlflow))
        print(f"servers up and logs written in {time.perf_counter() - t0:.0f}s ({root})")
        print("round  seconds  exit codes  versions (gated_against -> promotion)  champion  ok")
        for k in range(1, args.rounds + 1):
            model = f"poem-race-{k}"
            commands = [
                [sys.executable, "-m", "flows.cli", "retrain", "--config", str(config)]
                + ["--logs", str(day), "--set", f"tracking.registered_model={model}"]
                for day in days
            ]
            started = time.perf_counter()
            procs = [
                subprocess.Popen(
                    c,
                    cwd=root,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
                for c in commands
            ]
            outputs = [p.communicate()[0] for p in procs]
            seconds = time.perf_counter() - started
            tags, champion = registry(mlflow, model)
            found = problems(tags)
            promoted = [v for v, t in tags.items() if t.get("promotion") == "done"]
            concurrent = all(t.get("gated_against") == "logging-policy" for t in tags.values())
            if concurrent and len(tags) == 2:
                loser = [v for v in tags if v not in promoted]
                if len(promoted) != 1 or champion not in promoted:
                    found.append(f"promoted {promoted}, champion {champion}")
                elif tags[loser[0]].get("promotion") != "superseded":
                    found.append(f"v{loser[0]} is {tags[loser[0]].get('promotion')}")
                elif "PromotionConflict" not in "".join(outputs):
                    found.append("no PromotionConflict reported")
            else:
                found.append(f"not concurrent or not two versions: {tags}")
            failures += bool(found)
            summary = ", ".join(
                f"v{v} ({t.get('gated_against')} -> {t.get('promotion', t.get('gate_decision'))})"
                for v, t in sorted(tags.items())
            )
            codes = [p.returncode for p in procs]
            print(
                f"{k:>5}  {seconds:7.0f}  {codes!s:<10}  {summary}  v{champion}  "
                + ("yes" if not found else "NO: " + "; ".join(found)),
                flush=True,
            )
        print(
            f"{args.rounds - failures}/{args.rounds} rounds: one promotion per champion "
            "generation, gated against the champion it replaced"
        )
    finally:
        services.close()
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
