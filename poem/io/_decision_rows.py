"""Checks of served decisions before they enter the decision log (:mod:`poem.io.decisions`).

Each function refuses bad rows with a ``ValueError`` naming the field, the count and up to five
event ids, so one bad request never reaches the buffer; :func:`ids_on_disk` reads the event ids
already written to a ``date=`` folder (the decision log's exactly-once check).
"""

from __future__ import annotations

import datetime as _dt
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from poem.io._folder import READ_OPTIONS, scan_log_folder

__all__ = [
    "check_future",
    "check_propensities",
    "feature_matrix",
    "ids_on_disk",
    "served_min_propensity",
    "utc_naive",
]

logger = logging.getLogger(__name__)


def utc_naive(values: Any, event_ids: Any = None) -> np.ndarray:
    """Decision times as naive UTC ``datetime64[ns]``: offsets converted, naive values are UTC.

    Raises
    ------
    ValueError
        Naming the field ``timestamp``, the count and up to five event ids of the values that
        are missing or cannot be read as a date and time.
    """
    raw = pd.Series(values).reset_index(drop=True)
    try:
        if raw.dtype.kind in "OSU" or isinstance(raw.dtype, pd.StringDtype):
            ts = pd.to_datetime(
                raw.map(lambda v: v.isoformat() if hasattr(v, "isoformat") else v),
                utc=True,
                errors="coerce",
                format="ISO8601",
            )
        else:
            ts = pd.to_datetime(raw, utc=True, errors="coerce")
    except (TypeError, ValueError, OverflowError):
        ts = pd.Series(pd.NaT, index=raw.index, dtype="datetime64[ns, UTC]")
    bad = ts.isna().to_numpy()
    if bad.any():
        ids = np.arange(len(raw)) if event_ids is None else np.asarray(event_ids)
        raise ValueError(
            f"decision log: timestamp: {int(bad.sum())} of {len(raw)} decisions have no "
            f"readable time (ISO 8601 expected; naive values are UTC), e.g. event ids "
            f"{ids[bad][:5].tolist()} with {raw[bad].head(5).tolist()}"
        )
    return ts.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]")


def served_min_propensity(
    family: str, exploration_floor: float, n_actions: int | None = None
) -> float | None:
    r"""The smallest probability the served distribution can give any action.

    The exploration floor ε guarantees it (:mod:`poem.policies`): discrete and candidate sets
    serve :math:`(1 - K\varepsilon)\pi_w + \varepsilon \ge \varepsilon` per action; the
    multilabel family floors each of the q labels, so a label vector has probability at
    least :math:`\varepsilon^q`.

    Parameters
    ----------
    family : {"discrete", "multilabel", "candidates"}
        Action structure.
    exploration_floor : float
        ε of the served policy.
    n_actions : int or None
        Number of labels q (multilabel).

    Returns
    -------
    float or None
        The guaranteed minimum in (0, 1]; None without a floor (no guarantee).
    """
    eps = float(exploration_floor)
    if not eps > 0:
        return None
    if family == "multilabel":
        if n_actions is None:
            raise ValueError("n_actions (labels q) is required for the multilabel family")
        value = eps ** int(n_actions)
        return value if value > 0 else None
    return eps


def check_propensities(frame: pd.DataFrame, min_propensity: float | None) -> None:
    """Refuse propensities outside (0, 1] or below the served minimum (naming event ids)."""
    propensity = pd.to_numeric(frame["propensity"], errors="coerce").to_numpy(np.float64)
    bad = ~np.isfinite(propensity) | (propensity <= 0) | (propensity > 1)
    if bad.any():
        examples = frame.loc[bad, "event_id"].head(5).tolist()
        raise ValueError(
            f"decision log: propensity: {int(bad.sum())} of {len(frame)} decisions outside "
            f"(0, 1] or not a number, e.g. event ids {examples}; a decision without a "
            "valid propensity cannot be learned from"
        )
    floor = min_propensity
    low = propensity < floor * (1 - 1e-9) if floor is not None else np.zeros(len(frame), bool)
    if low.any():
        raise ValueError(
            f"decision log: propensity: {int(low.sum())} of {len(frame)} decisions below the "
            f"served policy's min_propensity {floor:g}, e.g. event ids "
            f"{frame.loc[low, 'event_id'].head(5).tolist()}; they were not served by it"
        )


def feature_matrix(
    requests: pd.DataFrame, frame: pd.DataFrame, feature_names: tuple[str, ...]
) -> np.ndarray:
    """The feature matrix of the request, every non-finite or non-numeric value named."""
    block = requests[list(feature_names)]
    numeric = block.apply(pd.to_numeric, errors="coerce")
    X = numeric.to_numpy(dtype=np.float64, na_value=np.nan)
    finite = np.isfinite(X)
    if finite.all():
        return X
    rows = ~finite.all(axis=1)
    ids = (
        requests["event_id"].astype(str).to_numpy()
        if "event_id" in requests.columns
        else frame["event_id"].to_numpy()
        if len(frame) == len(requests)
        else np.arange(len(requests))
    )
    columns = [feature_names[j] for j in np.flatnonzero(~finite.all(axis=0))]
    raise ValueError(
        f"decision log: features {columns[:10]}: {int(rows.sum())} of {len(requests)} "
        f"request rows are NaN, infinite or not numbers, e.g. event ids "
        f"{list(dict.fromkeys(ids[rows].tolist()))[:5]}; such a row cannot be learned from "
        "(nothing added)"
    )


def check_future(frame: pd.DataFrame, max_future: _dt.timedelta | None) -> None:
    """Refuse decisions dated more than ``max_future`` after the wall clock."""
    if max_future is None:
        return
    limit = utc_naive([pd.Timestamp.now(tz="UTC")])[0] + np.timedelta64(max_future)
    ahead = frame["timestamp"].to_numpy() > limit
    if ahead.any():
        raise ValueError(
            f"decision log: timestamp: {int(ahead.sum())} of {len(frame)} decisions are "
            f"dated more than {max_future} after the clock (e.g. event ids "
            f"{frame.loc[ahead, 'event_id'].head(5).tolist()} at "
            f"{[str(t) for t in frame.loc[ahead, 'timestamp'].head(5)]}); check the serving clock, "
            "or raise max_future"
        )


def ids_on_disk(folder: Path, cache: dict[str, frozenset]) -> frozenset:
    """Event ids already in a ``date=`` folder; ``cache`` keeps each file's ids (read once)."""
    if not folder.is_dir():
        return frozenset()
    ids: set = set()
    for file in scan_log_folder(folder, within=folder.parent).files:
        key = str(file)
        if key not in cache:
            try:
                column = pq.read_table(file, columns=["event_id"], **READ_OPTIONS)
            except (pa.ArrowException, OSError, KeyError, ValueError) as exc:
                logger.warning("decision log: cannot read the event ids of %s (%s)", file, exc)
                continue
            cache[key] = frozenset(column.column(0).cast(pa.string()).to_pylist())
        ids |= cache[key]
    return frozenset(ids)
