"""The team topology for real (docs/team.md, "Running it for a team"; fixture ``team``).

PostgreSQL-backed MLflow and Prefect servers, a Dask scheduler with two workers, a process
work pool and its worker, all started by docs/team.md's own blocks. The scheduled retraining is
deployed to the work pool and run by the worker on two days of logs; then two ``retrain``
commands start at once against the tracking server. Everything is checked through the
servers' REST APIs, as another machine of the team would see it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("team")]  # one topology per run

DAYS = ("2026-01-01", "2026-01-02")


def _get(base: str, path: str, **query: str) -> dict:
    url = f"{base}{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def _post(base: str, path: str, body: dict) -> list | dict:
    request = urllib.request.Request(
        f"{base}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def versions(team, model: str) -> dict[str, dict[str, str]]:
    """Version -> tags of every version of ``model``, through the tracking server's REST API."""
    found = _get(team.mlflow_url, "/api/2.0/mlflow/model-versions/search", filter=f"name='{model}'")
    return {
        mv["version"]: {t["key"]: t["value"] for t in mv.get("tags", [])}
        for mv in found.get("model_versions", [])
    }


def aliases(team, model: str) -> dict[str, str]:
    found = _get(team.mlflow_url, "/api/2.0/mlflow/registered-models/get", name=model)
    return {a["alias"]: a["version"] for a in found["registered_model"].get("aliases", [])}


def promotion_problems(tags_by_version: dict[str, dict[str, str]]) -> list[str]:
    """Violations of: <= 1 promotion per champion generation, each gated against the replaced."""
    problems, per_generation = [], {}
    for version, tags in tags_by_version.items():
        if tags.get("promotion") != "done":
            continue
        against = tags.get("gated_against")
        replaced = tags.get("replaced_champion", "logging-policy")
        if against != replaced:
            problems.append(f"v{version} was gated against {against} but replaced {replaced}")
        per_generation.setdefault(against, []).append(version)
    problems += [
        f"{len(vs)} versions promoted over {gen}: {vs}"
        for gen, vs in per_generation.items()
        if len(vs) > 1
    ]
    return problems


def test_the_worker_runs_the_deployment_on_two_days_and_the_registry_records_it(team):
    seconds = []
    for seed, day in enumerate(DAYS, start=1):
        team.make_day(day, seed)
        started = time.perf_counter()
        done = team.bash(team.trigger, timeout=1800)
        seconds.append(time.perf_counter() - started)
        assert "Completed" in done.stdout, done.stdout[-2000:]
    print(f"start+deploy {team.started_seconds:.0f}s; runs {[round(s) for s in seconds]}s")

    tags = versions(team, "poem-policy")
    assert sorted(tags) == ["1", "2"], tags
    first, second = tags["1"], tags["2"]
    # day 1 against the logging policy, day 2 against day 1's champion; both on 2,000 rows
    assert first["gated_against"] == "logging-policy"
    assert first["gate_decision"] == "promoted" and first["promotion"] == "done"
    assert second["gated_against"] == "1"
    assert first["n_rows"] == second["n_rows"] == "2000"
    assert first["data_fingerprint"] != second["data_fingerprint"]
    for record in (first, second):  # the gate record: decision, reasons, bound and both risks
        assert record["gate_reasons"].count("passed:") + record["gate_reasons"].count("failed:")
        assert float(record["gate_upper_bound"]) < 0 or record["gate_decision"] == "rejected"
        assert record["challenger_risk"].endswith("(ips)")
        assert record["champion_risk"].endswith("(ips)")
    expected = {"challenger": "2"}
    if second["gate_decision"] == "promoted":
        expected |= {"champion": "2", "previous-champion": "1"}
        assert second["replaced_champion"] == "1" and second["promotion"] == "done"
    else:
        expected |= {"champion": "1"}
        assert "promotion" not in second
    assert aliases(team, "poem-policy") == expected
    assert promotion_problems(tags) == []

    # the runs went through the work pool's worker, and the partitions through the cluster
    runs = _post(team.prefect_api, "/flow_runs/filter", {"sort": "START_TIME_ASC"})
    scheduled = [r for r in runs if r.get("work_pool_name") == "poem-pool" and r["start_time"]]
    assert [r["state_type"] for r in scheduled] == ["COMPLETED", "COMPLETED"], scheduled
    dask_log = (team.work / "dask.log").read_text()
    assert dask_log.count("Receive client connection") >= 2
    # the promotion and ledger locks are released: no registered model other than the policy
    # and the gate's ledger (a model of its own, issue 34)
    models = _get(team.mlflow_url, "/api/2.0/mlflow/registered-models/search")
    names = sorted(m["name"] for m in models["registered_models"])
    assert names == ["poem-gate-ledger", "poem-policy"]


def test_two_concurrent_retrains_promote_at_most_once_per_champion(team):
    """Both gated against the logging policy of a fresh model: one promotes, one conflicts."""
    for seed, day in enumerate(DAYS, start=1):
        team.make_day(day, seed)
    env = {**team.env, "PREFECT_API_URL": team.prefect_api}
    commands = [
        [sys.executable, "-m", "flows.cli", "retrain", "--config", "team.yml"]
        + ["--logs", f"decisions/date={day}", "--set", "tracking.registered_model=poem-race"]
        for day in DAYS
    ]
    started = time.perf_counter()
    processes = [
        subprocess.Popen(
            command,
            cwd=team.work,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for command in commands
    ]
    outputs = [p.communicate(timeout=1800)[0] for p in processes]
    print(f"two concurrent retrains: {time.perf_counter() - started:.0f}s")
    codes = sorted(p.returncode for p in processes)

    tags = versions(team, "poem-race")
    assert sorted(tags) == ["1", "2"], outputs
    assert promotion_problems(tags) == [], tags
    done = [v for v, t in tags.items() if t.get("promotion") == "done"]
    assert aliases(team, "poem-race")["champion"] in done
    against = sorted(t["gated_against"] for t in tags.values())
    if against == ["logging-policy"] * 2:
        # both read the champion before either promoted and both passed the gate: the
        # compare-and-set through the server lets exactly one through, the other conflicts
        assert [t["gate_decision"] for t in tags.values()] == ["promoted"] * 2, tags
        assert len(done) == 1 and codes == [0, 1], outputs
        loser = next(v for v in tags if v not in done)
        assert tags[loser]["promotion"] == "superseded"
        assert "PromotionConflict" in outputs[[p.returncode for p in processes].index(1)]
    else:
        # the registry lock serialized them (the attempt ledger takes it too): the second read
        # the first's promotion and was gated against it, a generation of its own
        first = next(v for v, t in tags.items() if t["gated_against"] == "logging-policy")
        assert against == sorted([first, "logging-policy"]), tags
        assert tags[first]["promotion"] == "done" and codes == [0, 0], outputs
