"""Property tests of the partition-set protocol: k partitions give the one-partition result.

Every stage is written once against :mod:`poem.io.partitions`; here each stage runs on a log
held as one partition (the in-memory path) and as k uneven local partitions (one empty, one of
a single row) and must agree: to 1e-10 for additive results, with the same decision for the
gate. AdaGrad's minibatch order is the documented exception (:mod:`poem.learners._adagrad`):
one partition reproduces main's in-memory coefficients exactly, empty partitions change
nothing, k non-empty partitions are another valid run.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from poem.exceptions import InvalidLogError
from poem.gate import counterfactual_ab_test, gate_decision, gate_rows
from poem.io.partitions import LocalPartitions
from poem.learners.banditnet import BanditNet
from poem.learners.champion_candidates import champion_trials
from poem.learners.objective import crm_objective_from_statistics, crm_statistics
from poem.learners.poem import POEM
from poem.learners.prepared import prepare_log, prepare_training
from poem.learners.search import run_trial
from poem.learners.training_rows import TrainingRows, fit_on_rows, training_rows
from poem.log_rows import (
    as_partitions,
    partitioned_gate_rows,
    sample_log,
    split_partitioned,
    take_log,
)
from poem.policies import family_from_log
from poem.splits import split_rows, split_summary

sys.path.insert(0, str(Path(__file__).parent))
from conftest import make_family_log  # noqa: E402

BOUNDS = [0, 37, 37, 150, 151]  # uneven partitions, one empty (37:37), one of a single row
PARAMS = dict(solver="lbfgs", max_iter=60, tol=1e-10, variance_penalty="calibrated")
QUIET = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")


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


def both(log, **kw):
    """The split of one partition and of k partitions of the same log."""
    return split_partitioned(as_partitions(log), **kw), split_partitioned(partitions(log), **kw)


# -- split and rows --------------------------------------------------------------------------
@pytest.mark.parametrize("by_time", [True, False])
def test_split_is_the_same_rows_on_every_layout(timed_log, by_time):
    kw = dict(validation_fraction=0.3, test_fraction=0.2, by_time=by_time, random_state=4)
    method, *ref = split_rows(timed_log.n_rows, timed_log.timestamps, **kw)
    one, many = both(timed_log, **kw)
    edges = np.array([*BOUNDS, timed_log.n_rows])
    for name, rows in zip(("train", "validation"), ref[:2], strict=True):
        np.testing.assert_array_equal(one.rows[name][0], rows)
        local = many.rows[name]
        assert len(local) == 5 and local[1].size == 0
        np.testing.assert_array_equal(
            np.concatenate([r + o for r, o in zip(local, edges, strict=False)]), rows
        )
    assert one.summary() == many.summary() == split_summary(method, ref, timed_log.timestamps)
    assert one.family == many.family == "discrete"


@pytest.mark.parametrize("sparse", [False, True])
def test_take_log_gives_the_rows_of_every_family(family_log, sparse):
    log = make_family_log(family_log.family, n=60, sparse=sparse) if sparse else family_log
    if sparse and log.family != "discrete":
        pytest.skip("sparse contexts: discrete family")
    parts = partitions(log, [0, 7, 7, 25, 26])
    rows = [np.arange(0, 7, 2), np.zeros(0, int), np.arange(18), np.array([0]), np.array([3])]
    got = take_log(parts, rows)
    ref = log.take(np.concatenate([r + o for r, o in zip(rows, [0, 7, 7, 25, 26], strict=True)]))
    np.testing.assert_array_equal(got.propensities, ref.propensities)
    np.testing.assert_array_equal(np.asarray(got.actions), np.asarray(ref.actions))
    if log.family == "candidates":
        np.testing.assert_array_equal(got.candidates.offsets, ref.candidates.offsets)
        np.testing.assert_array_equal(got.candidates.features, ref.candidates.features)
    else:
        a, b = got.contexts, ref.contexts
        np.testing.assert_array_equal(a.toarray() if sparse else a, b.toarray() if sparse else b)
    with pytest.raises(ValueError, match=r"no rows selected in any of the partitions \(0 rows\)"):
        take_log(parts, [np.zeros(0, int)] * 5)


def test_sample_log_is_the_same_rows_on_every_layout(timed_log):
    """Whole part when it fits; else max_rows rows in log order, the same on every layout."""
    kw = dict(validation_fraction=0.3, test_fraction=0.2, by_time=True, random_state=4)
    one, many = both(timed_log, **kw)
    for split in (one, many):
        whole = sample_log(split, "validation", 10_000)
        assert whole.n_rows == one.n_rows("validation") == 120
        np.testing.assert_array_equal(whole.propensities, one.log("validation").propensities)
    a, b = (sample_log(s, "train", 50, random_state=3) for s in (one, many))
    assert a.n_rows == b.n_rows == 50
    np.testing.assert_array_equal(a.propensities, b.propensities)  # same rows, any layout
    train = list(one.log("train").propensities)  # distinct values: they name the rows
    positions = [train.index(p) for p in a.propensities]
    assert positions == sorted(positions)  # in log order
    with pytest.raises(ValueError, match="part must be one of"):
        sample_log(one, "holdout", 10)


# -- statistics and the fit -------------------------------------------------------------------
@pytest.mark.parametrize("clip", [np.inf, 2.5])
def test_statistics_of_k_partitions_equal_one(family_log, clip):
    one = prepare_log(family_log, fit_intercept=True, standardize_features=False)
    many, _ = prepare_training(
        split_partitioned(partitions(family_log, [0, 7, 7, 25, 26]), random_state=0),
        part="train+validation",
        standardize=False,
    )
    family = family_from_log(family_log, fit_intercept=True)
    w = 0.4 * np.random.default_rng(3).normal(size=family.coef_shape)
    sub = split_partitioned(as_partitions(family_log), random_state=0).log("train+validation")
    full = crm_statistics(
        w, family, family.inputs_from_log(sub), np.asarray(sub.actions), sub.scaled_losses(),
        sub.propensities, clip,
    )  # fmt: skip
    reduced = many.statistics(w, clip)
    assert (reduced.n, reduced.n_clipped) == (full.n, full.n_clipped)
    v_full, g_full = crm_objective_from_statistics(full, w, 0.8, 0.01)
    v, g = crm_objective_from_statistics(reduced, w, 0.8, 0.01)
    assert v == pytest.approx(v_full, rel=1e-10)
    np.testing.assert_allclose(g, g_full, rtol=1e-10, atol=1e-14)
    assert one.statistics(w, clip).n == family_log.n_rows


@QUIET
@pytest.mark.parametrize("anchored", [False, True])
def test_lbfgs_fit_of_k_partitions_equals_one(timed_log, anchored):
    one, many = both(timed_log, random_state=0, by_time=False)
    params = dict(PARAMS)
    if anchored:  # the anchor term κ·(d/n)·‖w − w₀‖² uses the rows of all partitions
        w0 = POEM(**{**PARAMS, "max_iter": 2}).fit(one.log("train")).coef_
        params.update(warm_start=w0, anchor_penalty=0.5)
    a = fit_on_rows(POEM(**params), TrainingRows(one))
    b = fit_on_rows(POEM(**params), TrainingRows(many))
    ref = POEM(**params).fit(one.log("train"))
    np.testing.assert_array_equal(a.coef_, ref.coef_)  # one partition: the in-memory fit
    assert b.clip_ == a.clip_ and b.variance_penalty_ == pytest.approx(a.variance_penalty_, 1e-12)
    assert b.objective_ == pytest.approx(a.objective_, rel=1e-10)
    np.testing.assert_allclose(b.coef_, a.coef_, rtol=1e-6, atol=1e-8)
    assert b.clipped_fraction_ == a.clipped_fraction_


MAIN_COEF = {  # POEM(S) on main (aae8053) before the twin was folded in: seed 7, n = 60
    "discrete": (
        {"variance_penalty": "calibrated", "max_epochs": 4, "batch_size": 7},
        [
            0.5252438285177246,
            0.23805101235007237,
            -0.031163370725736286,
            -0.32045921661598253,
            -0.06551262957187769,
            0.11989011640571795,
            -0.06553967779938433,
            0.3231039634844381,
            -0.2355071259557153,
            -0.5442477258817175,
            0.07940687470581259,
            0.7839056596657122,
            -0.36232193859484874,
            0.052673331398493645,
            0.0373135468537092,
            -0.30429495085401065,
        ],
    ),
    "discrete_prog": (
        {"variance_penalty": 0.5, "max_epochs": 3, "batch_size": 9, "progressive": True},
        [
            -0.2025763824928887,
            -0.36851520754216643,
            -0.011904711915428154,
            0.402661225164441,
            -0.16423808813190455,
            -0.031710361652853444,
            0.08762193118185224,
            -0.5123554635942877,
            -0.08194750525035659,
            0.09936023732844998,
            0.07888193084806422,
            -0.6871120805622265,
            0.43668426010170436,
            0.3042357539482049,
            -0.15396360168453707,
            0.7577458023244592,
        ],
    ),
    "discrete_maj": (
        {"variance_penalty": 0.5, "max_epochs": 3, "batch_size": 9, "majorize_every": 2},
        [
            -0.21879605296271068,
            -0.3864729045132646,
            -0.0194691985967007,
            0.41414035297977186,
            -0.17109782819712072,
            -0.030371596075746632,
            0.09349694341814908,
            -0.5435538148154554,
            -0.0884770496951385,
            0.10006001005253745,
            0.08219216184776473,
            -0.7162814643855173,
            0.46348704384719275,
            0.32066832271709955,
            -0.1554979179130023,
            0.8016863887008702,
        ],
    ),
    "multilabel": (
        {"variance_penalty": 0.3, "max_epochs": 3, "batch_size": 8},
        [
            -0.018736919869459103,
            -0.016512416443004104,
            -0.029027249413716455,
            -0.05469741599564496,
            -0.02439088999685432,
            0.03063608068168486,
            -0.011962194429464452,
            -0.11643181069431821,
            -0.025886305931887794,
            0.026043484313846614,
            0.023563454968114125,
            -0.08231375267937585,
            0.004183949373485024,
            0.041539880629363986,
            0.020166030406024316,
            -0.04329904603797518,
            -0.020709956990871015,
            0.07892832788802676,
            0.03454498798133212,
            -0.21420415582181665,
        ],
    ),
    "candidates": (
        {"variance_penalty": 0.3, "max_epochs": 3, "batch_size": 6, "learning_rate": 0.5},
        [-0.14548913347663622, -0.531990704882474, -0.2277980664628007],
    ),
    "discrete_sparse": (
        {"variance_penalty": 0.2, "max_epochs": 3, "batch_size": 10, "standardize": False},
        [
            -0.44423368368606775,
            -0.6135642571627262,
            0.0954520825122478,
            0.3251508659873618,
            -0.38410743419266846,
            -0.050297111479742654,
            0.24222499608098286,
            -0.45726629271450014,
            -0.18907045817184062,
            0.20734659040783837,
            0.1688525344666523,
            -0.5873493860616819,
            0.9635768018933226,
            0.4558477746235952,
            -0.5061029605039534,
            0.6854088940849006,
        ],
    ),
}


@QUIET
@pytest.mark.parametrize("case", sorted(MAIN_COEF))
def test_one_partition_adagrad_reproduces_main(case):
    """The results page's POEM(S) figures stand: main's in-memory minibatch order, to 1e-10."""
    params, coef = MAIN_COEF[case]
    family = case.split("_")[0]
    log = make_family_log(family, n=60, seed=3, sparse=case.endswith("sparse"))
    est = POEM(policy=family, solver="adagrad", random_state=7, **params).fit(log)
    np.testing.assert_allclose(est.coef_.ravel(), coef, rtol=0, atol=1e-10)


@QUIET
def test_adagrad_order_ignores_empty_partitions_and_k_partitions_are_a_valid_run(timed_log):
    est = POEM(solver="adagrad", variance_penalty=0.1, max_epochs=3, batch_size=40, random_state=0)
    log = split_partitioned(as_partitions(timed_log), random_state=0, by_time=False).log("train")
    ref = POEM(**est.get_params()).fit(log)
    padded = LocalPartitions([None, log, None])  # only empty partitions added
    rows = TrainingRows(split_partitioned(padded, validation_fraction=0.01, test_fraction=0.01))
    start = prepare_log(log, fit_intercept=True, standardize_features=True)
    got = POEM(**est.get_params()).fit_prepared(replace(start, partitions=padded.map(
        lambda p: None if p is None else start.partitions.items[0]), cache={}))  # fmt: skip
    np.testing.assert_array_equal(got.coef_, ref.coef_)
    many = fit_on_rows(POEM(**est.get_params()), TrainingRows(both(timed_log, random_state=0,
                                                                   by_time=False)[1]))  # fmt: skip
    again = fit_on_rows(POEM(**est.get_params()), TrainingRows(both(timed_log, random_state=0,
                                                                    by_time=False)[1]))  # fmt: skip
    np.testing.assert_array_equal(many.coef_, again.coef_)  # seeded: reproducible
    zero = POEM(**{**est.get_params(), "max_epochs": 1, "learning_rate": 1e-12}).fit(log)
    assert many.n_iter_ >= 1 and many.objective_ < zero.objective_  # it learned
    assert rows.split.n_rows("train") > 0


@QUIET
def test_majorize_every_and_dr_need_one_partition(timed_log, make_log):
    many = both(timed_log, random_state=0, by_time=False)[1]
    prepared = TrainingRows(many).preparation(True, True)
    with pytest.raises(ValueError, match=r"majorize_every needs the training rows in one part"):
        POEM(majorize_every=2, max_epochs=1).fit_prepared(prepared)
    log = make_log("multilabel", n=200, seed=2)
    one, many = both(log, random_state=0)
    dr = dict(policy="multilabel", objective="dr", **PARAMS)
    with pytest.raises(ValueError, match=r"objective='dr' cross-fits its loss model on the whole"):
        POEM(**dr).fit_prepared(TrainingRows(many).preparation(True, True))
    # the route: DR on k partitions fits the rows taken into one log, as in memory
    a = fit_on_rows(POEM(**dr), TrainingRows(one))
    b = fit_on_rows(POEM(**dr), TrainingRows(many))
    np.testing.assert_array_equal(a.coef_, b.coef_)


@QUIET
def test_learners_without_an_additive_form_take_the_rows(make_log):
    log = make_log("discrete", n=400, seed=4)
    one, many = both(log, random_state=0)
    net = dict(max_iter=20, loss_translations=[0.0, 0.5], random_state=0)
    rows, _ = training_rows(many, BanditNet(**net))
    assert rows._log is not None  # taken once, for every trial
    a = fit_on_rows(BanditNet(**net), TrainingRows(one))
    b = fit_on_rows(BanditNet(**net), rows)
    np.testing.assert_array_equal(a.coef_, b.coef_)


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
        POEM(fit_intercept=False).fit_prepared(prepared)
    with pytest.raises(ValueError, match=r"policy='multilabel' but the log's family is"):
        POEM(policy="multilabel").fit_prepared(prepared)


# -- validation scores, champion candidates, gate --------------------------------------------
def _validation(split):
    return split.source, split.rows_for("validation")


@QUIET
def test_trial_candidates_and_gate_of_k_partitions_equal_one(timed_log):
    one, many = both(timed_log, random_state=0)
    rows_one, one = training_rows(one, POEM(**PARAMS), release=True)
    rows_many, many = training_rows(many, POEM(**PARAMS), release=True)
    assert "train" in many.released and not one.released  # one partition: nothing to release
    with pytest.raises(ValueError, match=r"the train rows of this split were released"):
        many.rows_for("train+validation")
    params, temps = {"variance_scale": 0.01}, [1.0, 0.5]
    a = run_trial(POEM(**PARAMS), params, rows_one, _validation(one), keep_estimator=True,
                  temperatures=temps)  # fmt: skip
    b = run_trial(POEM(**PARAMS), params, rows_many, _validation(many), temperatures=temps)
    ref = run_trial(POEM(**PARAMS), params, one.log("train"), one.log("validation"),
                    temperatures=temps)  # fmt: skip
    for key, value in a.to_dict().items():
        if key != "fit_seconds":
            assert ref.to_dict()[key] == value, key  # one partition = the in-memory trial
            assert b.to_dict()[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    policy = a.estimator.policy_
    for x, y in zip(champion_trials(policy, _validation(one), temps),
                    champion_trials(policy, _validation(many), temps), strict=True):  # fmt: skip
        assert x.ips.value == pytest.approx(y.ips.value, rel=1e-12)
        assert x.snips.value == pytest.approx(y.snips.value, rel=1e-12)
    other = POEM(**{**PARAMS, "variance_penalty": 0.0}).fit(one.log("train")).policy_
    for champion in (None, other):
        kw = dict(estimator="snips", min_ess=10.0, failed_checks=["x"] if champion else [])
        kw |= dict(attempt=None, order_seed=0)
        out = []
        ref_rows = gate_rows(policy, champion, one.log("test"))
        for split in (one, many):
            rows = partitioned_gate_rows(split.source, split.rows_for("test"), policy, champion)
            assert rows.window == ref_rows.window  # the ledger's window, as in memory
            out.append(gate_decision(rows, **kw))
        ref_gate = counterfactual_ab_test(policy, champion, one.log("test"), **kw)
        for got in out:
            assert got.decision == ref_gate.decision and got.reasons == ref_gate.reasons
            for key, value in ref_gate.metrics().items():
                assert got.metrics()[key] == pytest.approx(value, rel=1e-10, abs=1e-12), key
