"""Propensity sanity checks (DESIGN §4.6): hand-computed values, statuses and thresholds."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats

from poem.data import CandidateSets, LoggedBandit
from poem.diagnostics.mergeable import SKETCH_RELATIVE_ERROR
from poem.diagnostics.propensity import (
    PropensityThresholds,
    propensity_report,
    reference_probabilities,
)
from poem.estimators.weights import suggested_clip
from poem.exceptions import PropensityWarning
from poem.policies.stochastic import StochasticPolicy, family_from_log

NO_ESS_GUARD = PropensityThresholds(uniform_weight_min_ess=0)


def test_tiny_log_hand_computed(tiny_log):
    report = propensity_report(tiny_log, thresholds=NO_ESS_GUARD)
    w = (1 / 3) / np.array([0.5, 0.25, 0.2, 0.5, 0.4])  # uniform weights over K = 3
    check = report.check("uniform_weight")
    assert check.value == pytest.approx(31 / 30)
    lo, hi = stats.t.interval(0.95, 4, loc=w.mean(), scale=w.std(ddof=1) / np.sqrt(5))
    assert (check.details["lower"], check.details["upper"]) == pytest.approx((lo, hi))
    assert check.status == "pass"
    assert report.quantiles["min"] == 0.2 and report.quantiles["max"] == 0.5
    levels = [0.0, 0.01, 0.1, 0.5, 0.9, 1.0]  # the sketch's quantiles: within ρ = 2^-10
    exact = np.quantile([0.5, 0.25, 0.2, 0.5, 0.4], levels)
    np.testing.assert_allclose(
        list(report.quantiles.values()), exact, rtol=SKETCH_RELATIVE_ERROR, atol=0
    )
    assert report.suggested_clip == pytest.approx(
        suggested_clip(tiny_log.propensities), rel=2 * SKETCH_RELATIVE_ERROR
    )
    assert report.check("support").value == 0 and report.check("near_deterministic").value == 0
    assert [c.name for c in report.checks] == [
        "min_propensity",
        "near_deterministic",
        "uniform_weight",
        "support",
        "clipping",
    ]


def test_uniform_weight_is_inconclusive_when_heavy_tailed(tiny_log):
    check = propensity_report(tiny_log).check("uniform_weight")  # ESS of 5 weights < 100
    assert check.status == "warn" and check.explanation.startswith("inconclusive")


def test_clean_synthetic_log_passes(synthetic_problem):
    report = propensity_report(synthetic_problem.log)
    assert report.status == "pass", report.to_markdown()
    assert 0.9 < report.check("uniform_weight").value < 1.1


def test_propensities_times_half_fail(synthetic_log):
    bad = replace(synthetic_log, propensities=synthetic_log.propensities * 0.5)
    check = propensity_report(bad).check("uniform_weight")
    assert check.status == "fail" and check.details["lower"] > 1.25
    assert "far from 1" in check.explanation and f"{check.value:.3g}" in check.explanation


def test_deterministic_logger_fails(synthetic_log):
    report = propensity_report(replace(synthetic_log, propensities=np.ones(synthetic_log.n_rows)))
    assert report.check("near_deterministic").status == "fail"
    assert "100.0% of rows have p ≥ 1 − 0.001" in report.check("near_deterministic").explanation
    assert report.check("uniform_weight").value == pytest.approx(0.25) and report.status == "fail"
    assert [c.name for c in report.failed] == ["near_deterministic", "uniform_weight"]


def test_ess_of_target_policy(synthetic_log):
    target = StochasticPolicy.uniform(family_from_log(synthetic_log))
    report = propensity_report(synthetic_log, target_policy=target)
    w = 0.25 / synthetic_log.propensities
    ess = w.sum() ** 2 / (w**2).sum()
    check = report.check("effective_sample_size")
    assert check.details["ess"] == pytest.approx(ess) and check.value == pytest.approx(ess / 2000)
    strict = PropensityThresholds(min_ess_fraction_warn=0.99, min_ess_fraction_fail=0.98)
    assert (
        propensity_report(synthetic_log, target_policy=target, thresholds=strict)
        .check("effective_sample_size")
        .status
        == "fail"
    )


def test_never_logged_actions_and_logging_distribution(synthetic_problem):
    log = synthetic_problem.log
    rows = np.arange(log.n_rows)
    dist = synthetic_problem.logging_probs
    wide = replace(log, n_actions=5, logging_distribution=None)
    support = propensity_report(wide).check("support")
    assert (
        support.status == "warn" and support.value == 0.2 and support.details["never_logged"] == [4]
    )
    assert "1 of 5 actions never logged: [4]" in support.explanation
    good = replace(log, logging_distribution=dist)
    assert propensity_report(good).check("logging_distribution").status == "pass"
    off = dist.copy()
    off[:7] *= 1.1
    check = propensity_report(replace(log, logging_distribution=off)).check("logging_distribution")
    assert check.status == "fail" and check.details["rows_not_summing_to_one"] == 7
    assert check.details["rows_inconsistent_with_propensity"] == 7 and np.all(
        dist[rows, log.actions] > 0
    )


def test_reference_probabilities_per_family(rng):
    n = 6
    ml = LoggedBandit(
        rng.normal(size=(n, 2)),
        rng.integers(0, 2, (n, 3)),
        np.zeros(n),
        np.full(n, 0.1),
        (0, 3),
        family="multilabel",
    )
    np.testing.assert_array_equal(reference_probabilities(ml), np.full(n, 1 / 8))
    sizes = np.array([1, 2, 3, 4, 2, 1])
    cand = LoggedBandit(
        None,
        np.zeros(n, int),
        np.zeros(n),
        np.full(n, 0.5),
        (0, 1),
        family="candidates",
        candidates=CandidateSets.from_sizes(rng.normal(size=(sizes.sum(), 2)), sizes),
    )
    np.testing.assert_array_equal(reference_probabilities(cand), 1 / sizes)
    names = [c.name for c in propensity_report(cand).checks]
    assert "support" not in names and "logging_distribution" not in names


def test_report_serialises_and_warns(synthetic_log):
    report = propensity_report(replace(synthetic_log, propensities=np.ones(synthetic_log.n_rows)))
    data = json.loads(json.dumps(report.to_dict()))
    assert data["status"] == "fail" and data["checks"][1]["name"] == "near_deterministic"
    assert "| near_deterministic | fail | 1 |" in report.to_markdown()
    with pytest.warns(PropensityWarning) as record:
        report.emit_warnings()
    assert [str(w.message).split(":")[0] for w in record] == [
        "near_deterministic (fail)",
        "uniform_weight (fail)",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        propensity_report(synthetic_log).emit_warnings()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"near_deterministic_warn": -0.1},
            r"near_deterministic_warn must be a finite number >= 0, got -0.1",
        ),
        ({"confidence_level": 1.0}, r"confidence_level must be in \(0, 1\), got 1.0"),
        (
            {"min_ess_fraction_fail": float("nan")},
            r"min_ess_fraction_fail must be a finite number >= 0",
        ),
    ],
)
def test_bad_thresholds(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PropensityThresholds(**kwargs)


class _FirstAction:
    """A deterministic target policy: action 0 always (weight 0 on every other row)."""

    family = object()

    def log_action_probability_on(self, log):
        return (log.actions == 0).astype(np.float64)


def test_deterministic_target_policy_zero_weights(synthetic_log):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no log(0) in the weight sketch
        report = propensity_report(synthetic_log, target_policy=_FirstAction())
    w = (synthetic_log.actions == 0) / synthetic_log.propensities
    assert report.target == "_FirstAction(object)"
    assert report.check("effective_sample_size").details["ess"] == pytest.approx(
        w.sum() ** 2 / (w @ w)
    )
    clipping, clip, rho = report.check("clipping"), report.suggested_clip, SKETCH_RELATIVE_ERROR
    assert (
        np.mean(w >= clip * (1 + 3 * rho)) <= clipping.value <= np.mean(w >= clip * (1 - 3 * rho))
    )
    assert "of the target policy's weights reach M" in clipping.explanation
