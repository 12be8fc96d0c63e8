"""A newcomer's own log (issue 36, measured items 1-5): one settings path for ``check`` and
``retrain``, own column names, text action ids, the deciding reason first, and a scheduled
run that recognises what ``retrain`` trained on.

Real components: the ``check`` command in process, ``retrain``'s own check stage
(:func:`flows.retrain._checked_log`) on a real MLflow store and the Prefect test harness.
"""

from __future__ import annotations

import json
from dataclasses import fields

import numpy as np
import pandas as pd
import pytest
import yaml
from mlflow import MlflowClient

from data_checks.stages import CheckSettings
from flows.checking import check_settings
from flows.cli import main
from flows.config import ChecksConfig, PropensityChecksConfig, load_config
from flows.tracking import TrackedRun
from poem.diagnostics.propensity import PropensityThresholds
from poem.exceptions import InvalidLogError
from poem.io.logs import log_fingerprint, read_log_table

ITEMS = ("shoes", "hats", "bags", "socks")


def newcomer_frame(n: int = 400, seed: int = 0, *, own_names: bool = True) -> pd.DataFrame:
    """A discrete log as a warehouse exports it: own feature names, clicks, text item ids."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    W = rng.normal(size=(3, len(ITEMS)))
    p = np.exp(0.5 * X @ W)
    p = 0.8 * p / p.sum(1, keepdims=True) + 0.2 / len(ITEMS)
    a = np.array([rng.choice(len(ITEMS), p=row) for row in p])
    click = rng.binomial(1, 0.1 + 0.3 * (a == np.argmax(X @ W, 1)))
    stamps = pd.date_range("2026-01-01", periods=n, freq="min").strftime("%Y-%m-%dT%H:%M:%S")
    frame = pd.DataFrame(
        {
            "event_id": np.arange(n),
            "timestamp": stamps,
            "age": X[:, 0],
            "income": X[:, 1],
            "visits": X[:, 2],
            "item": np.array(ITEMS)[a],
            "click": click,
            "propensity": p[np.arange(n), a],
        }
    )
    if own_names:
        return frame
    frame = frame.rename(
        columns={"age": "x_0", "income": "x_1", "visits": "x_2", "click": "reward"}
    )
    frame["item"] = a
    return frame.rename(columns={"item": "action"})


def _check(args, capsys) -> tuple[int, dict]:
    code = main(["check", *map(str, args), "--json"])
    out = capsys.readouterr().out
    return code, json.loads(out[out.index("{") :])


# -- measured item 1: one translation of checks:, its defaults written once --------------------
CONFIG_ONLY = {"quarantine", "block_on_warnings"}  # keys the library does not have


def test_the_checks_defaults_are_written_once_in_the_library():
    """``CheckSettings`` had min_rows 1 and a 5 % quarantine limit; the config 100 and 1 %."""
    from pydantic_core import PydanticUndefined

    from flows.config.checks import SETTINGS, THRESHOLDS

    for section, owner in ((ChecksConfig, SETTINGS), (PropensityChecksConfig, THRESHOLDS)):
        for name, f in section.model_fields.items():
            if name in CONFIG_ONLY or name == "propensity":
                continue
            assert f.default is PydanticUndefined, f"{name} is written in the config"
            assert f.default_factory.owner == owner, name
    written = {
        n for n, f in ChecksConfig.model_fields.items() if f.default is not PydanticUndefined
    }
    assert written == CONFIG_ONLY


@pytest.mark.parametrize(
    "owner, key, value",
    [
        (CheckSettings, "min_rows", 7),
        (CheckSettings, "future_timestamps", "quarantine"),
        (PropensityThresholds, "near_deterministic_fail", 0.9),
    ],
)
def test_a_changed_library_default_is_what_check_and_retrain_use(
    owner, key, value, monkeypatch, tmp_path
):
    from flows.config._base import _default_of

    (field,) = (f for f in fields(owner) if f.name == key)
    monkeypatch.setattr(field, "default", value)
    _default_of.cache_clear()
    try:
        (tmp_path / "mlflow.yml").write_text("data: {family: discrete}\n")
        cfg = load_config(tmp_path / "mlflow.yml")
        settings = check_settings(cfg.checks, cfg.data)
    finally:
        _default_of.cache_clear()
    section = cfg.checks if owner is CheckSettings else cfg.checks.propensity
    assert getattr(section, key) == value
    where = settings if owner is CheckSettings else settings.thresholds
    assert getattr(where, key) == value


def test_an_invalid_library_default_is_refused_like_a_given_value(monkeypatch):
    from pydantic import ValidationError

    from flows.config._base import _default_of

    (field,) = (f for f in fields(CheckSettings) if f.name == "min_rows")
    monkeypatch.setattr(field, "default", 0)
    _default_of.cache_clear()
    try:
        with pytest.raises(ValidationError) as info:
            ChecksConfig()
    finally:
        _default_of.cache_clear()
    assert info.value.errors()[0]["loc"] == ("min_rows",)


# a value per checks: key that changes what the check finds on the test log (the log has one
# NaN feature and one row dated in 2100; the base config allows 0.4 % quarantined rows)
CHANGED = {
    "min_rows": 1000,
    "min_propensity": 0.1,
    "quarantine": False,
    "max_quarantine_fraction": 0.0,
    "block_on_warnings": True,  # decides promotion, not the check: both pass
    "future_timestamps": "quarantine",
    "propensity.min_propensity_warn": 0.2,
    "propensity.near_deterministic_epsilon": 0.95,
    "propensity.near_deterministic_warn": 0.0,
    "propensity.near_deterministic_fail": 0.6,
    "propensity.uniform_weight_fail_tolerance": 0.0,
    "propensity.uniform_weight_min_ess": 1e9,
    "propensity.min_ess_fraction_warn": 0.5,
    "propensity.min_ess_fraction_fail": 0.05,
    "propensity.never_logged_warn": 0.1,
    "propensity.never_logged_fail": 0.0,
    "propensity.distribution_tolerance": 0.5,
    "propensity.clipped_fraction_warn": 0.0,
    "propensity.confidence_level": 0.5,
}


def checks_keys() -> list[str]:
    """Every key of the ``checks:`` section, dotted (a new key is a new case of the tests)."""
    keys = [k for k in ChecksConfig.model_fields if k != "propensity"]
    return keys + [f"propensity.{k}" for k in PropensityChecksConfig.model_fields]


def test_every_checks_key_is_covered():
    assert set(checks_keys()) == set(CHANGED)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One MLflow store (sqlite) and the test log, shared by the agreement cases."""
    root = tmp_path_factory.mktemp("agree")
    frame = newcomer_frame(own_names=False)
    frame.loc[5, "x_0"] = np.nan
    frame.loc[7, "timestamp"] = "2100-01-01T00:00:00"
    frame.to_csv(root / "log.csv", index=False)
    return root


def _config(root, key: str | None, value) -> str:
    checks: dict = {"max_quarantine_fraction": 0.004}
    if key is not None:
        section, _, name = key.rpartition(".")
        (checks.setdefault(section, {}) if section else checks)[name] = value
    cfg = {
        "tracking": {
            "uri": f"sqlite:///{root / 'mlflow.db'}",
            "artifact_location": str(root / "mlartifacts"),
            "experiment": "agree",
        },
        "data": {
            "path": str(root / "log.csv"),
            "family": "discrete",
            "reward_bounds": [0, 1],
            "n_actions": 4,
        },
        "checks": checks,
    }
    path = root / f"{key or 'base'}.yml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _retrain_check(config: str) -> tuple[bool, str | None, list | None]:
    """``retrain``'s own check stage on a real MLflow run: (passed, first reason, statuses)."""
    from flows.retrain import _checked_log

    cfg = load_config(config)
    client = MlflowClient(cfg.tracking.uri)
    name = cfg.tracking.experiment
    found = client.get_experiment_by_name(name)
    location = cfg.tracking.artifact_location  # in tmp, not ./mlruns
    exp = found.experiment_id if found else client.create_experiment(name, location)
    run = TrackedRun(cfg.tracking, exp, client.create_run(exp).info.run_id)
    try:
        _, _, propensity, _ = _checked_log(cfg, run, None)
    except InvalidLogError as exc:
        v = exc.violations[0]
        return False, f"{v.column}: {v.message}", None
    return True, None, [(c.name, c.status) for c in propensity.checks]


@pytest.mark.parametrize("key", checks_keys())
def test_check_reads_every_checks_key_as_retrain_does(store, key):
    """``check`` passed only min_propensity and max_quarantine_fraction to the library."""
    from flows.cli import build_parser
    from flows.commands.check import settings_of

    config = _config(store, key, CHANGED[key])
    cfg = load_config(config)
    args = build_parser().parse_args(["check", str(store / "log.csv"), "--config", config])
    ours, flows = settings_of(args, cfg), check_settings(cfg.checks, cfg.data)
    assert ours == flows
    base = load_config(_config(store, None, None))
    if key != "block_on_warnings":  # promotion only
        assert ours != check_settings(base.checks, base.data), key


# the keys whose changed value refuses the test log (the others, and the defaults, pass it;
# rows below checks.min_propensity are kept by both, a warning, and block the gate: issue 34)
REFUSING = (
    "min_rows",
    "quarantine",
    "max_quarantine_fraction",
    "future_timestamps",
    "propensity.near_deterministic_epsilon",
)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
@pytest.mark.parametrize("key", [None, *checks_keys()], ids=lambda k: k or "defaults")
def test_check_and_retrain_agree_on_every_refusal(store, key, capsys, monkeypatch):
    """A 50-row log passed ``check`` (library min_rows 1) and failed ``retrain`` (100).

    Every ``checks:`` key, changed to a value that changes what the check finds: both refuse
    the log with the same first reason, or both pass it with the same status of every
    propensity check.
    """
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = _config(store, key, CHANGED[key] if key else None)
    code, report = _check([store / "log.csv", "--config", config], capsys)
    passed, reason, statuses = _retrain_check(config)
    assert (code == 0) == passed, (key, report, reason)
    assert passed == (key not in REFUSING), (key, report, reason)
    if passed:  # the same status of every propensity check
        assert statuses == [(c["name"], c["status"]) for c in report["propensity"]["checks"]]
        return
    hard = report["data_checks"]["hard_failures"]
    if hard:
        assert hard[0].startswith(reason.split(": ")[0] + ": "), (hard[0], reason)
    else:  # a failed propensity check
        failed = [c["name"] for c in report["propensity"]["checks"] if c["status"] == "fail"]
        assert reason.startswith(failed[0] + ": "), reason


# -- measured item 2: a reward column of its own name ---------------------------------------------
def test_a_click_column_is_named_with_the_flag_that_fixes_it(tmp_path, capsys):
    """Was: ``0 rows ... unexpected ValueError: the log declares no loss bounds (please report
    this)``."""
    frame = newcomer_frame(own_names=False).rename(columns={"reward": "click"})
    frame.to_csv(tmp_path / "raw.csv", index=False)
    base = [tmp_path / "raw.csv", "--family", "discrete", "--reward-bounds", "0", "1"]
    code, report = _check([*base, "--n-actions", "4"], capsys)
    assert code == 1
    (first,) = report["data_checks"]["hard_failures"]
    assert first.startswith("loss: column is missing: the log has neither")
    assert "click" in first and "--reward-column COLUMN" in first and "unexpected" not in first
    code, report = _check([*base, "--reward-column", "click"], capsys)
    assert code == 0, report["data_checks"]["hard_failures"]
    code, report = _check([*base, "--reward-column", "clicks"], capsys)
    assert report["data_checks"]["hard_failures"][0].startswith(
        "clicks: column is missing (named by reward_column)"
    )


# -- measured item 3: the deciding reason first ---------------------------------------------------
def test_a_refusal_leads_with_the_deciding_reason(tmp_path, capsys):
    """3 % NaN features, 3 repeated ids, 2 zero propensities: the quarantine limit decides."""
    frame = newcomer_frame(8000, own_names=False)
    frame.loc[:239, "x_0"] = np.nan
    frame.loc[300:302, "event_id"] = 299
    frame.loc[400:401, "propensity"] = 0.0
    frame.to_csv(tmp_path / "bad.csv", index=False)
    args = [tmp_path / "bad.csv", "--family", "discrete", "--reward-bounds", "0", "1"]
    code = main(["check", *map(str, args)])
    first = capsys.readouterr().out.splitlines()[0]
    assert code == 1
    assert first.endswith(
        "FAILED: quarantine: 246 of 8,000 rows (3.08%) failed row-level checks, more than the "
        "allowed 1.00%"
    )
    from data_checks.check import check_logs
    from data_checks.report import raise_for_failures

    outcome = check_logs(tmp_path / "bad.csv", family="discrete", reward_bounds=(0, 1))
    with pytest.raises(InvalidLogError) as info:  # what retrain raises and prints first
        raise_for_failures(outcome.report, quarantine=False)
    assert [v.column for v in info.value.violations] == [
        "quarantine",
        "event_id",
        "propensity",
        "x_0",
    ]


# -- measured item 4: own feature names, text action ids ------------------------------------------
def test_own_feature_names_and_text_action_ids_have_a_way_in(tmp_path, capsys):
    frame = newcomer_frame()
    frame.to_csv(tmp_path / "raw.csv", index=False)
    base = [tmp_path / "raw.csv", "--family", "discrete", "--reward-bounds", "0", "1"]
    base += ["--reward-column", "click", "--action-column", "item"]
    code, report = _check(base, capsys)
    (first,) = report["data_checks"]["hard_failures"]
    assert first.startswith("action: holds 4 text ids ('bags', 'hats', 'shoes'")
    assert "--action-ids bags,hats,shoes,socks (data.action_ids)" in first
    code, report = _check([*base, "--action-ids", ",".join(ITEMS)], capsys)
    (first,) = report["data_checks"]["hard_failures"]
    assert first.startswith("context_columns: the log has no feature columns")
    assert "--context-columns a,b or a glob 'f_*' (data.context_columns)" in first
    ok = [*base, "--action-ids", ",".join(ITEMS), "--context-columns", "a*,income,visits"]
    code, report = _check(ok, capsys)
    assert code == 0 and report["data_checks"]["extra_columns"] == []
    table = read_log_table(
        tmp_path / "raw.csv",
        family="discrete",
        reward_bounds=(0, 1),
        reward_column="click",
        action_column="item",
        action_ids=ITEMS,
        context_columns=("a*", "income", "visits"),
    )
    assert table.meta.action_ids == ITEMS and table.meta.n_actions == 4 and table.meta.rewards
    assert table.frame.attrs["poem"]["action_ids"] == list(ITEMS)  # recorded in the metadata
    log = table.to_log()
    assert log.feature_names == ("age", "income", "visits") and log.action_ids == ITEMS
    assert log.actions.tolist() == [ITEMS.index(i) for i in frame["item"]]
    assert np.array_equal(log.losses, -frame["click"].to_numpy(float))
    code, report = _check([*ok[:-1], "f_*"], capsys)
    assert report["data_checks"]["hard_failures"][0].startswith(
        "context_columns: 'f_*' matches no column; the log's columns: event_id"
    )


def test_the_data_section_names_the_columns_for_check_and_retrain(tmp_path, capsys):
    frame = newcomer_frame()
    frame.to_csv(tmp_path / "raw.csv", index=False)
    data = {
        "path": "raw.csv",
        "family": "discrete",
        "reward_bounds": [0, 1],
        "reward_column": "click",
        "action_column": "item",
        "action_ids": list(ITEMS),
        "context_columns": ["age", "income", "visits"],
    }
    config = tmp_path / "mlflow.yml"
    config.write_text(yaml.safe_dump({"data": data}))
    code, report = _check([tmp_path / "raw.csv", "--config", config], capsys)
    assert code == 0, report["data_checks"]["hard_failures"]
    assert load_config(config).data.overrides()["n_actions"] == 4


# -- measured item 5: the schedule recognises what retrain trained on ----------------------------
def test_a_partition_has_one_fingerprint_as_its_folder_and_as_the_folder_holding_it(tmp_path):
    from poem.io.parquet import write_log

    log = read_log_table(
        _write(tmp_path / "raw.csv"), family="discrete", reward_bounds=(0, 1)
    ).to_log()
    write_log(log, tmp_path / "decisions" / "date=2026-01-01")
    whole = log_fingerprint(tmp_path / "decisions")
    assert log_fingerprint(tmp_path / "decisions" / "date=2026-01-01") == whole
    write_log(log, tmp_path / "decisions" / "date=2026-01-02")
    assert log_fingerprint(tmp_path / "decisions") != whole


def _write(path):
    newcomer_frame(own_names=False).to_csv(path, index=False)
    return path


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_the_schedule_skips_the_partition_retrain_trained_on(tmp_path, monkeypatch):
    """``retrain --logs decisions`` tags its version with the folder's fingerprint; the
    schedule staged ``decisions/date=…`` and named its files differently: trained twice."""
    from flows.deployments import scheduled_retrain
    from flows.tracking import client_for
    from poem.io.parquet import write_log

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    log = read_log_table(_write(tmp_path / "raw.csv"), family="discrete", reward_bounds=(0, 1))
    write_log(log.to_log(), tmp_path / "decisions" / "date=2026-01-01")
    (tmp_path / "mlflow.yml").write_text("data: {path: decisions}\n")
    cfg = load_config(tmp_path / "mlflow.yml")
    client = client_for(cfg.tracking)
    client.create_registered_model(cfg.tracking.registered_model)
    client.create_model_version(  # what retrain registers: the fingerprint of its --logs
        cfg.tracking.registered_model,
        source=(tmp_path / "model").as_uri(),
        tags={"data_fingerprint": log_fingerprint(tmp_path / "decisions")},
    )
    result = scheduled_retrain(str(tmp_path / "mlflow.yml"), None)
    assert result == {
        "status": "skipped",
        "reason": "already trained as version 1",
        "partitions": ["date=2026-01-01"],
    }


def test_the_deployment_creates_its_log_folder_when_asked(tmp_path, capsys, monkeypatch):
    from flows.deployments import logs_folder

    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"pass --create to create it empty now"):
        logs_folder("mlflow.yml", "decisions")
    assert logs_folder("mlflow.yml", "decisions", create=True).is_dir()
    assert "created decisions: empty; the decision log" in capsys.readouterr().err


# -- the served model and the decision log speak the log's own ids and rewards ------------------
def test_the_served_model_and_the_decision_log_use_the_own_ids_and_rewards(tmp_path):
    """``DecisionLog`` took losses only and integer actions; the pyfunc answered 0..K-1."""
    from deploy.pyfunc import StochasticPolicyModel
    from flows.tasks.register import with_action_ids
    from poem.io.decisions import DecisionLog
    from poem.io.logs import read_log
    from poem.policies import StochasticPolicy, make_family

    rng = np.random.default_rng(0)
    policy = StochasticPolicy(
        make_family("discrete", 3, 4, True),
        rng.normal(size=(4, 4)),
        1.0,
        0.01,
        {"feature_names": ["age", "income", "visits"]},
    )
    model = StochasticPolicyModel(with_action_ids(policy, ITEMS))
    request = pd.DataFrame(rng.normal(size=(20, 3)), columns=["age", "income", "visits"])
    response = model.predict(None, request, {"seed": 1})
    assert set(response["action"]) <= set(ITEMS) and set(response["map_action"]) <= set(ITEMS)
    plain = StochasticPolicyModel(policy).predict(None, request, {"seed": 1})
    assert response["action"].tolist() == [ITEMS[a] for a in plain["action"]]
    log = DecisionLog(
        tmp_path / "decisions",
        "discrete",
        ["age", "income", "visits"],
        reward_bounds=(0, 1),
        action_ids=ITEMS,
    )
    assert log.loss_bounds == (-1.0, 0.0) and log.n_actions == 4
    log.add_decisions(request, response)
    clicks = rng.binomial(1, 0.3, 20)
    assert log.add_feedback(response["event_id"], rewards=clicks) == 20
    log.flush(force=True)
    written = read_log(tmp_path / "decisions")
    assert written.actions.tolist() == plain["action"].tolist()
    assert np.array_equal(written.losses, -clicks.astype(float)) and written.action_ids == ITEMS
    again = read_log(  # the decision log read with the CSV's data: settings (the schedule)
        tmp_path / "decisions",
        family="discrete",
        reward_bounds=(0, 1),
        reward_column="click",
        action_column="item",
        action_ids=ITEMS,
        context_columns=("age", "income", "visits"),
    )
    assert np.array_equal(again.losses, written.losses) and again.loss_bounds == (-1.0, 0.0)
    assert np.array_equal(again.contexts, written.contexts)
    with pytest.raises(ValueError, match=r"1 action\(s\) are not among the action ids"):
        log.add_decisions(request[:1], response[:1].assign(action="boots", event_id="x"))
    with pytest.raises(ValueError, match="give loss_bounds or reward_bounds"):
        DecisionLog(tmp_path / "d2", "discrete", ["a"], n_actions=2)


def test_a_reward_log_reads_rewards_in_the_headline():
    """A click log read "IPS risk -0.2500": the negated click-through rate."""
    from flows.retrain import RetrainResult

    metrics = {
        "challenger_risk": -0.25,
        "champion_risk": -0.2,
        "risk_difference": -0.05,
        "risk_difference_lower": -0.08,
        "risk_difference_upper": -0.02,
        "risk_difference_ucb": -0.01,
    }
    result = RetrainResult("promoted", "2", "2", "1", (), metrics, estimator="ips", rewards=True)
    assert result.headline()[:2] == [
        "PROMOTED: challenger v2 IPS reward (e.g. click-through rate) 0.2500 vs champion v1 0.2000",
        "  gain +0.0500, interval [+0.0200, +0.0800], lower bound +0.0100; champion is now v2",
    ]
