"""What MLflow, Prefect and the terminal say about a run (issue 36, measured item 7)."""

from __future__ import annotations

import fcntl
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flows.config import TrackingConfig
from flows.story import decision_line, model_description, version_description
from flows.tracking import client_for, store_lock
from poem.ledger import LedgerEntry, TestWindow

ROOT = Path(__file__).resolve().parents[2]

PROMOTED = {
    "gate_decision": "promoted",
    "gated_against": "1",
    "replaced_champion": "1",
    "promotion": "done",
    "challenger_risk": "0.162434 [0.076826, 0.248041] (ips)",
    "champion_risk": "0.275912 [0.205618, 0.346206] (ips)",
    "difference_risk": "-0.113478 [-0.176019, -0.0509378] (ips_difference)",
    "gate_upper_bound": "-0.00104706",
    "gate_reasons": "passed: improvement: bound -0.001 below 0 | passed: effective sample size",
    "n_rows": "2396",
    "data_fingerprint": "1d8fa15cbc26a42ed50de0e664b257f0",
    "challenger_kind": "learned",
}


def test_a_version_description_says_decision_risks_bound_and_the_champion_replaced():
    """The version description was empty: the page showed only tags."""
    text = version_description(PROMOTED)
    lines = text.splitlines()
    assert lines[0] == (
        "PROMOTED: IPS risk 0.1624 vs 0.2759 of champion v1; gate bound -0.0010; "
        "replaced champion v1 as champion"
    )
    assert "| challenger (this version) | 0.1624 | [0.0768, 0.2480] |" in lines
    assert "| champion v1 | 0.2759 | [0.2056, 0.3462] |" in lines
    assert "| difference | -0.1135 | [-0.1760, -0.0509] |" in lines
    assert "Trained on 2,396 rows (data fingerprint `1d8fa15cbc26`); challenger learned." in lines
    assert lines[-2:] == [
        "- passed: improvement: bound -0.001 below 0",
        "- passed: effective sample size",
    ]
    first = {**PROMOTED, "gated_against": "logging-policy", "replaced_champion": ""}
    assert (
        version_description(first)
        .splitlines()[0]
        .endswith(
            "of the logging policy; gate bound -0.0010; replaced the logging policy as champion"
        )
    )
    pending = {**PROMOTED, "promotion": "pending"}
    assert (
        version_description(pending)
        .splitlines()[0]
        .endswith("to replace champion v1 (promotion pending)")
    )
    rejected = {**PROMOTED, "gate_decision": "rejected", "promotion": ""}
    assert version_description(rejected).splitlines()[0].endswith("champion v1 stays champion")
    assert version_description({}).splitlines()[0].startswith("NOT GATED: risk n/a vs n/a")


def test_a_reward_logs_version_description_shows_rewards_not_negative_risks():
    """A click log's version page said "IPS risk -0.0512": the risks of δ = −reward."""
    clicks = {
        **PROMOTED,
        "feedback": "reward",
        "challenger_risk": "-0.0612 [-0.0701, -0.0523] (ips)",
        "champion_risk": "-0.0512 [-0.0580, -0.0444] (ips)",
        "difference_risk": "-0.01 [-0.015, -0.005] (ips_difference)",
        "gate_upper_bound": "-0.002",
    }
    lines = version_description(clicks).splitlines()
    assert lines[0] == (
        "PROMOTED: IPS reward 0.0612 vs 0.0512 of champion v1; gate bound 0.0020; "
        "replaced champion v1 as champion"
    )
    assert "| | reward | interval |" in lines
    assert "| challenger (this version) | 0.0612 | [0.0523, 0.0701] |" in lines
    assert "| gain | 0.0100 | [0.0050, 0.0150] |" in lines
    assert "Gate bound (lower confidence bound of the gain): 0.0020." in lines
    # a loss log (and a version tagged before the tag existed) is unchanged
    assert version_description({**PROMOTED, "feedback": "loss"}) == version_description(PROMOTED)


def test_version_tags_say_whether_the_log_gave_rewards():
    from types import SimpleNamespace

    from flows.registry import version_tags
    from poem.estimators import Estimate

    est = Estimate("ips", 0.1, 0.05, 0.0, 0.2, 100, 0.95, 100.0, 0.0, "t")
    comparison = SimpleNamespace(
        decision="rejected", reasons=(), upper_bound=0.01, promote=False,
        challenger=est, champion=est, difference=est,
    )  # fmt: skip
    common = {"data_fingerprint": "f", "flow_run_id": "r", "n_rows": 10}
    assert version_tags(comparison, **common)["feedback"] == "loss"
    assert version_tags(comparison, **common, rewards=True)["feedback"] == "reward"


def test_the_model_description_is_the_ledger_in_words():
    """The model page's first screen was the raw JSON of the ``gate_ledger`` tag."""
    tracking = TrackingConfig(uri="sqlite:///x.db")
    window = TestWindow(start="2026-01-02T00:29:57.000000000", end="2026-01-02T00:39:55")
    entries = [
        LedgerEntry(window, 1, 0.04, run_id="4bb08d69072b46b9", champion="1"),
        LedgerEntry(
            TestWindow(rows="a1b2c3d4e5f60718"), 2, 0.008, run_id="5cc08d69072b46b9", champion="1"
        ),
    ]
    assert model_description(tracking, "2", entries).splitlines() == [
        "Policies learned by poem-pipeline's `retrain` flow; `@champion` is served (at the last "
        "retrain: champion v2). Each version's description says what the gate decided.",
        "",
        "Gate ledger (2 attempts; the JSON is in the tags `gate_ledger.*` of the registered "
        "model `poem-gate-ledger`):",
        "- attempt 1 against champion v1 on test rows 2026-01-02T00:29:57 to "
        "2026-01-02T00:39:55: α = 0.04 (run `4bb08d69`)",
        "- attempt 2 against champion v1 on test rows `a1b2c3d4e5f60718`: α = 0.008 "
        "(run `5cc08d69`)",
    ]
    assert model_description(tracking, None, []).endswith(
        "\n\nGate ledger: no attempt recorded yet."
    )


def test_a_scheduled_run_names_its_decision_in_one_line():
    from flows.retrain import RetrainResult

    result = RetrainResult(
        decision="rejected",
        challenger_version="3",
        champion_version="2",
        previous_champion_version="2",
        reasons=(),
        estimator="snips",
        metrics={"challenger_risk": 0.2, "champion_risk": 0.19, "risk_difference_ucb": 0.04},
    )
    assert decision_line(result, ["date=2026-01-01", "date=2026-01-02"]) == (
        "retrain on date=2026-01-01, date=2026-01-02: REJECTED challenger v3 (SNIPS risk "
        "0.2000 vs 0.1900 of champion v2, bound +0.0400); champion stays v2"
    )


def test_no_lock_file_is_left_beside_the_store(tmp_path):
    """``mlflow.db.lock`` was left untracked in the repo after the Quick start."""
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    client_for(TrackingConfig(uri=uri)).search_experiments()
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["mlflow.db"]
    from flows.tracking import store_lock_path

    path = store_lock_path(uri)
    assert path.parent == Path(os.environ.get("TMPDIR", "/tmp")).resolve() or path.is_file()
    # the same store through another spelling of its path: the same lock
    relative = os.path.relpath(tmp_path / "store" / "mlflow.db")
    assert store_lock_path(f"sqlite:///{relative}") == path
    with store_lock(uri), open(path, "rb") as other:  # still excludes other holders
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_a_tracking_server_client_prints_no_view_run_lines(monkeypatch):
    """A worker's retrain printed 40 "🏃 View run … at: …" lines (one per ended trial run)."""
    from mlflow.environment_variables import MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT

    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    client_for(TrackingConfig(uri="http://127.0.0.1:9"))
    assert MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.get() is True


def test_creating_a_gx_context_logs_no_info_line(caplog):
    """``INFO | great_expectations...base - Created temporary directory …`` in every run."""
    from data_checks.runner import make_context

    with caplog.at_level(logging.WARNING):  # the console's level
        make_context()
    assert [r for r in caplog.records if r.name.startswith("great_expectations")] == []
    gx = logging.getLogger("great_expectations.data_context.types.base")
    assert gx.getEffectiveLevel() == logging.getLogger("great_expectations").getEffectiveLevel()


def test_a_refit_that_does_not_converge_warns_in_the_run_log_not_the_console(
    digits_log, recwarn, caplog
):
    """``WARNING | py.warnings - … ConvergenceWarning: POEM(solver='adagrad') did not converge``."""
    from flows.config import TrainingConfig
    from flows.tasks.train import fit_learner
    from poem.learners.training_rows import TrainingRows
    from poem.log_rows import as_partitions, split_partitioned

    training = TrainingConfig(params={"solver": "adagrad", "max_epochs": 1, "random_state": 0})
    split = split_partitioned(as_partitions(digits_log), random_state=0, by_time=False)
    with caplog.at_level(logging.INFO, logger="flows.tasks"):
        fitted = fit_learner(TrainingRows(split, "train"), digits_log, training, {})
    assert not fitted.converged_
    assert [w for w in recwarn if w.category.__name__ == "ConvergenceWarning"] == []
    assert any("did not converge" in r.getMessage() for r in caplog.records)


def test_the_selection_refits_a_configuration_on_a_log_of_training_rows(digits_log):
    """issue 35: the cross-fitted evidence refits through fit_learner on a LoggedBandit."""
    import numpy as np

    from flows.config import TrainingConfig
    from flows.tasks.train import fit_learner

    training = TrainingConfig(params={"solver": "lbfgs", "max_iter": 5, "random_state": 0})
    rows = digits_log.take(np.arange(450))
    fitted = fit_learner(rows, digits_log, training, {"variance_scale": 0.01})
    assert fitted.variance_scale == 0.01 and fitted.policy_.coef.shape[0] == 10
    again = fit_learner(rows, digits_log, training, {"variance_scale": 0.01})
    assert np.array_equal(fitted.policy_.coef, again.policy_.coef)
    other = fit_learner(digits_log.take(np.arange(450, 900)), digits_log, training, {})
    assert not np.array_equal(fitted.policy_.coef, other.policy_.coef)


@pytest.mark.slow
def test_prefect_flow_runs_carry_their_log_lines_and_the_console_stays_quiet(prefect_harness):
    """Prefect's flow-run pages said "This run didn't generate logs" (.ci/env.sh's WARNING)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.settings import PREFECT_API_URL

    script = textwrap.dedent(
        """
        from prefect import flow, task, get_run_logger

        @task
        def stage():
            get_run_logger().info("task line for the API")

        @flow
        def story():
            get_run_logger().info("flow line for the API")
            stage()
            from prefect.runtime import flow_run
            return str(flow_run.get_id())

        print(story())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_LOGGING")}
    env["PREFECT_API_URL"] = PREFECT_API_URL.value()
    done = subprocess.run(
        ["bash", "-c", f'source .ci/env.sh && exec {sys.executable} -c "$0"', script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    flow_run_id = done.stdout.strip().splitlines()[-1]
    assert "line for the API" not in done.stdout + done.stderr  # the console stays at WARNING

    import anyio

    async def read() -> list[str]:
        async with get_client() as client:
            logs = await client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
            )
        return [log.message for log in logs]

    for _ in range(50):  # the API log worker sends in batches
        messages = anyio.run(read)
        if {"flow line for the API", "task line for the API"} <= set(messages):
            break
        import time

        time.sleep(0.2)
    assert {"flow line for the API", "task line for the API"} <= set(messages), messages


def _partitioned(logs_dir: Path, root: Path, day: str) -> Path:
    target = root / f"date={day}"
    target.mkdir(parents=True)
    for file in (logs_dir / "good").rglob("*.parquet"):
        shutil.copy2(file, target / file.name)
    return root


@pytest.mark.slow
def test_a_scheduled_run_prints_its_decision_and_describes_the_version_and_the_model(
    prefect_harness, tmp_path, logs_dir, write_config, capfd
):
    from flows.deployments import scheduled_retrain

    config = write_config(logs_dir / "good")
    root = _partitioned(logs_dir, tmp_path / "decisions", "2026-01-01")
    capfd.readouterr()
    result = scheduled_retrain(str(config), str(root))
    assert result["decision"] == "promoted"
    out, err = capfd.readouterr()
    lines = [line for line in out.splitlines() if line.startswith("retrain on ")]
    assert len(lines) == 1 and lines[0].startswith(
        "retrain on date=2026-01-01: PROMOTED challenger v1 (IPS risk "
    ), out
    assert lines[0].endswith("; champion is now v1")
    assert "View run" not in out
    assert "great_expectations" not in err and "ConvergenceWarning" not in err, err

    tracking = TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = client_for(tracking)
    version = client.get_model_version(tracking.registered_model, "1")
    assert re.fullmatch(
        r"PROMOTED: IPS risk 0\.\d{4} vs 0\.\d{4} of the logging policy; gate bound "
        r"-0\.\d{4}; replaced the logging policy as champion",
        version.description.splitlines()[0],
    ), version.description
    model = client.get_registered_model(tracking.registered_model)
    assert "champion v1" in model.description
    assert "- attempt 1 against the logging policy on test rows " in model.description
    # the second run on the same files is skipped, in one line
    capfd.readouterr()
    assert scheduled_retrain(str(config), str(root))["status"] == "skipped"
    assert "retrain on date=2026-01-01: skipped, already trained as version 1\n" in (
        capfd.readouterr().out
    )


@pytest.fixture
def logger_state():
    """Restore every logger's level and propagation after a test that calls ``quiet()``."""
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict)]
    saved = [(lg, lg.level, lg.propagate) for lg in loggers if isinstance(lg, logging.Logger)]
    yield
    for lg, level, propagate in saved:
        lg.setLevel(level)
        lg.propagate = propagate


@pytest.mark.slow
def test_the_cli_sends_run_logs_to_a_persistent_prefect_server_not_the_terminal(
    prefect_harness, monkeypatch, capfd, logger_state
):
    """``retrain``/``demo`` silenced Prefect's run loggers: flow-run pages showed no logs."""
    from prefect import flow, get_run_logger
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.logging.handlers import APILogWorker
    from prefect.runtime import flow_run
    from prefect.settings import PREFECT_API_URL

    from flows.commands._console import quiet

    monkeypatch.setenv("PREFECT_API_URL", PREFECT_API_URL.value())  # exported, as the README
    quiet()

    @flow
    def story_cli() -> str:
        get_run_logger().info("a line for the flow-run page")
        return str(flow_run.get_id())

    flow_run_id = story_cli()
    APILogWorker.drain_all(timeout=10)
    out, err = capfd.readouterr()
    assert "a line for the flow-run page" not in out + err

    import anyio

    async def read() -> list[str]:
        async with get_client() as client:
            logs = await client.read_logs(
                LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
            )
        return [log.message for log in logs]

    assert "a line for the flow-run page" in anyio.run(read)


def test_a_run_prints_no_convergence_warning_of_concurrent_search_trials():
    """``WARNING | py.warnings - … ConvergenceWarning`` got past the per-trial filter of the
    search (``warnings.catch_warnings`` is not thread-safe) in ``simulate`` and deployments."""
    script = textwrap.dedent(
        """
        import sys, warnings
        if sys.argv[1] == "flows":
            import flows.tasks  # noqa: F401 - what every retrain imports
        from poem.datasets import load_dataset
        from poem.learners.poem import POEM
        from poem.simulate import fit_logging_policy, supervised_to_bandit

        ds = load_dataset("digits")
        h0 = fit_logging_policy(ds.X_train, ds.Y_train, family="discrete", fraction=0.05,
                                random_state=0)
        log = supervised_to_bandit(ds.X_train[:300], ds.Y_train[:300], h0, random_state=1)
        POEM(solver="adagrad", max_epochs=1, random_state=0).fit(log)
        """
    )
    outputs = {}
    for mode in ("library", "flows"):
        done = subprocess.run(
            [sys.executable, "-c", script, mode],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        outputs[mode] = done.stderr
    assert "ConvergenceWarning" in outputs["library"]  # the library still warns its users
    assert "ConvergenceWarning" not in outputs["flows"], outputs["flows"]


def test_the_headline_says_where_a_learned_challenger_was_shown_better():
    """issue 35: a fit shown only on the training folds (cross-fitted) is not said 'on validation'."""
    from flows.retrain import TRAINING_FOLDS, RetrainResult

    kw = {"decision": "promoted", "challenger_version": "3", "champion_version": "3"}
    kw |= {"previous_champion_version": "2", "reasons": (), "estimator": "snips"}
    assert RetrainResult(**kw).challenger_origin() == (
        "challenger learned: shown better than champion v2 re-tempered on validation "
        "(paired DR and model bounds)"
    )
    assert RetrainResult(**kw, learning_shown_on=TRAINING_FOLDS).challenger_origin() == (
        "challenger learned: shown better than champion v2 re-tempered on the training folds, "
        "its configuration refitted (paired DR and model bounds)"
    )
