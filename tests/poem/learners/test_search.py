"""Counterfactual hyperparameter search: grid expansion, trials scored by IPS, selection."""

from __future__ import annotations

import numpy as np
import pytest

from poem.estimators.ips import Estimate, evaluate_policy
from poem.learners import POEM, Trial, expand_grid, run_trial, search_hyperparameters, select_trial


def _estimate(name, value):
    return Estimate(name, value, 0.1, value - 0.2, value + 0.2, 100, 0.95, 50.0, 0.0, "t")


def _trial(ips, snips, i=0):
    return Trial(
        {"i": i}, _estimate("ips", ips), _estimate("snips", snips), 50.0, 0.0, -0.5, 3, True, 0.01
    )


@pytest.fixture
def split_logs(synthetic_log):
    rows = np.random.default_rng(0).permutation(synthetic_log.n_rows)
    return synthetic_log.take(rows[:1500]), synthetic_log.take(rows[1500:])


def test_expand_grid_order_and_errors():
    grid = {"variance_scale": [0.1, 1.0], "solver": ["adagrad", "lbfgs"], "clip": [None]}
    configs = expand_grid(grid)
    assert configs == [
        {"variance_scale": 0.1, "solver": "adagrad", "clip": None},
        {"variance_scale": 0.1, "solver": "lbfgs", "clip": None},
        {"variance_scale": 1.0, "solver": "adagrad", "clip": None},
        {"variance_scale": 1.0, "solver": "lbfgs", "clip": None},
    ]
    assert expand_grid({}) == [{}]
    with pytest.raises(ValueError, match=r"grid\['clip'\] has 0 values"):
        expand_grid({"clip": []})
    with pytest.raises(TypeError, match=r"grid\['solver'\] must be a list of values, got str"):
        expand_grid({"solver": "lbfgs"})


def test_select_trial_lowest_ips_with_snips_tie_break():
    trials = [_trial(0.5, 0.4, 0), _trial(0.3, 0.5, 1), _trial(0.3, 0.2, 2), _trial(np.nan, 0.0, 3)]
    assert select_trial(trials) == 2  # tie on IPS, lower SNIPS wins; NaN ranks last
    assert select_trial(trials, scoring="snips") == 3
    assert select_trial([_trial(0.3, 0.2), _trial(0.3, 0.2)]) == 0
    with pytest.raises(ValueError, match=r"scoring must be one of \['ips', 'snips', 'ips_ucb', "):
        select_trial(trials, scoring="IPS")
    with pytest.raises(ValueError, match="at least one trial, got 0"):
        select_trial([])


def test_select_trial_by_upper_bound_prefers_the_better_supported_estimate():
    """A lower SNIPS resting on a wide interval loses to a slightly higher, tight one."""
    wide = Estimate("snips", 0.30, 0.2, 0.0, 0.70, 100, 0.95, 5.0, 0.0, "delta")
    tight = Estimate("snips", 0.35, 0.02, 0.31, 0.39, 100, 0.95, 80.0, 0.0, "delta")
    trials = [
        Trial({"i": 0}, _estimate("ips", 0.3), wide, 5.0, 0.0, -0.5, 3, True, 0.01),
        Trial({"i": 1}, _estimate("ips", 0.4), tight, 80.0, 0.0, -0.5, 3, True, 0.01),
    ]
    assert select_trial(trials, scoring="snips") == 0
    assert select_trial(trials, scoring="snips_ucb") == 1
    assert select_trial(trials, scoring="ips_ucb") == 0  # IPS uppers 0.5 < 0.6


def test_run_trial_scores_the_fitted_policy_on_validation(split_logs):
    train, valid = split_logs
    template = POEM(solver="lbfgs", max_iter=30, tol=1e-4, random_state=0)
    trial = run_trial(
        template, {"variance_penalty": "calibrated", "variance_scale": 0.1}, train, valid
    )
    assert template.get_params()["variance_penalty"] == 1.0  # template untouched
    refit = POEM(
        solver="lbfgs",
        max_iter=30,
        tol=1e-4,
        random_state=0,
        variance_penalty="calibrated",
        variance_scale=0.1,
    ).fit(train)
    expected = evaluate_policy(refit.policy_, valid, estimator="ips")
    assert trial.ips.value == pytest.approx(expected.value, rel=1e-12)
    assert trial.snips.value == pytest.approx(
        evaluate_policy(refit.policy_, valid, estimator="snips").value, rel=1e-12
    )
    assert trial.ips.n == valid.n_rows
    flat = trial.to_dict()
    for key in (
        "ips_risk",
        "ips_risk_lower",
        "ips_risk_upper",
        "snips_risk",
        "effective_sample_size",
        "clipped_fraction",
        "objective",
        "n_iter",
        "fit_seconds",
    ):
        assert np.isfinite(flat[key]), key
    assert flat["ips_risk_lower"] < flat["ips_risk"] < flat["ips_risk_upper"]
    assert flat["resolved_variance_penalty"] == pytest.approx(refit.variance_penalty_)


def test_search_selects_the_best_validation_risk(split_logs):
    train, valid = split_logs
    grid = {"variance_penalty": [0.0, "calibrated"], "solver": ["lbfgs"], "max_iter": [1, 30]}
    result = search_hyperparameters(POEM(tol=1e-4, random_state=0), train, valid, grid)
    assert len(result.trials) == 4
    risks = [t.ips.value for t in result.trials]
    assert result.best_index == int(np.argmin(risks))
    assert result.best_params == result.trials[result.best_index].params
    assert result.best_trial.params["max_iter"] == 30  # one L-BFGS step is far from the optimum
    with pytest.raises(ValueError, match=r"unknown hyperparameter 'lambda_' for POEM"):
        search_hyperparameters(POEM(), train, valid, {"lambda_": [1.0]})
    with pytest.raises(ValueError, match=r"scoring must be one of"):
        search_hyperparameters(POEM(), train, valid, {"solver": ["lbfgs"]}, scoring="dr")


def test_undefined_snips_is_recorded_as_nan(split_logs, monkeypatch):
    import poem.learners._trials as search

    real = search.evaluate_rows

    def no_snips(*rows, estimator="ips", **kw):
        if estimator == "snips":
            raise ValueError("weights are all 0")
        return real(*rows, estimator=estimator, **kw)

    monkeypatch.setattr(search, "evaluate_rows", no_snips)
    train, valid = split_logs
    trial = run_trial(POEM(solver="lbfgs", max_iter=3), {}, train, valid)
    assert np.isnan(trial.snips.value) and np.isfinite(trial.ips.value)
    assert select_trial([trial, _trial(trial.ips.value, 0.1)]) == 1  # NaN SNIPS loses the tie


def test_ess_guard_ranks_thin_estimates_last():
    thin = Trial(
        {"i": 0}, _estimate("ips", 0.1), _estimate("snips", 0.1), 3.0, 0.0, -0.5, 3, True, 0.01
    )
    thick = _trial(0.4, 0.4, 1)  # ESS 50
    assert select_trial([thin, thick]) == 0
    assert select_trial([thin, thick], min_effective_sample_size=10.0) == 1
    assert select_trial([thin], min_effective_sample_size=10.0) == 0  # falls back when none passes
    # below the guard the scores are not trusted: the best-supported trial wins, not the lowest
    thinner = Trial(
        {"i": 2}, _estimate("ips", 0.0), _estimate("snips", 0.0), 1.1, 0.0, -0.5, 3, True, 0.01
    )
    assert select_trial([thinner, thin], min_effective_sample_size=10.0) == 1
    assert select_trial([thinner, thin, thick], min_effective_sample_size=10.0) == 2
    assert select_trial([thinner, thin]) == 0


def test_keep_estimators(split_logs):
    train, valid = split_logs
    result = search_hyperparameters(
        POEM(solver="lbfgs", max_iter=5),
        train,
        valid,
        {"variance_penalty": [0.0, 1.0]},
        keep_estimators=True,
    )
    for trial in result.trials:
        assert isinstance(trial.estimator, POEM) and trial.estimator.objective_ == trial.objective
    assert "estimator" not in result.trials[0].to_dict()
    assert run_trial(POEM(solver="lbfgs", max_iter=5), {}, train, valid).estimator is None


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_run_trial_serves_at_the_temperature_its_rule_selects(split_logs):
    """Each temperature is scored on validation from one fit; the rule's choice is served."""
    from poem.learners.search import validation_scores

    train, valid = split_logs
    template = POEM(solver="lbfgs", max_iter=30, tol=1e-4, random_state=0)
    temps = [1.0, 0.5, 0.25, 0.125]
    trial = run_trial(
        template, {}, train, valid, temperatures=temps, scoring="snips_ucb", keep_estimator=True
    )
    plain = run_trial(template, {}, train, valid, keep_estimator=True)
    uppers = [
        validation_scores(plain.estimator.policy_.with_serving(temperature=t), valid)[1].upper
        for t in temps
    ]
    chosen = temps[int(np.argmin(uppers))]
    assert trial.params == {"temperature": chosen}
    assert trial.snips.upper == pytest.approx(min(uppers), rel=1e-12)
    assert trial.estimator.temperature == chosen == trial.estimator.policy_.temperature
    np.testing.assert_array_equal(trial.estimator.coef_, plain.estimator.coef_)  # no refit
    # the flow refits the selected params: the same served policy
    refit = POEM(solver="lbfgs", max_iter=30, tol=1e-4, random_state=0, temperature=chosen)
    probs = refit.fit(train).predict_proba(valid.contexts)
    np.testing.assert_allclose(trial.estimator.predict_proba(valid.contexts), probs, rtol=1e-12)
    # an ESS guard no temperature meets: the best-supported one (the flattest) is served
    guarded = run_trial(
        template,
        {},
        train,
        valid,
        temperatures=temps,
        scoring="snips_ucb",
        min_effective_sample_size=10 * valid.n_rows,
    )
    assert guarded.params == {"temperature": 1.0}


def test_temperature_choice_errors(split_logs):
    train, valid = split_logs
    template = POEM(solver="lbfgs", max_iter=5, tol=1e-4, random_state=0)
    for bad, message in (([], r"finite values > 0, got \[\]"), ([1.0, 0.0], r"got \[1\.0, 0\.0\]")):
        with pytest.raises(ValueError, match=message):
            run_trial(template, {}, train, valid, temperatures=bad)
    with pytest.raises(ValueError, match="grid has 'temperature' and temperatures are given"):
        search_hyperparameters(
            template, train, valid, {"temperature": [1.0, 0.5]}, temperatures=[1.0]
        )
