"""``estimated_propensities.parquet``: every row carries its identity, and joins back safely.

The file once identified rows by position only (``row``): a consumer joining it onto a
reordered log silently paired each row with another row's estimate.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit
from poem.exceptions import InvalidLogError
from poem.io.estimates import read_estimates, row_digests, write_estimates


@pytest.fixture
def estimates(synthetic_log):
    return np.linspace(0.05, 0.95, synthetic_log.n_rows)


def test_rows_carry_the_event_id_and_a_content_digest(tmp_path, synthetic_log, estimates):
    path = write_estimates(estimates, synthetic_log, tmp_path / "e.parquet")
    table = pq.read_table(path).to_pandas()
    assert list(table.columns) == ["event_id", "row", "row_digest", "action", "propensity"]
    assert table["event_id"].tolist() == list(synthetic_log.event_ids)
    assert table["row_digest"].str.fullmatch("[0-9a-f]{16}").all()
    assert table["row_digest"].nunique() == synthetic_log.n_rows  # distinct rows, distinct digests
    # the digest is of the content: the same rows give the same digests, another loss another one
    assert list(row_digests(synthetic_log)) == table["row_digest"].tolist()
    flipped = replace(synthetic_log, losses=1 - synthetic_log.losses)
    assert not np.any(row_digests(flipped) == row_digests(synthetic_log))


def test_a_reordered_subset_joins_back_by_event_id(tmp_path, synthetic_log, estimates):
    path = write_estimates(estimates, synthetic_log, tmp_path / "e.parquet")
    rows = np.random.default_rng(0).permutation(synthetic_log.n_rows)[:500]
    joined = read_estimates(path, synthetic_log.take(rows))
    np.testing.assert_array_equal(joined, estimates[rows])


def test_without_event_ids_a_reordering_is_detected(tmp_path, synthetic_log, estimates):
    log = replace(synthetic_log, event_ids=None)
    path = write_estimates(estimates, log, tmp_path / "e.parquet")
    assert "event_id" not in pq.read_schema(path).names
    np.testing.assert_array_equal(read_estimates(path, log), estimates)
    swapped = np.arange(log.n_rows)
    swapped[[3, 7]] = [7, 3]
    with pytest.raises(InvalidLogError) as err:
        read_estimates(path, log.take(swapped))
    assert str(err.value) == (
        "row_digest: 2 of the log's 2000 rows differ from the estimated row of the same row "
        "(rows moved; first at log row 3). Join the log exactly as it was estimated, or give "
        "the log an event_id column to join on"
    )
    with pytest.raises(
        InvalidLogError, match=r"^row: e.parquet estimates 2000 rows, the log has 10"
    ):
        read_estimates(path, log.take(np.arange(10)))


def test_a_changed_row_or_a_missing_id_is_refused(tmp_path, synthetic_log, estimates):
    path = write_estimates(estimates, synthetic_log, tmp_path / "e.parquet")
    losses = synthetic_log.losses.copy()
    losses[5] = 1 - losses[5]
    with pytest.raises(InvalidLogError) as err:
        read_estimates(path, replace(synthetic_log, losses=losses))
    assert str(err.value).startswith(
        "row_digest: 1 of the log's 2000 rows differ from the estimated row of the same "
        "event_id (rows changed; first at log row 5)"
    )
    ids = synthetic_log.event_ids.copy()
    ids[:4] = ["x0", "x1", "x2", "x3"]
    with pytest.raises(InvalidLogError) as err:
        read_estimates(path, replace(synthetic_log, event_ids=ids))
    assert str(err.value).startswith(
        "event_id: 4 of the log's 2000 event ids have no estimate in e.parquet (e.g. x0, x1, x2)"
    )


def test_sparse_contexts_and_candidate_order_are_in_the_digest(synthetic_log):
    dense = synthetic_log
    sparse = replace(dense, contexts=sp.csr_matrix(dense.contexts))
    assert list(row_digests(sparse)) == list(row_digests(sparse.take(np.arange(dense.n_rows))))
    shifted = sp.csr_matrix(dense.contexts)
    shifted.data[0] += 1.0
    assert (row_digests(replace(dense, contexts=shifted)) != row_digests(sparse)).sum() == 1
    feats = np.arange(12, dtype=float).reshape(6, 2)
    log = LoggedBandit(
        None,
        np.array([0, 1, 0]),
        np.array([0.0, 1.0, 0.5]),
        np.array([0.5, 0.5, 0.5]),
        loss_bounds=(0.0, 1.0),
        family="candidates",
        candidates=CandidateSets.from_sizes(feats, [2, 2, 2]),
    )
    other = replace(log, candidates=CandidateSets.from_sizes(feats[[1, 0, 2, 3, 4, 5]], [2, 2, 2]))
    assert (row_digests(other) != row_digests(log)).tolist() == [True, False, False]
