"""Cross-fitted learning evidence on the training rows (issue 35: small validation logs)."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from scipy import stats

from poem.learners import POEM
from poem.learners.crossfit import crossfit_evidence, crossfit_folds, pool_evidence
from poem.learners.learning_evidence import LearningEvidence
from poem.learners.selection import FIT_SHOWN_CROSSFIT
from tests.conftest import make_synthetic
from tests.poem.learners.test_selection import _fit, _policy, _select, perturbed_fits


def _theta(n: int, seed: int) -> np.ndarray:
    stream = np.random.default_rng(seed)  # make_synthetic's stream: X, then θ
    stream.normal(size=(n, 5))
    return stream.normal(size=(4, 5))


def test_folds_keep_clusters_whole_and_cover_every_row_once():
    groups = np.repeat(np.arange(30), 4)[::-1]
    parts = crossfit_folds(120, 3, groups, random_state=1)
    assert sorted(np.concatenate(parts).tolist()) == list(range(120))
    assert [p.size for p in parts] == [40, 40, 40]
    for p in parts:
        assert not set(groups[p]) & set(np.setdiff1d(groups, groups[p]))
    assert [p.tolist() for p in crossfit_folds(120, 3, groups, 1)] == [p.tolist() for p in parts]
    assert [p.tolist() for p in crossfit_folds(120, 3, groups, 2)] != [p.tolist() for p in parts]


@pytest.mark.parametrize(
    ("n", "folds", "groups", "message"),
    [
        (12, 1, None, "at least 2 folds, got 1"),
        (12, 3, np.arange(11), r"one label per training row \(12\), got \(11,\)"),
        (12, 3, np.repeat(np.arange(5), [3, 3, 2, 2, 2]), "3 folds need at least 6 training clusters, got 5"),
    ],
)  # fmt: skip
def test_bad_folds_are_named(n, folds, groups, message):
    with pytest.raises(ValueError, match=message):
        crossfit_folds(n, folds, groups)


def _evidence(diff, se, g, level=0.9, weight=1.0, weight_se=0.0):
    t = stats.t.ppf(level, g - 1)
    return LearningEvidence(
        diff, se, diff + t * se, level, diff / 2, diff / 2 + t * se / 2, 3 * g, g, 6 * g, 0.2,
        weight, weight_se, weight, 0.0,
    )  # fmt: skip


def test_the_folds_pool_by_clusters():
    parts = [_evidence(-0.3, 0.1, 100), _evidence(0.0, 0.2, 300)]
    pooled = pool_evidence(parts, 0.9, loss_range=1.0)
    assert pooled.difference == pytest.approx(0.25 * -0.3)
    assert pooled.std_error == pytest.approx(math.sqrt(0.25**2 * 0.01 + 0.75**2 * 0.04))
    # the folds disagree (−0.3 and 0.0): the between-fold bound, 1 degree of freedom, binds
    spread = (0.25 * 0.225**2 + 0.75 * 0.075**2) / (1 - 0.25**2 - 0.75**2)
    between = stats.t.ppf(0.9, 1) * math.sqrt(spread * (0.25**2 + 0.75**2))
    t = stats.t.ppf(0.9, 99 + 299)
    assert between > t * pooled.std_error
    assert pooled.upper == pytest.approx(-0.075 + between)
    assert pooled.model_difference == pytest.approx(pooled.difference / 2)
    assert pooled.model_upper == pytest.approx(-0.075 / 2 + between / 2)
    # folds that agree: the within-fold bound (Σ(G_f − 1) degrees of freedom) binds
    same = pool_evidence([_evidence(-0.1, 0.1, 100), _evidence(-0.1, 0.1, 300)], 0.9, 1.0)
    assert same.upper == pytest.approx(-0.1 + t * same.std_error)
    assert (pooled.n_clusters, pooled.n_validation, pooled.n_model_rows) == (400, 1200, 2400)
    assert pooled.coverage_penalty == 0.0 and pooled.confidence_level == 0.9


def test_pooled_weights_shown_below_one_are_charged_the_loss_range():
    parts = [_evidence(-0.3, 0.1, 100, weight=0.5, weight_se=0.01)] * 2
    pooled = pool_evidence(parts, 0.9, loss_range=6.0)
    upper = 0.5 + stats.t.ppf(0.999, 198) * 0.01 / math.sqrt(2)
    assert pooled.weight_upper == pytest.approx(upper)
    assert pooled.coverage_penalty == pytest.approx(6.0 * (1 - upper))
    assert not pooled.learned and pooled.refused_for_coverage


def test_a_better_configuration_is_shown_and_each_refit_sees_the_other_folds():
    problem = make_synthetic(n=1500, seed=3)
    theta = _theta(1500, 3)
    champion = _policy(np.hstack([-0.3 * theta, np.zeros((4, 1))]))
    seen = []

    def refit(rows):
        seen.append(rows.n_rows)
        return POEM(solver="lbfgs", max_iter=50, variance_penalty=0.0).fit(rows)

    evidence = crossfit_evidence(refit, champion, problem.log, folds=3, confidence_level=0.9)
    assert seen == [1000, 1000, 1000]
    assert (evidence.n_validation, evidence.n_clusters) == (1500, 1500)
    assert evidence.difference < -0.05 and evidence.learned
    same = crossfit_evidence(
        lambda rows: SimpleNamespace(policy_=champion), champion, problem.log, folds=3
    )
    assert same.difference == pytest.approx(0.0, abs=1e-12) and not same.learned


def test_excluded_rows_train_but_are_never_scored():
    problem = make_synthetic(n=600, seed=3)
    champion = _policy(np.zeros((4, 6)))
    fixed = SimpleNamespace(policy_=_policy(np.hstack([-_theta(600, 3), np.zeros((4, 1))])))
    evidence = crossfit_evidence(
        lambda rows: fixed, champion, problem.log, exclude=np.arange(100), folds=3
    )
    assert evidence.n_validation == 500
    with pytest.raises(ValueError, match="exclude must index the 600 training rows"):
        crossfit_evidence(lambda rows: fixed, champion, problem.log, exclude=[600])
    with pytest.raises(ValueError, match="fold 0 has fewer than 2 clusters left"):
        crossfit_evidence(lambda rows: fixed, champion, problem.log, exclude=np.arange(599))


def _small_validation():
    """A fit truly better than the champion among 49 that are not, validated on 12 rows only."""
    problem = make_synthetic(n=1440, seed=0)
    theta = _theta(1440, 0)
    champion = _policy(np.hstack([-0.2 * theta, np.zeros((4, 1))]))
    valid, train = problem.log.take(np.arange(12)), problem.log.take(np.arange(12, 1440))
    rng = np.random.default_rng(1)
    policies = [_policy(np.hstack([-0.6 * theta, np.zeros((4, 1))]))] + [
        _policy(np.hstack([-0.2 * theta + rng.normal(0, 0.3, (4, 5)), np.zeros((4, 1))]))
        for _ in range(49)
    ]
    fits = [_fit({"k": k}, p, valid) for k, p in enumerate(policies)]
    return champion, valid, train, fits


def test_a_fit_too_few_rows_validate_is_served_on_the_training_folds():
    champion, valid, train, fits = _small_validation()
    refits = []

    def refit(params, rows):
        refits.append((params, rows.n_rows))
        return fits[params["k"]].estimator

    without = _select(fits, champion, valid, train)
    assert without.ranked_first == 0 and without.kind == "champion_retempered"
    assert not without.evidence.learned and without.crossfit_evidence is None
    chosen = _select(fits, champion, valid, train, crossfit_folds=3, refit=refit)
    assert not chosen.evidence.learned  # 12 rows at the level of 50 fits still do not show it
    cv = chosen.crossfit_evidence
    assert cv.learned and (cv.n_validation, cv.n_clusters) == (1428, 1428)
    assert cv.difference == pytest.approx(-0.128, abs=0.005)  # true R difference: −0.12
    assert chosen.kind == "learned" and chosen.policy is fits[0].estimator.policy_
    assert chosen.reason == FIT_SHOWN_CROSSFIT
    assert chosen.shown_on_training_folds and not without.shown_on_training_folds
    assert chosen.tags()["learning_evidence"] == "shown (cross-fitted)"
    metrics = chosen.metrics()
    assert metrics["crossfit_learned"] == 1.0
    assert metrics["crossfit_difference"] == pytest.approx(cv.difference)
    assert refits == [({"k": 0}, 952)] * 3


def test_the_winner_of_many_is_not_rescued_by_the_training_folds():
    """100 perturbations of a near-optimal champion, none truly better: the winner stays out."""
    champion, valid, train, fits = perturbed_fits(-3.0)
    chosen = _select(
        fits, champion, valid, train, crossfit_folds=3,
        refit=lambda params, rows: fits[params["k"]].estimator,
    )  # fmt: skip
    assert chosen.evidence.difference < -0.04  # the winner's curse: truly +0.013 (worse)
    assert chosen.kind == "champion_retempered" and chosen.champion_kept
    # its own validation bound fails even uncorrected (+0.04 at 0.9): nothing is refitted
    assert chosen.evidence.difference + 1.29 * chosen.evidence.std_error > 0
    assert chosen.crossfit_evidence is None and "crossfit_learned" not in chosen.metrics()
    winner = fits[chosen.ranked_first].estimator
    cv = crossfit_evidence(lambda rows: winner, champion, train, folds=3, confidence_level=0.9)
    assert not cv.learned and cv.upper > 0  # on rows that chose nothing it is not better
    assert cv.difference > chosen.evidence.difference + 0.03  # back toward the truth


def test_crossfit_needs_a_way_to_refit():
    champion, valid, train, fits = _small_validation()
    kept_none = [replace(t, estimator=None) for t in fits]
    with pytest.raises(ValueError, match="keep its estimator or pass refit="):
        _select(
            kept_none, champion, valid, train, crossfit_folds=3,
            fit=lambda params: fits[params["k"]].estimator,
        )  # fmt: skip
