"""One challenger selection for the flow and the benchmarks, corrected for multiplicity (issue 35)."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from poem.learners._trials import Trial, rows_scores, validation_scores
from poem.learners.selection import (
    FIT_NOT_COVERED,
    FIT_NOT_SHOWN,
    FIT_SHOWN,
    HOLDOUT,
    NO_CHAMPION,
    RETEMPER_NOT_SHOWN,
    confirm_split,
    corrected_level,
    n_compared,
    select_challenger,
)
from poem.policies import StochasticPolicy, make_family
from tests.conftest import make_synthetic
from tests.poem.learners.test_learning_evidence import _RowTable

TEMPERATURES = [1.0, 0.5, 0.25, 0.125, 0.0625]


def _policy(coef: np.ndarray) -> StochasticPolicy:
    return StochasticPolicy(make_family("discrete", coef.shape[1] - 1, coef.shape[0], True), coef)


def _fit(params: dict, policy: StochasticPolicy, valid) -> Trial:
    ips, snips = validation_scores(policy, valid)
    model = SimpleNamespace(policy_=policy)
    return Trial(params, ips, snips, ips.effective_sample_size, 0.0, 0.0, 1, True, 0.0, {}, model)


def perturbed_fits(scale: float = -0.7):
    """The champion w = scale·θ and 100 perturbations of it scored on 200 validation rows."""
    problem = make_synthetic(n=1400, seed=0)
    stream = np.random.default_rng(0)  # make_synthetic's stream: X, then θ
    stream.normal(size=(1400, 5))
    theta = stream.normal(size=(4, 5))
    champion = _policy(np.hstack([scale * theta, np.zeros((4, 1))]))
    valid, train = problem.log.take(np.arange(200)), problem.log.take(np.arange(200, 1400))
    rng = np.random.default_rng(100)
    fits = [
        _fit(
            {"k": k},
            _policy(np.hstack([scale * theta + rng.normal(0, 1.2, (4, 5)), np.zeros((4, 1))])),
            valid,
        )
        for k in range(100)
    ]
    return champion, valid, train, fits


@pytest.fixture(scope="module")
def many_fits():
    """100 perturbations of a champion scored on 200 validation rows: the winner's curse."""
    return perturbed_fits()


def _select(fits, champion, valid, train, **kw):
    return select_challenger(
        fits,
        champion,
        valid,
        scoring="snips_ucb",
        evidence_logs=(valid, train),
        learning_confidence_level=0.9,
        **kw,
    )


def test_the_best_of_many_fits_needs_the_corrected_bound(many_fits):
    champion, valid, train, fits = many_fits
    old = _select(fits, champion, valid, train, multiplicity=False)
    assert (old.kind, old.reason, old.n_compared) == ("learned", FIT_SHOWN, 1)
    assert old.evidence.confidence_level == 0.9 and old.evidence.learned
    new = _select(fits, champion, valid, train)  # the same evidence at 1 − 0.1/100
    assert new.n_compared == 100 and new.confidence_level == pytest.approx(0.999)
    assert new.evidence.confidence_level == pytest.approx(0.999)
    assert new.evidence.difference == pytest.approx(old.evidence.difference, abs=1e-12)
    assert new.evidence.upper > 0 > old.evidence.upper and not new.evidence.learned
    assert new.kind == "champion_retempered" and new.champion_kept
    assert new.reason.startswith(FIT_NOT_SHOWN)
    assert new.ranked_first == old.ranked_first == old.selected < 100 <= new.selected
    assert new.estimator is None and new.policy.metadata["challenger_kind"] == "champion_retempered"
    metrics, tags = new.metrics(), new.tags()
    assert metrics["learning_n_compared"] == 100.0 and metrics["learning_champion_kept"] == 1.0
    assert metrics["learning_learned"] == 0.0
    assert tags == {
        "learning_evidence": "not shown",
        "selection_reason": new.reason,
        "selection_rule": "bonferroni",
    }


def test_a_retempering_is_served_only_when_shown_better():
    """The champion sharpened is served only when shown better than the champion as served."""
    problem = make_synthetic(n=1400, seed=0)
    stream = np.random.default_rng(0)
    stream.normal(size=(1400, 5))
    theta = stream.normal(size=(4, 5))
    train = problem.log.take(np.arange(200, 1400))
    worse = np.hstack([0.7 * theta, np.zeros((4, 1))])  # a fit that ranks last
    rng = np.random.default_rng(5)
    rng.normal(size=(4, 5))
    cases = {  # (champion coefficients, validation rows) -> (served α, old rule's α)
        "good direction, 200 rows": (-0.7 * theta, 200, 0.125, 0.125),
        "no direction, 30 rows": (-0.01 * theta + 0.05 * rng.normal(size=(4, 5)), 30, 1.0, 0.125),
    }
    for name, (coef, n_valid, alpha, old_alpha) in cases.items():
        valid = problem.log.take(np.arange(n_valid))
        champion = _policy(np.hstack([coef, np.zeros((4, 1))]))
        fits = [_fit({"k": 0}, _policy(worse), valid)]
        new = _select(fits, champion, valid, train, temperatures=TEMPERATURES)
        old = _select(fits, champion, valid, train, temperatures=TEMPERATURES, multiplicity=False)
        assert new.selected_trial.params["temperature"] == alpha, name
        assert old.selected_trial.params["temperature"] == old_alpha, name
        assert old.retemper_evidence is None and new.kind == old.kind == "champion_retempered"
        evidence = new.retemper_evidence
        assert evidence.confidence_level == pytest.approx(1 - 0.1 / 4), name  # 4 other α
        assert evidence.learned == (alpha != 1.0), name
        assert new.policy.temperature == alpha
        assert new.metrics()["retemper_learned"] == float(alpha != 1.0)
        if alpha == 1.0:
            assert new.reason.endswith(RETEMPER_NOT_SHOWN), name


def test_a_fit_whose_weights_cover_nothing_is_not_served():
    """Ranked first, both bounds < 0, yet it never plays a logged action: the champion is kept.

    The fit of ``test_a_fit_whose_weights_under_cover_the_rows_is_not_shown_better`` (0.99 on
    the low-loss actions other than the logged one) against a champion that plays the
    high-loss action 0: its evidence is the loss model's alone, and the reason says why.
    """
    problem = make_synthetic(n=3000, seed=4)
    mu = np.array([0.7, 0.4, 0.4, 0.4])
    coin = np.random.default_rng(5).random(3000) < mu[np.asarray(problem.log.actions)]
    log = replace(problem.log, losses=coin.astype(float))
    valid, rest = log.take(np.arange(1000)), log.take(np.arange(1000, 3000))
    avoid = np.zeros((1000, 4), dtype=bool)
    avoid[:, 0] = True
    avoid[np.arange(1000), np.asarray(valid.actions)] = True
    table = np.where(avoid, 0.01, 0.99)
    fit = _RowTable(table / table.sum(axis=1, keepdims=True))
    ips, snips = rows_scores(
        valid.losses, fit.action_probability(None, valid.actions), valid.propensities,
        valid.loss_bounds,
    )  # fmt: skip
    trial = Trial({"k": 0}, ips, snips, ips.effective_sample_size, 0, 0, 1, True, 0, {},
                  SimpleNamespace(policy_=fit))  # fmt: skip
    coef = np.zeros((4, 6))
    coef[0, -1] = 3.0  # the champion: action 0 (expected loss 0.7) with probability ~0.87
    chosen = _select([trial], _policy(coef), valid, rest)
    evidence = chosen.evidence
    assert chosen.ranked_first == 0 and evidence.upper < 0 and evidence.model_upper < 0
    assert evidence.weight_mean < 0.05 and not evidence.covered and not evidence.learned
    assert chosen.kind == "champion_retempered" and chosen.champion_kept
    assert chosen.reason.startswith(FIT_NOT_COVERED)
    assert chosen.metrics()["learning_covered"] == 0.0
    assert chosen.metrics()["learning_weight_upper"] == pytest.approx(evidence.weight_upper)
    assert chosen.tags()["learning_evidence"] == "not shown"


def test_no_champion_serves_the_first_ranked_fit(many_fits):
    _, valid, _, fits = many_fits
    chosen = select_challenger(fits, None, valid, scoring="snips_ucb")
    assert (chosen.kind, chosen.reason, chosen.evidence) == ("learned", NO_CHAMPION, None)
    assert chosen.policy is fits[chosen.selected].estimator.policy_
    assert chosen.tags()["learning_evidence"] == "none"


def test_the_count_and_the_level():
    trial = SimpleNamespace(
        ips=SimpleNamespace(value=0.1), snips=SimpleNamespace(value=0.2), effective_sample_size=5
    )
    other = SimpleNamespace(
        ips=SimpleNamespace(value=0.3), snips=SimpleNamespace(value=0.2), effective_sample_size=5
    )
    assert n_compared([trial, trial, other], TEMPERATURES) == 2  # a repeated fit counts once
    assert n_compared([trial, trial, other], TEMPERATURES, per_temperature=True) == 10
    assert n_compared([trial], None) == 1 and n_compared([], None) == 1
    assert corrected_level(0.9, 100) == pytest.approx(0.999)
    assert corrected_level(0.9, 1) == pytest.approx(0.9)


def test_nothing_to_select_is_named(many_fits):
    _, valid, _, _ = many_fits
    with pytest.raises(ValueError, match="no trials to select from: the grid gave 0 fits"):
        select_challenger([], None, valid, scoring="ips")
    kept = [SimpleNamespace(**{**vars(t), "estimator": None}) for t in many_fits[3][:1]]
    with pytest.raises(ValueError, match="kept no estimator; pass fit="):
        select_challenger(kept, None, valid, scoring="ips")


def test_holdout_keeps_the_champion_against_the_winner_of_many(many_fits):
    """The uncorrected rule serves the best of 100 worse fits; the held-out confirm keeps it."""
    champion, valid, train, fits = many_fits
    chosen = _select(fits, champion, valid, train, rule="holdout")
    assert (chosen.rule, chosen.n_confirm, chosen.n_compared) == ("holdout", 100, 1)
    assert chosen.kind == "champion_retempered" and chosen.champion_kept
    assert chosen.reason.startswith(HOLDOUT[FIT_NOT_SHOWN])
    evidence = chosen.evidence  # one uncorrected bound on the 100 rows that chose nothing
    assert (evidence.n_validation, evidence.confidence_level) == (100, 0.9)
    assert evidence.difference == pytest.approx(0.0972, abs=1e-3) and not evidence.learned
    assert chosen.ranked_first == 73  # the winner on the selection half, not the full rows' 89
    assert chosen.tags()["selection_rule"] == "holdout"
    assert chosen.metrics()["learning_n_confirm"] == 100.0
    assert chosen.metrics()["learning_holdout"] == 1.0


def test_holdout_serves_a_better_fit_the_corrected_bound_misses():
    """19 noisy fits and one truly better (true R −0.053): Bonferroni ranks a noisy fit first."""
    problem = make_synthetic(n=1400, seed=0)
    stream = np.random.default_rng(0)
    stream.normal(size=(1400, 5))
    theta = stream.normal(size=(4, 5))
    champion = _policy(np.hstack([-0.7 * theta, np.zeros((4, 1))]))
    valid, train = problem.log.take(np.arange(100)), problem.log.take(np.arange(200, 1400))
    rng = np.random.default_rng(100)
    fits = [
        _fit(
            {"k": k},
            _policy(np.hstack([-0.7 * theta + rng.normal(0, 1.2, (4, 5)), np.zeros((4, 1))])),
            valid,
        )
        for k in range(19)
    ]
    good = _policy(np.hstack([-1.4 * theta, np.zeros((4, 1))]))
    true_risk = np.mean(np.sum(good.predict_proba(problem.log.contexts) * problem.expected_loss, 1))
    true_champion = np.mean(
        np.sum(champion.predict_proba(problem.log.contexts) * problem.expected_loss, 1)
    )
    assert true_risk - true_champion == pytest.approx(-0.053, abs=1e-3)
    fits.append(_fit({"k": "good"}, good, valid))
    old = _select(fits, champion, valid, train)
    assert (old.ranked_first, old.kind, old.n_compared) == (14, "champion_retempered", 20)
    new = _select(fits, champion, valid, train, rule="holdout")
    assert (new.ranked_first, new.selected, new.kind) == (19, 19, "learned")
    assert new.reason == HOLDOUT[FIT_SHOWN] and new.evidence.learned
    assert new.evidence.difference == pytest.approx(-0.054, abs=1e-3)
    assert new.policy is good or np.allclose(new.policy.coef, good.coef)
    assert fits[19].estimator.policy_ is good  # the search's estimator is left as it was


def test_the_confirm_split_keeps_clusters_whole():
    groups = np.repeat(np.arange(10), 4)
    select, confirm = confirm_split(40, groups, 0.5, random_state=3)
    assert select.size == confirm.size == 20
    assert not set(groups[select]) & set(groups[confirm])
    again = confirm_split(40, groups, 0.5, random_state=3)
    assert np.array_equal(again[1], confirm)
    with pytest.raises(ValueError, match="at least 4 validation clusters"):
        confirm_split(12, np.repeat(np.arange(3), 4))
    with pytest.raises(ValueError, match="confirm_fraction must be in"):
        confirm_split(40, None, 1.0)
    with pytest.raises(ValueError, match="one label per validation row"):
        confirm_split(40, np.arange(39))


def test_holdout_needs_the_fits_and_a_known_rule(many_fits):
    champion, valid, train, fits = many_fits
    kept = [SimpleNamespace(**{**vars(t), "estimator": None}) for t in fits[:5]]
    with pytest.raises(ValueError, match="rule='holdout' re-scores every fit"):
        _select(kept, champion, valid, train, rule="holdout")
    with pytest.raises(ValueError, match="rule must be one of"):
        _select(fits, champion, valid, train, rule="bonferoni")


@pytest.mark.parametrize(
    ("noise", "bonferroni", "simultaneous"),
    [(0.0, 0.9, 0.9039), (0.05, 0.995, 0.9311), (0.3, 0.995, 0.9869)],
)
def test_the_simultaneous_level_follows_how_alike_the_fits_are(noise, bonferroni, simultaneous):
    """20 fits around one better direction: max-t's level is Bonferroni's only when they differ."""
    problem = make_synthetic(n=1400, seed=0)
    stream = np.random.default_rng(0)
    stream.normal(size=(1400, 5))
    theta = stream.normal(size=(4, 5))
    champion = _policy(np.hstack([-0.7 * theta, np.zeros((4, 1))]))
    valid, train = problem.log.take(np.arange(60)), problem.log.take(np.arange(200, 1400))
    rng = np.random.default_rng(7)
    for _ in range({0.0: 0, 0.05: 1, 0.3: 2}[noise]):  # the draws of the smaller noises first
        [rng.normal(0, 1, (4, 5)) for _ in range(20)]
    fits = [
        _fit(
            {"k": k},
            _policy(np.hstack([-1.4 * theta + rng.normal(0, noise, (4, 5)), np.zeros((4, 1))])),
            valid,
        )
        for k in range(20)
    ]
    old = _select(fits, champion, valid, train)
    new = _select(fits, champion, valid, train, rule="simultaneous")
    assert old.confidence_level == pytest.approx(bonferroni)
    assert new.confidence_level == pytest.approx(simultaneous, abs=2e-4)
    assert new.evidence.difference == pytest.approx(old.evidence.difference, abs=1e-12)
    if noise:  # a lower level, a tighter bound (copies: the level is 0.9 up to the draws)
        assert new.evidence.upper < old.evidence.upper
    assert new.kind == old.kind == "learned" and new.tags()["selection_rule"] == "simultaneous"


def test_simultaneous_is_about_bonferroni_for_independent_fits(many_fits):
    champion, valid, train, fits = many_fits
    chosen = _select(fits, champion, valid, train, rule="simultaneous")
    assert chosen.n_compared == 100
    assert chosen.confidence_level == pytest.approx(0.99835, abs=2e-4)  # Bonferroni: 0.999
    assert chosen.evidence.upper == pytest.approx(0.0362, abs=1e-3) and chosen.champion_kept


def test_simultaneous_refits_a_fit_that_kept_no_estimator():
    problem = make_synthetic(n=1400, seed=0)
    stream = np.random.default_rng(0)
    stream.normal(size=(1400, 5))
    theta = stream.normal(size=(4, 5))
    champion = _policy(np.hstack([-0.7 * theta, np.zeros((4, 1))]))
    valid, train = problem.log.take(np.arange(60)), problem.log.take(np.arange(200, 1400))
    rng = np.random.default_rng(7)
    fits = [
        _fit(
            {"k": k},
            _policy(np.hstack([-1.4 * theta + rng.normal(0, 0.05, (4, 5)), np.zeros((4, 1))])),
            valid,
        )
        for k in range(5)
    ]
    by_k = {t.params["k"]: t.estimator for t in fits}
    kept = [SimpleNamespace(**{**vars(t), "estimator": None}) for t in fits]
    with pytest.raises(ValueError, match="kept no estimator; pass fit="):
        _select(kept, champion, valid, train, rule="simultaneous")
    refitted = []
    chosen = _select(
        kept,
        champion,
        valid,
        train,
        rule="simultaneous",
        fit=lambda params: refitted.append(params["k"]) or by_k[params["k"]],
    )
    assert chosen.kind == "learned"
    first = chosen.ranked_first
    assert sorted(refitted) == sorted([first, *(k for k in range(5) if k != first)])
    level = _select(fits, champion, valid, train, rule="simultaneous").confidence_level
    assert chosen.confidence_level == level and 0.9 < level < 0.98
