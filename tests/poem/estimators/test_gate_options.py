"""The gate's options as objects (:mod:`poem.estimators.gate_options`)."""

import numpy as np
import pytest

from poem.estimators.gate_options import (
    GATE_ESTIMATORS,
    GATE_OPTIONS,
    bound_free_terms,
    gate_option,
    paired_terms,
)


def test_one_registry_names_every_option():
    assert GATE_ESTIMATORS == ("ips", "clipped_ips", "snips")
    assert all(GATE_OPTIONS[name].name == name for name in GATE_ESTIMATORS)
    with pytest.raises(ValueError, match=r"estimator must be one of \['ips'"):
        gate_option("IPS")


@pytest.mark.parametrize(
    ("name", "logger", "needs"),
    [
        ("ips", True, False),
        ("ips", False, True),
        ("snips", True, False),  # the ips capitals (issue 34)
        ("clipped_ips", True, False),
    ],
)
def test_which_options_need_a_declared_weight_bound(name, logger, needs):
    assert gate_option(name).needs_weight_bound(logger) is needs


def test_config_checks_of_the_clip():
    gate_option("clipped_ips").check(10.0, None)
    gate_option("ips").check(None, None)
    with pytest.raises(ValueError, match="estimator 'clipped_ips' needs a clip value"):
        gate_option("clipped_ips").check(None, None)
    with pytest.raises(ValueError, match="clip is only used by estimator 'clipped_ips'"):
        gate_option("snips").check(5.0, 50.0)


def test_bound_free_terms_by_hand():
    # (b − δ) r^c + (δ − a) r^h − (b − a) on [a, b] = [0, 2]; ≥ −2 whatever the weights
    losses = np.array([0.0, 2.0, 1.0])
    rc, rh = np.array([3.0, 100.0, 0.0]), np.array([1e4, 0.0, 2.0])
    terms, lower = bound_free_terms(losses, rc, rh, (0.0, 2.0))
    np.testing.assert_allclose(terms, [2 * 3 - 2, 2 * 0 - 2, 1 * 0 + 1 * 2 - 2])
    assert lower.tolist() == [-2.0]
    same = bound_free_terms(losses, rc, np.ones(3), (0.0, 2.0))[0]
    np.testing.assert_allclose(
        same, paired_terms(losses, rc, np.ones(3), (0.0, 2.0), None, True)[0]
    )
    # the paired terms against a policy need the declared bound B: L = −(b − a)B
    assert paired_terms(losses, rc, rh, (0.0, 2.0), 50.0, False)[1].tolist() == [-100.0]
