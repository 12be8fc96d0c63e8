"""``mlflow.yml`` loading: defaults, path resolution, environment override, one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from flows.config import ConfigError, GateConfig, PipelineConfig, load_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_env_uri(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "mlflow.yml"
    path.write_text(text)
    return path


def test_repository_config_loads_with_local_defaults(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(REPO / "mlflow.yml")
    assert cfg.tracking.uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert cfg.tracking.artifact_location == (tmp_path / "mlartifacts").as_uri()
    assert cfg.tracking.champion_alias == "champion"
    assert cfg.training.learner == "poem" and cfg.gate.estimator == "ips"
    assert cfg.search.grid["solver"] == ["adagrad", "lbfgs"] and cfg.search.scoring == "snips"


def test_empty_file_gives_defaults_and_sections_are_frozen(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = load_config(_write(tmp_path, ""))
    assert cfg.gate.confidence_level == 0.95 and cfg.data.split.test_fraction == 0.25
    with pytest.raises(ValidationError, match="frozen"):
        cfg.gate.confidence_level = 0.5


def test_environment_overrides_tracking_uri(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere/store.db")
    cfg = load_config(_write(tmp_path, "tracking:\n  uri: sqlite:///mine.db\n"))
    assert cfg.tracking.uri == "sqlite:////elsewhere/store.db"


def test_logs_override_and_flat_params(tmp_path):
    cfg = load_config(_write(tmp_path, "data:\n  path: a\n")).with_data_path(tmp_path / "b")
    assert cfg.data.path == str(tmp_path / "b")
    flat = cfg.flat_params()
    assert flat["gate.confidence_level"] == "0.95" and flat["data.split.by_time"] == "True"
    assert "gate:" in cfg.to_yaml()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("search:\n  grdi: {clip: [1]}\n", r"unknown key 'search\.grdi'"),
        ("gates:\n  estimator: ips\n", r"unknown key 'gates'"),
        ("checks:\n  propensity:\n    min_ess: 3\n", r"unknown key 'checks\.propensity\.min_ess'"),
        ("gate:\n  confidence_level: high\n", r"gate\.confidence_level: .*valid number.*'high'"),
        ("gate:\n  confidence_level: 1.5\n", r"gate\.confidence_level: .*less than 1"),
        ("gate:\n  estimator: ipss\n", r"gate\.estimator: .*'ips', 'snips' or 'clipped_ips'"),
        ("search:\n  max_workers: two\n", r"search\.max_workers: .*valid integer"),
        ("training:\n  learner: xgboost\n", r"training\.learner: unknown learner 'xgboost'"),
        (
            "training:\n  params: {clipp: 3}\n",
            r"training\.params: unknown parameter\(s\) \['clipp'\]",
        ),
        ("search:\n  grid: {bogus: [1, 2]}\n", r"search\.grid: unknown parameter\(s\) \['bogus'\]"),
        ("data:\n  split: {validation_fraction: 0.6, test_fraction: 0.5}\n", r"must be < 1"),
        ("- a\n- b\n", r"must hold a mapping"),
        ("gate: [\n", r"not valid YAML"),
    ],
)
def test_invalid_config_gives_one_clear_error(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(path) in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"config file not found: .*nope\.yml"):
        load_config(tmp_path / "nope.yml")


def test_clipped_ips_needs_clip():
    with pytest.raises(ValidationError, match="needs a clip"):
        GateConfig(estimator="clipped_ips")
    assert PipelineConfig().gate.min_ess == 100.0


def test_learner_is_a_config_choice(tmp_path):
    text = (
        "training:\n  learner: banditnet\n  params: {max_iter: 5}\n"
        "search:\n  grid: {l2_penalty: [0.0, 1.0]}\n"
    )
    cfg = load_config(_write(tmp_path, text))
    assert cfg.training.learner == "banditnet"
    bad = "training:\n  learner: banditnet\nsearch:\n  grid: {variance_scale: [0.1]}\n"
    with pytest.raises(
        ConfigError, match=r"unknown parameter\(s\) \['variance_scale'\] for learner 'banditnet'"
    ):
        load_config(_write(tmp_path, bad))
