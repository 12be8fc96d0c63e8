"""Open Bandit Dataset adapter: row/candidate counts, exact propensities, log checks, errors."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from poem.data import check_logged_bandit
from poem.exceptions import InvalidLogError
from poem.io.obd import obd_to_log, read_obd, read_obd_table

N_ITEMS = {"all": 80, "men": 34, "women": 46}


@pytest.fixture(scope="module")
def obd_dir(shared_data_dir):
    path = shared_data_dir / "obd"
    if not path.is_dir():
        pytest.skip(f"{path} is absent")
    return shared_data_dir


@pytest.fixture(scope="module")
def men_table(obd_dir):
    return read_obd_table(obd_dir, "random", "men")


@pytest.fixture(scope="module")
def men_log(men_table):
    return obd_to_log(men_table)


def _raw_column(path, column):
    """The column's text exactly as written (no float parsing by pandas)."""
    return pd.read_csv(path, usecols=[column], dtype=str)[column].tolist()


@pytest.mark.shared_data
@pytest.mark.parametrize("behavior_policy", ["random", "bts"])
@pytest.mark.parametrize("campaign", ["all", "men", "women"])
def test_rows_items_and_propensities_preserved_exactly(obd_dir, behavior_policy, campaign):
    table = read_obd_table(obd_dir, behavior_policy, campaign)
    path = obd_dir / "obd" / behavior_policy / campaign / f"{campaign}.csv"
    raw = np.array([float(v) for v in _raw_column(path, "propensity_score")])
    assert table.n_rows == 10_000 and table.n_items == N_ITEMS[campaign]
    np.testing.assert_array_equal(table.propensities, raw)  # bit for bit
    np.testing.assert_array_equal(table.item_ids, np.array(_raw_column(path, "item_id"), dtype=int))
    assert set(np.unique(table.positions)) == {1, 2, 3}
    log = obd_to_log(table, family="discrete", position=1)
    np.testing.assert_array_equal(log.propensities, raw[table.positions == 1])


@pytest.mark.shared_data
def test_candidate_log_shape_losses_and_checks(men_table, men_log):
    log = men_log
    assert log.family == "candidates" and log.n_rows == 10_000
    np.testing.assert_array_equal(log.candidates.sizes, np.full(10_000, 34))
    np.testing.assert_array_equal(log.actions, men_table.item_ids)
    np.testing.assert_array_equal(log.propensities, np.full(10_000, 1 / 34))
    np.testing.assert_array_equal(log.losses, -men_table.clicks.astype(float))
    assert log.loss_bounds == (-1.0, 0.0)
    assert int((log.losses == -1).sum()) == 46  # 0.46% click rate of random/men
    assert len(log.feature_names) == log.n_features
    assert log.event_ids[0] == 0 and log.timestamps.dtype == np.dtype("datetime64[ns]")
    check_logged_bandit(log, min_rows=2, min_distinct_actions=2)


@pytest.mark.shared_data
def test_candidate_vectors_encode_item_position_and_affinity(men_table, men_log):
    names = men_log.feature_names
    F = men_log.candidates.features
    K = 34
    for i in (0, 17, 9_999):
        item, pos = men_table.item_ids[i], men_table.positions[i]
        row = F[i * K + item].toarray().ravel()
        assert row[names.index(f"item={item}")] == 1
        assert row[names.index(f"position={pos}&item={item}")] == 1
        assert row[names.index("user-item_affinity")] == men_table.affinity[i, item]
        assert row[names.index("item_feature_0")] == men_table.item_features[item, 0]
        # user one-hot ⊗ item features: 4 active user codes × the item's non-zero features
        cross = [j for j, n in enumerate(names) if n.startswith("user_feature_") and "&" in n]
        assert np.count_nonzero(row[cross]) == 4 * np.count_nonzero(men_table.item_features[item])


@pytest.mark.shared_data
def test_discrete_family_per_position(men_table):
    logs = [obd_to_log(men_table, family="discrete", position=k) for k in (1, 2, 3)]
    assert sum(log.n_rows for log in logs) == 10_000
    for k, log in zip((1, 2, 3), logs, strict=True):
        assert log.n_actions == 34 and log.n_rows == int((men_table.positions == k).sum())
        assert log.contexts.shape[1] == men_table.user_features.shape[1] + 34
        check_logged_bandit(log, min_rows=2, min_distinct_actions=2)


@pytest.mark.shared_data
def test_read_obd_all_campaign_bts(obd_dir):
    log = read_obd(obd_dir, "bts", "all", interactions=False)
    assert log.n_rows == 10_000 and int(log.candidates.sizes.max()) == 80
    assert 0 < log.propensities.min() and log.propensities.max() <= 1


# -- errors, on a hand-made two-item folder ----------------------------------------
def _write_folder(tmp_path, frame=None):
    folder = tmp_path / "obd" / "random" / "men"
    folder.mkdir(parents=True)
    items = pd.DataFrame(
        {
            "item_id": [0, 1],
            "item_feature_0": [0.5, -0.5],
            "item_feature_1": ["a", "b"],
            "item_feature_2": ["c", "c"],
            "item_feature_3": ["d", "e"],
        }
    )
    items.to_csv(folder / "item_context.csv")
    if frame is None:
        frame = pd.DataFrame(
            {
                "timestamp": [
                    "2019-11-24 00:00:01+00:00",
                    "2019-11-24 00:00:02+00:00",
                    "2019-11-24 00:00:03+00:00",
                ],
                "item_id": [0, 1, 1],
                "position": [1, 2, 3],
                "click": [0, 1, 0],
                "propensity_score": [0.5, 0.5, 0.5],
                "user_feature_0": ["u", "v", "u"],
                "user_feature_1": ["w", "w", "w"],
                "user_feature_2": ["x", "y", "x"],
                "user_feature_3": ["z", "z", "z"],
                "user-item_affinity_0": [0.0, 1.0, 0.0],
                "user-item_affinity_1": [0.0, 0.0, 2.0],
            }
        )
    frame.to_csv(folder / "men.csv")
    return frame


def test_tiny_folder_round_trip(tmp_path):
    _write_folder(tmp_path)
    log = read_obd(tmp_path, "random", "men")
    np.testing.assert_array_equal(log.losses, [0.0, -1.0, 0.0])
    np.testing.assert_array_equal(log.candidates.sizes, [2, 2, 2])
    assert log.candidates.features[2 * 2 + 1, log.feature_names.index("user-item_affinity")] == 2.0


@pytest.mark.parametrize(
    ("mutate", "exception", "message"),
    [
        (
            lambda f: f.drop(columns=["propensity_score"]),
            InvalidLogError,
            r"propensity_score: column is missing",
        ),
        (
            lambda f: f.drop(columns=["user-item_affinity_1"]),
            InvalidLogError,
            r"user-item_affinity_1: column is missing",
        ),
        (
            lambda f: f.assign(item_id=[0, 5, 7]),
            InvalidLogError,
            r"item_id: 2 of 3 rows outside the item table 0\.\.1; first rows: \[1, 2\]",
        ),
        (
            lambda f: f.assign(propensity_score=["0.5", "abc", "0.5"]),
            InvalidLogError,
            r"propensity_score: 1 of 3 rows are not numbers; first rows: \[1\]",
        ),
        (
            lambda f: f.assign(user_feature_2=["x", None, "x"]),
            InvalidLogError,
            r"user_feature_2: 1 of 3 rows are missing; first rows: \[1\]",
        ),
        (
            lambda f: f.assign(position=[0, 2, 3]),
            InvalidLogError,
            r"position: 1 of 3 rows outside 1\.\.3",
        ),
        (
            lambda f: f.assign(propensity_score=[0.5, 0.0, 1.5]),
            InvalidLogError,
            r"propensity: 2 of 3 rows outside \(0, 1\]",
        ),
    ],
)
def test_bad_files_are_rejected(tmp_path, mutate, exception, message):
    frame = _write_folder(tmp_path / "ok")
    (tmp_path / "bad").mkdir()
    _write_folder(tmp_path / "bad", mutate(frame))
    with pytest.raises(exception, match=message):
        read_obd(tmp_path / "bad", "random", "men")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"behavior_policy": "Random"}, r"behavior_policy must be one of"),
        ({"campaign": "kids"}, r"campaign must be one of"),
        ({"family": "discrete"}, r"position must be 1, 2 or 3 for the discrete family"),
        ({"family": "multilabel"}, r"family must be 'candidates' or 'discrete'"),
        ({"position": 4}, r"position must be 1, 2 or 3, got 4"),
    ],
)
def test_bad_arguments(tmp_path, kwargs, message):
    _write_folder(tmp_path)
    args = {"behavior_policy": "random", "campaign": "men", **kwargs}
    with pytest.raises(ValueError, match=message):
        read_obd(tmp_path, **args)


def test_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"men\.csv not found"):
        read_obd(tmp_path, "random", "men")
