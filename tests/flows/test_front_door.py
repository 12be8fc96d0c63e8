"""One front door: the same logs through ``check`` and ``retrain`` give the same data-check report.

Corrupted (quarantined rows), reward-based, windowed, metadata-less (plain CSV) and unreadable
logs go through :func:`data_checks.check.check_logs` and the ``retrain`` flow with the same
settings; the report the flow logs to MLflow equals the one ``check`` returns, and the logs
that pass train end to end.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from mlflow import MlflowClient

from data_checks.check import check_logs
from flows.retrain import retrain
from poem.exceptions import InvalidLogError
from poem.io.csv import metadata_path, write_csv
from poem.io.parquet import METADATA_KEY, log_to_frame, write_log

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness")]

CHECKS = {"min_rows": 50, "max_quarantine_fraction": 0.01}
IGNORED = ("source", "docs_path")  # where the file was and where Data Docs went


def _parquet(frame, path, meta=None):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    stored = json.dumps(frame.attrs[METADATA_KEY] if meta is None else meta)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: stored}), path)
    return path


def corrupted(log, root):
    """Four non-finite features in x_5 and two subnormal propensities: 6 of 900 quarantined."""
    frame = log_to_frame(log)
    frame.loc[[10, 20, 30, 40], "x_5"] = np.nan
    frame.loc[[50, 60], "propensity"] = 1e-320
    return _parquet(frame, root / "corrupted.parquet"), {}


def rewards(log, root):
    """Clicks (reward = 1 − loss) with declared reward bounds, as a date-partitioned Parquet."""
    frame = log_to_frame(log)
    frame = frame.rename(columns={"loss": "reward"}).assign(reward=1 - frame["loss"])
    meta = {**frame.attrs[METADATA_KEY], "loss_bounds": None, "reward_bounds": [0.0, 1.0]}
    return _parquet(frame, root / "rewards.parquet", meta), {}


def windowed(log, root):
    """A time window that leaves out the first three and the last two events."""
    start, end = (str(np.datetime_as_string(log.timestamps[i], "s")) for i in (3, -3))
    return write_log(log, root / "windowed"), {"window_start": start, "window_end": end}


def plain_csv(log, root):
    """A warehouse export: columns only, no metadata; family, bounds and K from the config."""
    path = write_csv(replace(log, logging_distribution=None), root / "plain.csv")
    metadata_path(path).unlink()
    return path, {"loss_bounds": [0.0, 1.0], "n_actions": 10}


def reward_beside_loss(log, root):
    frame = log_to_frame(log).assign(reward=0.0)
    return _parquet(frame, root / "ambiguous.parquet"), {}


def window_without_timestamps(log, root):
    path = write_log(replace(log, timestamps=None), root / "untimed")
    return path, {"window_start": "2026-01-01T00:00:00", "window_end": "2026-01-02T00:00:00"}


CASES = [
    ("corrupted", corrupted, 894),
    ("rewards", rewards, 900),
    ("windowed", windowed, 895),
    ("plain-csv", plain_csv, 900),
    ("reward-beside-loss", reward_beside_loss, None),
    ("window-without-timestamps", window_without_timestamps, None),
]


def _flow_report(tmp_path) -> dict:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    exp = client.get_experiment_by_name("test")
    (run,) = client.search_runs([exp.experiment_id], "tags.mlflow.parentRunId IS NULL")
    local = client.download_artifacts(
        run.info.run_id, "checks/data_check_report.json", str(tmp_path)
    )
    with open(local) as fh:
        return json.load(fh)


def _without(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in IGNORED}


@pytest.mark.parametrize(("case", "make", "n_kept"), CASES, ids=[c[0] for c in CASES])
def test_check_and_retrain_give_the_same_report(
    tmp_path, digits_log, write_config, case, make, n_kept
):
    path, data = make(digits_log, tmp_path)
    window = (data["window_start"], data["window_end"]) if "window_start" in data else None
    outcome = check_logs(
        path,
        family="discrete",
        window=None if window is None else tuple(np.datetime64(w).astype(object) for w in window),
        loss_bounds=data.get("loss_bounds"),
        n_actions=data.get("n_actions"),
        **CHECKS,
    )
    config = write_config(
        path, data=data, checks=CHECKS, search={"grid": {"variance_scale": [0.1]}}
    )
    if n_kept is None:
        with pytest.raises(InvalidLogError):
            retrain(config)
        assert outcome.exit_code == 1
    else:
        result = retrain(config)
        assert result.decision in ("promoted", "rejected") and result.n_rows == n_kept
        assert outcome.log.n_rows == n_kept, outcome.to_text()
    assert _without(_flow_report(tmp_path)) == _without(outcome.report.to_dict())


@pytest.mark.parametrize(
    "data", [{}, {"reward_bounds": [0.0, 1.0]}], ids=["declared-by-the-log", "configured"]
)
def test_a_reward_log_is_reported_in_rewards_wherever_its_bounds_are_declared(
    tmp_path, digits_log, write_config, data
):
    """Reward bounds declared in the Parquet metadata (``data.reward_bounds`` null) gave a
    headline of "risk" (the negated rewards) and a version tagged ``feedback: loss``."""
    path, _ = rewards(digits_log, tmp_path)
    config = write_config(
        path, data=data, checks=CHECKS, search={"grid": {"variance_scale": [0.1]}}
    )
    result = retrain(config)
    first, second = result.headline()[:2]
    assert result.rewards and "reward (e.g. click-through rate)" in first, first
    assert second.startswith("  gain ") and "lower bound" in second, second
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    version = MlflowClient(tracking_uri=uri, registry_uri=uri).get_model_version(
        "poem-policy", result.challenger_version
    )
    assert version.tags["feedback"] == "reward"
    assert " reward " in version.description.splitlines()[0], version.description
