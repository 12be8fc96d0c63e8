"""``mlflow.yml`` loading: defaults, path resolution, environment override, one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from flows.config import (
    ConfigError,
    GateConfig,
    PipelineConfig,
    apply_overrides,
    default_config_path,
    load_config,
    parse_overrides,
    resolve_config_path,
)

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
    assert cfg.search.grid["solver"] == ["adagrad", "lbfgs"] and cfg.search.scoring == "snips_ucb"


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
        (
            "gate:\n  estimator: snips\n",
            r"gate\.estimator 'snips' needs a declared weight bound: set checks\.min_propensity > 0",
        ),
        ("gate:\n  retry_fraction: 1.0\n", r"gate\.retry_fraction: .*less than 1"),
        ("gate:\n  seed: -1\n", r"gate\.seed: .*greater than or equal to 0"),
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


# Every defect of issues #12 and #14 ("Config"): one ConfigError naming the key path and the
# allowed values, raised at load (before any data is read).
DEFECTS = [
    (
        "search:\n  grid: {clip: ['p90/p1']}\n",
        r"search\.grid\.clip\[0\]: clip must be one of \['p90/p10'",
    ),
    (
        "search:\n  grid: {implicit_exploration: [0.0, p100]}\n",
        r"search\.grid\.implicit_exploration\[1\]: implicit_exploration must be .*'p1'..'p99', "
        r"got 'p100'",
    ),
    (
        "search:\n  grid: {variance_scale: [0.1, -1]}\n",
        r"search\.grid\.variance_scale\[1\]: variance_scale == -1, must be >= 0",
    ),
    (
        "search:\n  grid: {max_iter: [5, '7']}\n",
        r"search\.grid\.max_iter\[1\]: max_iter must be an instance of int",
    ),
    (
        "training:\n  params: {variance_penalty: calibrate}\n",
        r"training\.params: variance_penalty must be a number >= 0 or 'calibrated', got 'calibrate'",
    ),
    (
        "training:\n  params: {solver: sgd, variance_penalty: calibrated}\n",
        r"training\.params: solver must be one of \['adagrad', 'lbfgs'\], got 'sgd'",
    ),
    (
        "training:\n  params: {max_iter: ten, variance_penalty: calibrated}\n",
        r"training\.params: max_iter must be an instance of int, not str",
    ),
    (
        "gate:\n  clip: 5\n",
        r"gate\.clip \(5\.0\) is only used by estimator 'clipped_ips', but gate\.estimator is 'ips'",
    ),
    (
        "training:\n  params: {variance_penalty: 1.0}\n",
        r"variance_scale only scales variance_penalty 'calibrated', but variance_penalty is 1\.0: the trials would be identical",
    ),
    ("search:\n  grid: {}\n", r"search\.grid: the grid is empty \(one trial would run silently\)"),
    (
        "search:\n  grid: {variance_scale: [0.1, 0.1]}\n",
        r"grid entry 'variance_scale' repeats \[0\.1\]",
    ),
    (
        "tracking:\n  challenger_alias: champion\n",
        r"tracking\.champion_alias and tracking\.challenger_alias are both 'champion'",
    ),
    (
        "tracking:\n  previous_champion_alias: champion\n",
        r"tracking\.champion_alias and tracking\.previous_champion_alias are both 'champion'",
    ),
    (
        "tracking:\n  champion_alias: latest\n",
        r"tracking\.champion_alias: .*not 'latest' or v<number>",
    ),
    (
        "tracking:\n  registered_model: team/policy\n",
        r"tracking\.registered_model: .*no '/'.*\(got 'team/policy'\)",
    ),
    (
        "tracking:\n  registered_model: ''\n",
        r"tracking\.registered_model: registered model name must be 1-255",
    ),
    (
        "tracking:\n  experiment: ' '\n",
        r"tracking\.experiment: experiment name must be 1-500 printable",
    ),
    (
        "tracking:\n  uri: ftp://host/x\n",
        r"tracking\.uri: tracking URI has scheme 'ftp'; allowed: sqlite, http",
    ),
    (  # issue 24.18: accepted at load, it failed at run time
        "tracking:\n  uri: 'file:'\n",
        r"^invalid config \S+: tracking\.uri: tracking URI: MLflow 3 no longer runs on a "
        r"file: store \(maintenance mode, it fails at run time\); use sqlite:///mlflow\.db, or "
        r"a tracking server http\(s\)://HOST:PORT \(got 'file:'\)$",
    ),
    (
        "tracking:\n  uri: file:///tmp/mlruns\n",
        r"tracking\.uri: tracking URI: MLflow 3 no longer runs on a file: store",
    ),
    (
        "tracking:\n  artifact_location: ftp://host/x\n",
        r"tracking\.artifact_location: artifact location has scheme 'ftp'; allowed: file, s3",
    ),
    (
        "data:\n  loss_bounds: [1, 0]\n",
        r"data\.loss_bounds: bounds must be \[min, max\] with min < max, got \[1\.0, 0\.0\]",
    ),
    (
        "data:\n  reward_bounds: [0, 1.0e+308]\n",
        r"data\.reward_bounds: bounds span 1e\+308, more than 1e\+12",
    ),
    (
        "data:\n  window_start: 2026-02-01\n  window_end: 2026-01-01\n",
        r"data\.window_start 2026-02-01T00:00:00 must be before data\.window_end 2026-01-01",
    ),
    (
        "data:\n  family: multilabel\n",
        r"training\.params\.policy is 'discrete' but data\.family is 'multilabel'",
    ),
    ("gate:\n  min_ess: .inf\n", r"gate\.min_ess: Input should be a finite number"),
    ("gate:\n  randomized: sometimes\n", r"gate\.randomized: Input should be a valid boolean"),
    (
        "search:\n  cache_expiration_hours: 1.0e+12\n",
        r"search\.cache_expiration_hours: Input should be less than or equal to 87600",
    ),
    (
        "checks:\n  propensity: {never_logged_warn: 0.6}\n",
        r"checks\.propensity\.never_logged_warn \(0\.6\) must be <= checks\.propensity\.never_logged_fail \(0\.5\)",
    ),
    (
        "training:\n  learner: banditnet\n",
        r"search\.grid: the default grid is POEM's; give learner 'banditnet' its own",
    ),
    (
        "search:\n  temperatures: []\n",
        r"search\.temperatures: .*temperatures is empty; give at least one, e\.g\. \[1\.0\], or null",
    ),
    (
        "search:\n  temperatures: [1.0, 0.0]\n",
        r"search\.temperatures: .*temperatures must be finite and > 0, got \[0\.0\]",
    ),
    (
        "search:\n  temperatures: [1.0, .nan]\n",
        r"search\.temperatures",
    ),
    ("search:\n  temperatures: [0.5, 0.5]\n", r"search\.temperatures: .*repeats \[0\.5\]"),
    (
        "search:\n  grid: {temperature: [1.0, 0.5]}\n",
        r"search\.grid\.temperature and search\.temperatures both set: .*search\.temperatures: null",
    ),
]


@pytest.mark.parametrize(("text", "message"), DEFECTS)
def test_every_config_defect_is_one_clear_error_at_load(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(info.value).startswith(f"invalid config {path}: ")
    assert "\n" not in str(info.value) and len(str(info.value)) < 600


def test_uniform_weight_min_ess_is_settable(tmp_path):
    cfg = load_config(_write(tmp_path, "checks:\n  propensity: {uniform_weight_min_ess: 10}\n"))
    assert cfg.checks.propensity.uniform_weight_min_ess == 10.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            b"a: &x [1, 2]\nb: *x\n",
            r"YAML alias \*x at line 2, column 4: aliases and anchors are not allowed",
        ),
        (b"gate:\n  min_ess: 1\n  min_ess: 2\n", r"duplicate key 'min_ess' at line 3, column 3"),
        (b"gate:\n  estimator: \xffips\n", r"is not UTF-8 text \(byte 0xff at offset 19\)"),
        (b"# " + b"x" * (1 << 20) + b"\n", r"is larger than 1,048,576 bytes"),
    ],
)
def test_yaml_is_read_strictly(tmp_path, content, message):
    path = tmp_path / "mlflow.yml"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        load_config(path)


def test_alias_bomb_is_refused_before_expansion(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    path = tmp_path / "mlflow.yml"
    path.write_text("search:\n  grid: {clip: [*a8]}\n" + "\n".join(lines))
    with pytest.raises(ConfigError, match=r"alias") as info:
        load_config(path)
    assert len(str(info.value)) < 300


def test_error_messages_are_bounded(tmp_path):
    grid = {f"p{i}": ["y" * 5000] for i in range(50)}
    path = _write(tmp_path, "search:\n  grid: " + str(grid).replace("'", '"') + "\n")
    with pytest.raises(ConfigError, match=r"unknown parameter") as info:
        load_config(path)
    assert len(str(info.value)) < 2000
    many = "".join(f"k{i}: 1\n" for i in range(40))
    with pytest.raises(ConfigError, match=r"unknown key 'k0'.*and 35 more") as info:
        load_config(_write(tmp_path, many))


def test_packaged_default_equals_empty_file_and_repository_copy(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    packaged = default_config_path()
    assert packaged.read_text() == (REPO / "mlflow.yml").read_text()
    empty = tmp_path / "empty.yml"
    empty.write_text("")
    assert load_config(packaged) == load_config(empty)
    assert resolve_config_path(None) == packaged  # no mlflow.yml here
    (tmp_path / "mlflow.yml").write_text("")
    assert resolve_config_path(None) == Path("mlflow.yml")


def test_overrides_set_nested_keys_and_are_validated(tmp_path):
    path = _write(tmp_path, "")
    overrides = parse_overrides(
        ["search.scoring=snips", "training.params.max_iter=7", "data.loss_bounds=[0, 2]"]
    )
    cfg = load_config(path, overrides)
    assert cfg.search.scoring == "snips" and cfg.training.params["max_iter"] == 7
    assert cfg.training.params["solver"] == "lbfgs"  # the other params are kept
    assert cfg.data.loss_bounds == (0.0, 2.0)
    with pytest.raises(ConfigError, match=r"gate\.min_ess: Input should be a finite number"):
        load_config(path, parse_overrides(["gate.min_ess=.inf"]))
    with pytest.raises(ConfigError, match=r"--set expects SECTION\.KEY=VALUE, got 'gate'"):
        parse_overrides(["gate"])
    with pytest.raises(ConfigError, match=r"--set search\.scoring\.x: search\.scoring is 'ips'"):
        apply_overrides({"search": {"scoring": "ips"}}, {"search.scoring.x": 1})


def test_environment_tracking_uri_is_validated(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "ftp://nowhere")
    with pytest.raises(ConfigError, match=r"MLFLOW_TRACKING_URI: tracking URI has scheme 'ftp'"):
        load_config(_write(tmp_path, ""))


def test_overrides_of_another_learner_keep_its_own_defaults(tmp_path):
    path = _write(tmp_path, "training:\n  learner: banditnet\n")
    with pytest.raises(ConfigError, match=r"the default grid is POEM's"):
        load_config(path, parse_overrides(["training.params.max_iter=5"]))
    cfg = load_config(path, parse_overrides(["search.grid={l2_penalty: [0.0, 1.0]}"]))
    assert cfg.training.params == {} and cfg.search.grid == {"l2_penalty": [0.0, 1.0]}


def test_snips_with_a_declared_floor_loads(tmp_path):
    cfg = load_config(
        _write(tmp_path, "checks:\n  min_propensity: 0.01\ngate:\n  estimator: snips\n")
    )
    assert (
        cfg.gate.estimator == "snips" and cfg.gate.retry_fraction == 0.2 and cfg.gate.seed is None
    )  # fresh entropy per attempt


def test_the_gate_defaults_are_the_gate_functions(monkeypatch):
    """``gate:`` wrote 0.95, 100, 't', ... again beside :func:`poem.gate.gate_decision`."""
    from pydantic_core import PydanticUndefined

    from flows.config._base import _default_of
    from poem.gate import gate_decision

    for name, f in GateConfig.model_fields.items():
        if name in ("seed", "retry_fraction"):  # the config's own (the ledger pins them)
            assert f.default is not PydanticUndefined
            continue
        assert f.default is PydanticUndefined, f"gate.{name} is written in the config"
        assert f.default_factory.owner == "poem.gate:gate_decision"
    monkeypatch.setattr(
        gate_decision, "__kwdefaults__", {**gate_decision.__kwdefaults__, "min_ess": 7.0}
    )
    _default_of.cache_clear()
    try:
        assert PipelineConfig().gate.min_ess == 7.0
    finally:
        _default_of.cache_clear()


def test_json_dumps_of_the_config_hold_no_password():
    """The config is a Prefect flow-run parameter (a JSON dump): no tracking password in it."""
    uri = "postgresql://poem:s3cret@127.0.0.1:5432/mlflow"
    cfg = PipelineConfig(tracking={"uri": uri, "artifact_location": "s3://u:pw@bucket/a"})
    assert cfg.tracking.uri == uri  # the object keeps it: MLflow connects with it
    dumped = cfg.model_dump(mode="json")["tracking"]
    assert dumped["uri"] == "postgresql://poem:***@127.0.0.1:5432/mlflow"
    assert dumped["artifact_location"] == "s3://u:***@bucket/a"
    assert "s3cret" not in cfg.model_dump_json() and "s3cret" not in cfg.to_yaml()


def test_the_search_levels_are_the_selection_function_defaults(monkeypatch):
    from flows.config import SearchConfig
    from flows.config._base import _default_of
    from poem.learners.selection import select_challenger

    for name in ("confidence_level", "learning_confidence_level"):
        field = SearchConfig.model_fields[name]
        assert field.default_factory.owner == "poem.learners.selection:select_challenger"
    kwdefaults = {**select_challenger.__kwdefaults__, "learning_confidence_level": 0.8}
    monkeypatch.setattr(select_challenger, "__kwdefaults__", kwdefaults)
    _default_of.cache_clear()
    try:
        assert PipelineConfig().search.learning_confidence_level == 0.8
    finally:
        _default_of.cache_clear()


def test_search_selection_rule_is_the_library_rule_and_simultaneous_by_default(tmp_path):
    """issue 35: the selection rule is a config key; its values are the library's rules."""
    from typing import get_args

    from flows.config.search import SelectionRule
    from poem.learners.selection import RULES

    assert get_args(SelectionRule) == RULES
    assert load_config(REPO / "mlflow.yml").search.selection_rule == "simultaneous"
    assert load_config(_write(tmp_path, "")).search.selection_rule == "simultaneous"
    cfg = load_config(_write(tmp_path, "search:\n  selection_rule: holdout\n"))
    assert cfg.search.selection_rule == "holdout"
    with pytest.raises(ConfigError, match="selection_rule"):
        load_config(_write(tmp_path, "search:\n  selection_rule: bonferoni\n"))


def test_search_crossfit_folds_is_five_by_default_and_never_one(tmp_path):
    """issue 35: the cross-fitted evidence on the training rows is on by default (k = 5)."""
    assert load_config(REPO / "mlflow.yml").search.crossfit_folds == 5
    assert load_config(_write(tmp_path, "")).search.crossfit_folds == 5
    assert (
        load_config(_write(tmp_path, "search:\n  crossfit_folds: 0\n")).search.crossfit_folds == 0
    )
    with pytest.raises(
        ConfigError, match="crossfit_folds must be 0 \\(off\\) or at least 2 folds, got 1"
    ):
        load_config(_write(tmp_path, "search:\n  crossfit_folds: 1\n"))
    with pytest.raises(ConfigError, match="crossfit_folds"):
        load_config(_write(tmp_path, "search:\n  crossfit_folds: -1\n"))


def test_a_new_gate_option_is_one_class_and_one_registry_entry(tmp_path, monkeypatch):
    # issue 34 item 5: config validation and the report read the option registry; nothing
    # else branches on the option's name (before: a Literal in GateConfig, "snips" in
    # PipelineConfig, ESTIMATORS and name tests in compare_policies)
    from dataclasses import replace

    import numpy as np

    from poem.estimators.compare import compare_policies
    from poem.estimators.gate_options import GATE_OPTIONS, IPSOption

    class FlooredIPS(IPSOption):
        """The ips terms and estimates, under its own name, with a declared floor required."""

        name = "floored_ips"
        needs_declared_floor = True

        def estimate(self, losses, weights, clip, **options):
            return replace(super().estimate(losses, weights, clip, **options), estimator=self.name)

    monkeypatch.setitem(GATE_OPTIONS, FlooredIPS.name, FlooredIPS())  # the one registration
    assert GateConfig(estimator="floored_ips").estimator == "floored_ips"
    with pytest.raises(ValidationError, match=r"'ips', 'snips', 'floored_ips' or 'clipped_ips'"):
        GateConfig(estimator="floored")
    with pytest.raises(ConfigError, match=r"gate\.estimator 'floored_ips' needs a declared weight"):
        load_config(_write(tmp_path, "gate:\n  estimator: floored_ips\n"))
    cfg = load_config(
        _write(tmp_path, "checks:\n  min_propensity: 0.1\ngate:\n  estimator: floored_ips\n")
    )
    assert cfg.gate.estimator == "floored_ips"

    rng = np.random.default_rng(3)
    losses, wc = rng.random(200), rng.uniform(0.2, 2.0, 200)
    options = dict(loss_bounds=(0.0, 1.0), order_seed=5, min_ess=0.0)
    new = compare_policies(losses, wc, np.ones(200), estimator="floored_ips", **options)
    ips = compare_policies(losses, wc, np.ones(200), estimator="ips", **options)
    assert new.estimator == "floored_ips" and new.to_dict()["estimator"] == "floored_ips"
    assert new.challenger.estimator == "floored_ips"
    assert new.difference.estimator == "floored_ips_difference"
    assert new.upper_bound == ips.upper_bound and new.promote == ips.promote
    assert "floored_ips terms" in new.to_markdown()


def test_the_default_search_has_the_ipw_classifier_as_a_candidate(tmp_path):
    """issue 35 item 2: the convex reduction is a candidate of the default search."""
    ipw = {"params": {"clip": "p90/p10"}, "grid": {"C": [0.01, 0.1, 1.0, 10.0]}}
    for cfg in (load_config(REPO / "mlflow.yml"), load_config(_write(tmp_path, ""))):
        assert cfg.search.model_dump(mode="json")["candidates"] == {"ipw_classifier": ipw}
    auto = load_config(_write(tmp_path, "search:\n  candidates: auto\n"))
    assert list(auto.search.candidates) == ["ipw_classifier"]
    off = load_config(_write(tmp_path, "search:\n  candidates: {}\n"))
    assert off.search.candidates == {}  # the off switch: training.learner alone
    # --set on an empty file keeps the candidate's fixed params
    cfg = load_config(
        _write(tmp_path, ""), parse_overrides(["search.candidates.ipw_classifier.grid.C=[1.0]"])
    )
    assert cfg.search.candidates["ipw_classifier"].params == {"clip": "p90/p10"}
    assert cfg.search.candidates["ipw_classifier"].grid == {"C": [1.0]}
    # multilabel: POEM(B) with per-label weights, the champion as logger (issue 35)
    ml = "data:\n  family: multilabel\ntraining:\n  params: {policy: multilabel, variance_penalty: calibrated}\n"
    marginal = load_config(_write(tmp_path, ml)).search.model_dump(mode="json")["candidates"]
    assert list(marginal) == ["poem_marginal"]
    assert marginal["poem_marginal"]["params"]["objective"] == "marginal"
    assert marginal["poem_marginal"]["params"]["logging_policy"] == "champion"
    assert marginal["poem_marginal"]["grid"] == {"variance_scale": [0.0001, 0.001, 0.01]}
    assert load_config(_write(tmp_path, ml + "search:\n  candidates: {}\n")).search.candidates == {}
    opt_in = ml + "search:\n  candidates: {ipw_classifier: {grid: {C: [1.0]}}}\n"
    assert list(load_config(_write(tmp_path, opt_in)).search.candidates) == ["ipw_classifier"]
    # a candidates log: the default has none (the reduction fits discrete/multilabel logs)
    text = (
        "data:\n  family: candidates\ntraining:\n  params: {policy: candidates}\n"
        "search:\n  grid: {l2_penalty: [0.0, 1.0]}\n"
    )
    assert load_config(_write(tmp_path, text)).search.candidates == {}


CANDIDATE_DEFECTS = [
    (
        "search:\n  candidates: {nope: {grid: {C: [1.0]}}}\n",
        r"search\.candidates\.nope: unknown learner 'nope'; choose one of \[.*'ipw_classifier'",
    ),
    (
        "search:\n  candidates: {ipw_classifier: {grid: {C: [0.1, 0.0]}}}\n",
        r"search\.candidates\.ipw_classifier\.grid\.C\[1\]: C must be a finite number > 0, got 0\.0",
    ),
    (
        "search:\n  candidates: {ipw_classifier: {grid: {c: [1.0]}}}\n",
        r"search\.candidates\.ipw_classifier\.grid: unknown parameter\(s\) \['c'\] for learner "
        r"'ipw_classifier'; valid: \['C',",
    ),
    (
        "search:\n  candidates: {ipw_classifier: {params: {clip: p99}, grid: {C: [1.0]}}}\n",
        r"search\.candidates\.ipw_classifier\.params: clip must be one of",
    ),
    (
        "search:\n  candidates: {ipw_classifier: {grid: {}}}\n",
        r"search\.candidates\.ipw_classifier\.grid: .*the grid is empty",
    ),
    (
        "search:\n  candidates: {ipw_classifier: {grid: {C: [1.0, 1.0]}}}\n",
        r"search\.candidates\.ipw_classifier\.grid: .*grid entry 'C' repeats \[1\.0\]",
    ),
    (
        "search:\n  candidates: {ipw_classifier: {params: {C: 1.0}}}\n",
        r"missing key 'search\.candidates\.ipw_classifier\.grid'",
    ),
    (
        "search:\n  candidates: {ipw_classifier: {grid: {temperature: [1.0, 0.5]}}}\n",
        r"search\.candidates\.ipw_classifier\.grid\.temperature and search\.temperatures both set",
    ),
    (
        "data:\n  family: candidates\ntraining:\n  params: {policy: candidates}\nsearch:\n"
        "  grid: {l2_penalty: [0.0]}\n  candidates: {ipw_classifier: {grid: {C: [1.0]}}}\n",
        r"search\.candidates\.ipw_classifier: learner 'ipw_classifier' fits \['discrete', "
        r"'multilabel'\] logs, but data\.family is 'candidates'",
    ),
    (
        "training:\n  learner: ipw_classifier\n  params: {}\nsearch:\n  grid: {C: [1.0]}\n",
        r"search\.candidates\.ipw_classifier: 'ipw_classifier' is training\.learner already",
    ),
]


@pytest.mark.parametrize(("text", "message"), CANDIDATE_DEFECTS)
def test_a_bad_candidate_spec_is_one_clear_error_naming_the_key(tmp_path, text, message):
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(path)
    assert str(info.value).startswith(f"invalid config {path}: ")
    assert "\n" not in str(info.value)
