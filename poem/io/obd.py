"""Open Bandit Dataset (ZOZOTOWN, Saito et al. 2021, arXiv:2008.07146) → :class:`LoggedBandit`.

Files: ``<data_dir>/obd/<behavior_policy>/<campaign>/<campaign>.csv`` and ``item_context.csv``
beside it, ``behavior_policy`` ∈ {``"random"``, ``"bts"``}, ``campaign`` ∈ {``"all"``, ``"men"``,
``"women"``}. Each CSV row is one displayed recommendation: ``timestamp``, ``item_id`` (0..K−1),
``position`` (1..3), ``click`` (0/1), ``propensity_score`` (the logger's probability of showing
that item at that position), ``user_feature_0..3`` (hashed categoricals) and
``user-item_affinity_0..K-1``; ``item_context.csv`` holds ``item_feature_0`` (float) and
``item_feature_1..3`` (hashed categoricals) per item. Hashes differ between the two loggers'
folders, so categorical codes are only comparable within one folder.

Mapping: row i is the decision "which of the K items goes to the row's position kᵢ". Its action
is ``item_id``, its propensity ``propensity_score`` bit for bit (exactly π₀(item | kᵢ); each
slot shows one item, so Σ_items π₀(item | k) = 1), its loss δᵢ = −clickᵢ with bounds [−1, 0]
(:meth:`LoggedBandit.from_rewards`, reward bounds [0, 1]). Row order, timestamps (UTC) and the
CSV's index (as event ids) are kept.

``family="candidates"`` (items × positions): row i's candidate set is the K items in ``item_id``
order, so the action index *is* the item id. The (sparse) vector of candidate c for row i
stacks:

1. ``item=c`` — item one-hot (K columns);
2. ``position=k&item=c`` — position × item one-hot (3K columns), so one linear policy can
   prefer different items in different slots (any context-free ranking policy's per-slot
   marginals are then representable exactly);
3. item features: ``item_feature_0`` and the one-hot codes of ``item_feature_1..3``;
4. ``<user one-hot>&<item feature>`` — user one-hot ⊗ item features, when ``interactions=True``;
5. ``user-item_affinity`` — the row's affinity for candidate c.

``family="discrete"``: one log per position (``position=1``, ``2`` or ``3``); contexts are the
user one-hot codes followed by the K user–item affinities, ``n_actions = K``, action ``item_id``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import scipy.sparse as sp

from poem.data import LoggedBandit
from poem.exceptions import InvalidLogError, Violation
from poem.io._metadata import invalid_log
from poem.io._obd_features import N_POSITIONS, OBDTable, obd_candidate_sets

__all__ = [
    "BEHAVIOR_POLICIES",
    "CAMPAIGNS",
    "N_POSITIONS",
    "OBDTable",
    "obd_to_log",
    "read_obd",
    "read_obd_table",
]

BEHAVIOR_POLICIES = ("random", "bts")
CAMPAIGNS = ("all", "men", "women")
_USER_COLUMNS = tuple(f"user_feature_{j}" for j in range(4))
_ITEM_CATEGORICAL = tuple(f"item_feature_{j}" for j in range(1, 4))


def _check_columns(frame: pd.DataFrame, required: list[str], path: Path) -> None:
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InvalidLogError(
            [Violation(c, 0, len(frame), (), f"column is missing from {path}") for c in missing]
        )


def _parse_floats(column: pd.Series, name: str, row_index: np.ndarray) -> np.ndarray:
    """float() of every text entry; InvalidLogError naming the rows that are not numbers."""
    values = np.empty(len(column))
    bad = []
    for k, text in enumerate(column.tolist()):
        try:
            values[k] = float(text)
        except (TypeError, ValueError):
            values[k] = np.nan
            bad.append(k)
    if bad:
        rows = tuple(row_index[bad][:5].tolist())
        raise InvalidLogError([Violation(name, len(bad), len(column), rows, "are not numbers")])
    return values


def _one_hot(frame: pd.DataFrame, columns: tuple[str, ...]) -> tuple[sp.csr_matrix, list[str]]:
    """One-hot codes of categorical columns (categories sorted, per file); missing values raise."""
    missing = [
        Violation(
            col, int(bad.sum()), bad.size, tuple(frame.index[bad][:5].tolist()), "are missing"
        )
        for col in columns
        if (bad := frame[col].isna().to_numpy()).any()
    ]
    if missing:
        raise InvalidLogError(missing)
    blocks, names = [], []
    for col in columns:
        codes, cats = pd.factorize(frame[col].astype(str), sort=True)
        n = codes.size
        blocks.append(sp.csr_matrix((np.ones(n), (np.arange(n), codes)), shape=(n, cats.size)))
        names.extend(f"{col}={c}" for c in cats)
    return sp.hstack(blocks, format="csr"), names


def read_obd_table(
    data_dir: str | Path, behavior_policy: str = "random", campaign: str = "all"
) -> OBDTable:
    """Read one OBD folder into an :class:`OBDTable`.

    Parameters
    ----------
    data_dir : str or Path
        Folder holding ``obd/`` (e.g. ``../shared/data``) or the ``obd`` folder itself.
    behavior_policy : {"random", "bts"}, default="random"
        Logging policy folder.
    campaign : {"all", "men", "women"}, default="all"
        Campaign folder.

    Returns
    -------
    OBDTable
        Decoded arrays.

    Raises
    ------
    ValueError
        If ``behavior_policy`` or ``campaign`` is not a known folder name.
    FileNotFoundError
        If a CSV file is absent.
    InvalidLogError
        If required columns are missing, item ids fall outside the item table or positions
        outside 1..3 (each with counts and example rows).
    """
    if behavior_policy not in BEHAVIOR_POLICIES:
        raise ValueError(
            f"behavior_policy must be one of {BEHAVIOR_POLICIES}, got {behavior_policy!r}"
        )
    if campaign not in CAMPAIGNS:
        raise ValueError(f"campaign must be one of {CAMPAIGNS}, got {campaign!r}")
    root = Path(data_dir)
    if (root / "obd").is_dir():
        root = root / "obd"
    folder = root / behavior_policy / campaign
    log_path, item_path = folder / f"{campaign}.csv", folder / "item_context.csv"
    for path in (log_path, item_path):
        if not path.is_file():
            raise FileNotFoundError(f"OBD file {path} not found")
    # propensities are parsed from their text by Python's correctly rounded float()
    frame = pd.read_csv(log_path, index_col=0, dtype={"propensity_score": str})
    items = pd.read_csv(item_path, index_col=0)
    _check_columns(items, ["item_id", "item_feature_0", *_ITEM_CATEGORICAL], item_path)
    n_items = len(items)
    if not np.array_equal(items["item_id"].to_numpy(), np.arange(n_items)):
        raise invalid_log("item_id", n_items, f"in {item_path} must be 0..{n_items - 1} in order")
    affinity_cols = [f"user-item_affinity_{c}" for c in range(n_items)]
    base = ["timestamp", "item_id", "position", "click", "propensity_score", *_USER_COLUMNS]
    _check_columns(frame, base + affinity_cols, log_path)

    row_index = frame.index.to_numpy()
    item_ids = frame["item_id"].to_numpy()
    positions = frame["position"].to_numpy()
    violations = []
    for column, bad, message in (
        (
            "item_id",
            (item_ids < 0) | (item_ids >= n_items),
            f"outside the item table 0..{n_items - 1}",
        ),
        ("position", (positions < 1) | (positions > N_POSITIONS), f"outside 1..{N_POSITIONS}"),
    ):
        if bad.any():
            violations.append(
                Violation(
                    column, int(bad.sum()), bad.size, tuple(row_index[bad][:5].tolist()), message
                )
            )
    if violations:
        raise InvalidLogError(violations)

    user_features, user_names = _one_hot(frame, _USER_COLUMNS)
    item_cat, item_names = _one_hot(items, _ITEM_CATEGORICAL)
    item_features = np.hstack([items[["item_feature_0"]].to_numpy(float), item_cat.toarray()])
    timestamps = pd.to_datetime(frame["timestamp"], utc=True).dt.tz_convert(None)
    return OBDTable(
        behavior_policy=behavior_policy,
        campaign=campaign,
        row_index=row_index,
        timestamps=timestamps.to_numpy(dtype="datetime64[ns]"),
        item_ids=item_ids.astype(np.int64),
        positions=positions.astype(np.int64),
        clicks=frame["click"].to_numpy(),
        propensities=_parse_floats(frame["propensity_score"], "propensity_score", row_index),
        user_features=user_features,
        user_feature_names=tuple(user_names),
        affinity=frame[affinity_cols].to_numpy(float),
        item_features=item_features,
        item_feature_names=("item_feature_0", *item_names),
    )


def obd_to_log(
    table: OBDTable,
    *,
    family: str = "candidates",
    position: int | None = None,
    interactions: bool = True,
) -> LoggedBandit:
    """Map an :class:`OBDTable` to a :class:`LoggedBandit` (mapping in the module docstring).

    Parameters
    ----------
    table : OBDTable
        Decoded folder.
    family : {"candidates", "discrete"}, default="candidates"
        Target policy family.
    position : int or None, default=None
        Keep only rows shown at this slot (1, 2 or 3). Required for ``family="discrete"``;
        for candidates, None keeps every row.
    interactions : bool, default=True
        Candidates only: include the user one-hot ⊗ item-feature block.

    Returns
    -------
    LoggedBandit
        Losses δᵢ = −clickᵢ with bounds [−1, 0]; propensities exactly ``propensity_score``;
        event ids = the CSV index; timestamps in UTC.

    Raises
    ------
    ValueError
        If ``family`` is unknown or ``position`` is invalid for it.
    """
    if family not in ("candidates", "discrete"):
        raise ValueError(f"family must be 'candidates' or 'discrete', got {family!r}")
    if position is None and family == "discrete":
        raise ValueError(
            "position must be 1, 2 or 3 for the discrete family (one log per position)"
        )
    if position is not None and position not in range(1, N_POSITIONS + 1):
        raise ValueError(f"position must be 1, 2 or 3, got {position!r}")
    rows = (
        np.arange(table.n_rows) if position is None else np.flatnonzero(table.positions == position)
    )
    common = {
        "rewards": table.clicks[rows],
        "reward_bounds": (0.0, 1.0),
        "actions": table.item_ids[rows],
        "propensities": table.propensities[rows],
        "timestamps": table.timestamps[rows],
        "event_ids": table.row_index[rows],
        "logging_model_version": f"obd/{table.behavior_policy}/{table.campaign}",
    }
    if family == "discrete":
        contexts = np.hstack([table.user_features[rows].toarray(), table.affinity[rows]])
        names = (
            *table.user_feature_names,
            *(f"user-item_affinity_{c}" for c in range(table.n_items)),
        )
        return LoggedBandit.from_rewards(
            contexts=contexts,
            family="discrete",
            n_actions=table.n_items,
            feature_names=names,
            **common,
        )
    candidates, names = obd_candidate_sets(table, rows, interactions=interactions)
    return LoggedBandit.from_rewards(
        contexts=None, family="candidates", candidates=candidates, feature_names=names, **common
    )


def read_obd(
    data_dir: str | Path,
    behavior_policy: str = "random",
    campaign: str = "all",
    *,
    family: str = "candidates",
    position: int | None = None,
    interactions: bool = True,
) -> LoggedBandit:
    """Read one OBD folder as a :class:`LoggedBandit` (:func:`read_obd_table`, :func:`obd_to_log`).

    Parameters
    ----------
    data_dir, behavior_policy, campaign
        As in :func:`read_obd_table`.
    family, position, interactions
        As in :func:`obd_to_log`.

    Returns
    -------
    LoggedBandit
        The mapped log.
    """
    table = read_obd_table(data_dir, behavior_policy, campaign)
    return obd_to_log(table, family=family, position=position, interactions=interactions)
