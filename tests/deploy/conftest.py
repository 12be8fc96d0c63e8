"""Fixtures of the deploy tests: one throw-away MLflow store per session with a registered serving
model per family, and small policies of each family.

The store is made current (``mlflow.set_tracking_uri``) only inside :func:`using_store`, never via
``MLFLOW_TRACKING_URI``, so other test directories keep their own stores.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow import MlflowClient

from deploy.pyfunc import log_policy_model
from flows.tracking import tracking_uri_scope
from poem.policies import StochasticPolicy, make_family

FAMILIES = ("discrete", "multilabel", "candidates")


def _make_policy(
    family: str, seed: int = 0, temperature: float = 1.0, floor: float = 0.0
) -> StochasticPolicy:
    """A random policy with 3 features (discrete: 4 actions; multilabel: 3 labels)."""
    rng = np.random.default_rng(seed)
    fam = {
        "discrete": make_family("discrete", 3, 4, True),
        "multilabel": make_family("multilabel", 3, 3, True),
        "candidates": make_family("candidates", 3),
    }[family]
    return StochasticPolicy(
        fam,
        2.0 * rng.normal(size=fam.coef_shape),
        temperature,
        floor,
        {"feature_names": ["f_a", "f_b", "f_c"]},
    )


@contextmanager
def _using(store: dict):
    """Make ``store`` the current tracking and registry URI; restore the previous ones after.

    Through :func:`flows.tracking.tracking_uri_scope`, which restores the environment exactly:
    saving ``mlflow.get_tracking_uri()`` and setting it back exported MLflow's *default* URI as
    ``MLFLOW_TRACKING_URI`` / ``MLFLOW_REGISTRY_URI`` to every later test of the session (a
    later ``load_config`` honours that variable and used the default store instead of its own).
    """
    with tracking_uri_scope(store["uri"]):
        yield store


def _register(store: dict, policy: StochasticPolicy, name: str) -> str:
    """Log the policy as the serving pyfunc inside a run of the store, register it; returns the version."""
    with _using(store), mlflow.start_run(experiment_id=store["experiment_id"]):
        info = log_policy_model(policy, "policy", registered_model_name=name)
    return str(info.registered_model_version)


@pytest.fixture(scope="session")
def deploy_store(tmp_path_factory):
    """sqlite store + artifact root; ``pyfunc-<family>`` version 1 = ``make_policy(family, 0, 0.8, 0.05)``."""
    root = Path(tmp_path_factory.mktemp("mlflow"))
    store = {"uri": f"sqlite:///{root / 'mlflow.db'}", "root": root}
    store["experiment_id"] = MlflowClient(store["uri"]).create_experiment(
        "deploy-tests", artifact_location=(root / "artifacts").as_uri()
    )
    store["policies"] = {f: _make_policy(f, temperature=0.8, floor=0.05) for f in FAMILIES}
    store["versions"] = {f: _register(store, store["policies"][f], f"pyfunc-{f}") for f in FAMILIES}
    return store


@pytest.fixture(scope="session")
def using_store():
    """Context manager ``using_store(store)`` making the store current."""
    return _using


@pytest.fixture(scope="session")
def make_policy():
    """Factory ``make_policy(family, seed=0, temperature=1.0, floor=0.0)``."""
    return _make_policy


@pytest.fixture(scope="session")
def register():
    """Factory ``register(store, policy, name) -> version``."""
    return _register
