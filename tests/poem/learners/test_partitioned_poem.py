"""Split, fit, trial and gate on partitions equal the in-memory ones (uneven, one empty)."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from poem.exceptions import InvalidLogError
from poem.gate import counterfactual_ab_test
from poem.io.partitions import LocalPartitions
from poem.learners.partitioned_poem import fit_prepared, prepare_training, run_trial_partitioned
from poem.learners.poem import POEM
from poem.learners.search import run_trial
from poem.partitioned_log import counterfactual_ab_test_partitioned, split_partitioned
from poem.splits import split_log

BOUNDS = [0, 37, 37, 150, 151]  # uneven partitions, one empty (37:37), one of a single row
PARAMS = dict(solver="lbfgs", max_iter=60, tol=1e-10, variance_penalty="calibrated")


def partitions(log, bounds=BOUNDS):
    edges = [*bounds, log.n_rows]
    return LocalPartitions(
        [
            log.take(np.arange(a, b)) if b > a else None
            for a, b in zip(edges, edges[1:], strict=False)
        ]
    )


@pytest.fixture
def timed_log(make_log):
    log = make_log("discrete", n=400, seed=5)
    stamps = np.datetime64("2026-01-01") + np.random.default_rng(1).permutation(400).astype(
        "timedelta64[m]"
    )
    return replace(log, timestamps=stamps)


@pytest.mark.parametrize("by_time", [True, False])
def test_split_equals_split_log(timed_log, by_time):
    kw = dict(validation_fraction=0.3, test_fraction=0.2, by_time=by_time, random_state=4)
    ref = split_log(timed_log, **kw)
    got = split_partitioned(partitions(timed_log), **kw)
    edges = np.array([*BOUNDS, timed_log.n_rows])
    for name, rows in (("train", ref.train_rows), ("validation", ref.validation_rows)):
        local = got.rows[name]
        assert len(local) == 5 and local[1].size == 0
        np.testing.assert_array_equal(
            np.concatenate([r + o for r, o in zip(local, edges, strict=False)]), rows
        )
    assert got.summary() == ref.summary() and got.n_rows("test") == ref.test_rows.size


@pytest.mark.parametrize("solver", ["lbfgs", "adagrad"])
def test_fit_prepared_equals_fit(timed_log, solver):
    split = split_partitioned(partitions(timed_log), random_state=0, by_time=False)
    train = split_log(timed_log, random_state=0, by_time=False).train
    prepared, _ = prepare_training(split)
    est = POEM(**{**PARAMS, "solver": solver}, max_epochs=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        got = fit_prepared(POEM(**est.get_params()), prepared)
    if solver == "adagrad":  # partition order, not the in-memory minibatch order
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            again = fit_prepared(POEM(**est.get_params()), prepared)
        assert got.n_iter_ >= 1 and np.isfinite(got.objective_)
        np.testing.assert_array_equal(again.coef_, got.coef_)  # seeded: reproducible
        return
    ref = POEM(**est.get_params()).fit(train)
    assert got.clip_ == ref.clip_ and got.variance_penalty_ == pytest.approx(
        ref.variance_penalty_, rel=1e-12
    )
    assert got.objective_ == pytest.approx(ref.objective_, rel=1e-10)
    np.testing.assert_allclose(got.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    assert got.clipped_fraction_ == ref.clipped_fraction_


def test_partitioned_adagrad_takes_its_step_per_epoch_like_fit(timed_log):
    """learning_rate_unit='epoch': η = γ·b/n on partitions too (n = the training rows)."""
    split = split_partitioned(partitions(timed_log), random_state=0, by_time=False)
    prepared, _ = prepare_training(split)
    common = dict(solver="adagrad", variance_penalty=0.1, max_epochs=2, batch_size=40)
    per_epoch = POEM(**common, learning_rate=50.0, learning_rate_unit="epoch", random_state=0)
    eta = 50.0 * 40 / prepared.n_rows
    per_step = POEM(**common, learning_rate=eta, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        a, b = fit_prepared(per_epoch, prepared), fit_prepared(per_step, prepared)
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_trial_and_gate_equal_in_memory(timed_log):
    parts = partitions(timed_log)
    split = split_partitioned(parts, random_state=0)
    ref_split = split_log(timed_log, random_state=0)
    prepared, split = prepare_training(split, release=True)
    assert split.n_rows("validation") == ref_split.validation_rows.size
    with pytest.raises(ValueError, match=r"the train rows of this split were released"):
        split.rows_for("train+validation")
    params = {"variance_scale": 0.01}
    got = run_trial_partitioned(POEM(**PARAMS), params, prepared, split, keep_estimator=True)
    ref = run_trial(POEM(**PARAMS), params, ref_split.train, ref_split.validation)
    for key, value in ref.to_dict().items():
        if key != "fit_seconds":
            assert got.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    policy = got.estimator.policy_
    other = POEM(**{**PARAMS, "variance_penalty": 0.0}).fit(ref_split.train).policy_
    for champion in (None, other):
        kw = dict(estimator="snips", min_ess=10.0, failed_checks=["x"] if champion else [])
        a = counterfactual_ab_test_partitioned(policy, champion, split, **kw)
        b = counterfactual_ab_test(policy, champion, ref_split.test, **kw)
        assert a.decision == b.decision and a.reasons == b.reasons
        for key, value in b.metrics().items():
            assert a.metrics()[key] == pytest.approx(value, rel=1e-10, abs=1e-12), key


def test_prepare_training_errors(make_log):
    log = make_log("discrete", n=40)
    one_action = replace(log, actions=np.zeros(40, dtype=int))
    split = split_partitioned(partitions(one_action, [0, 10]), random_state=0)
    with pytest.raises(InvalidLogError, match=r"action: the training rows .* 20 rows and 1 dis"):
        prepare_training(split)
    split = split_partitioned(partitions(log, [0, 10]), random_state=0)
    with pytest.raises(ValueError, match=r"release=True needs part='train'"):
        prepare_training(split, part="train+validation", release=True)
    prepared, _ = prepare_training(split, part="train+validation")
    assert prepared.n_rows == 30
    with pytest.raises(ValueError, match=r"fit_intercept=False, standardize=True but the"):
        fit_prepared(POEM(fit_intercept=False), prepared)
    with pytest.raises(ValueError, match=r"policy='multilabel' but the log's family is"):
        fit_prepared(POEM(policy="multilabel"), prepared)
