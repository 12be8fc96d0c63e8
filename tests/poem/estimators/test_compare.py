import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from poem.estimators import PolicyComparison, compare_policies, ips, snips
from poem.estimators.betting import betting_lower_bound
from poem.estimators.improvement import shuffle_rows

LOSSES = np.array([0.0, 1.0, 0.5, 0.25, 1.0])  # tiny_log
WEIGHTS = np.array([0.5, 2.0, 2.0, 2.0, 0.5])  # hand-chosen target


def test_paired_ips_difference_by_hand(tiny_log):
    result = compare_policies(tiny_log.losses, WEIGHTS, np.ones(5), min_ess=1, order_seed=0)
    # dᵢ = δᵢ(rᵢ − 1) = [0, 1, 0.5, 0.25, −0.5]: mean 0.25, Σ(d − d̄)² = 1.25
    # → se = √(1.25/4/5) = 0.25
    assert result.difference.estimator == "ips_difference"
    assert result.difference.value == pytest.approx(0.25)
    assert result.difference.std_error == pytest.approx(0.25)
    assert result.difference.upper == pytest.approx(
        0.25 + 2.7764451051977987 * 0.25
    )  # t, two-sided
    # the decision: betting bound on Xᵢ = (δ_max − δᵢ)(rᵢ − 1) ≥ −1, loss bounds (0, 1)
    # observed, the rows in the random order of seed 0
    d, r, _ = shuffle_rows(0, tiny_log.losses, WEIGHTS, np.ones(5))
    terms = (1.0 - d) * (r - 1.0)
    assert result.upper_bound == pytest.approx(-betting_lower_bound(terms, -1.0, scale=1.0))
    assert result.upper_bound == pytest.approx(0.5973, abs=1e-4)
    assert result.challenger == ips(tiny_log.losses, WEIGHTS)
    assert result.champion.value == pytest.approx(0.55)
    assert result.difference.effective_sample_size == pytest.approx(3.92)  # the smaller ESS
    assert not result.promote and result.decision == "rejected"
    assert result.reasons == (
        "failed: improvement: the one-sided 95% upper confidence bound of "
        "R(challenger) - R(champion) (ips terms, betting bound valid at every n) is 0.5973, "
        "not below -min_improvement = 0",
        "passed: effective sample size: the challenger's is 3.9 of 5 rows, at least min_ess = 1",
        "assumed: no weight bound (the champion is the logging policy)",
    )


def test_paired_snips_and_clipped_differences_by_hand():
    result = compare_policies(LOSSES, WEIGHTS, np.ones(5), estimator="snips", min_ess=1)
    assert result.difference.value == pytest.approx(4 / 7 - 0.55)
    assert result.difference.value == pytest.approx(snips(LOSSES, WEIGHTS).value - LOSSES.mean())
    e = WEIGHTS * (LOSSES - 4 / 7) / 1.4 - (LOSSES - 0.55)  # paired delta-method terms
    assert result.difference.std_error == pytest.approx(np.std(e, ddof=1) / np.sqrt(5))
    clipped = compare_policies(
        LOSSES, WEIGHTS, np.ones(5), estimator="clipped_ips", clip=1.5, min_ess=1
    )
    d = LOSSES * (np.minimum(1.5, WEIGHTS) - 1.0)
    assert clipped.difference.value == pytest.approx(d.mean())
    assert clipped.difference.std_error == pytest.approx(np.std(d, ddof=1) / np.sqrt(5))
    assert clipped.difference.clipped_fraction == pytest.approx(0.6)


@pytest.mark.parametrize("interval", ["t", "normal", "bootstrap"])
@pytest.mark.parametrize(
    ("estimator", "clip"), [("ips", None), ("snips", None), ("clipped_ips", 1.5)]
)
def test_a_a_never_promotes(rng, estimator, clip, interval):
    losses, weights = rng.random(50), rng.exponential(size=50)
    result = compare_policies(
        losses, weights, weights, estimator=estimator, clip=clip, interval=interval, min_ess=0
    )
    assert not result.promote
    assert result.difference.value == 0.0 and result.upper_bound >= 0.0
    assert result.reasons[0].startswith("failed: improvement")


@settings(max_examples=50)
@given(
    st.integers(2, 30).flatmap(
        lambda n: st.tuples(
            arrays(np.float64, n, elements=st.floats(-3.0, 3.0)),
            arrays(np.float64, n, elements=st.floats(0.01, 50.0)),
        )
    ),
    st.sampled_from(["ips", "snips"]),
)
def test_a_a_never_promotes_property(data, estimator):
    losses, weights = data
    assert not compare_policies(losses, weights, weights, estimator=estimator, min_ess=0).promote


def _one_log(simulation, target, seed):
    actions, losses, propensities = simulation.draw(1, seed=seed)
    return losses[0], simulation.weights(target, actions[0], propensities[0])


@pytest.mark.parametrize(
    ("estimator", "clip"), [("ips", None), ("snips", None), ("clipped_ips", 20.0)]
)
def test_clearly_better_challenger_promotes_unless_ess_or_margin_blocks(
    simulation, estimator, clip
):
    challenger = simulation.softmax_policy(5.0)  # true risk 0.22 vs the logger's 0.51
    losses, weights = _one_log(simulation, challenger, seed=5)
    kwargs = {"estimator": estimator, "clip": clip, "order_seed": 0}
    result = compare_policies(losses, weights, np.ones(simulation.n), min_ess=50, **kwargs)
    ess = result.challenger.effective_sample_size
    assert 50 < ess < 150
    assert result.promote and result.decision == "promoted"
    assert result.upper_bound < 0 and result.difference.upper < 0
    assert result.reasons[0].startswith("passed: improvement")
    assert " below -min_improvement = 0" in result.reasons[0]
    assert result.reasons[1] == (
        f"passed: effective sample size: the challenger's is {ess:,.1f} of 200 rows, "
        "at least min_ess = 50"
    )

    blocked = compare_policies(losses, weights, np.ones(simulation.n), min_ess=150, **kwargs)
    assert not blocked.promote and blocked.upper_bound == result.upper_bound
    assert blocked.reasons[0] == result.reasons[0]
    assert blocked.reasons[1] == (
        f"failed: effective sample size: the challenger's is {ess:,.1f} of 200 rows, "
        "below min_ess = 150"
    )

    margin = compare_policies(
        losses, weights, np.ones(simulation.n), min_ess=50, min_improvement=0.5, **kwargs
    )
    assert not margin.promote
    assert margin.reasons[0].startswith("failed: improvement")
    assert margin.reasons[0].endswith("not below -min_improvement = -0.5")


def test_false_promotion_rate_is_at_most_alpha(simulation):
    r_good, r_bad = simulation.softmax_policy(2.0), simulation.softmax_policy(-3.0)
    risk_logger, risk_good, risk_bad = (
        simulation.risk(p) for p in (simulation.logging_probs, r_good, r_bad)
    )
    mix = (risk_bad - risk_logger) / (risk_bad - risk_good)
    equal = mix * r_good + (1 - mix) * r_bad  # same true risk as the champion (the logger)
    assert simulation.risk(equal) == pytest.approx(risk_logger)
    actions, losses, propensities = simulation.draw(200, seed=7)
    ones = np.ones(simulation.n)
    for target, max_rate in ((equal, 0.1), (r_bad, 0.0)):  # α = 0.05, 200 repeats: MC sd ≈ 0.015
        weights = simulation.weights(target, actions, propensities)
        rate = np.mean(
            [compare_policies(losses[r], weights[r], ones, min_ess=0).promote for r in range(200)]
        )
        assert rate <= max_rate


def test_report_and_dict(tiny_log):
    result = compare_policies(
        tiny_log.losses, WEIGHTS, np.ones(5), min_ess=1, min_improvement=0.01, order_seed=0
    )
    d = json.loads(json.dumps(result.to_dict()))
    assert d["decision"] == "rejected" and d["promote"] is False
    assert d["upper_bound"] == pytest.approx(result.upper_bound)
    assert d["challenger"]["value"] == pytest.approx(0.8) and d["champion"][
        "value"
    ] == pytest.approx(0.55)
    assert d["difference"]["estimator"] == "ips_difference"
    assert (
        d["reasons"] == list(result.reasons)
        and d["min_improvement"] == 0.01
        and d["min_ess"] == 1.0
    )
    assert d["randomization"] is None and "gate_randomization" not in d["metrics"]
    assert d["order_seed"] == 0 and d["seed_given"] is True  # given: a replay
    assert d["metrics"]["gate_seed_given"] == 1.0
    md = result.to_markdown()
    assert md.startswith("## Counterfactual A/B gate: rejected\n")
    assert "| challenger | ips | 0.8 | [" in md and "| champion | ips | 0.55 | [" in md
    assert "| difference (challenger − champion) | ips_difference | 0.25 |" in md
    assert "**0.5973** (promotion needs < -0.01)" in md
    assert "| challenger | ips | 0.8 | [" in md and "| no (see flags) |" in md
    assert "- difference: few non-zero terms (rare losses): 4 of 5 rows (< 300)\n" in md
    assert d["estimator"] == "ips" and d["flags"] == list(result.flags)
    assert d["metrics"]["risk_difference_ucb"] == pytest.approx(result.upper_bound)
    assert "**Decision: rejected**" in md and "betting bound valid at every n)" in md
    for reason in result.reasons:
        assert f"- {reason}\n" in md
    assert isinstance(result, PolicyComparison)


@pytest.mark.parametrize(
    ("kwargs", "exception", "message"),
    [
        ({"losses": LOSSES[:4]}, ValueError, r"losses has 4 rows but challenger_weights has 5"),
        (
            {"champion_weights": np.ones(4)},
            ValueError,
            r"champion_weights has 4 rows but challenger_weights has 5",
        ),
        (
            {"challenger_weights": [1.0, np.nan, 1.0, 1.0, 1.0]},
            ValueError,
            r"challenger_weights: 1 of 5 values are not finite \(NaN or inf\); "
            r"first positions: \[1\]",
        ),
        (
            {"champion_weights": [1.0, 1.0, -1.0, 1.0, 1.0]},
            ValueError,
            r"champion_weights: 1 of 5 values are negative",
        ),
        (
            {"losses": [0.0, np.inf, 0.0, 0.0, 0.0]},
            ValueError,
            r"losses: 1 of 5 values are not finite",
        ),
        ({"confidence_level": 1.0}, ValueError, r"confidence_level must be in \(0, 1\), got 1.0"),
        (
            {"min_improvement": -0.1},
            ValueError,
            r"min_improvement must be finite and >= 0, got -0.1",
        ),
        (
            {"min_improvement": np.nan},
            ValueError,
            r"min_improvement must be finite and >= 0, got nan",
        ),
        ({"min_ess": -1}, ValueError, r"min_ess must be finite and >= 0, got -1"),
        ({"min_ess": "100"}, TypeError, r"min_ess must be a real number, got str"),
        (
            {"estimator": "snip"},
            ValueError,
            r"estimator must be one of \['ips', 'clipped_ips', 'snips'\], got 'snip'",
        ),
        ({"estimator": "dr"}, ValueError, r"estimator must be one of .*, got 'dr'"),
        (
            {"interval": "bootstrapped"},
            ValueError,
            r"interval must be one of .*, got 'bootstrapped'",
        ),
        (
            {"estimator": "clipped_ips"},
            ValueError,
            r"clip is required when estimator='clipped_ips'",
        ),
        ({"clip": 5.0}, ValueError, r"clip is only used by estimator='clipped_ips', got clip=5.0"),
        ({"estimator": "clipped_ips", "clip": -2.0}, ValueError, r"clip must be > 0, got -2.0"),
        ({"randomization": 0.0}, ValueError, r"randomization must be in \(0, 1\], got 0.0"),
        ({"randomization": 1.5}, ValueError, r"randomization must be in \(0, 1\], got 1.5"),
        ({"randomization": np.nan}, ValueError, r"randomization must be in \(0, 1\], got nan"),
        (
            {"randomization": True},
            TypeError,
            r"randomization must be a real number or None, got bool",
        ),
    ],
    ids=[
        "losses-length",
        "champion-length",
        "challenger-nan",
        "champion-negative",
        "losses-inf",
        "level",
        "min-improvement-negative",
        "min-improvement-nan",
        "min-ess-negative",
        "min-ess-string",
        "estimator-prefix",
        "estimator-unknown",
        "interval-unknown",
        "clip-missing",
        "clip-unused",
        "clip-negative",
        "coin-zero",
        "coin-above-one",
        "coin-nan",
        "coin-bool",
    ],
)
def test_bad_arguments(kwargs, exception, message):
    arguments = {
        "losses": LOSSES,
        "challenger_weights": WEIGHTS,
        "champion_weights": np.ones(5),
    } | kwargs
    with pytest.raises(exception, match=message):
        compare_policies(
            arguments.pop("losses"),
            arguments.pop("challenger_weights"),
            arguments.pop("champion_weights"),
            **arguments,
        )


def test_challenger_equal_to_champion_up_to_rounding_is_not_promoted():
    # Found on OBD: a challenger that stayed uniform has weights 1 ± 1e-16; the paired
    # difference is ~1e-17 with standard error ~0, which must not count as an improvement.
    rng = np.random.default_rng(3)
    losses = -(rng.random(5000) < 0.01).astype(float)
    champion = np.ones(5000)
    challenger = np.where(losses < 0, 1 + 2 * np.finfo(float).eps, 1.0)  # rounding, all one way
    result = compare_policies(losses, challenger, champion, min_improvement=0.0, min_ess=10)
    assert not result.promote
    assert "failed: improvement" in result.reasons[0]


def test_loss_baseline_moves_each_risk_but_not_the_difference():
    rng = np.random.default_rng(5)
    losses = rng.random(400)
    wc, wh = rng.exponential(size=400), np.ones(400)
    plain = compare_policies(losses, wc, wh, min_ess=1)
    shifted = compare_policies(losses, wc, wh, min_ess=1, loss_baseline=1.0)
    # unbiased either way, but the translated estimator is a different (control-variate) one
    assert shifted.challenger.value == pytest.approx(1.0 + np.mean((losses - 1.0) * wc))
    assert shifted.champion.value == pytest.approx(losses.mean())
    assert shifted.difference.value == pytest.approx(np.mean((losses - 1.0) * (wc - 1.0)))
    assert plain.difference.value == pytest.approx(np.mean(losses * (wc - 1.0)))


def test_gate_rejects_a_challenger_that_avoids_the_logged_actions_whatever_the_baseline():
    # Positive losses: putting no mass on logged actions makes plain IPS ≈ 0 ("better"); the
    # bound's terms are translated by δ_max whatever the reported baseline, so it is rejected.
    rng = np.random.default_rng(6)
    losses = rng.random(2000)
    avoid = np.full(2000, 1e-3)
    for baseline in (0.0, 1.0):
        result = compare_policies(losses, avoid, np.ones(2000), min_ess=1, loss_baseline=baseline)
        assert not result.promote and result.upper_bound > 0.4


def test_randomized_decision_promotes_on_evidence_short_of_one_over_alpha():
    # a 2.4-point better challenger on 300 rows: the capital never reaches 1/α = 20, so the
    # deterministic gate rejects; it ends above U/α = 4 (U = 0.2), so the randomized one
    # promotes — and no coin can promote on a log whose capital ended below 1
    logger, mu = np.array([0.9, 0.09, 0.01]), np.array([0.3, 0.2, 0.1])
    challenger = np.array([0.7, 0.25, 0.05])
    rng = np.random.default_rng(25)
    actions = (rng.random((300, 1)) > np.cumsum(logger)).sum(axis=1)
    losses = (rng.random(300) < mu[actions]).astype(float)
    weights = challenger[actions] / logger[actions]
    kwargs = {"loss_bounds": (0.0, 1.0), "min_ess": 0.0, "order_seed": 0}
    plain = compare_policies(losses, weights, np.ones(300), **kwargs)
    coin = compare_policies(losses, weights, np.ones(300), randomization=0.2, **kwargs)
    assert not plain.promote and plain.upper_bound > 0
    assert coin.promote and coin.upper_bound < 0 and coin.randomization == 0.2
    assert coin.reasons[0].startswith(
        "passed: improvement: the one-sided 95% upper confidence bound of R(challenger) - "
        "R(champion) (ips terms, randomized betting bound, U = 0.2: it also promotes when the "
        "capital at the end of the log reaches U/α; valid at every n over the draw of U)"
    )
    assert coin.metrics()["gate_randomization"] == 0.2
    assert json.loads(json.dumps(coin.to_dict()))["randomization"] == 0.2
    assert "randomized betting bound, U = 0.2" in coin.to_markdown()
    # the coin only adds rejections of the null: the randomized bound is never the higher one
    assert coin.upper_bound <= plain.upper_bound
    # the smallest coin promotes only logs whose capital ended at ≥ 1: not a worse challenger's
    worse = np.array([1.0, 0.0, 0.0])[actions] / logger[actions]  # risk 0.3 > 0.289
    assert not compare_policies(losses, worse, np.ones(300), randomization=1e-12, **kwargs).promote
