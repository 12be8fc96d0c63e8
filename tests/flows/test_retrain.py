"""End-to-end runs of the ``retrain`` flow: real Prefect (test harness) and real MLflow (sqlite)."""

from __future__ import annotations

import contextlib
import os
import sys
from datetime import UTC, datetime

import pytest
from mlflow import MlflowClient

from flows.cli import main
from flows.retrain import retrain
from poem.exceptions import InvalidLogError

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

TRIAL_METRICS = {
    "ips_risk",
    "ips_risk_lower",
    "ips_risk_upper",
    "snips_risk",
    "snips_risk_lower",
    "snips_risk_upper",
    "effective_sample_size",
    "clipped_fraction",
    "objective",
    "n_iter",
    "fit_seconds",
}
MODEL = "poem-policy"

_OPENED: list[str] | None = None  # files opened while a test counts (audit hooks stay for good)


def _record_open(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None and isinstance(args[0], (str, bytes, os.PathLike)):
        _OPENED.append(os.path.realpath(os.fsdecode(args[0])))


sys.addaudithook(_record_open)


@contextlib.contextmanager
def _reads_of(path) -> list[str]:
    """How many times ``path`` is opened in the block (the list is filled as it runs)."""
    global _OPENED
    _OPENED, target, reads = [], os.path.realpath(path), []
    try:
        yield reads
    finally:
        reads += [p for p in _OPENED if p == target]
        _OPENED = None


def _client(tmp_path) -> MlflowClient:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    return MlflowClient(tracking_uri=uri, registry_uri=uri)


def _alias(client, alias):
    try:
        return str(client.get_model_version_by_alias(MODEL, alias).version)
    except Exception:  # noqa: BLE001 - absent alias
        return None


def _artifacts(client, run_id, path=""):
    out = []
    for item in client.list_artifacts(run_id, path):
        out += _artifacts(client, run_id, item.path) if item.is_dir else [item.path]
    return out


def test_promote_then_reject_then_compare_and_rollback(tmp_path, logs_dir, write_config, capsys):
    config = write_config(logs_dir / "good")
    first = retrain(config)
    assert first.decision == "promoted"
    assert (first.challenger_version, first.champion_version, first.previous_champion_version) == (
        "1",
        "1",
        None,
    )
    assert first.metrics["risk_difference_ucb"] < 0
    # the first attempt on this test window against the logging policy: α₁ = 0.05·0.8
    assert first.metrics["gate_attempt"] == 1.0
    assert first.metrics["gate_alpha"] == pytest.approx(0.04)
    client = _client(tmp_path)
    assert _alias(client, "champion") == "1" and _alias(client, "challenger") == "1"

    # the run says what ran: data, date, decision; the log is its dataset, the model its output
    parent = client.get_run(first.mlflow_run_id)
    today = datetime.now(UTC).strftime("%Y-%m-%d")
    assert parent.info.run_name == f"good {today} promoted v1"
    assert (parent.data.tags["decision"], parent.data.tags["champion"]) == ("promoted", "1")
    assert parent.data.tags["mlflow.note.content"].startswith("retrain on ")
    assert "promoted" in parent.data.tags["mlflow.note.content"]
    assert parent.data.params["gate_estimator"] == parent.data.params["gate.estimator"]
    (dataset,) = parent.inputs.dataset_inputs
    assert (dataset.dataset.name, dataset.dataset.digest) == ("good", first.data_fingerprint[:32])
    version_1 = client.get_model_version(MODEL, "1")
    (output,) = parent.outputs.model_outputs  # the run's "Logged models"
    assert version_1.tags["model_location"].endswith(f"/models/{output.model_id}/artifacts")
    assert {"policy_sha256", "model_code_sha256", "gated_against"} <= set(version_1.tags)
    assert (version_1.tags["promotion"], version_1.tags["gated_against"]) == (
        "done",
        "logging-policy",
    )

    # nested trial runs, one per grid point, with the documented metric keys
    exp = client.get_experiment_by_name("test")
    children = client.search_runs(
        [exp.experiment_id], f"tags.mlflow.parentRunId = '{first.mlflow_run_id}'"
    )
    assert len(children) == 2
    for child in children:
        assert TRIAL_METRICS <= set(child.data.metrics), set(child.data.metrics)
        assert "variance_scale" in child.data.params
        assert float(child.data.params["temperature"]) in (1.0, 0.5, 0.25, 0.125, 0.0625)
    # the refit serves at the selected trial's temperature (search.temperatures, no refit per α)
    chosen = first.best_params["temperature"]
    assert float(parent.data.params["selected.temperature"]) == chosen
    artifacts = set(_artifacts(client, first.mlflow_run_id))
    for expected in (
        "config/resolved.yml",
        "checks/data_check_report.json",
        "checks/propensity_report.json",
        "search/results.json",
        "gate/report.md",
        "gate/report.json",
        "gate/gate_intervals.png",
    ):
        assert expected in artifacts
    assert not any(a.startswith("checks/data_docs/") for a in artifacts)
    assert any(a.startswith("search/") and a.endswith(".png") for a in artifacts)

    from prefect.artifacts import Artifact

    assert "Decision: promoted" in Artifact.get("gate-decision").data
    for key in ("search-results", "propensity-report", "data-check-report"):
        assert Artifact.get(key) is not None, key

    # logs whose losses carry no signal: the challenger cannot beat the champion
    second = retrain(config, logs=logs_dir / "noise")
    assert second.decision == "rejected"
    assert (
        second.challenger_version,
        second.champion_version,
        second.previous_champion_version,
    ) == ("2", "1", "1")
    assert _alias(client, "champion") == "1" and _alias(client, "challenger") == "2"
    v2 = client.get_model_version(MODEL, "2")
    assert v2.tags["gate_decision"] == "rejected"
    assert v2.tags["data_fingerprint"] == second.data_fingerprint != first.data_fingerprint
    assert any(r.startswith("failed: improvement") for r in second.reasons)

    capsys.readouterr()
    assert main(["compare", "--config", str(config)]) == 0
    table = capsys.readouterr().out
    assert first.mlflow_run_id[:8] in table and second.mlflow_run_id[:8] in table
    assert "promoted" in table and "rejected" in table and "champion=1" in table

    assert main(["rollback", "--config", str(config)]) == 1  # version 1 is the first champion
    from flows.config import load_config
    from flows.registry import promote
    from flows.tracking import client_for

    tracking = load_config(config).tracking
    assert promote(client_for(tracking), tracking, "2", force=True) == "1"  # v2 was rejected
    assert _alias(client, "previous-champion") == "1"
    assert main(["rollback", "--config", str(config)]) == 0
    assert capsys.readouterr().out.strip().splitlines()[-1] == "champion=1"
    assert _alias(client, "champion") == "1" and _alias(client, "previous-champion") is None
    assert client.get_model_version(MODEL, "2").tags["rolled_back_to"] == "1"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad-propensity.parquet", r"quarantine: 90 of 900 rows(.|\n)*propensity: 90 of 900 rows"),
        ("no-propensity.parquet", r"propensity: .*missing|propensity.*not"),
        ("halved-propensity.parquet", r"uniform"),
    ],
)
def test_bad_logs_fail_before_training(tmp_path, logs_dir, write_config, name, message):
    config = write_config(logs_dir / name)
    with pytest.raises(InvalidLogError, match=message):
        retrain(config)
    client = _client(tmp_path)
    (run,) = client.search_runs([client.get_experiment_by_name("test").experiment_id])
    assert run.info.status == "FAILED"
    assert "checks/data_check_report.json" in _artifacts(client, run.info.run_id)
    assert "validation_ips_risk" not in run.data.metrics  # no search, no training
    assert client.search_model_versions(f"name='{MODEL}'") == []


def test_crash_between_register_and_promote_keeps_champion(
    tmp_path, logs_dir, write_config, monkeypatch
):
    import flows.tasks.register as register

    config = write_config(logs_dir / "good")

    def crash(*args, **kwargs):
        raise RuntimeError("injected crash before promotion")

    monkeypatch.setattr(register, "promote", crash)
    with pytest.raises(RuntimeError, match="injected crash"):
        retrain(config)
    client = _client(tmp_path)
    assert _alias(client, "champion") is None  # production untouched: still the logging policy
    assert _alias(client, "challenger") == "1"
    assert client.get_model_version(MODEL, "1").tags["gate_decision"] == "promoted"
    assert client.get_model_version(MODEL, "1").tags["promotion"] == "pending"

    monkeypatch.undo()
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    rerun = retrain(config)
    versions = {
        v.version: (v.aliases, v.run_id) for v in client.search_model_versions(f"name='{MODEL}'")
    }
    assert rerun.previous_champion_version is None, (versions, rerun.mlflow_run_id)
    # the crashed run spent its α on this window: the re-run is attempt 2 (α₂ = 0.05·0.8·0.2)
    assert rerun.metrics["gate_attempt"] == 2.0
    assert rerun.metrics["gate_alpha"] == pytest.approx(0.008)
    assert (rerun.decision, rerun.challenger_version, rerun.champion_version) == (
        "promoted",
        "2",
        "2",
    )
    assert rerun.previous_champion_version is None
    assert _alias(client, "champion") == "2" and _alias(client, "challenger") == "2"
    assert client.get_model_version(MODEL, "1").tags["promotion"] == "interrupted"  # repaired
    assert client.get_model_version(MODEL, "2").tags["promotion"] == "done"


def test_cli_prints_stages_and_a_headline(tmp_path, logs_dir, write_config, capsys):
    config = write_config(logs_dir / "good")
    assert (
        main(
            [
                "retrain",
                "--config",
                str(config),
                "--set",
                "gate.min_ess=10",
                "--set",
                "gate.randomized=true",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    stages = [line.split()[1] for line in out if line.startswith("    ") and "s  " in line]
    for stage in ("validate-logs", "split-logs", "search-trial", "train-policy", "gate-candidate"):
        assert stage in stages, out
    headline = next(i for i, line in enumerate(out) if line.startswith("PROMOTED: challenger v1 "))
    assert "vs champion (the logging policy)" in out[headline]
    assert (
        out[headline + 1].startswith("  difference -") and "champion is now v1" in out[headline + 1]
    )
    assert "], randomized upper bound (U = 0." in out[headline + 1]
    assert out[-1] == "decision=promoted champion=1"
    # gate.randomized: the coin is drawn from the attempt's fresh entropy, recorded in the
    # report and on the ledger, so the decision can be replayed
    from flows.config import load_config
    from flows.ledger import read_ledger
    from flows.tracking import client_for
    from poem.estimators.improvement import decision_coin

    tracking = load_config(config).tracking
    client = client_for(tracking)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("test").experiment_id], "tags.decision = 'promoted'"
    )
    (entry,) = read_ledger(client)
    assert entry.run_id == run.info.run_id and not entry.seed_given
    coin = decision_coin(int(entry.order_seed))
    assert run.data.params["gate.randomized"] == "True"
    assert run.data.metrics["gate_randomization"] == pytest.approx(coin, rel=1e-12)


def test_a_champion_start_without_champion_is_not_fitted_twice(
    tmp_path, logs_dir, write_config, capsys
):
    """Before a promotion ``warm_start: champion`` is ``zeros``: one fit, two recorded trials."""
    grid = {"variance_scale": [0.1], "warm_start": ["zeros", "champion"]}
    config = write_config(logs_dir / "good", search={"grid": grid, "max_workers": 2})
    assert main(["retrain", "--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    stages = [line.split()[1] for line in out if line.startswith("    ") and "s  " in line]
    assert stages.count("search-trial") == 1, out
    client = _client(tmp_path)
    (parent,) = client.search_runs(
        [client.get_experiment_by_name("test").experiment_id], "tags.decision = 'promoted'"
    )
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert sorted(c.data.params["warm_start"] for c in children) == ["champion", "zeros"]
    first, second = (c.data.metrics for c in children)
    assert first == second and TRIAL_METRICS <= set(first)


def test_a_fit_is_served_only_when_shown_better_than_the_champion_retempered(
    tmp_path, logs_dir, write_config
):
    """With a champion, a selected fit must beat its best re-tempered candidate, paired (DR)."""
    config = write_config(logs_dir / "good")
    # the three runs gate on one test window: one ledger, α and q pinned by the first attempt;
    # a generous α leaves attempt 2 (αₖ = α(1 − q)q) enough to promote a fit that is better
    gate = {
        "gate.confidence_level": 0.5,
        "gate.retry_fraction": 0.5,
        "gate.seed": 0,
    }  # seeded order
    weak = retrain(config, overrides={**gate, "training.params.max_iter": 4})  # v1: 4 steps
    assert weak.decision == "promoted"
    client = _client(tmp_path)
    shown = retrain(config, overrides=gate)  # 40 steps: better than v1 at any temperature
    run = client.get_run(shown.mlflow_run_id).data
    assert shown.challenger_kind == "learned", shown.best_params
    assert run.tags["learning_evidence"] == "shown"
    m = run.metrics
    assert m["learning_upper"] < 0 and m["learning_learned"] == 1.0
    assert m["learning_difference"] < m["learning_upper"]
    assert m["learning_model_difference"] < m["learning_model_upper"] < 0
    # the fit's weights cover the validation rows: no penalty for an unseen share of its mass
    assert m["learning_covered"] == 1.0 and m["learning_coverage_penalty"] == 0.0
    assert not any(k.startswith("crossfit_") for k in m)  # validation showed it: no refits
    assert m["learning_weight_upper"] >= 1.0 and m["learning_weight_std_error"] > 0
    # issue 35: the level is corrected for the K distinct fits compared (2 here): the max-t
    # level of their paired differences (search.selection_rule: simultaneous), between the
    # uncorrected 0.9 and Bonferroni's 1 − 0.1/2; the run says why the fit is served
    assert m["learning_n_compared"] == 2.0
    assert 0.9 <= m["learning_confidence_level"] < 1 - 0.1 / 2
    assert m["learning_corrected_level"] == m["learning_confidence_level"]
    assert run.tags["selection_rule"] == "simultaneous" and m["learning_holdout"] == 0.0
    assert m["learning_champion_kept"] == 0.0
    assert run.tags["selection_reason"] == "fit shown better than the champion re-tempered"
    assert m["learning_n_model_rows"] > m["learning_n_validation"] > 0
    assert shown.headline()[2] == (
        "  challenger learned: shown better than champion v1 re-tempered on validation "
        "(paired DR and model bounds)"
    )

    # the same data again: the selected fit is the champion v2 itself (Δ̂ = 0, se = 0), so it
    # is not served as learned; the champion re-tempered is, and the gate rejects it
    same = retrain(config, overrides=gate)
    run = client.get_run(same.mlflow_run_id).data
    assert shown.decision == "promoted" and same.previous_champion_version == "2"
    assert run.tags["learning_evidence"] == "not shown"
    assert run.tags["selection_reason"].startswith(
        "fit not shown better (multiplicity-corrected): champion kept"
    )
    assert run.metrics["learning_champion_kept"] == 1.0
    # its own bounds do not pass even uncorrected (Δ̂ = 0): no cross-fitted refits either
    assert not any(k.startswith("crossfit_") for k in run.metrics)
    # 0 up to round-off: the refit reproduces w to ~1e-13 (summation order varies with load)
    assert (run.metrics["learning_difference"], run.metrics["learning_upper"]) == pytest.approx(
        (0.0, 0.0), abs=1e-9
    )
    assert same.challenger_kind == "champion_retempered", same.best_params
    assert run.tags["challenger_kind"] == "champion_retempered"
    assert same.headline()[2].endswith("no learning: no fit was shown better on validation")
    assert same.decision == "rejected"


def test_champion_retempered_is_a_candidate_and_the_run_says_so(tmp_path, logs_dir, write_config):
    """With a champion, the search also scores it re-tempered (no refit); the runs say which won."""
    config = write_config(logs_dir / "good")
    first = retrain(config)
    client = _client(tmp_path)
    assert (first.decision, first.challenger_kind) == ("promoted", "learned")
    assert client.get_run(first.mlflow_run_id).data.tags["challenger_kind"] == "learned"
    assert client.get_model_version(MODEL, "1").tags["challenger_kind"] == "learned"
    assert first.headline()[2] == (
        "  challenger learned (no champion coefficients to re-temper: the logging policy)"
    )

    # fits that cannot move off the uniform policy (μ = 10⁶): the champion re-tempered wins
    second = retrain(config, overrides={"training.params.l2_penalty": 1.0e6})
    assert second.challenger_kind == "champion_retempered", second.best_params
    alpha = second.best_params["temperature"]
    assert second.best_params == {"challenger_kind": "champion_retempered", "temperature": alpha}
    assert alpha in (1.0, 0.5, 0.25, 0.125, 0.0625)
    parent = client.get_run(second.mlflow_run_id)
    assert parent.data.tags["challenger_kind"] == "champion_retempered"
    assert "challenger_kind=champion_retempered" in parent.data.tags["mlflow.note.content"]
    assert float(parent.data.params["selected.temperature"]) == alpha
    v2 = client.get_model_version(MODEL, second.challenger_version)
    assert (v2.tags["challenger_kind"], v2.tags["gated_against"]) == ("champion_retempered", "1")
    assert second.previous_champion_version == "1" and "champion_risk" in second.metrics
    assert second.headline()[2].startswith("  challenger = champion v1 re-tempered (temperature")

    # 2 fits + the champion at each of the 5 serving temperatures, each a nested run
    exp = client.get_experiment_by_name("test")
    children = client.search_runs(
        [exp.experiment_id], f"tags.mlflow.parentRunId = '{second.mlflow_run_id}'"
    )
    kinds = sorted(c.data.params["challenger_kind"] for c in children)
    assert kinds == ["champion_retempered"] * 5 + ["learned"] * 2
    retempered = [c for c in children if c.data.params["challenger_kind"] != "learned"]
    assert {float(c.data.params["temperature"]) for c in retempered} == {
        1.0,
        0.5,
        0.25,
        0.125,
        0.0625,
    }

    # the new version serves the champion's distribution re-tempered by α: no learning
    from flows.config import load_config
    from flows.registry import load_version_policy
    from flows.tracking import client_for

    tracking = load_config(config).tracking
    champion = load_version_policy(client_for(tracking), tracking, "1")
    served = load_version_policy(client_for(tracking), tracking, second.challenger_version)
    assert served.temperature == alpha
    assert served.coef == pytest.approx(champion.coef / champion.temperature, rel=1e-12)
    assert served.metadata["retempered_from"] == champion.digest()


def test_one_retrain_reads_its_config_once_and_passes_the_settings(
    tmp_path, logs_dir, write_config, capsys
):
    """The CLI validated ``mlflow.yml``, ``run_retrain`` and the flow loaded it again: 3 reads."""
    from prefect import get_client
    from prefect.utilities.asyncutils import run_coro_as_sync

    config = write_config(tmp_path / "nowhere", search={"grid": {"variance_scale": [0.1]}})
    args = ["retrain", "--config", str(config), "--logs", str(logs_dir / "good")]
    with _reads_of(config) as reads:
        assert main([*args, "--set", "gate.min_ess=10"]) == 0
    assert len(reads) == 1
    client = _client(tmp_path)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("test").experiment_id], "tags.decision = 'promoted'"
    )
    assert run.data.params["gate.min_ess"] == "10.0"  # --set and --logs reached the flow
    assert run.data.tags["data_path"] == str(logs_dir / "good")

    async def parameters(flow_run_id):
        async with get_client() as prefect:
            return (await prefect.read_flow_run(flow_run_id)).parameters

    recorded = run_coro_as_sync(parameters(run.data.tags["prefect_flow_run_id"]))
    assert recorded["config"]["gate"]["min_ess"] == 10.0  # the flow run shows its settings
    assert recorded["config"]["data"]["path"] == str(logs_dir / "good")
    assert recorded["overrides"] is None and recorded["logs"] is None


def test_a_scheduled_run_reads_its_config_once(tmp_path, digits_log, write_config):
    """The scheduled flow loaded ``mlflow.yml`` and its ``retrain`` subflow loaded it again."""
    from flows.deployments import scheduled_retrain
    from poem.io.parquet import write_log

    decisions = tmp_path / "decisions"
    write_log(digits_log, decisions / "date=2026-01-01")
    config = write_config(decisions, search={"grid": {"variance_scale": [0.1]}})
    with _reads_of(config) as reads:
        result = scheduled_retrain(str(config))
    assert (result["status"], result["partitions"]) == ("retrained", ["date=2026-01-01"])
    assert len(reads) == 1


def test_settings_and_overrides_are_not_both_given(tmp_path, write_config):
    from flows.config import load_config
    from flows.retrain import run_settings

    config = write_config(tmp_path / "logs")
    cfg = load_config(config)
    assert run_settings(cfg) is cfg
    assert run_settings(cfg, tmp_path / "other").data.path == str(tmp_path / "other")
    assert run_settings(config, None, {"gate.min_ess": 5}).gate.min_ess == 5
    with pytest.raises(TypeError) as info:
        run_settings(cfg, None, {"gate.min_ess": 5})
    assert str(info.value) == (
        "overrides ['gate.min_ess'] given with a loaded config: pass them to "
        "load_config(path, overrides), or pass the path"
    )


def test_the_default_search_has_ipw_candidates_and_can_serve_one(tmp_path, logs_dir, write_config):
    """search.candidates: the IPW-weighted classifier's fits are trials of the same search.

    Each is a nested run naming its learner; the same rule selects among them and POEM's fits
    (K counts them); with fits that cannot move off the uniform policy (μ = 10⁶) the IPW
    classifier is served, refit-free, and the run tags the learner.
    """
    from flows.config import load_config
    from flows.config.search import IPW_CANDIDATE
    from flows.registry import load_version_policy
    from flows.tracking import client_for

    config = write_config(logs_dir / "good", search={"candidates": "auto"})  # the default
    assert load_config(config).search.model_dump(mode="json")["candidates"] == {
        "ipw_classifier": IPW_CANDIDATE
    }
    result = retrain(config, overrides={"training.params.l2_penalty": 1.0e6})
    assert result.decision == "promoted"
    assert result.challenger_kind == "learned", result.best_params
    assert result.best_params["learner"] == "ipw_classifier"
    assert result.best_params["C"] in (0.01, 0.1, 1.0, 10.0)
    client = _client(tmp_path)
    parent = client.get_run(result.mlflow_run_id)
    assert parent.data.tags["challenger_learner"] == "ipw_classifier"
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{result.mlflow_run_id}'"
    )
    learners = sorted(c.data.params["learner"] for c in children)
    assert learners == ["ipw_classifier"] * 4 + ["poem"] * 2
    ipw = [c for c in children if c.data.params["learner"] == "ipw_classifier"]
    assert sorted(float(c.data.params["C"]) for c in ipw) == [0.01, 0.1, 1.0, 10.0]
    assert all(TRIAL_METRICS <= set(c.data.metrics) for c in ipw)
    tracking = load_config(config).tracking
    served = load_version_policy(client_for(tracking), tracking, result.challenger_version)
    assert served.metadata["learner"] == "ipw_classifier"
    assert served.temperature == result.best_params["temperature"]

    # a second run: a champion exists; the selection counts the 2 POEM fits and the 4
    # IPW-classifier fits (distinct validation scores) in K and tags what it served
    second = retrain(config, overrides={"training.params.l2_penalty": 1.0e6})
    run = client.get_run(second.mlflow_run_id).data
    assert run.tags["challenger_learner"] in ("ipw_classifier", "champion")
    assert run.metrics["learning_n_compared"] >= 5.0
