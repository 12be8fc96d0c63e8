"""Tasks as plain functions (``.fn()``), against a real MLflow store in ``tmp_path``."""

from __future__ import annotations

import errno
from types import SimpleNamespace

import numpy as np
import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import RESOURCE_DOES_NOT_EXIST

from flows.config import (
    ChecksConfig,
    DataConfig,
    GateConfig,
    SearchConfig,
    SplitConfig,
    TrackingConfig,
)
from flows.registry import alias_version
from flows.tasks import is_transient_io_error
from flows.tasks.gate import gate_candidate, gate_metrics, load_champion
from flows.tasks.load import check_logs, fingerprint_logs
from flows.tasks.register import promote_policy, register_policy
from flows.tasks.search import (
    champion_candidates,
    retempered_policy,
    search_trial,
    select_best,
    serving_choice,
)
from flows.tasks.split import split_logs
from flows.tasks.validate import enforce_checks, record_check_report
from flows.tracking import TrackedRun, client_for, ensure_experiment, start_run
from poem.estimators.improvement import decision_coin
from poem.exceptions import InvalidLogError
from poem.gate import gate_rows
from poem.learners.training_rows import TrainingRows
from poem.ledger import next_attempt
from poem.log_rows import as_partitions, log_header, split_partitioned

PARAMS = {"solver": "lbfgs", "variance_penalty": "calibrated", "max_iter": 30, "random_state": 0}


@pytest.fixture
def run(tmp_path) -> TrackedRun:
    tracking = TrackingConfig(
        uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        artifact_location=(tmp_path / "mlartifacts").as_uri(),
        experiment="unit",
    )
    client = client_for(tracking)
    experiment_id = ensure_experiment(client, tracking)
    return TrackedRun(tracking, experiment_id, start_run(client, experiment_id, "unit"))


@pytest.fixture(scope="module")
def split(digits_log):
    """The split as the flow holds it: row positions of a partition set (here one partition)."""
    return split_partitioned(as_partitions(digits_log), random_state=0)


@pytest.fixture(scope="module")
def parts(split):
    """The same split's train, validation and test rows as logs in memory."""
    return SimpleNamespace(**{p: split.log(p) for p in ("train", "validation", "test")})


@pytest.fixture(scope="module")
def trials(split, digits_log):
    return [
        search_trial.fn(
            TrainingRows(split),
            split,
            log_header(as_partitions(digits_log)),
            "poem",
            PARAMS,
            {"variance_scale": c},
            0.95,
            "key",
            "code",
        )
        for c in (0.0, 0.1)
    ]


def test_split_task_splits_by_time_and_logs_sizes(digits_log, run):
    config = SplitConfig(validation_fraction=0.2, test_fraction=0.3)
    parts = split_logs.fn(as_partitions(digits_log), config, run)
    sizes = [parts.n_rows(p) for p in ("train", "validation", "test")]
    assert (parts.method, *sizes) == ("time", 450, 180, 270)
    stamps = [parts.log(p).timestamps for p in ("train", "validation", "test")]
    assert stamps[0].max() < stamps[1].min() <= stamps[2].min()
    params = run.client().get_run(run.run_id).data.params
    assert params["split.n_test"] == "270" and params["split.split_method"] == "time"


def test_search_trial_and_selection(trials):
    for trial in trials:
        metrics = trial.to_dict()
        assert {"ips_risk", "snips_risk", "effective_sample_size", "fit_seconds"} <= set(metrics)
        assert 0.0 <= metrics["ips_risk"] <= 5.0
    best = select_best.fn(trials, SearchConfig(scoring="ips"))
    assert trials[best].ips.value == min(t.ips.value for t in trials)
    # the ESS guard: a fraction only the other trial reaches moves the selection to it
    ess = sorted(t.effective_sample_size for t in trials)
    assert ess[0] < ess[1]
    fraction = (ess[0] + ess[1]) / 2 / trials[0].ips.n
    guarded = select_best.fn(trials, SearchConfig(scoring="ips", min_ess_fraction=fraction))
    assert trials[guarded].effective_sample_size == ess[1]
    if trials[best].effective_sample_size == ess[0]:
        assert guarded != best


def test_search_min_ess_is_a_floor_in_rows(trials):
    # search.min_ess: a trial resting on fewer effective validation rows ranks last whatever
    # the fraction (issue 21: on a 100-row validation log 1 % is one row)
    ess = sorted(t.effective_sample_size for t in trials)
    rows = (ess[0] + ess[1]) / 2
    guarded = select_best.fn(
        trials, SearchConfig(scoring="ips", min_ess_fraction=0.0, min_ess=rows)
    )
    assert trials[guarded].effective_sample_size == ess[1]
    serving = serving_choice(SearchConfig(min_ess_fraction=0.01, min_ess=10.0), 100)
    assert serving["min_effective_sample_size"] == 10.0  # not 1 % of 100 rows
    serving = serving_choice(SearchConfig(min_ess_fraction=0.01, min_ess=10.0), 5000)
    assert serving["min_effective_sample_size"] == 50.0


def test_champion_candidates_join_the_selection(parts, split, trials, run):
    from flows.learners import build_learner

    champion = build_learner("poem", PARAMS).fit(parts.train).policy_.with_serving(temperature=0.5)
    search = SearchConfig(scoring="ips")
    serving = serving_choice(search, parts.validation.n_rows)
    candidates = champion_candidates.fn(champion, split, serving, 0.95)
    assert [t.params for t in candidates] == [
        {"challenger_kind": "champion_retempered", "temperature": a}
        for a in (1.0, 0.5, 0.25, 0.125, 0.0625)
    ]
    assert champion_candidates.fn(None, split, serving, 0.95) == []  # the logger
    assert len(champion_candidates.fn(champion, split, {}, 0.95)) == 1  # as served
    everything = trials + candidates
    best = select_best.fn(everything, search)
    assert everything[best].ips.value == min(t.ips.value for t in everything)
    policy = retempered_policy.fn(candidates[2].params, champion, None, run)
    assert (policy.temperature, policy.coef.tolist()) == (0.25, (champion.coef / 0.5).tolist())
    params = run.client().get_run(run.run_id).data.params
    assert params["selected.challenger_kind"] == "champion_retempered"


def test_gate_against_logging_policy_and_blocking_checks(parts, trials):
    from flows.learners import build_learner

    policy = build_learner("poem", PARAMS, trials[0].params).fit(parts.train).policy_
    gate = GateConfig(min_ess=10)
    rows = gate_rows(policy, None, parts.test)
    attempt = next_attempt([], rows.window, alpha=0.05, retry_fraction=0.2)
    comparison = gate_candidate.fn(rows, gate, [], None, attempt)
    assert comparison.champion.value == pytest.approx(float(np.mean(parts.test.losses)))
    assert comparison.promote and comparison.decision == "promoted"
    assert comparison.order_seed == attempt.order_seed and not comparison.seed_given
    metrics = gate_metrics(comparison)
    assert (
        metrics["gate_promoted"] == 1.0 and metrics["risk_difference_ucb"] == comparison.upper_bound
    )
    blocked = gate_candidate.fn(rows, gate, ["uniform_weight_mean"], None, attempt)
    assert not blocked.promote and "check did not pass: uniform_weight_mean" in blocked.reasons[-1]
    same = gate_candidate.fn(gate_rows(policy, policy, parts.test), gate, [], None, attempt)
    assert not same.promote and same.difference.value == 0.0
    # gate.randomized: the coin is drawn from the attempt's entropy; off by default
    assert comparison.randomization is None
    randomized = GateConfig(min_ess=10, randomized=True)
    drawn = gate_candidate.fn(rows, randomized, [], None, attempt)
    coin = decision_coin(attempt.order_seed)
    assert drawn.randomization == coin and gate_metrics(drawn)["gate_randomization"] == coin
    # the coin only lowers the bound (equal up to rounding: the two are summed in another order)
    assert drawn.upper_bound <= comparison.upper_bound + 1e-12 * abs(comparison.upper_bound)


def test_gate_on_estimated_propensities_is_labelled_and_refuses_the_logged_terms(
    split, parts, trials
):
    # issue 38 item 3: with propensity_source estimated the gate decides on the DR terms
    # of estimated_gate_inputs (models fitted on the validation rows) and says so; the
    # logged rows' vectors with estimated propensities are a failed precondition
    from flows.learners import build_learner
    from flows.tasks.gate import ESTIMATED, estimated_gate_inputs

    policy = build_learner("poem", PARAMS, trials[0].params).fit(parts.train).policy_
    gate = GateConfig(min_ess=10)
    rows = estimated_gate_inputs.fn(policy, None, split)
    assert rows.provenance["fit_rows"] == parts.validation.n_rows
    assert rows.window == gate_rows(policy, None, parts.test).window  # one ledger key
    attempt = next_attempt([], rows.window, alpha=0.05, retry_fraction=0.2)
    decided = gate_candidate.fn(rows, gate, [], None, attempt, ESTIMATED)
    assert decided.propensity_source == "estimated" and decided.to_dict()["attempt"] == 1
    assert any("rests on estimated propensities" in r for r in decided.reasons)
    logged = gate_candidate.fn(gate_rows(policy, None, parts.test), gate, [], None, attempt)
    assert logged.propensity_source == "logged"
    refused = gate_candidate.fn(
        gate_rows(policy, None, parts.test), gate, [], None, attempt, ESTIMATED
    )
    assert not refused.promote and refused.propensity_source == "estimated"
    assert refused.reasons[-1] == (
        "check did not pass: precondition: the test rows' propensities are estimated; "
        "gate.estimator 'ips' needs known propensities (use the gate's inputs on estimated "
        "propensities, flows.tasks.gate.estimated_gate_inputs)"
    )


def test_register_promote_load_champion(run, parts, trials):
    from flows.learners import build_learner

    tracking = run.tracking
    assert load_champion.fn(tracking) == (None, None)
    policy = build_learner("poem", PARAMS).fit(parts.train).policy_
    version = register_policy.fn(
        policy, run, {"gate_decision": "promoted", "data_fingerprint": "abc"}
    )
    assert version == "1" and alias_version(run.client(), tracking, "challenger") == "1"
    assert alias_version(run.client(), tracking, "champion") is None
    assert promote_policy.fn(version, run) is None
    champion_version, champion = load_champion.fn(tracking)
    assert champion_version == "1"
    np.testing.assert_array_equal(champion.coef, policy.coef)
    tags = run.client().get_model_version(tracking.registered_model, "1").tags
    assert tags["data_fingerprint"] == "abc" and tags["policy_uri"].endswith("/artifacts/policy")


def test_load_fingerprint_and_build(logs_dir, run):
    data = DataConfig(path=str(logs_dir / "good"))
    report, propensity, kept, header = check_logs.fn(data, ChecksConfig(), run)
    assert len(kept) == 1 and kept.items[0].n_rows == header.n_rows == 900  # one partition
    assert report.passed and propensity.n_rows == 900
    assert (
        fingerprint_logs.fn(data)
        == fingerprint_logs.fn(data)
        != fingerprint_logs.fn(DataConfig(path=str(logs_dir / "noise")))
    )
    with pytest.raises(FileNotFoundError, match="data.path"):
        fingerprint_logs.fn(DataConfig(path=str(logs_dir / "absent")))


@pytest.mark.usefixtures("prefect_harness")
def test_validate_and_quarantine_reconcile(logs_dir, run):
    data = DataConfig(path=str(logs_dir / "bad-propensity.parquet"))
    checks = ChecksConfig(min_rows=10, max_quarantine_fraction=0.2)
    report, _, kept, _ = check_logs.fn(data, checks, run)
    record_check_report.fn(report, run)
    assert enforce_checks.fn(report, checks) is report  # 10% quarantined: within the limit
    with pytest.raises(InvalidLogError, match=r"propensity: 90 of 900 rows"):
        enforce_checks.fn(report, ChecksConfig(quarantine=False))
    assert (kept.items[0].n_rows, report.n_quarantined, report.n_rows) == (810, 90, 900)
    artifacts = {a.path for a in run.client().list_artifacts(run.run_id, "checks")}
    assert {
        "checks/quarantine.parquet",
        "checks/quarantine_reasons.json",
        "checks/data_check_report.json",
        "checks/data_check_report.md",
    } <= artifacts
    assert "checks/data_docs" not in artifacts  # CDN-styled pages + ~4 MB of fonts per run


@pytest.mark.parametrize(
    ("exc", "retry"),
    [
        (OSError("disk"), True),
        (MlflowException("db locked"), True),
        (FileNotFoundError("x"), False),
        (OSError(errno.EROFS, "Read-only file system"), False),
        (OSError(errno.EACCES, "Permission denied"), False),
        (OSError(errno.ENOSPC, "No space left on device"), False),
        (OSError(errno.EIO, "I/O error"), True),
        (MlflowException("API request to http://x failed with exception Max retries"), False),
        # issue 37.5: a tracking server answering 503 to every HTTP retry (its PostgreSQL down)
        (
            MlflowException(
                "API request to http://x/api/2.0/mlflow/runs/log-batch failed with exception "
                "HTTPConnectionPool(host='x', port=5000): Max retries exceeded with url: "
                "/api/2.0/mlflow/runs/log-batch (Caused by ResponseError('too many 503 error "
                "responses'))"
            ),
            True,
        ),
        (MlflowException("no", error_code=RESOURCE_DOES_NOT_EXIST), False),
        # issue 24.14: sqlite's form of a full disk (wrapped by MLflow) was retried for minutes
        (MlflowException("(sqlite3.OperationalError) database or disk is full\n[SQL: …]"), False),
        (MlflowException("(sqlite3.OperationalError) attempt to write a readonly database"), False),
        (ValueError("bad"), False),
    ],
)
def test_only_transient_io_errors_retry(exc, retry):
    assert is_transient_io_error(None, None, SimpleNamespace(data=exc)) is retry


def test_trial_cache_key_includes_the_learning_code(prefect_harness, split, digits_log):
    from prefect import flow

    from flows.tasks.search import code_fingerprint

    @flow
    def three_trials():
        header = log_header(as_partitions(digits_log))
        args = (TrainingRows(split), split, header, "poem", PARAMS, {"variance_scale": 0.1}, 0.95)
        return [
            search_trial(*args, "data-key", code, return_state=True)
            for code in ("code-a", "code-a", "code-b")
        ]

    first, again, new_code = three_trials()
    assert first.is_completed() and first.name == "Completed"
    assert again.name == "Cached"
    assert new_code.name == "Completed"  # same data and params, other code: refitted
    assert again.result().ips.value == first.result().ips.value
    key = code_fingerprint()
    assert len(key) == 64 and int(key, 16) >= 0 and code_fingerprint() == key


def test_an_unreachable_tracking_server_is_an_error_within_seconds(monkeypatch):
    import socket
    import time

    for key in ("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_REQUEST_TIMEOUT"):
        monkeypatch.delenv(key, raising=False)
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tracking = TrackingConfig(uri=f"http://127.0.0.1:{port}")
    started = time.monotonic()
    with pytest.raises(MlflowException, match=r"API request to .* failed with exception") as info:
        ensure_experiment(client_for(tracking), tracking)
    assert time.monotonic() - started < 60  # MLflow's defaults: 7 retries, minutes
    assert is_transient_io_error(None, None, SimpleNamespace(data=info.value)) is False


def test_a_read_only_artifact_folder_fails_once_and_leaves_no_running_run(
    tmp_path, logs_dir, monkeypatch
):
    import flows.tasks.track as track
    from flows.config import PipelineConfig

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(track, "log_text", read_only)
    tracking = TrackingConfig(
        uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        artifact_location=(tmp_path / "mlartifacts").as_uri(),
        experiment="ro",
    )
    cfg = PipelineConfig(tracking=tracking, data=DataConfig(path=str(logs_dir / "good")))
    with pytest.raises(OSError, match="Read-only") as info:
        track.start_tracking.fn(cfg, "fingerprint", "flow-run")
    assert is_transient_io_error(None, None, SimpleNamespace(data=info.value)) is False
    client = client_for(tracking)
    (run,) = client.search_runs([client.get_experiment_by_name("ro").experiment_id])
    assert run.info.status == "FAILED"
