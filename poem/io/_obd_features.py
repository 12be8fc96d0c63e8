"""The decoded Open Bandit Dataset table and its candidate vectors ψ_{i,c}.

The mapping is described in :mod:`poem.io.obd`, which re-exports both names.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from poem.data import CandidateSets

__all__ = ["N_POSITIONS", "OBDTable", "obd_candidate_sets"]

N_POSITIONS = 3


@dataclass(frozen=True, eq=False)
class OBDTable:
    """One OBD folder decoded into arrays (before choosing a policy family).

    Attributes
    ----------
    behavior_policy, campaign : str
        Folder names.
    row_index : ndarray of shape (n_rows,)
        The CSV's unnamed index column (used as event ids).
    timestamps : ndarray of datetime64[ns] of shape (n_rows,)
        Decision times in UTC.
    item_ids : ndarray of int of shape (n_rows,)
        Shown item (0..K−1).
    positions : ndarray of int of shape (n_rows,)
        Slot 1..3 as in the file.
    clicks : ndarray of int of shape (n_rows,)
        Reward (0/1).
    propensities : ndarray of shape (n_rows,)
        ``propensity_score`` exactly as read.
    user_features : csr_matrix of shape (n_rows, n_user_codes)
        One-hot user-feature codes (one active code per user-feature column).
    user_feature_names : tuple of str
        ``"user_feature_j=<hash>"`` per column of ``user_features``.
    affinity : ndarray of shape (n_rows, K)
        User–item affinities.
    item_features : ndarray of shape (K, n_item_features)
        ``item_feature_0`` then one-hot codes of ``item_feature_1..3``.
    item_feature_names : tuple of str
        Names of the item-feature columns.
    """

    behavior_policy: str
    campaign: str
    row_index: np.ndarray
    timestamps: np.ndarray
    item_ids: np.ndarray
    positions: np.ndarray
    clicks: np.ndarray
    propensities: np.ndarray
    user_features: Any
    user_feature_names: tuple[str, ...]
    affinity: np.ndarray
    item_features: np.ndarray
    item_feature_names: tuple[str, ...]

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return int(self.item_ids.size)

    @property
    def n_items(self) -> int:
        """Number of items K."""
        return int(self.item_features.shape[0])


def obd_candidate_sets(
    table: OBDTable, rows: Any = None, *, interactions: bool = True
) -> tuple[CandidateSets, tuple[str, ...]]:
    """Candidate vectors ψ_{i,c} of every row (the K items at the row's position).

    Parameters
    ----------
    table : OBDTable
        Decoded folder.
    rows : array-like of int or None, default=None
        Rows to build (all when None).
    interactions : bool, default=True
        Include the user one-hot ⊗ item-feature block (block 4 of the module docstring).

    Returns
    -------
    candidates : CandidateSets
        K candidates per row, candidate c = item c, sparse CSR features.
    feature_names : tuple of str
        Name of every feature column.
    """
    rows = np.arange(table.n_rows) if rows is None else np.asarray(rows, dtype=np.int64)
    n, K = rows.size, table.n_items
    item_of = np.tile(np.arange(K), n)  # candidate c of row i is item c
    row_of = np.repeat(rows, K)
    total = n * K
    eye = sp.identity(K, format="csr")
    blocks = [eye[item_of]]  # 1. item one-hot
    pos_item = (table.positions[row_of] - 1) * K + item_of
    blocks.append(
        sp.csr_matrix(
            (np.ones(total), (np.arange(total), pos_item)), shape=(total, N_POSITIONS * K)
        )
    )
    item_csr = sp.csr_matrix(table.item_features)
    blocks.append(item_csr[item_of])  # 3. item features
    names = [f"item={c}" for c in range(K)]
    names += [f"position={k}&item={c}" for k in range(1, N_POSITIONS + 1) for c in range(K)]
    names += list(table.item_feature_names)
    if interactions:
        blocks.append(_user_item_block(table.user_features[rows], item_csr, K))
        names += [f"{u}&{f}" for u in table.user_feature_names for f in table.item_feature_names]
    blocks.append(sp.csr_matrix(table.affinity[rows].reshape(-1, 1)))  # 5. affinity of candidate c
    names.append("user-item_affinity")
    features = sp.hstack(blocks, format="csr")
    return CandidateSets(features, np.arange(n + 1, dtype=np.int64) * K), tuple(names)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenation of arange(s, s + l) for every (s, l)."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if ends.size else 0)


def _user_item_block(users: sp.csr_matrix, items: sp.csr_matrix, K: int) -> sp.csr_matrix:
    """Row-wise Kronecker product: row (i, c) = users[i] ⊗ items[c], for all c of every row i."""
    n, d_u = users.shape
    d_i = items.shape[1]
    u_nnz = np.diff(users.indptr)
    i_nnz = np.diff(items.indptr)
    item_of = np.tile(np.arange(K), n)
    # level 1: (candidate (i, c), user entry s), ordered by candidate then s
    u_len = np.repeat(u_nnz, K)
    s = _ranges(np.repeat(users.indptr[:-1], K), u_len)
    c1 = np.repeat(item_of, u_len)
    # level 2: expand every (candidate, s) by the item entries t of item c
    t_len = i_nnz[c1]
    t = _ranges(items.indptr[:-1][c1], t_len)
    s2 = np.repeat(s, t_len)
    indices = users.indices[s2].astype(np.int64) * d_i + items.indices[t]
    data = users.data[s2] * items.data[t]
    indptr = np.concatenate([[0], np.cumsum(u_len * i_nnz[item_of])])
    return sp.csr_matrix((data, indices, indptr), shape=(n * K, d_u * d_i))
