"""Fixtures of the flow tests: one Prefect test server per session, MLflow on sqlite in tmp_path,
and small digits logs (good, uninformative, corrupted) written as canonical Parquet.

Prefect is loaded here, at collection (``from prefect import flow``): loading it configures
logging (``dictConfig`` replaces the root logger's handlers), which inside a test drops pytest's
capture handler, so a ``caplog`` test run alone saw no records (it passed only after another
test had loaded Prefect).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from prefect import flow as _configures_logging  # noqa: F401  (module docstring)

from poem.datasets import load_dataset
from poem.io.parquet import METADATA_KEY, log_to_frame, write_log
from poem.simulate import fit_logging_policy, supervised_to_bandit


@pytest.fixture(scope="session")
def prefect_harness(tmp_path_factory):
    """A real Prefect API (temporary SQLite) for the whole session; results stored in a temp dir."""
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    storage = tmp_path_factory.mktemp("prefect-storage")
    with temporary_settings(updates={PREFECT_LOCAL_STORAGE_PATH: storage}):
        # 90 s was not enough at load average 20 (2 cores): a session fixture's error is every
        # later test's (38 errors in one run); a healthy start takes seconds either way
        with prefect_test_harness(server_startup_timeout=300):
            yield


@pytest.fixture(scope="session")
def digits_log():
    """About 900 rows of digits bandit feedback from a weak stochastic logger, with timestamps."""
    ds = load_dataset("digits")
    h0 = fit_logging_policy(
        ds.X_train, ds.Y_train, family="discrete", fraction=0.05, random_state=0
    )
    return supervised_to_bandit(
        ds.X_train[:900], ds.Y_train[:900], h0, n_replays=1, random_state=1, start_time="2026-01-01"
    )


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory, digits_log):
    """Folder with ``good`` (learnable), ``noise`` (losses carry no signal) and bad logs."""
    root = tmp_path_factory.mktemp("logs")
    write_log(digits_log, root / "good")
    rng = np.random.default_rng(7)
    noise = replace(
        digits_log,
        losses=rng.binomial(1, 0.5, digits_log.n_rows).astype(float),
        timestamps=digits_log.timestamps + np.timedelta64(1, "D"),
    )
    write_log(noise, root / "noise")
    frame = log_to_frame(digits_log)
    bad = frame.copy()
    bad.loc[bad.index[:90], "propensity"] = 1.5  # 10% of rows: above the 1% quarantine limit
    _write_frame(bad, frame.attrs[METADATA_KEY], root / "bad-propensity.parquet")
    halved = frame.copy()
    halved["propensity"] = halved["propensity"] * 0.5  # not the logger's probabilities
    _write_frame(halved, frame.attrs[METADATA_KEY], root / "halved-propensity.parquet")
    _write_frame(
        frame.drop(columns=["propensity"]),
        frame.attrs[METADATA_KEY],
        root / "no-propensity.parquet",
    )
    return root


def _write_frame(frame, meta, path: Path) -> None:
    table = pa.Table.from_pandas(frame, preserve_index=False)
    pq.write_table(table.replace_schema_metadata({METADATA_KEY: json.dumps(meta)}), path)


@pytest.fixture
def write_config(tmp_path, monkeypatch):
    """Write a small ``mlflow.yml`` with its tracking store in ``tmp_path``; returns its path."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)

    def write(data_path: Path, **sections) -> Path:
        cfg = {
            "tracking": {
                "uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
                "artifact_location": str(tmp_path / "mlartifacts"),
                "experiment": "test",
            },
            "data": {"path": str(data_path), "family": "discrete"},
            "checks": {"min_rows": 50},
            # candidates: {} (training.learner alone) keeps these runs small; the tests of
            # search.candidates give their own
            "search": {"grid": {"variance_scale": [0.0, 0.1]}, "candidates": {}, "max_workers": 2},
            "training": {
                "params": {
                    "solver": "lbfgs",
                    "variance_penalty": "calibrated",
                    "max_iter": 40,
                    "random_state": 0,
                }
            },
            "gate": {"min_ess": 20},
        }
        for name, values in sections.items():
            cfg[name] = {**cfg.get(name, {}), **values}
        path = tmp_path / "mlflow.yml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    return write
