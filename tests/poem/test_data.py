"""LoggedBandit invariants: table-driven bad inputs, each naming column and count."""

import numpy as np
import pytest
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit, check_logged_bandit, exclude_rows, scale_losses
from poem.exceptions import InvalidLogError


def base(**over):
    kw = dict(
        contexts=np.arange(10.0).reshape(5, 2),
        actions=np.array([0, 1, 2, 0, 1]),
        losses=np.array([0.0, 1.0, 0.5, 0.25, 1.0]),
        propensities=np.array([0.5, 0.25, 0.2, 0.5, 0.4]),
        loss_bounds=(0.0, 1.0),
        n_actions=3,
    )
    kw.update(over)
    return kw


@pytest.mark.parametrize(
    "over, column, pattern",
    [
        (
            {"propensities": [0.5, np.nan, 0.2, 0.5, 0.4]},
            "propensity",
            r"propensity: 1 of 5 rows outside \(0, 1\]; first rows: \[1\]",
        ),
        (
            {"propensities": [0.5, np.inf, 0.2, -np.inf, 0.4]},
            "propensity",
            r"propensity: 2 of 5 rows outside \(0, 1\]; first rows: \[1, 3\]",
        ),
        (
            {"propensities": [0.0, 0.25, 0.2, 0.5, 0.4]},
            "propensity",
            r"propensity: 1 of 5 rows outside",
        ),
        (
            {"propensities": [-0.1, 0.25, -0.2, 0.5, 0.4]},
            "propensity",
            r"propensity: 2 of 5 rows outside",
        ),
        (
            {"propensities": [1.5, 0.25, 0.2, 0.5, 0.4]},
            "propensity",
            r"propensity: 1 of 5 rows outside.*logging policy's probability",
        ),
        ({"losses": [np.nan, 1.0, 0.5, 0.25, 1.0]}, "loss", r"loss: 1 of 5 rows not finite"),
        (
            {"losses": [0.0, 1.0, 3.0, 0.25, -2.0]},
            "loss",
            r"loss: 2 of 5 rows outside the declared loss bounds \[0, 1\]; first rows: \[2, 4\]",
        ),
        (
            {"actions": [0, 1, 3, 0, -1]},
            "action",
            r"action: 2 of 5 rows outside the action range 0\.\.2; first rows: \[2, 4\]",
        ),
        ({"actions": [0, 0, 0, 0, 0]}, None, None),  # one distinct action is allowed by default
        (
            {"contexts": np.array([[1.0, np.nan]] + [[0.0, 0.0]] * 3 + [[np.inf, 0.0]])},
            "x_1",
            r"(?s)x_0: 1 of 5 rows not finite \(NaN or inf\); first rows: \[4\].*"
            r"x_1: 1 of 5 rows not finite \(NaN or inf\); first rows: \[0\]",
        ),
        (
            {"propensities": [1e-320, 0.25, 0.2, 0.5, 0.4]},
            "propensity",
            r"propensity: 1 of 5 rows below 2.23e-308 \(subnormal: the importance weight 1/p "
            r"overflows\)",
        ),
        (
            {"event_ids": ["a", "b", "a", "c", "b"]},
            "event_id",
            r"event_id: 2 of 5 rows repeat an earlier event id; first rows: \['a', 'b'\]",
        ),
        (
            {"propensities": [0.5, 0.25, 0.2]},
            "propensities",
            r"propensities: has 3 rows but losses has 5",
        ),
        ({"contexts": np.zeros((4, 2))}, "contexts", r"contexts: has 4 rows but losses has 5"),
    ],
)
def test_invalid_logs_name_column_and_count(over, column, pattern):
    if column is None:
        LoggedBandit(**base(**over))
        return
    with pytest.raises(InvalidLogError, match=pattern) as info:
        LoggedBandit(**base(**over))
    assert column in info.value.columns


def test_all_columns_are_checked_before_raising():
    with pytest.raises(InvalidLogError) as info:
        LoggedBandit(
            **base(propensities=[0, 1, 1, 1, 1], losses=[9, 0, 0, 0, 0], actions=[7, 0, 1, 2, 0])
        )
    assert set(info.value.columns) == {"propensity", "loss", "action"}
    assert all(v.n_invalid == 1 and v.n_rows == 5 for v in info.value.violations)


def test_event_ids_are_used_as_row_examples():
    with pytest.raises(InvalidLogError, match=r"first rows: \['e2'\]"):
        LoggedBandit(
            **base(propensities=[0.5, 0.5, 2.0, 0.5, 0.5], event_ids=[f"e{i}" for i in range(5)])
        )


@pytest.mark.parametrize(
    "over, exc, pattern",
    [
        (
            {
                "losses": np.array([], float),
                "propensities": np.array([], float),
                "actions": np.array([], int),
                "contexts": np.zeros((0, 2)),
            },
            InvalidLogError,
            r"rows: the log has 0 row\(s\)",
        ),
        ({"propensities": np.array(["a"] * 5)}, TypeError, r"propensities must be numeric"),
        (
            {"actions": np.array([0.5, 1, 2, 0, 1])},
            InvalidLogError,
            r"action: 5 of 5 rows are not integers",
        ),
        (
            {"loss_bounds": (1.0, 0.0)},
            ValueError,
            r"loss_bounds must have min < max, got \[1.0, 0.0\]",
        ),
        ({"loss_bounds": (0, 1e308)}, ValueError, r"loss_bounds \[0.0, 1e\+308\] overflow"),
        ({"loss_bounds": (0, np.inf)}, ValueError, r"loss_bounds must be finite"),
        (
            {"loss_bounds": "0,1"},
            ValueError,
            r"loss_bounds must be two numbers \[min, max\], got '0,1'",
        ),
        ({"family": "bandit"}, ValueError, r"family must be one of"),
        ({"contexts": np.zeros(5)}, ValueError, r"contexts must be 2-dimensional"),
    ],
)
def test_structural_errors(over, exc, pattern):
    with pytest.raises(exc, match=pattern):
        LoggedBandit(**base(**over))


def test_nan_candidate_feature_names_the_column_and_row():
    from poem.data import CandidateSets

    feats = np.ones((6, 2))
    feats[3, 1] = np.nan  # candidate 3 belongs to row 1 (sizes 2, 2, 2)
    with pytest.raises(
        InvalidLogError, match=r"candidate_features: 1 of 3 rows not finite.*first rows: \[1\]"
    ):
        LoggedBandit(
            None,
            [0, 1, 0],
            [0.0, 1.0, 0.0],
            [0.5, 0.5, 0.5],
            (0, 1),
            family="candidates",
            candidates=CandidateSets.from_sizes(feats, [2, 2, 2]),
        )


def test_learner_level_minimums():
    log = LoggedBandit(**base())
    with pytest.raises(
        InvalidLogError, match=r"rows: the log has 1 row\(s\); at least 2 are needed"
    ):
        check_logged_bandit(log.take([0]), min_rows=2)
    same = LoggedBandit(**base(actions=[1, 1, 1, 1, 1]))
    with pytest.raises(InvalidLogError, match=r"action: .*only 1 distinct value\(s\); at least 2"):
        check_logged_bandit(same, min_distinct_actions=2)


def test_multilabel_width_and_bits():
    Y = np.array([[1, 0, 1], [0, 0, 1], [1, 1, 1], [0, 0, 0], [1, 0, 0]])
    kw = base(
        actions=Y, n_actions=3, family="multilabel", loss_bounds=(0, 3), losses=[0, 1, 2, 3, 1]
    )
    log = LoggedBandit(**kw)
    assert log.n_actions == 3
    with pytest.raises(
        InvalidLogError, match=r"action: 5 of 5 rows have width 2, expected 3 labels"
    ):
        LoggedBandit(**{**kw, "actions": Y[:, :2]})
    bad = Y.copy()
    bad[1, 0] = 2
    with pytest.raises(
        InvalidLogError, match=r"action: 1 of 5 rows have entries other than 0/1; first rows: \[1\]"
    ):
        LoggedBandit(**{**kw, "actions": bad})


def test_candidate_sets():
    cs = CandidateSets.from_sizes(np.arange(14.0).reshape(7, 2), [1, 2, 0, 4, 0])
    with pytest.raises(InvalidLogError) as info:
        LoggedBandit(
            None,
            [0, 2, 0, 3, 0],
            np.zeros(5),
            np.full(5, 0.5),
            (0, 1),
            family="candidates",
            candidates=cs,
        )
    text = str(info.value)
    assert "candidates: 2 of 5 rows have zero candidates; first rows: [2, 4]" in text
    assert "action: 1 of 5 rows index outside the row's candidate set; first rows: [1]" in text
    good = CandidateSets.from_sizes(np.arange(14.0).reshape(7, 2), [1, 2, 1, 2, 1])
    sub = good.take([3, 0])
    np.testing.assert_array_equal(sub.features, [[8, 9], [10, 11], [0, 1]])
    np.testing.assert_array_equal(sub.offsets, [0, 2, 3])


def test_rewards_become_losses_once():
    log = LoggedBandit.from_rewards(
        rewards=[1, 0, 1, 0, 0],
        reward_bounds=(0, 1),
        contexts=np.zeros((5, 1)),
        actions=[0, 1, 0, 1, 0],
        propensities=np.full(5, 0.5),
    )
    np.testing.assert_array_equal(log.losses, [-1, 0, -1, 0, 0])
    assert log.loss_bounds == (-1.0, 0.0)
    np.testing.assert_allclose(log.scaled_losses(), [-1, 0, -1, 0, 0])


def test_scale_losses_maps_bounds_to_minus_one_zero():
    np.testing.assert_allclose(scale_losses([0, 2, 4], (0, 4)), [-1, -0.5, 0])


def test_log_is_immutable_and_take_preserves_sparse():
    log = LoggedBandit(**base(contexts=sp.csr_matrix(np.eye(5, 2))))
    with pytest.raises(ValueError):
        log.losses[0] = 3.0
    with pytest.raises(AttributeError):
        log.losses = np.zeros(5)
    sub = log.take([4, 0])
    assert sp.issparse(sub.contexts) and sub.n_rows == 2
    np.testing.assert_array_equal(sub.actions, [1, 0])


def test_exclude_rows_reports_and_keeps_the_rest():
    log = LoggedBandit(**base(event_ids=list("abcde")))
    kept, exclusion = exclude_rows(log, [False, True, False, True, False], "late feedback")
    assert kept.n_rows == 3 and list(kept.event_ids) == ["a", "c", "e"]
    assert (
        exclusion.n_rows == 2
        and exclusion.row_examples == ("b", "d")
        and exclusion.reason == "late feedback"
    )
    with pytest.raises(ValueError, match="would remove all 5 rows"):
        exclude_rows(log, np.ones(5, bool), "x")
