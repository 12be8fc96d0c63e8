"""``data.propensity: estimate``: a log without propensities through ``check`` and ``retrain``.

The one-line refusals (no propensity column, a deterministic logger, a propensity column while
estimating, bad config values) are pinned; one ``retrain`` runs the real flow (Prefect test
harness, MLflow on sqlite) and checks the prepared log's metadata, the MLflow diagnostics and
the labels of the run, the version and the decision.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow import MlflowClient

from flows.cli import main
from flows.config import ConfigError, load_config
from poem.io.parquet import METADATA_KEY, log_to_frame

NO_COLUMN = (
    "propensity: column is missing; name yours with --propensity-column COLUMN "
    "(data.propensity_column), or set data.propensity: estimate (check --estimate, retrain "
    "--set data.propensity=estimate) to estimate the logging policy"
)


def _write(frame, path):
    table = pa.Table.from_pandas(frame, preserve_index=False)
    meta = json.dumps(frame.attrs[METADATA_KEY])
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: meta}), path)
    return path


@pytest.fixture(scope="module")
def deterministic_log(tmp_path_factory, digits_log):
    """The digits rows with the action a threshold rule of one pixel: no overlap."""
    frame = log_to_frame(digits_log).drop(columns=["propensity"])
    frame["action"] = (frame["x_36"] > 8).astype("int64") * 3
    return _write(frame, tmp_path_factory.mktemp("det") / "rule.parquet")


def test_check_names_the_key_that_enables_estimation(logs_dir, capsys):
    assert main(["check", str(logs_dir / "no-propensity.parquet")]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"-> FAILED: {NO_COLUMN}"), first


def test_check_estimates_and_prints_the_diagnostics(logs_dir, tmp_path, capsys):
    log = logs_dir / "no-propensity.parquet"
    assert main(["check", str(log), "--estimate", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "-> PASSED" in out.splitlines()[0]
    assert (
        "propensities ESTIMATED (data.propensity: estimate): logistic, 5 folds cross-fitted, "
        "calibration none, seed " in out
    )
    assert "  held-out log loss " in out and "for the marginal frequencies (the contexts " in out
    assert "  estimated propensities: min " in out
    assert "  uniform policy's effective sample size on these estimates: " in out
    report = json.loads((tmp_path / "check_report.json").read_text())
    model = report["propensity_model"]
    assert model["metadata"]["propensity_source"] == "estimated"
    assert model["metadata"]["folds"] == 5 and model["metadata"]["model"] == "logistic"
    metrics = model["metrics"]
    assert metrics["propensity_model_log_loss"] < metrics["propensity_model_marginal_log_loss"]
    assert 0 < metrics["estimated_propensity_min"] <= metrics["estimated_propensity_p50"] < 1
    assert (tmp_path / "plots" / "propensity_reliability.png").stat().st_size > 0
    # the estimates join back onto the log: by position among the kept rows, each checked by
    # its content digest (this log's event ids are the writer's generated ones: not loaded)
    table = pq.read_table(tmp_path / "estimated_propensities.parquet").to_pandas()
    assert list(table.columns) == ["row", "row_digest", "timestamp", "action", "propensity"]
    assert len(table) == 900 and table["row_digest"].is_unique
    assert report["files"]["estimated_propensities"] == str(
        tmp_path / "estimated_propensities.parquet"
    )
    # the suite ran without propensity expectations (the placeholder is never validated)
    assert all(f["column"] != "propensity" for f in report["data_checks"]["failures"])


def test_check_refuses_a_deterministic_logger_in_one_line(deterministic_log, capsys):
    assert main(["check", str(deterministic_log), "--estimate"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert "-> FAILED: action: " in first and "look chosen by a deterministic logger" in first
    assert "logged action = the model's most probable action" in first


def test_check_refuses_a_propensity_column_while_estimating(logs_dir, capsys):
    assert main(["check", str(logs_dir / "good"), "--estimate"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(
        "-> FAILED: propensity: the log records propensities, but data.propensity is estimate. "
        "Use data.propensity: logged (logged propensities are exact), or drop the column to "
        "estimate the logging policy"
    ), first


def test_check_refuses_a_declared_floor_of_the_missing_propensities(tmp_path, digits_log, capsys):
    """A floor declared for logged propensities must not pass for one of the estimates.

    The old code estimated (min 0.0026) and kept the metadata's floor 0.05: the gate's
    declared floor (``declared_min_propensity``) still read 0.05, a weight bound of 20 on
    estimated weights up to 386.
    """
    frame = log_to_frame(digits_log).drop(columns=["propensity"])
    frame.attrs[METADATA_KEY] = {**frame.attrs[METADATA_KEY], "min_propensity": 0.05}
    path = _write(frame, tmp_path / "floor.parquet")
    assert main(["check", str(path), "--estimate"]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(
        "-> FAILED: min_propensity: the log's metadata declares min_propensity 0.05, a floor "
        "of logged propensities, but data.propensity is estimate: the estimates have no "
        "declared floor, and neither the checks nor the gate may assume one. Remove "
        "min_propensity from the log's metadata, or log the propensities and use "
        "data.propensity: logged"
    ), first


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"data.propensity": "guess"}, "data.propensity: Input should be 'logged' or 'estimate'"),
        (
            {"data.propensity": "estimate", "data.propensity_column": "p"},
            "data.propensity_column 'p' names logged propensities but data.propensity is "
            "estimate; drop one (logged propensities are exact)",
        ),
        (
            {"data.propensity_estimation.folds": 1},
            "data.propensity_estimation.folds: Input should be greater than or equal to 2",
        ),
        (
            {"data.propensity_estimation.model": "forest"},
            "data.propensity_estimation.model: Input should be 'logistic' or 'boosting'",
        ),
    ],
)
def test_bad_propensity_keys_are_one_line_errors(tmp_path, overrides, message):
    path = tmp_path / "mlflow.yml"
    path.write_text("")
    with pytest.raises(ConfigError) as err:
        load_config(path, overrides)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.slow
@pytest.mark.usefixtures("prefect_harness")
def test_retrain_on_estimated_propensities(tmp_path, logs_dir, write_config, capsys):
    config = write_config(
        logs_dir / "no-propensity.parquet", data={"propensity_estimation": {"folds": 2}}
    )
    args = ["retrain", "--config", str(config), "--set", "data.propensity=estimate"]
    code = main(args)
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    stages = [line.split()[1] for line in out if line.startswith("    ") and "s  " in line]
    assert "estimate-propensities" in stages, out
    headline = next(line for line in out if line.startswith(("PROMOTED: ", "REJECTED: ")))
    assert headline.endswith(" [on ESTIMATED propensities]"), headline

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("test").experiment_id])
    (run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    m = run.data.metrics
    assert m["propensity_model_log_loss"] < m["propensity_model_marginal_log_loss"]
    assert m["propensity_model_brier"] < m["propensity_model_marginal_brier"]
    assert 0 < m["estimated_propensity_min"] < m["estimated_propensity_p50"] < 1
    assert 0 < m["estimated_uniform_effective_sample_size"] <= 900
    assert run.data.tags["propensity_source"] == "estimated"
    assert m["gate_estimated_propensities"] == 1  # the gate decided on its estimated terms
    note = run.data.tags["mlflow.note.content"]
    assert "propensity_source=estimated" in note
    local = client.download_artifacts(run.info.run_id, "checks", str(tmp_path / "art"))
    meta = json.loads((tmp_path / "art" / "checks" / "propensity_model.json").read_text())
    assert {k: meta[k] for k in ("propensity_source", "model", "folds", "random_state")} == {
        "propensity_source": "estimated",
        "model": "logistic",
        "folds": 2,
        "random_state": 0,
    }
    assert isinstance(meta["seed"], int) and meta["unseen_action_rule"] == "laplace"
    plots = {p.name for p in (tmp_path / "art" / "checks" / "propensity_plots").iterdir()}
    assert {"propensity_histogram.png", "propensity_reliability.png"} <= plots
    estimates = pq.read_table(f"{local}/estimated_propensities.parquet").to_pandas()
    assert len(estimates) == 900 and estimates["propensity"].between(0, 1).all()
    assert estimates["row_digest"].is_unique  # each row's identity (no real event ids here)
    (version,) = client.search_model_versions("name='poem-policy'")
    assert version.tags["propensity_source"] == "estimated"
    reason = "propensities estimated, not logged (logistic, 2 folds cross-fitted)"
    assert reason in note and reason in version.tags["gate_reasons"]
    assert "assumed: rests on estimated propensities" in version.tags["gate_reasons"]
    assert any(line.strip().startswith(reason) for line in out), out
