"""MLflow's UI shows the decision, both risks and the versions on the runs table.

The experiment carries ``mlflow.experimentKind`` (the runs view, not the GenAI one) and a saved
view of the runs table with the headline columns (:func:`flows.tracking.experiment_ui_tags`).
Headless Chromium (Debian's ``chromium``; ``.ci/run`` installs it) renders the runs table of
the retrain runs on the team's tracking server (those of ``test_team.py``, which runs first;
run alone, the test triggers one) and the test reads the rendered page.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from flows.config import TrackingConfig
from flows.tracking import (
    EXPERIMENT_KIND_TAG,
    HEADLINE_VIEW,
    client_for,
    ensure_experiment,
    headline_view_url,
)

SCREENSHOT_DIR = Path(os.environ.get("POEM_SCREENSHOT_DIR", "/tmp"))


def test_a_new_and_an_old_experiment_get_the_runs_view_and_the_headline_columns(tmp_path):
    tracking = TrackingConfig(uri=f"sqlite:///{tmp_path / 'mlflow.db'}", experiment="ui")
    client = client_for(tracking)
    old = client.create_experiment("old")  # created by an earlier release: no tags
    client.set_experiment_tag(old, EXPERIMENT_KIND_TAG, "finetuning")  # a kind set by hand
    for name in ("ui", "old"):
        experiment_id = ensure_experiment(client, tracking.model_copy(update={"experiment": name}))
        tags = client.get_experiment(experiment_id).tags
        view = json.loads(tags[f"mlflow.sharedViewState.{HEADLINE_VIEW}"])
        assert view["selectedColumns"] == [
            "attributes.`Run Name`",
            "tags.`decision`",
            "tags.`champion`",
            "tags.`challenger`",
            "metrics.`challenger_risk`",
            "metrics.`champion_risk`",
            "metrics.`risk_difference_ucb`",
        ]
        kind = "custom_model_development" if name == "ui" else "finetuning"
        assert tags[EXPERIMENT_KIND_TAG] == kind
    assert headline_view_url("http://127.0.0.1:5000/", "7") == (
        "http://127.0.0.1:5000/#/experiments/7/runs?workflowType=machine_learning"
        "&viewStateShareKey=poem-headline"
    )


@pytest.mark.slow
@pytest.mark.xdist_group("team")  # the topology of test_team.py, not a second one
def test_the_runs_table_shows_decision_risks_and_versions(team, chromium):
    base = team.mlflow_url
    if not any((team.work / "decisions").glob("date=*")):  # run alone: one retrain first
        team.make_day("2026-01-01", 1)
        team.bash(team.trigger, timeout=1800)
    query = urllib.parse.urlencode({"experiment_name": "poem-retrain"})
    with urllib.request.urlopen(f"{base}/api/2.0/mlflow/experiments/get-by-name?{query}") as r:
        experiment = json.load(r)["experiment"]
    tags = {t["key"]: t["value"] for t in experiment.get("tags", [])}
    assert tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    screenshot = SCREENSHOT_DIR / "poem-mlflow-runs.png"
    dom = chromium(headline_view_url(base, experiment["experiment_id"]), screenshot)
    assert screenshot.stat().st_size > 10_000
    for column in ("decision", "champion", "challenger", "challenger_risk", "champion_risk"):
        assert f">{column}<" in dom, column
    assert "risk_difference_ucb" in dom
    assert ">promoted<" in dom  # the decision of a run, in its cell
    assert "Error loading shared view state" not in dom
