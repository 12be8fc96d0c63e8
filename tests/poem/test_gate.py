"""The gate on a log (:func:`poem.gate.counterfactual_ab_test`) and its plot."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from poem.diagnostics.gate_plot import plot_gate
from poem.diagnostics.search_plot import plot_search
from poem.gate import (
    GateRows,
    counterfactual_ab_test,
    decision_coin,
    gate_decision,
    gate_rows,
    weight_bound,
)
from poem.ledger import TestWindow, next_attempt
from poem.policies import StochasticPolicy, family_from_log


def _oracle(problem, scale):
    """Softmax over −E[δ|x,a] fitted by least squares on the contexts (beats the logger)."""
    log = problem.log
    X = np.column_stack([log.contexts, np.ones(log.n_rows)])
    coef = -scale * np.linalg.lstsq(X, problem.expected_loss, rcond=None)[0].T
    return StochasticPolicy(family_from_log(log, fit_intercept=True), coef)


def test_logging_policy_as_champion_has_unit_weights(synthetic_problem):
    log = synthetic_problem.log
    challenger = _oracle(synthetic_problem, 8.0)
    result = counterfactual_ab_test(challenger, None, log, min_ess=10)
    assert result.champion.value == pytest.approx(log.losses.mean())
    assert result.champion.effective_sample_size == pytest.approx(log.n_rows)
    true_chal = np.mean(
        np.sum(challenger.predict_proba(log.contexts) * synthetic_problem.expected_loss, 1)
    )
    assert true_chal < log.losses.mean()
    assert result.promote and result.upper_bound < 0


def test_same_policy_is_never_promoted_and_checks_block(synthetic_problem):
    log = synthetic_problem.log
    policy = _oracle(synthetic_problem, 8.0)
    same = counterfactual_ab_test(policy, policy, log, min_ess=10)
    assert same.difference.value == 0.0 and not same.promote
    blocked = counterfactual_ab_test(
        policy, None, log, min_ess=10, failed_checks=["uniform_weight_mean"]
    )
    assert not blocked.promote
    assert blocked.reasons[-1] == "check did not pass: uniform_weight_mean"


def test_worse_challenger_is_rejected(synthetic_problem):
    worse = _oracle(synthetic_problem, -8.0)  # prefers high-loss actions
    result = counterfactual_ab_test(worse, None, synthetic_problem.log, min_ess=10)
    assert not result.promote and result.difference.value > 0


def test_plots_are_written(synthetic_problem, tmp_path):
    result = counterfactual_ab_test(
        _oracle(synthetic_problem, 8.0), None, synthetic_problem.log, min_ess=10
    )
    png = plot_gate(result, tmp_path / "gate.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = [
        {
            "variance_penalty": lam,
            "clip": clip,
            "ips_risk": 0.3 + lam,
            "ips_risk_lower": 0.2 + lam,
            "ips_risk_upper": 0.4 + lam,
        }
        for lam in (0.0, 0.1, 1.0)
        for clip in (10.0, 100.0)
    ]
    png = plot_search(rows, tmp_path / "search" / "ips.png")
    assert png.stat().st_size > 1000


def test_decision_coin_is_a_reproducible_function_of_what_the_challenger_serves(
    synthetic_problem,
):
    policy = _oracle(synthetic_problem, 8.0)
    u = decision_coin(policy)
    assert 0.0 < u <= 1.0 and u == (int(policy.digest()[:16], 16) + 1) / 2.0**64
    # metadata does not serve anything: a retrain that reproduces w reproduces the coin
    renamed = StochasticPolicy(policy.family, policy.coef.copy(), metadata={"run": "other"})
    assert decision_coin(renamed) == u
    # anything that changes the served probabilities changes it
    assert decision_coin(policy.with_serving(temperature=0.5)) != u
    assert decision_coin(policy.with_serving(exploration_floor=0.01)) != u
    assert decision_coin(StochasticPolicy(policy.family, policy.coef * (1 + 1e-15))) != u
    coins = [decision_coin(_oracle(synthetic_problem, s)) for s in np.linspace(1, 9, 400)]
    assert len(set(coins)) == 400 and 0.4 < np.mean(coins) < 0.6  # s.e. 0.014


def test_randomized_gate_uses_the_given_coin(synthetic_problem):
    log = synthetic_problem.log
    challenger = _oracle(synthetic_problem, 8.0)
    u = decision_coin(challenger)
    result = counterfactual_ab_test(challenger, None, log, min_ess=10, randomization=u)
    plain = counterfactual_ab_test(challenger, None, log, min_ess=10)
    assert result.randomization == u and plain.randomization is None
    assert result.upper_bound <= plain.upper_bound and result.promote


def test_the_gate_decides_from_per_row_vectors(synthetic_problem):
    # the in-memory path and any path that hands over the same vectors decide the same
    log = synthetic_problem.log
    challenger, champion = _oracle(synthetic_problem, 8.0), _oracle(synthetic_problem, 2.0)
    rows = gate_rows(challenger, champion, log)
    assert isinstance(rows, GateRows) and rows.losses.shape == (log.n_rows,)
    np.testing.assert_array_equal(rows.propensities, log.propensities)
    floor = float(log.propensities.min())
    via_log = counterfactual_ab_test(challenger, champion, log, min_ess=10, min_propensity=floor)
    copied = GateRows(
        rows.losses.copy(),
        rows.propensities.copy(),
        rows.challenger_probabilities.copy(),
        rows.champion_probabilities.copy(),
        rows.loss_bounds,
        rows.total_variation.copy(),
    )
    via_rows = gate_decision(copied, min_ess=10, min_propensity=floor)
    assert via_rows.upper_bound == via_log.upper_bound and via_rows.promote == via_log.promote
    assert via_log.max_weight == pytest.approx(1 / floor) and via_log.order_seed == 0
    assert via_log.reasons[2] == (
        "assumed: no weight bound: the terms (b - δ)(r^c - r^h)+ + (δ - a)(r^h - r^c)+ - "
        "(b - a)TV(x) >= -(b - a), TV(x) the policies' total variation at each row's context"
    )
    # without the policies' distributions the declared bound is what the gate can use
    blind = gate_decision(replace(copied, total_variation=None), min_ess=10, min_propensity=floor)
    assert blind.reasons[2] == (
        f"assumed: every importance weight <= the declared bound B = {1 / floor:.4g}"
    )


def test_the_weight_bound_is_declared_never_read_off_the_log(synthetic_problem):
    log = synthetic_problem.log
    challenger, champion = _oracle(synthetic_problem, 8.0), _oracle(synthetic_problem, 2.0)
    no_bound = counterfactual_ab_test(challenger, champion, log, min_ess=10)
    assert no_bound.max_weight is None
    assert no_bound.reasons[2].startswith("assumed: no weight bound: the terms")
    rows = replace(gate_rows(challenger, champion, log), total_variation=None)
    blind = gate_decision(rows, min_ess=10)
    assert blind.reasons[2].startswith("assumed: no weight bound (none declared)")
    snips = counterfactual_ab_test(challenger, champion, log, min_ess=10, estimator="snips")
    assert "not the snips terms (they need one)" in snips.reasons[2]
    assert weight_bound(log.propensities, None) is None
    floor = float(log.propensities.min())
    with pytest.raises(ValueError, match=r"propensity: 1 of .* below the declared min_propensity"):
        weight_bound(log.propensities, floor * 1.0001)
    with pytest.raises(ValueError, match="min_propensity must be in"):
        weight_bound(log.propensities, 0.0)


def test_an_attempt_spends_its_share_of_alpha(synthetic_problem):
    log = synthetic_problem.log
    challenger = _oracle(synthetic_problem, 8.0)
    attempt = next_attempt(
        [], "logging-policy", TestWindow(rows="x"), alpha=0.05, retry_fraction=0.2
    )
    first = counterfactual_ab_test(challenger, None, log, min_ess=10, attempt=attempt)
    assert first.attempt == 1 and first.alpha == pytest.approx(0.04)
    assert first.family_alpha == 0.05 and first.difference.confidence_level == pytest.approx(0.96)
    assert (
        "attempt 1 on this test window against this champion: alpha = 0.04 of the "
        in (first.reasons[3])
    )
    assert first.metrics()["gate_attempt"] == 1.0
    assert "Attempt 1 on this test window" in first.to_markdown()
