"""The champion re-tempered, no refit: candidates of the search beside the fitted trials."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from poem.io.partitions import LocalPartitions
from poem.learners.champion_candidates import (
    KIND_KEY,
    LEARNED,
    RETEMPERED,
    challenger_kind,
    champion_trials,
    retempered_champion,
    selected_champion_policy,
)
from poem.learners.poem import POEM
from poem.learners.search import run_trial, select_trial, validation_scores
from poem.log_rows import as_partitions, split_partitioned
from poem.policies import StochasticPolicy, make_family

TEMPERATURES = [1.0, 0.5, 0.25]


@pytest.fixture
def log(make_log):
    return make_log("discrete", n=300, seed=3)


@pytest.fixture
def champion():
    """A champion served at τ = 0.5 with a floor (3 features + intercept, 4 actions)."""
    coef = np.random.default_rng(0).normal(size=(4, 4))
    family = make_family("discrete", 3, 4, True)
    return StochasticPolicy(family, coef, 0.5, 0.02, {"hyperparameters": {"c": 1}})


def test_retempered_champion_moves_the_served_distribution_along_w(champion, log):
    same = retempered_champion(champion, 1.0)  # α = 1: the champion's own probabilities
    np.testing.assert_allclose(same.coef, champion.coef / 0.5)
    assert (same.temperature, same.exploration_floor) == (1.0, 0.02)
    np.testing.assert_allclose(
        same.predict_proba(log.contexts), champion.predict_proba(log.contexts)
    )
    sharper = retempered_champion(champion, 0.25)  # π_{(w/τ)/α} = the champion at τ·α
    np.testing.assert_allclose(
        sharper.predict_proba(log.contexts),
        champion.with_serving(temperature=0.125).predict_proba(log.contexts),
        rtol=1e-12,
    )
    assert sharper.metadata[KIND_KEY] == RETEMPERED
    assert sharper.metadata["retempered_from"] == champion.digest()
    assert sharper.metadata["retempered_by"] == 0.25
    assert sharper.metadata["hyperparameters"] == {"c": 1}
    with pytest.raises(ValueError, match=r"temperatures must be finite values > 0, got \[0.0\]"):
        retempered_champion(champion, 0.0)


def test_candidates_serve_the_challengers_floor_not_the_loggers(champion, log):
    """A champion without a floor (h₀, the logger) re-tempered to α = 1/16 served p ≈ 1 on most
    rows: the next round's log failed the uniform-weight check. Candidates take the floor every
    challenger is served with."""
    logger = champion.with_serving(exploration_floor=0.0)
    sharp = retempered_champion(logger, 0.0625, exploration_floor=0.01)
    assert sharp.exploration_floor == 0.01
    assert sharp.predict_proba(log.contexts).min() >= 0.01 - 1e-12
    trials = champion_trials(logger, log, [0.0625], exploration_floor=0.01)
    expected = validation_scores(sharp, log, 0.95)[0].value
    assert math.isclose(trials[0].ips.value, expected, rel_tol=1e-12)
    picked = selected_champion_policy(trials[0].params, logger, 0.01)
    assert picked.digest() == sharp.digest()


def test_champion_trials_score_each_temperature_like_a_fit(champion, log):
    trials = champion_trials(champion, log, TEMPERATURES, confidence_level=0.9)
    assert [t.params for t in trials] == [
        {KIND_KEY: RETEMPERED, "temperature": a} for a in TEMPERATURES
    ]
    for trial, alpha in zip(trials, TEMPERATURES, strict=True):
        served = champion.with_serving(temperature=0.5 * alpha)
        weights = served.log_action_probability_on(log) / log.propensities
        # IPS on losses translated by δ_max = 1 (DESIGN §4.2), in original units
        expected = np.mean((log.losses - 1.0) * weights) + 1.0
        assert trial.ips.value == pytest.approx(expected, rel=1e-12)
        ref_ips, ref_snips = validation_scores(served, log, 0.9)
        assert (trial.ips.upper, trial.snips.value) == pytest.approx(
            (ref_ips.upper, ref_snips.value), rel=1e-12
        )
        assert trial.effective_sample_size == pytest.approx(ref_ips.effective_sample_size)
        assert (trial.n_iter, trial.converged, trial.resolved) == (0, True, {})
        assert math.isnan(trial.objective) and math.isnan(trial.clipped_fraction)
        assert trial.seconds >= 0
    # no champion (the logging policy): no candidates; no temperatures: the champion as served
    assert champion_trials(None, log, TEMPERATURES) == []
    (only,) = champion_trials(champion, log, None)
    assert only.params["temperature"] == 1.0


def test_a_champion_of_another_action_structure_is_an_error(log):
    other = StochasticPolicy(make_family("discrete", 3, 5, True), np.zeros((5, 4)))
    with pytest.raises(
        ValueError,
        match=r"\('discrete', 3, 5\) cannot score a log with \('discrete', 3, 4\)",
    ):
        champion_trials(other, log, TEMPERATURES)


def test_search_with_candidates_selects_the_retempered_champion_over_worse_fits(log):
    """One L-BFGS step from zeros is barely off uniform; the fitted champion re-tempered wins."""
    train, valid = log.take(np.arange(200)), log.take(np.arange(200, 300))
    good = POEM(solver="lbfgs", max_iter=100, variance_penalty=0.0).fit(log).policy_
    fits = [
        run_trial(POEM(solver="lbfgs", max_iter=1), {}, train, valid, temperatures=TEMPERATURES)
    ]
    candidates = champion_trials(good, valid, TEMPERATURES)
    best = select_trial(fits + candidates, "ips")
    chosen = (fits + candidates)[best]
    assert challenger_kind(chosen.params) == RETEMPERED
    assert chosen.ips.value < fits[0].ips.value
    policy = selected_champion_policy(chosen.params, good)
    assert policy.temperature == chosen.params["temperature"]
    np.testing.assert_allclose(policy.coef, good.coef / good.temperature)
    assert challenger_kind(fits[0].params) == LEARNED


def test_challenger_kind_and_selected_policy_errors(champion):
    assert challenger_kind({"variance_scale": 0.1}) == LEARNED
    with pytest.raises(ValueError, match=r"challenger_kind must be one of .* got 'other'"):
        challenger_kind({KIND_KEY: "other"})
    with pytest.raises(ValueError, match=r"not a champion candidate's"):
        selected_champion_policy({"variance_scale": 0.1}, champion)
    with pytest.raises(ValueError, match=r"there is no champion policy"):
        selected_champion_policy({KIND_KEY: RETEMPERED, "temperature": 0.5}, None)


def test_partitioned_candidates_equal_in_memory(champion, make_log):
    log = make_log("discrete", n=300, seed=3)
    log = replace(log, timestamps=np.datetime64("2026-01-01") + np.arange(300).astype("m8[m]"))
    edges = [0, 37, 37, 150, 151, 300]
    parts = LocalPartitions(
        [
            log.take(np.arange(a, b)) if b > a else None
            for a, b in zip(edges[:-1], edges[1:], strict=True)
        ]
    )
    split = split_partitioned(parts, random_state=0)
    ref = champion_trials(
        champion,
        split_partitioned(as_partitions(log), random_state=0).log("validation"),
        TEMPERATURES,
    )
    got = champion_trials(champion, (split.source, split.rows_for("validation")), TEMPERATURES)
    assert [t.params for t in got] == [t.params for t in ref]
    for a, b in zip(got, ref, strict=True):
        for key, value in b.to_dict().items():
            if key not in ("fit_seconds", "objective", "clipped_fraction"):
                assert a.to_dict()[key] == pytest.approx(value, rel=1e-10, abs=1e-12), key
    assert champion_trials(None, (split.source, split.rows_for("validation")), TEMPERATURES) == []
