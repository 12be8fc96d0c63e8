"""Train / validation / test splits of a logged-bandit log (DESIGN §2, "split").

By time when the log has timestamps (so that the gate estimates how a policy trained on the
past does on the future), else a seeded random permutation. Only the gate uses the test part.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils import check_random_state

__all__ = ["split_rows", "split_summary"]


def split_rows(
    n: int,
    timestamps: Any,
    *,
    validation_fraction: float = 0.25,
    test_fraction: float = 0.25,
    by_time: bool = True,
    random_state: Any = None,
) -> tuple[str, np.ndarray, np.ndarray, np.ndarray]:
    """Row positions of the train, validation and test parts of an n-row log.

    With timestamps and ``by_time``, rows are ordered by time (ties keep log order) and cut
    at the fractions: the newest ``test_fraction`` of rows form the test part and the
    ``validation_fraction`` before them the validation part. Otherwise a seeded random
    permutation is cut the same way. A log of several partitions is split as their
    concatenation (:func:`poem.log_rows.split_partitioned`).

    Parameters
    ----------
    n : int
        Rows of the log.
    timestamps : array-like of shape (n,) or None
        The rows' timestamps (None: random split).
    validation_fraction : float, default=0.25
        Fraction of rows for validation (hyperparameter selection).
    test_fraction : float, default=0.25
        Fraction of rows for the test part (the gate).
    by_time : bool, default=True
        Split by time when the log has timestamps.
    random_state : int, RandomState instance or None, default=None
        Seed of the random split.

    Returns
    -------
    method : {"time", "random"}
    train_rows, validation_rows, test_rows : ndarray of int
        Sorted row positions, each part at least one row.

    Raises
    ------
    ValueError
        If the fractions are outside (0, 1), sum to 1 or more, or leave a part empty.
    """
    for name, frac in (
        ("validation_fraction", validation_fraction),
        ("test_fraction", test_fraction),
    ):
        if not 0 < frac < 1:
            raise ValueError(f"{name} must be in (0, 1), got {frac!r}")
    if validation_fraction + test_fraction >= 1:
        raise ValueError(
            "validation_fraction + test_fraction must be < 1, "
            f"got {validation_fraction + test_fraction:g}"
        )
    n_test = int(round(test_fraction * n))
    n_val = int(round(validation_fraction * n))
    n_train = n - n_test - n_val
    if min(n_train, n_val, n_test) < 1:
        raise ValueError(
            f"cannot split {n} rows into train/validation/test with fractions "
            f"{1 - validation_fraction - test_fraction:g}/{validation_fraction:g}/"
            f"{test_fraction:g}: a part is empty"
        )
    if by_time and timestamps is not None:
        method, order = "time", np.argsort(timestamps, kind="stable")
    else:
        method, order = "random", check_random_state(random_state).permutation(n)
    return method, *(np.sort(part) for part in np.split(order, [n_train, n_train + n_val]))


def split_summary(method: str, rows: tuple, timestamps: Any) -> dict[str, Any]:
    """Row counts, method and time boundaries of a split (JSON-serialisable, for tracking).

    ``rows`` are the train, validation and test row positions; ``timestamps`` the source
    log's (used only when ``method == "time"``).
    """
    out: dict[str, Any] = {"split_method": method}
    for name, part in zip(("train", "validation", "test"), rows, strict=True):
        out[f"n_{name}"] = int(part.size)
    if method == "time":
        for name, part in zip(("train", "validation", "test"), rows, strict=True):
            out[f"{name}_start"] = str(timestamps[part].min())
            out[f"{name}_end"] = str(timestamps[part].max())
    return out
