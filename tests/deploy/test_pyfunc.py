"""The serving pyfunc in process: logging, loading, decisions, validation, propensity correctness."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
from mlflow.exceptions import MlflowException
from scipy import stats

from deploy.pyfunc import (
    OUTPUT_COLUMNS,
    StochasticPolicyModel,
    feature_names_of,
    log_policy_model,
    serving_limits,
)

FEATURES = ["f_a", "f_b", "f_c"]


def request_for(family: str, n: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    if family == "candidates":
        sizes = np.array([2, 3, 4] * n)[:n]
        frame = pd.DataFrame(rng.normal(size=(sizes.sum(), 3)), columns=FEATURES)
        frame.insert(0, "event_id", np.repeat([f"r{i}" for i in range(n)], sizes))
        return frame
    return pd.DataFrame(rng.normal(size=(n, 3)), columns=FEATURES)


@pytest.fixture(scope="module")
def registered(deploy_store, using_store):
    """Version 1 of each family (α = 0.8, ε = 0.05), loaded back through the registry."""
    with using_store(deploy_store):
        return {
            f: (
                deploy_store["policies"][f],
                deploy_store["versions"][f],
                mlflow.pyfunc.load_model(f"models:/pyfunc-{f}/{deploy_store['versions'][f]}"),
            )
            for f in deploy_store["policies"]
        }


@pytest.fixture
def store(deploy_store, using_store):
    with using_store(deploy_store):
        yield deploy_store


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_decisions_carry_the_served_propensity_map_and_version(registered, family):
    policy, version, model = registered[family]
    request = request_for(family, 6)
    out = model.predict(request, params={"seed": 5, "return_distribution": True})
    assert list(out.columns) == [*OUTPUT_COLUMNS, "distribution"]
    assert (out["model_version"] == version).all() and version == "1"
    if family == "candidates":
        from poem.data import CandidateSets

        sizes = request.groupby("event_id", sort=False).size().to_numpy()
        X = CandidateSets.from_sizes(request[FEATURES].to_numpy(), sizes)
        assert out["event_id"].tolist() == [f"r{i}" for i in range(6)]
    else:
        X = request[FEATURES].to_numpy()
    actions = np.array(out["action"].tolist())
    expected = policy.action_probability(X, actions)
    np.testing.assert_allclose(out["propensity"].to_numpy(), expected, rtol=1e-12)
    assert np.all((out["propensity"] > 0) & (out["propensity"] <= 1))
    np.testing.assert_array_equal(np.array(out["map_action"].tolist()), policy.predict(X))
    dist = policy.predict_proba(X)
    flat = (
        np.concatenate(out["distribution"].tolist())
        if family == "candidates"
        else np.array(out["distribution"].tolist())
    )
    np.testing.assert_allclose(flat, dist, rtol=1e-12)


def test_seed_reproduces_and_no_seed_draws_independently(registered):
    _, _, model = registered["discrete"]
    request = request_for("discrete", 400)
    a = model.predict(request, params={"seed": 11})["action"].to_numpy()
    b = model.predict(request, params={"seed": 11})["action"].to_numpy()
    c = model.predict(request)["action"].to_numpy()
    d = model.predict(request)["action"].to_numpy()
    np.testing.assert_array_equal(a, b)
    # 400 draws with every action probability ≥ ε = 0.05: identical unseeded vectors are impossible in practice
    assert not np.array_equal(c, d)
    assert not np.array_equal(a, c)


def test_model_directory_holds_signature_example_and_no_pickle(store):
    local = Path(mlflow.artifacts.download_artifacts("models:/pyfunc-discrete/1"))
    assert (local / "serving_input_example.json").is_file()
    example = json.loads((local / "serving_input_example.json").read_text())
    assert example["dataframe_split"]["columns"] == FEATURES
    mlmodel = (local / "MLmodel").read_text()
    assert "pyfunc.py" in mlmodel and "python_model.pkl" not in mlmodel
    assert not list(local.rglob("*.pkl"))
    assert (local / "artifacts" / "policy" / "policy.json").is_file()
    signature = mlflow.models.get_model_info("models:/pyfunc-discrete/1").signature
    assert signature.params.to_dict() == [
        {"name": "seed", "type": "long", "default": -1, "shape": None},
        {"name": "return_distribution", "type": "boolean", "default": False, "shape": None},
    ]


def test_tampered_artifact_fails_at_load(store, tmp_path):
    local = Path(
        mlflow.artifacts.download_artifacts("models:/pyfunc-discrete/1", dst_path=str(tmp_path))
    )
    arrays = local / "artifacts" / "policy" / "policy.npz"
    with open(arrays, "wb") as fh:
        np.savez(fh, coef=np.zeros((4, 4)))
    with pytest.raises(
        MlflowException, match=r"cannot load the served policy: .*policy\.npz: SHA-256 mismatch"
    ):
        mlflow.pyfunc.load_model(str(local))


def _error(model, frame, params=None):
    with pytest.raises(MlflowException) as info:
        model.predict(None, frame, params)
    assert info.value.error_code == "INVALID_PARAMETER_VALUE"
    return info.value.message


def test_malformed_requests_are_invalid_parameter_errors_naming_the_problem(make_policy):
    model = StochasticPolicyModel(make_policy("discrete"))
    good = request_for("discrete", 4)
    assert "2 of 3 feature columns are missing from the request: ['f_b', 'f_c']" in _error(
        model, good[["f_a"]]
    )
    typed = good.astype(object)
    typed.loc[[1, 3], "f_b"] = "abc"
    assert "column 'f_b' has 2 non-numeric value(s) (rows 1, 3)" in _error(model, typed)
    nan = good.copy()
    nan.loc[2, "f_c"] = np.nan
    nan.loc[0, "f_a"] = np.inf
    msg = _error(model, nan)
    assert (
        "2 feature column(s) contain NaN or infinite values" in msg
        and "'f_c': 1 row(s) (rows 2)" in msg
    )
    assert "the request has no rows" in _error(model, good.iloc[:0])
    assert "param 'seed' must be an integer" in _error(model, good, {"seed": -3})
    assert "param 'return_distribution' must be a boolean" in _error(
        model, good, {"return_distribution": "yes"}
    )
    assert "must be a table" in _error(model, good.to_numpy())


def test_malformed_candidate_layouts_are_rejected(make_policy):
    model = StochasticPolicyModel(make_policy("candidates", floor=0.2))
    good = request_for("candidates", 3)
    assert "need an 'event_id' column" in _error(model, good.drop(columns="event_id"))
    split = good.iloc[[0, 2, 1, 3, 4, 5, 6, 7, 8]]  # r0, r1, r0 ...
    assert "candidate rows of 1 request(s) are not contiguous" in _error(model, split)
    again = pd.concat([good, good[good.event_id == "r0"]], ignore_index=True)  # r0 again at the end
    assert "(e.g. ['r0'])" in _error(model, again)
    large = request_for("candidates", 3)
    large["event_id"] = "one"  # 9 candidates > 1/ε = 5
    assert "1 request(s) have more than 5 candidates" in _error(model, large)
    blank = good.copy()
    blank.loc[0, "event_id"] = None
    assert "column 'event_id' has 1 empty value(s) (rows 0)" in _error(model, blank)


def _chi_square(counts: np.ndarray, probs: np.ndarray) -> tuple[float, int]:
    """Pearson statistic summed over contexts, cells with expected count < 5 pooled per context."""
    stat, dof = 0.0, 0
    for c, p in zip(counts, probs, strict=True):
        c, p = c[p > 0], p[p > 0]  # impossible cells (candidate padding) carry no information
        expected = c.sum() * p
        small = expected < 5
        obs = np.append(c[~small], c[small].sum()) if small.any() else c
        exp = np.append(expected[~small], expected[small].sum()) if small.any() else expected
        stat += float(np.sum((obs - exp) ** 2 / exp))
        dof += obs.size - 1
    return stat, dof


def _cell_probabilities(family: str, dist_rows: list) -> np.ndarray:
    """Served probability of every outcome cell per context (multilabel: the 8 joint label vectors)."""
    if family != "multilabel":
        return np.array(dist_rows, dtype=float)
    sig = np.array(dist_rows, dtype=float)  # (contexts, 3) marginals
    bits = (np.arange(8)[:, None] >> np.arange(3)) & 1  # cell index -> label vector
    return np.prod(np.where(bits[None] == 1, sig[:, None, :], 1 - sig[:, None, :]), axis=2)


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_sampled_frequencies_match_returned_propensities(family, make_policy):
    """20,000 decisions (4 contexts × 5,000) at α = 0.5, ε = 0.04 — chi-square at a fixed seed."""
    policy = make_policy(family, seed=3, temperature=0.5, floor=0.04)
    model = StochasticPolicyModel(policy, "test")
    base = request_for(family, 4, seed=7)
    context = np.repeat(np.arange(4), 5000)
    if family == "candidates":
        base = base[
            base.event_id.isin(["r0", "r1"])
        ]  # two sets of 2 and 3 candidates, used twice each
        rows_of = {0: [0, 1], 1: [2, 3, 4]}  # positions of r0's and r1's candidates in `base`
        picks = [rows_of[c % 2] for c in context]
        request = base.iloc[np.concatenate(picks)].reset_index(drop=True)
        request["event_id"] = np.repeat(np.arange(20000).astype(str), [len(p) for p in picks])
    else:
        request = base.iloc[context].reset_index(drop=True)
    out = model.predict(None, request, {"seed": 20260, "return_distribution": True})
    assert len(out) == 20000
    acts = np.array(out["action"].tolist())
    if family == "multilabel":
        acts = acts @ (1 << np.arange(3))  # joint outcome cell of the 3 label bits
    first = np.arange(4) * 5000
    dist_rows = [out["distribution"].iloc[i] for i in first]
    if family == "candidates":
        dist_rows = [np.pad(d, (0, 3 - len(d))) for d in dist_rows]  # sets of 2 and 3 candidates
    probs = _cell_probabilities(family, dist_rows)
    # every returned propensity is the served probability of the returned action
    np.testing.assert_allclose(out["propensity"].to_numpy(), probs[context, acts], rtol=1e-12)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-9)
    counts = np.zeros_like(probs)
    np.add.at(counts, (context, acts), 1)
    keep = probs > 0  # candidate padding cells
    assert counts[~keep].sum() == 0
    stat, dof = _chi_square(counts, probs)
    assert stats.chi2.sf(stat, dof) > 1e-3, (stat, dof)
    # the test can fail: the same counts are rejected against the distribution without ε
    X = base[FEATURES].to_numpy()
    bare = policy.with_serving(exploration_floor=0.0)
    if family == "candidates":
        return  # the candidate floor check is the propensity identity above; sets are too small to separate
    raw = bare.predict_proba(X[:4])
    stat0, dof0 = _chi_square(counts, np.clip(_cell_probabilities(family, list(raw)), 1e-12, None))
    assert stats.chi2.sf(stat0, dof0) < 1e-6, (stat0, dof0)


def test_feature_names_default_to_the_log_formats_columns(make_policy):
    policy = make_policy("discrete")
    bare = type(policy)(policy.family, policy.coef)
    assert feature_names_of(bare) == ["x_0", "x_1", "x_2"]
    assert feature_names_of(policy) == FEATURES


def test_a_csv_log_without_metadata_is_served_under_its_own_column_names(store, tmp_path):
    """docs/your-own-log.md's plain CSV (x_0 … x_7, no metadata) → POEM → pyfunc: requests use x_0 … x_7."""
    from poem.io.logs import read_log
    from poem.learners import POEM

    rng = np.random.default_rng(0)
    n, d = 400, 8
    x = rng.normal(size=(n, d))
    action = rng.integers(0, 4, n)
    frame = pd.DataFrame({f"x_{j}": x[:, j] for j in range(d)})
    frame = frame.assign(
        action=action, reward=(action == (x[:, 0] > 0)).astype(int), propensity=0.25
    )
    frame.to_csv(tmp_path / "export.csv", index=False)
    log = read_log(tmp_path / "export.csv", family="discrete", reward_bounds=(0, 1), n_actions=4)
    policy = POEM(solver="lbfgs", max_iter=20, random_state=0).fit(log).policy_
    with mlflow.start_run(experiment_id=store["experiment_id"]):
        info = log_policy_model(policy, "policy")
    model = mlflow.pyfunc.load_model(info.model_uri)
    names = [f"x_{j}" for j in range(d)]
    assert model.metadata.get_input_schema().input_names() == ["event_id", *names]
    out = model.predict(frame[names].head(3), params={"seed": 0})
    assert out["action"].between(0, 3).all() and len(out) == 3
    with pytest.raises(MlflowException, match="x_0"):  # the old positional names are refused
        model.predict(frame[names].head(3).set_axis([f"x{j}" for j in range(d)], axis=1))


def test_unknown_columns_and_too_many_rows_are_refused_in_process(make_policy, store, monkeypatch):
    """Issue 37 item 6: the limits and the column rule of the served model, without a server."""
    model = StochasticPolicyModel(make_policy("discrete"))
    good = request_for("discrete", 4)
    msg = _error(model, good.assign(eventid="x", extra=1.0))
    assert msg.startswith(
        "2 unknown request column(s): ['eventid', 'extra']; expected ['event_id', 'f_a', 'f_b', "
        "'f_c']"
    )
    # a model loaded by MLflow has the row limit, read from the environment at load
    monkeypatch.setenv("POEM_SERVING_MAX_ROWS", "3")
    loaded = mlflow.pyfunc.load_model(f"models:/pyfunc-discrete/{store['versions']['discrete']}")
    with pytest.raises(MlflowException, match="the request has 4 rows, more than the 3 this"):
        loaded.predict(good, params={"seed": 0})
    assert len(loaded.predict(good.iloc[:3], params={"seed": 0})) == 3
    monkeypatch.setenv("POEM_SERVING_MAX_ROWS", "lots")
    with pytest.raises(MlflowException, match="POEM_SERVING_MAX_ROWS='lots' must be a positive"):
        serving_limits()


def test_error_messages_lose_the_request_values_mlflow_quotes():
    from deploy.pyfunc import without_values

    frame = "Failed to predict data '     f_a\n0  secret  1e308'. \nError: 1 of 1 request row(s)"
    assert without_values(frame) == "1 of 1 request row(s)"
    quoted = "Invalid input. could not convert string to float: 'secret-in'"
    assert without_values(quoted) == (
        "Invalid input. could not convert string to float (the value is not shown)"
    )
    assert without_values("missing inputs ['f_c']") == "missing inputs ['f_c']"
