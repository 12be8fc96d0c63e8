"""Kill ``retrain`` with SIGKILL at every stage boundary and inside register/promote, then rerun;
run 2 and 4 ``retrain`` at once on a fresh and on an existing store; kill the decision log
inside ``DecisionLog.flush`` (named points and random moments), repair, audit. Prints tables.

The decision-log trials are in ``benchmarks/fault_injection_decisions.py`` (its docstring says
what is checked: no truncated file visible to readers, no decision duplicated or missing after
the repair, ``check`` passes).

Each killed run is the real command (``poem-pipeline retrain``, in a child process that installs
a kill hook, then calls the CLI's ``main``): at a stage boundary the hook is a handler on the
``flows.progress`` logger (one record per finished task) that sends SIGKILL to its own process;
inside register/promote it wraps the registry call named by the kill point. After the kill the
benchmark checks that no Prefect server of this work folder survived and that the child's stdout
was released (``retrain … | tail -1`` returns), then reruns ``retrain`` and audits the store:

- no run left RUNNING (the rerun closes the killed one as KILLED);
- ``previous-champion`` ≠ ``champion``; no version left ``promotion=pending``;
- every promoted version (``promotion=done``) was gated against the champion it replaced, and
  at most one version was promoted per champion generation.

Concurrency: N commands start together on a fresh store (first-time creation) and on an
existing store whose champion is the uniform policy (every challenger beats it, so all N pass
the gate and race to promote).

Team-topology outages (``--outages``): PostgreSQL, ``mlflow server`` and a Prefect server on it
(``tests/integration/team_servers.py``, no Dask or work pool), and the real ``retrain`` command
against them; when a stage finishes one server is stopped (PostgreSQL, ``pg_ctl -m fast``; or
stopped for 20 s then started again: ``postgres-20s``) or killed (``mlflow``, ``prefect``: SIGKILL
of its process group), and stays down until the command exits. Each trial has a model and an
experiment of its own; after it every server is brought back and the table reports the exit
code, the last line, the ``champion`` alias, whether they agree (``promoted`` ⇔ the alias is
this run's version; ``failed``/``rejected`` ⇔ it is not; ``unknown`` is reported as such) and
how many runs were left RUNNING.

Usage::

    source .ci/env.sh
    .venv/bin/python benchmarks/fault_injection.py --workdir /tmp/fault-injection
    # only the team-topology outages (every server at every stage; ~1 h on a loaded machine):
    .venv/bin/python benchmarks/fault_injection.py --points --concurrency --decision-log-kills 0 \
        --outages
    # a few of them: SERVER@STAGE, SERVER one of postgres, postgres-20s, mlflow, prefect
    .venv/bin/python benchmarks/fault_injection.py --points --concurrency --decision-log-kills 0 \
        --outages postgres-20s@search-trial mlflow@promote-policy
    # only the decision-log kills (a few minutes):
    .venv/bin/python benchmarks/fault_injection.py --points --concurrency --decision-log-kills 24

About 20–30 min on a loaded 2-core machine (every retrain starts its own Prefect server).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from fault_injection_decisions import decision_log_kills, summary

ROOT = Path(__file__).resolve().parents[1]

STAGES = (
    "start-tracking",
    "validate-logs",
    "split-logs",
    "record-search",
    "train-policy",
    "report-gate",
    "register-policy",
    "promote-policy",
)
INSIDE = ("register:before-alias", "promote:before-commit", "promote:after-commit")
OUTAGE_SERVERS = ("postgres", "postgres-20s", "mlflow", "prefect")
OUTAGE_STAGES = ("start-tracking", "search-trial", "register-policy", "promote-policy")

DRIVER = r"""
import logging, os, signal, sys
point, config = sys.argv[1], sys.argv[2]

def die(*args, **kwargs):
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)

if point.startswith(("register:", "promote:")):
    import flows.registry as registry
    from mlflow import MlflowClient
    if point == "register:before-alias":
        original = MlflowClient.set_registered_model_alias
        def hook(self, name, alias, version):
            if alias == "challenger":
                die()
            return original(self, name, alias, version)
        MlflowClient.set_registered_model_alias = hook
    elif point == "promote:before-commit":
        original = MlflowClient.set_model_version_tag
        def hook(self, name, version, key, value):
            original(self, name, version, key, value)
            if key == registry.REPLACED_TAG or (key == "promotion" and value == "done"):
                die()
        MlflowClient.set_model_version_tag = hook
        # first promotion on a fresh store has no replaced tag: stop right before the alias
        original_alias = MlflowClient.set_registered_model_alias
        def alias_hook(self, name, alias, version):
            if alias == "champion":
                die()
            return original_alias(self, name, alias, version)
        MlflowClient.set_registered_model_alias = alias_hook
    elif point == "promote:after-commit":
        registry._finish_promotion = die
elif point != "none":
    class Kill(logging.Handler):
        def emit(self, record):
            if record.getMessage().split(" ")[0] == point:
                die()
    progress = logging.getLogger("flows.progress")
    progress.addHandler(Kill())
    progress.setLevel(logging.INFO)

from flows.cli import main
sys.exit(main(["retrain", "--config", config]))
"""


def _config(store: Path, logs: Path) -> Path:
    import yaml

    cfg = {
        "tracking": {
            "uri": f"sqlite:///{store / 'mlflow.db'}",
            "artifact_location": str(store / "mlartifacts"),
            "experiment": "fault-injection",
        },
        "data": {"path": str(logs), "family": "discrete"},
        "checks": {"min_rows": 50},
        "search": {"grid": {"variance_scale": [0.0, 0.1]}, "max_workers": 2},
        "training": {
            "params": {
                "solver": "lbfgs",
                "variance_penalty": "calibrated",
                "max_iter": 30,
                "random_state": 0,
            }
        },
        "gate": {"min_ess": 20},
    }
    store.mkdir(parents=True, exist_ok=True)
    path = store / "mlflow.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _env(workdir: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PREFECT_HOME": str(workdir / ".prefect")}
    for key in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI"):
        env.pop(key, None)
    return env


def _start(workdir: Path, config: Path, point: str = "none") -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, point, str(config)],
        env=_env(workdir),
        cwd=config.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )


def _finish(proc: subprocess.Popen, timeout: float = 900) -> tuple[int | None, str, bool]:
    """Exit code, stdout, and whether stdout reached EOF within 20 s of the exit."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    try:
        out = proc.communicate(timeout=20)[0]
        return proc.returncode, out, True
    except subprocess.TimeoutExpired:
        return proc.returncode, "", False


def _our_servers(workdir: Path) -> list[int]:
    """Live Prefect API servers started with this work folder's PREFECT_HOME."""
    marker = f"PREFECT_HOME={workdir / '.prefect'}".encode()
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if b"prefect.server.api.server:create_app" not in cmdline:
                continue
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def audit(config: Path) -> dict:
    """Registry and run consistency of one store (see the module docstring)."""
    from flows.config import load_config
    from flows.registry import alias_version
    from flows.tracking import client_for

    tracking = load_config(config).tracking
    client = client_for(tracking)
    experiment = client.get_experiment_by_name(tracking.experiment)
    runs = client.search_runs([experiment.experiment_id]) if experiment else []
    statuses = Counter(r.info.status for r in runs)
    champion = alias_version(client, tracking, tracking.champion_alias)
    previous = alias_version(client, tracking, tracking.previous_champion_alias)
    try:
        versions = client.search_model_versions(f"name='{tracking.registered_model}'")
    except Exception:  # noqa: BLE001 - no registered model yet
        versions = []
    promotion = Counter(v.tags.get("promotion", "-") for v in versions)
    done = [v for v in versions if v.tags.get("promotion") == "done"]
    wrong_base = [  # a version promoted by hand (no gated_against, e.g. a baseline) is exempt
        v.version
        for v in done
        if "gated_against" in v.tags
        and v.tags["gated_against"] != v.tags.get("replaced_champion", "logging-policy")
    ]
    per_generation = Counter(v.tags["gated_against"] for v in done if "gated_against" in v.tags)
    consistent = (
        statuses.get("RUNNING", 0) == 0
        and (champion is None or champion != previous)
        and promotion.get("pending", 0) == 0
        and not wrong_base
        and max(per_generation.values(), default=0) <= 1
    )
    return {
        "running": statuses.get("RUNNING", 0),
        "killed": statuses.get("KILLED", 0),
        "failed": statuses.get("FAILED", 0),
        "champion": champion or "-",
        "previous": previous or "-",
        "versions": len(versions),
        "promotion": dict(promotion),
        "max_promotions_per_generation": max(per_generation.values(), default=0),
        "gated_against_other": wrong_base,
        "consistent": consistent,
    }


def _decision(out: str) -> str:
    lines = [ln for ln in out.strip().splitlines() if ln.startswith("decision=")]
    return lines[-1] if lines else "-"


def kill_points(workdir: Path, logs: Path, points: list[str]) -> list[dict]:
    rows = []
    for point in points:
        store = workdir / "kill" / point.replace(":", "-")
        shutil.rmtree(store, ignore_errors=True)
        config = _config(store, logs)
        started = time.monotonic()
        code, out, released = _finish(_start(workdir, config, point))
        time.sleep(3)  # PR_SET_PDEATHSIG is asynchronous
        orphans = _our_servers(workdir)
        for pid in orphans:  # clean up so the next point starts clean
            os.kill(pid, signal.SIGKILL)
        killed = code == -signal.SIGKILL
        before = audit(config)
        rerun_code, rerun_out, _ = _finish(_start(workdir, config))
        after = audit(config)
        rows.append(
            {
                "point": point,
                "sigkilled": killed,
                "orphan_servers": len(orphans),
                "stdout_released": released,
                "running_after_kill": before["running"],
                "rerun_exit": rerun_code,
                "rerun": _decision(rerun_out),
                "running": after["running"],
                "runs_killed": after["killed"],
                "champion": after["champion"],
                "previous": after["previous"],
                "promotion_tags": after["promotion"],
                "consistent": after["consistent"],
                "seconds": round(time.monotonic() - started),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def _uniform_champion(config: Path) -> None:
    """Register and promote the uniform policy over the digits actions (every challenger beats it)."""
    import numpy as np

    from flows.config import load_config
    from flows.registry import log_policy_model, promote, register_version
    from flows.tracking import client_for, ensure_experiment, start_run
    from poem.policies import StochasticPolicy, make_family

    tracking = load_config(config).tracking
    client = client_for(tracking)
    experiment_id = ensure_experiment(client, tracking)
    run_id = start_run(client, experiment_id, "uniform champion")
    family = make_family("discrete", 64, 10)
    policy = StochasticPolicy(family, np.zeros(family.coef_shape))
    logged = log_policy_model(client, tracking, experiment_id, run_id, policy)
    version = register_version(client, tracking, logged, run_id, {"role": "uniform baseline"})
    promote(client, tracking, version)
    client.set_terminated(run_id, "FINISHED")


def concurrency(
    workdir: Path, logs: Path, sizes: list[int], stores: tuple[str, ...] = ("fresh", "existing")
) -> list[dict]:
    rows = []
    for store_kind in stores:
        for n in sizes:
            store = workdir / "concurrent" / f"{store_kind}-{n}"
            shutil.rmtree(store, ignore_errors=True)
            config = _config(store, logs)
            if store_kind == "existing":
                _uniform_champion(config)
            started = time.monotonic()
            procs = [_start(workdir, config) for _ in range(n)]
            results = [_finish(p) for p in procs]
            result = audit(config)
            rows.append(
                {
                    "store": store_kind,
                    "n": n,
                    "exits": [r[0] for r in results],
                    "decisions": [_decision(r[1]) for r in results],
                    "champion": result["champion"],
                    "previous": result["previous"],
                    "promotion_tags": result["promotion"],
                    "max_promotions_per_generation": result["max_promotions_per_generation"],
                    "gated_against_other": result["gated_against_other"],
                    "running": result["running"],
                    "consistent": result["consistent"],
                    "orphan_servers": len(_our_servers(workdir)),
                    "seconds": round(time.monotonic() - started),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    return rows


def _team_servers():
    """``tests/integration/team_servers.py``, loaded by path (the tests are not a package)."""
    import importlib.util

    path = ROOT / "tests" / "integration" / "team_servers.py"
    spec = importlib.util.spec_from_file_location("team_servers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outage_command(servers, server: str) -> str:
    if server == "postgres":
        return servers.pg_shell("stop")
    if server == "postgres-20s":
        return f"{servers.pg_shell('stop')} && (sleep 20; {servers.pg_shell('start')}) &"
    return servers.kill_command(server)


def _agrees(last: str, champion: str | None) -> str:
    """Whether the last line says what the ``champion`` alias of the trial's fresh model holds."""
    fields = dict(f.split("=", 1) for f in last.split(" ")[:2] if "=" in f)
    decision = fields.get("decision")
    if decision == "promoted":
        return str(fields.get("champion") == champion)
    if decision in ("rejected", "failed"):
        return str(champion is None)  # a fresh model: its first champion would be this run's
    return "unknown" if decision == "unknown" else "no last line"


def outages(workdir: Path, trials: list[str], n_events: int) -> list[dict]:
    import yaml

    team_servers = _team_servers()
    servers = team_servers.TeamServers(workdir / "team")
    rows = []

    def terminated(signum, frame):  # a SIGTERM still stops the servers (the finally below)
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminated)
    try:
        started = time.monotonic()
        servers.start()
        print(json.dumps({"team_servers_started_s": round(time.monotonic() - started)}))
        work = servers.root / "work"
        work.mkdir(exist_ok=True)
        logs = work / "logs"
        if not logs.exists():
            subprocess.run(
                [sys.executable, "-m", "flows.cli", "make-logs", "--dataset", "digits"]
                + ["--out", str(logs), "--n-events", str(n_events)],
                env=servers.env,
                cwd=work,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        for i, trial in enumerate(trials):
            server, stage = trial.split("@", 1)
            name = f"outage-{i}-{server}-{stage}"
            cfg = yaml.safe_load(_config(work / name, logs).read_text())
            cfg["tracking"] = {
                "uri": servers.mlflow_url,
                "artifact_location": f"mlflow-artifacts:/{name}",
                "experiment": name,
                "registered_model": name,
            }
            config = work / name / "mlflow.yml"
            config.write_text(yaml.safe_dump(cfg))
            t0 = time.monotonic()
            done = servers.retrain(work, config, stage, _outage_command(servers, server))
            seconds = time.monotonic() - t0
            servers.ensure_running()
            lines = done.stdout.strip().splitlines()
            last = lines[-1] if lines else ""
            champion = servers.aliases(name).get("champion")
            statuses = Counter(r["status"] for r in servers.runs(name))
            errors = [ln for ln in done.stderr.splitlines() if ln.startswith(("error", "warning"))]
            rows.append(
                {
                    "server": server,
                    "stage": stage,
                    "exit": done.returncode,
                    "last_line": last if len(last) <= 90 else last[:89] + "…",
                    "champion_alias": champion or "-",
                    "agrees": _agrees(last, champion),
                    "running": statuses.get("RUNNING", 0),
                    "run_status": dict(statuses),
                    "error": (errors[0][:160] if errors else "-"),
                    "traceback": "Traceback (most recent call last)" in done.stderr,
                    "seconds": round(seconds),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        servers.stop()
    return rows


def _table(rows: list[dict], columns: list[str]) -> str:
    cells = [columns] + [[str(r.get(c, "-")) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join(
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in cells
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=Path("fault-injection-output"))
    parser.add_argument("--n-events", type=int, default=1200)
    parser.add_argument("--points", nargs="*", default=list(STAGES + INSIDE))
    parser.add_argument("--concurrency", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--stores", nargs="*", default=["fresh", "existing"])
    parser.add_argument(
        "--decision-log-kills",
        type=int,
        default=24,
        help="SIGKILLs at random moments of a flushing DecisionLog, besides the 4 named points "
        "(0: skip the decision-log trials)",
    )
    parser.add_argument(
        "--code", type=Path, default=ROOT, help="checkout whose poem the decision-log children run"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--outages",
        nargs="*",
        default=None,
        metavar="SERVER@STAGE",
        help="team-topology server outages (no value: every server of "
        f"{', '.join(OUTAGE_SERVERS)} at every stage of {', '.join(OUTAGE_STAGES)})",
    )
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    if args.decision_log_kills > 0:
        rows = decision_log_kills(
            workdir, args.decision_log_kills, code=args.code.resolve(), seed=args.seed
        )
        print("\nSIGKILL inside DecisionLog.flush, then a replay of every decision:\n")
        print(
            _table(
                rows,
                [
                    "point",
                    "delay_s",
                    "killed_in",
                    "visible_files",
                    "visible_unreadable",
                    "repair_written",
                    "repair_already_logged",
                    "rows",
                    "duplicated",
                    "missing",
                    "temp_left",
                    "check_passed",
                ],
            )
        )
        print("\n" + json.dumps(summary(rows)), flush=True)
    if args.outages is not None:
        trials = args.outages or [f"{s}@{t}" for s in OUTAGE_SERVERS for t in OUTAGE_STAGES]
        rows = outages(workdir, trials, args.n_events)
        print("\nA server of the team topology down from the end of a stage, then restored:\n")
        print(
            _table(
                rows,
                ["server", "stage", "exit", "last_line", "champion_alias", "agrees", "running"],
            )
        )
        print("\n" + _table(rows, ["server", "stage", "error", "traceback", "seconds"]))
    logs = workdir / "logs"
    if not logs.exists() and (args.points or args.concurrency):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "flows.cli",
                "make-logs",
                "--dataset",
                "digits",
                "--out",
                str(logs),
                "--n-events",
                str(args.n_events),
            ],
            check=True,
            env=_env(workdir),
            stdout=subprocess.DEVNULL,
        )
    kills = kill_points(workdir, logs, args.points) if args.points else []
    races = (
        concurrency(workdir, logs, args.concurrency, tuple(args.stores)) if args.concurrency else []
    )
    if kills:
        print("\nSIGKILL at each point, then one rerun:\n")
        print(
            _table(
                kills,
                [
                    "point",
                    "sigkilled",
                    "orphan_servers",
                    "stdout_released",
                    "running_after_kill",
                    "rerun",
                    "running",
                    "runs_killed",
                    "champion",
                    "previous",
                    "promotion_tags",
                    "consistent",
                ],
            )
        )
    if races:
        print("\nConcurrent retrain commands:\n")
        print(
            _table(
                races,
                [
                    "store",
                    "n",
                    "exits",
                    "decisions",
                    "champion",
                    "previous",
                    "promotion_tags",
                    "max_promotions_per_generation",
                    "running",
                    "orphan_servers",
                    "consistent",
                ],
            )
        )


if __name__ == "__main__":
    main()
