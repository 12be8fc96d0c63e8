"""The gate on estimated propensities (issue 38 item 3: :mod:`poem.gate_estimated`)."""

from __future__ import annotations

import numpy as np
import pytest

from poem.data import CandidateSets, LoggedBandit
from poem.estimators.estimated_terms import (
    estimated_dr_terms,
    estimated_translated_terms,
    propensity_error,
)
from poem.gate_estimated import ESTIMATED_LABEL, estimated_gate_decision, estimated_gate_rows
from poem.policies import StochasticPolicy, make_family

K = 3
MEASURED_UCB = -0.1321


def _exact_term_means(p0, phat, mu, muhat, pc, ph, eta):
    """E[Xᵢ | xᵢ] by summing over the logged action and the Bernoulli loss (no sampling)."""
    n = p0.shape[0]
    means = np.zeros((2, n))
    for y in range(K):
        for loss, prob in ((1.0, mu[:, y]), (0.0, 1 - mu[:, y])):
            parts = estimated_dr_terms(
                np.full(n, loss), np.full(n, y), pc, ph, phat, muhat, (0.0, 1.0), eta
            )
            translated = estimated_translated_terms(
                np.full(n, loss), np.full(n, y), pc, ph, phat, (0.0, 1.0), eta
            )
            means += p0[:, y] * prob * np.stack([parts.capital.terms, translated.terms])
    return means, (parts.capital.lower, translated.lower[0])


@pytest.mark.parametrize("champion", ["logger", "policy"])
def test_the_margin_makes_the_terms_conservative_when_the_model_is_within_eta(champion):
    # p̂ = π₀ / (1 ± η) action by action (the assumption holds with equality somewhere): the
    # DR terms without the margin overstate the improvement, with it they never do
    rng = np.random.default_rng(0)
    n, eta = 400, 0.2
    p0 = 0.95 * rng.dirichlet(np.ones(K) * 2, size=n) + 0.05 / K
    sign = np.where(p0 > 0.75, 1.0, np.sign(rng.normal(size=(n, K))))  # keeps p̂ ≤ 1
    phat = p0 / (1 + eta * sign)  # π₀/p̂ = 1 ± η exactly
    mu, muhat = rng.random((n, K)), rng.random((n, K))
    pc = rng.dirichlet(np.ones(K), size=n)
    ph = None if champion == "logger" else rng.dirichlet(np.ones(K), size=n)
    champ = p0 if ph is None else ph
    truth = np.sum((champ - pc) * mu, axis=1)  # R_i(champion) − R_i(challenger)
    with_margin, lower = _exact_term_means(p0, phat, mu, muhat, pc, ph, eta)
    without, _ = _exact_term_means(p0, phat, mu, muhat, pc, ph, 0.0)
    assert np.all(with_margin <= truth + 1e-12)  # both families of terms, every row
    assert np.any(without[0] > truth + 1e-3) and np.any(without[1] > truth + 1e-3)  # needed
    # the lower bounds hold for every action and loss; the DR terms' are per row (xᵢ only)
    assert lower[0].shape == (n,) and np.ptp(lower[0]) > 0.1
    for y in range(K):
        for loss in (0.0, 1.0):
            args = (np.full(n, loss), np.full(n, y), pc, ph, phat)
            dr = estimated_dr_terms(*args, muhat, (0.0, 1.0), eta).capital.terms
            translated = estimated_translated_terms(*args, (0.0, 1.0), eta).terms
            assert np.all(dr >= lower[0] - 1e-12) and np.all(translated >= lower[1] - 1e-12)


def test_exact_propensities_and_no_margin_give_unbiased_terms():
    rng = np.random.default_rng(1)
    n = 50
    p0, mu, muhat = rng.dirichlet(np.ones(K), size=n), rng.random((n, K)), rng.random((n, K))
    pc = rng.dirichlet(np.ones(K), size=n)
    means, _ = _exact_term_means(p0, p0, mu, muhat, pc, None, 0.0)
    truth = np.sum((p0 - pc) * mu, axis=1)
    np.testing.assert_allclose(means, np.stack([truth, truth]), atol=1e-12)


def test_propensity_error_is_the_per_action_calibration_error_beyond_its_noise():
    # one bin per action: action 0 predicted 0.8 (observed 0.75), action 1 predicted 0.2
    # (observed 0.25); raw (noise_level None): the worst relative error, 0.05 / 0.2
    P = np.tile([0.8, 0.2], (4, 1))
    raw = {"n_bins": 1, "noise_level": None}
    assert propensity_error(P, [0, 0, 0, 1], **raw) == pytest.approx(0.25)
    assert propensity_error(P, [1, 1, 1, 1], **raw) == pytest.approx(0.8 / 0.2)
    # beyond the noise: |ō − p̄| − z s, z = Φ⁻¹(1 − 0.05/(2·2·1)) = 2.2414, s = √(4·0.16)/4
    assert propensity_error(P, [1, 1, 1, 1], n_bins=1) == pytest.approx(
        (0.8 - 2.2414 * 0.2) / 0.2, abs=1e-3
    )
    assert propensity_error(P, [0, 0, 0, 1], n_bins=1) == 0.0  # within its noise
    # a calibrated model (p̂ = π₀) on a fixed-seed log: no margin; its raw worst bin is noise
    rng = np.random.default_rng(0)
    p0 = rng.dirichlet(np.ones(K), size=2000)
    y = (p0.cumsum(1) < rng.random((2000, 1))).sum(1)
    assert propensity_error(p0, y) == 0.0
    assert propensity_error(p0, y, n_bins=10, noise_level=None) > 0.1  # the noise alone
    # a model that ignores x (the marginal) is calibrated in bins of its own p̂; bins by a
    # key that varies with x (here π₀ itself) show it
    marginal = np.tile(np.bincount(y, minlength=K) / y.size, (y.size, 1))
    assert propensity_error(marginal, y) == 0.0
    assert propensity_error(marginal, y, keys=p0) == pytest.approx(0.8833, abs=1e-3)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"observed": [0, 1]}, r"predicted has shape \(4, 2\) and observed \(2,\)"),
        ({"observed": [0, 1, 2, 0]}, r"1 observed actions are outside 0..1"),
        ({"n_bins": 0}, r"n_bins must be >= 1, got 0"),
        ({"noise_level": 1.0}, r"noise_level must be in \(0, 1\) or None, got 1.0"),
        ({"keys": np.ones((4, 3))}, r"key 0 has shape \(4, 3\), expected \(4, 2\)"),
    ],
)
def test_propensity_error_refuses_bad_inputs_with_one_line(kwargs, message):
    args = {"predicted": np.tile([0.8, 0.2], (4, 1)), "observed": [0, 0, 0, 1], **kwargs}
    with pytest.raises(ValueError, match=message):
        propensity_error(**args)


def _policy(rng, scale=1.0):
    family = make_family("discrete", 2, K)
    return StochasticPolicy(family, scale * rng.normal(size=family.coef_shape))


def _logged(rng, n):
    X = rng.normal(size=(n, 2))
    s = np.column_stack([X[:, 0], -X[:, 0], 0.5 * X[:, 1]])
    p0 = np.exp(s) / np.exp(s).sum(1, keepdims=True)
    y = (p0.cumsum(1) < rng.random((n, 1))).sum(1)
    mu = 1 / (1 + np.exp(-np.column_stack([X[:, 1], -X[:, 1], X[:, 0]])))
    losses = (rng.random(n) < mu[np.arange(n), y]).astype(float)
    return LoggedBandit(X, y, losses, np.ones(n), (0.0, 1.0), n_actions=K), mu


def test_the_decision_is_labelled_and_rests_on_the_dr_terms():
    rng = np.random.default_rng(2)
    fit, _ = _logged(rng, 600)
    test, mu = _logged(rng, 600)
    challenger, champion = _policy(rng), _policy(rng)
    rows = estimated_gate_rows(challenger, champion, fit, test, random_state=0)
    assert rows.logger.shape == (600, K)
    assert rows.provenance["fit_rows"] == 600
    assert rows.provenance["propensity_error_source"] == "cross-fitted"
    result = estimated_gate_decision(rows, attempt=None, order_seed=3, min_ess=10.0)
    assert result.propensity_source == "estimated"
    assert result.to_dict()["propensity_source"] == "estimated"
    assert result.metrics()["gate_estimated_propensities"] == 1.0
    assert any(ESTIMATED_LABEL in r for r in result.reasons)
    assert any("gate.estimator 'ips' needs known propensities" in r for r in result.reasons)
    assert "Rests on estimated propensities" in result.to_markdown()
    assert result.difference.estimator == "dr_difference"
    # the reported difference is the DR estimate; the bound is above it (margin + betting)
    assert result.upper_bound > result.difference.value
    same = estimated_gate_decision(rows, attempt=None, order_seed=3, min_ess=10.0)
    assert same.upper_bound == result.upper_bound  # a recorded seed replays the decision
    blocked = estimated_gate_decision(
        rows, attempt=None, order_seed=3, min_ess=0.0, failed_checks=["support"]
    )
    assert not blocked.promote and blocked.reasons[-1] == "check did not pass: support"


def test_a_clearly_better_challenger_is_promoted_on_estimated_propensities():
    rng = np.random.default_rng(4)
    fit, _ = _logged(rng, 3000)
    test, mu = _logged(rng, 3000)

    class Oracle:  # prefers the action of lowest expected loss at each context
        def predict_proba(self, X):
            m = 1 / (1 + np.exp(-np.column_stack([X[:, 1], -X[:, 1], X[:, 0]])))
            e = np.exp(-6 * m)
            return e / e.sum(1, keepdims=True)

    # with a declared small propensity error (η = 0.02) the DR estimate's −0.17 is shown
    declared = estimated_gate_rows(
        Oracle(), None, fit, test, random_state=0, propensity_error_value=0.02
    )
    result = estimated_gate_decision(declared, attempt=None, order_seed=1, min_ess=100.0)
    assert result.promote, result.reasons
    assert result.difference.value == pytest.approx(-0.1668, abs=1e-3)
    assert declared.provenance["propensity_error_source"] == "declared"
    # the measured margin: this well-specified model shows no miscalibration beyond its
    # noise (η̂ = 0), so it is promoted on its own measurement too (the old worst-bin η,
    # 0.15 here, and one lower bound for the window took all the power: not promoted)
    rows = estimated_gate_rows(Oracle(), None, fit, test, random_state=0)
    assert rows.propensity_error == 0.0
    measured = estimated_gate_decision(rows, attempt=None, order_seed=1, min_ess=100.0)
    assert measured.promote, measured.reasons
    assert measured.upper_bound == pytest.approx(MEASURED_UCB, abs=1e-4)
    assert any(
        "eta cross-fitted: the model's calibration error beyond its sampling noise on 5 "
        "folds of the fit rows, an estimate, not a bound" in r
        for r in measured.reasons
    )


def test_a_misspecified_model_gets_a_larger_margin_than_a_well_specified_one():
    from sklearn.dummy import DummyClassifier

    rng = np.random.default_rng(2)
    fit, _ = _logged(rng, 600)
    test, _ = _logged(rng, 600)
    challenger, champion = _policy(rng), _policy(rng)
    well = estimated_gate_rows(challenger, champion, fit, test, random_state=0)
    # a model that ignores x: calibrated in bins of its own p̂, wrong where the gate's
    # weights lean on it
    wrong = estimated_gate_rows(
        challenger,
        champion,
        fit,
        test,
        random_state=0,
        propensity_model=DummyClassifier(strategy="prior"),
    )
    assert well.propensity_error == 0.0
    assert wrong.propensity_error == pytest.approx(0.1180, abs=1e-3)
    assert wrong.provenance["propensity_error_folds"] == 5
    with pytest.raises(
        ValueError,
        match=r"propensity_error_value .* must be a finite number "
        r">= 0 or None \(measure it\), got -0.1",
    ):
        estimated_gate_rows(challenger, champion, fit, test, propensity_error_value=-0.1)


def test_other_families_are_refused_with_one_line():
    rng = np.random.default_rng(5)
    sizes = rng.integers(2, 4, size=30)
    log = LoggedBandit(
        None,
        np.zeros(30, dtype=int),
        rng.random(30),
        1.0 / sizes,
        (0.0, 1.0),
        family="candidates",
        candidates=CandidateSets.from_sizes(rng.normal(size=(int(sizes.sum()), 2)), sizes),
    )
    with pytest.raises(ValueError, match=r"supports the discrete family only, the fit rows are"):
        estimated_gate_rows(None, None, log, log)
