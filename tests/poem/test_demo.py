import json
import math

import pytest

from poem.demo import DemoResult, run_digits_demo


@pytest.fixture(scope="module")
def result() -> DemoResult:
    return run_digits_demo(n_replays=1, random_state=0)


def test_poem_beats_the_logging_policy_on_digits(result):
    assert (result.n_train_log, result.n_test_log, result.n_actions) == (1198, 599, 10)
    h0, poem = result.policies
    assert (h0.name, poem.name) == ("h0", "POEM")
    # h0 is fitted on 60 rows and stays very stochastic; POEM learns from 1198 bandit rows
    assert 0.3 < h0.expected_loss < 0.6
    assert poem.expected_loss < 0.5 * h0.expected_loss
    assert poem.map_loss <= poem.expected_loss + 0.05
    assert result.converged and result.clip > 1 and result.variance_penalty > 0


def test_estimates_bracket_their_values_and_track_the_truth(result):
    for policy in result.policies:
        assert [e.estimator for e in policy.estimates] == ["ips", "snips"]
        for estimate in policy.estimates:
            assert estimate.n == 599 and estimate.confidence_level == 0.95
            assert estimate.lower <= estimate.value <= estimate.upper
            # seed-fixed check: the interval covers the exact test loss of the same policy
            assert estimate.lower <= policy.expected_loss <= estimate.upper
    h0_ips = result.policies[0].estimates[0]
    assert math.isclose(h0_ips.effective_sample_size, 599.0)  # target = logger: all weights are 1


def test_result_serialises_to_json(result):
    payload = json.loads(json.dumps(result.to_dict()))
    assert payload["solver"] == "lbfgs" and payload["variance_scale"] == 0.1
    assert payload["policies"][1]["estimates"][0]["estimator"] == "ips"
