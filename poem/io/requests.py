"""Parsing of serving requests: a request table and its params into policy inputs.

Pure pandas/numpy (no MLflow), so the serving pyfunc (``deploy/pyfunc.py``) stays a thin
wrapper: every problem raises :class:`InvalidRequestError` naming the column, the count and up
to five row positions, which the pyfunc turns into HTTP 400 (STYLE §6). The request layout is
documented in the pyfunc's module docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from poem.data import CandidateSets

__all__ = [
    "EVENT_ID",
    "MAX_REQUEST_BYTES",
    "MAX_REQUEST_ROWS",
    "UNSEEDED",
    "InvalidRequestError",
    "RequestTooLargeError",
    "check_body_size",
    "check_columns",
    "check_row_count",
    "check_score_range",
    "check_served_propensities",
    "group_candidates",
    "parse_event_ids",
    "parse_features",
    "parse_params",
]

EVENT_ID = "event_id"
UNSEEDED = -1  # the ``seed`` param's default: a fresh OS-entropy generator per request
_N_EXAMPLES = 5
MAX_REQUEST_ROWS = 10_000
"""Default most rows of one request (``POEM_SERVING_MAX_ROWS`` in the served model)."""
MAX_REQUEST_BYTES = 8 << 20
"""Default largest request body, 8 MiB (``POEM_SERVING_MAX_BODY_BYTES``): parsing JSON costs
~0.4 s per MB, so a 60 MB body held the server 24 s."""


class InvalidRequestError(ValueError):
    """A malformed serving request; the message names the column, count and rows, never values."""


class RequestTooLargeError(InvalidRequestError):
    """A request over the row or body limit (HTTP 413 for the body)."""


def _refuse_over(count: int, limit: int, template: str) -> None:
    """Raise :class:`RequestTooLargeError` with ``template`` filled when ``count > limit``."""
    if count > limit:
        raise RequestTooLargeError(template.format(count=count, limit=limit))


def check_body_size(n_bytes: int, limit: int) -> None:
    """Refuse a body of more than ``limit`` bytes, before it is parsed.

    Raises
    ------
    RequestTooLargeError
        Naming both sizes and what to do.
    """
    _refuse_over(
        n_bytes,
        limit,
        "the request body has {count:,} bytes, more than the {limit:,} this server accepts "
        "(POEM_SERVING_MAX_BODY_BYTES); send fewer rows per request",
    )


def check_row_count(n_rows: int, limit: int) -> None:
    """Refuse a request of more than ``limit`` rows.

    Raises
    ------
    RequestTooLargeError
        Naming both counts and what to do.
    """
    _refuse_over(
        n_rows,
        limit,
        "the request has {count:,} rows, more than the {limit:,} this server accepts "
        "per request (POEM_SERVING_MAX_ROWS); split it",
    )


def check_columns(columns: Sequence[Any], feature_names: Sequence[str]) -> None:
    """Refuse request columns that are neither a feature nor ``event_id``.

    A misspelt ``eventid`` would otherwise be dropped and a fresh id returned: the client's ids
    would be lost.

    Raises
    ------
    InvalidRequestError
        Naming the unknown columns (up to 10) and the expected ones.
    """
    expected = [EVENT_ID, *feature_names]
    allowed = set(expected)
    unknown = [str(c) for c in columns if str(c) not in allowed]
    if unknown:
        shown = expected if len(expected) <= 12 else [*expected[:12], "…"]
        raise InvalidRequestError(
            f"{len(unknown)} unknown request column(s): {unknown[:10]}"
            f"{' …' if len(unknown) > 10 else ''}; expected {shown} (event_id optional, "
            "except for candidate sets)"
        )


def _rows(mask: np.ndarray) -> str:
    idx = np.flatnonzero(mask)[:_N_EXAMPLES]
    return ", ".join(str(int(i)) for i in idx)


def parse_features(frame: pd.DataFrame, feature_names: Sequence[str]) -> np.ndarray:
    """The (n, d) float matrix of the named feature columns, every problem named.

    Raises
    ------
    InvalidRequestError
        Missing (all named, up to 10), non-numeric (count and rows per column) or NaN/inf
        feature columns.
    """
    names = list(feature_names)
    columns = frame.columns
    if columns.is_unique:
        positions = columns.get_indexer(names)
        missing = [n for n, i in zip(names, positions, strict=True) if i < 0]
    else:
        missing = [n for n in names if n not in columns]
    if missing:
        raise InvalidRequestError(
            f"{len(missing)} of {len(names)} feature columns are missing from the request: "
            f"{missing[:10]}{' …' if len(missing) > 10 else ''}"
        )
    if list(columns) == names:  # the usual case after MLflow's schema enforcement
        block = frame
    elif columns.is_unique:
        block = frame.iloc[:, positions]
    else:
        block = frame[names]
    problems = []
    for name, dtype in zip(names, block.dtypes, strict=True):
        if getattr(dtype, "kind", "O") in "biuf":
            continue
        col = block[name]
        numeric = pd.to_numeric(col, errors="coerce")
        bad = (numeric.isna() & col.notna()).to_numpy()
        if bad.any():
            problems.append(
                f"column {name!r} has {int(bad.sum())} non-numeric value(s) (rows {_rows(bad)})"
            )
    if problems:
        raise InvalidRequestError("feature columns must be numeric: " + "; ".join(problems[:10]))
    try:
        X = block.to_numpy(dtype=np.float64, na_value=np.nan)
    except (TypeError, ValueError) as exc:
        raise InvalidRequestError(f"feature columns must be numeric ({exc})") from exc
    finite = np.isfinite(X)
    if not finite.all():
        bad_cols = np.flatnonzero(~finite.all(axis=0))
        parts = [
            f"{names[j]!r}: {int((~finite[:, j]).sum())} row(s) (rows {_rows(~finite[:, j])})"
            for j in bad_cols[:10]
        ]
        raise InvalidRequestError(
            f"{len(bad_cols)} feature column(s) contain NaN or infinite values: " + "; ".join(parts)
        )
    return X


_MAX_SCORE = 1e300  # scores beyond this overflow exp/sums; no trained policy sees such inputs


def check_score_range(X: np.ndarray, coef: np.ndarray, temperature: float) -> None:
    r"""Reject rows whose scores w·x/α could overflow (finite but huge features, e.g. ±1e308).

    Uses the bound :math:`|w_a \cdot x / \alpha| \le \|x\|_\infty \max_a \|w_a\|_1 / \alpha`
    (plus the intercept), so the check costs one pass over the request.

    Raises
    ------
    InvalidRequestError
        Naming the count and up to five rows.
    """
    w = np.abs(np.asarray(coef, dtype=np.float64))
    w_norm = float(w.reshape(-1, w.shape[-1]).sum(axis=1).max()) if w.size else 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        scale = (np.abs(X).max(axis=1, initial=0.0) + 1.0) * (w_norm / float(temperature))
    bad = ~np.isfinite(scale) | (scale > _MAX_SCORE)
    if bad.any():
        raise InvalidRequestError(
            f"{int(bad.sum())} of {X.shape[0]} request row(s) have feature values so large that "
            f"the policy's scores overflow (rows {_rows(bad)}); scale the features to the range "
            "the policy was trained on"
        )


def check_served_propensities(propensities: Any) -> np.ndarray:
    """The served propensities, each finite and in (0, 1], or one error naming the rows.

    Huge features overflow the scores and give NaN propensities; such a request gets no
    decision, so the decision log never holds a propensity outside (0, 1] (STYLE §6).

    Raises
    ------
    InvalidRequestError
        Naming the count and up to five request positions.
    """
    p = np.asarray(propensities, dtype=np.float64)
    bad = ~np.isfinite(p) | (p <= 0.0) | (p > 1.0)
    if bad.any():
        raise InvalidRequestError(
            f"{int(bad.sum())} of {p.size} request(s) have features so large that the policy's "
            f"scores overflow (rows {_rows(bad)}): no valid propensity in (0, 1]; scale the "
            "features to the range the policy was trained on"
        )
    return p


def parse_event_ids(
    frame: pd.DataFrame, required: bool, *, unique: bool = False
) -> np.ndarray | None:
    """The ``event_id`` column as strings; None when absent and not ``required``.

    Parameters
    ----------
    frame : DataFrame
        The request.
    required : bool
        Whether the column must be present (candidate sets).
    unique : bool, default=False
        Whether every row is its own decision, so an id may occur once (discrete and
        multilabel requests; candidate rows share their request's id).

    Raises
    ------
    InvalidRequestError
        A required column is missing, values are empty, or (``unique``) an id is repeated:
        the decision log could not tell the decisions apart.
    """
    if EVENT_ID not in frame.columns:
        if required:
            raise InvalidRequestError(
                f"candidate-set requests need an {EVENT_ID!r} column (long format: one row per "
                "candidate, the rows of one request contiguous)"
            )
        return None
    ids = frame[EVENT_ID]
    bad = ids.isna().to_numpy() | (ids.astype(str).str.len() == 0).to_numpy()
    if bad.any():
        raise InvalidRequestError(
            f"column {EVENT_ID!r} has {int(bad.sum())} empty value(s) (rows {_rows(bad)})"
        )
    values = ids.astype(str).to_numpy()
    if unique:
        repeated = pd.Series(values).duplicated(keep=False).to_numpy()
        if repeated.any():
            names = list(dict.fromkeys(values[repeated].tolist()))
            raise InvalidRequestError(
                f"column {EVENT_ID!r} repeats {len(names)} id(s) within the request: "
                f"{names[:_N_EXAMPLES]} (rows {_rows(repeated)}); every decision needs its own id"
            )
    return values


def group_candidates(
    X: np.ndarray, ids: np.ndarray, exploration_floor: float
) -> tuple[CandidateSets, np.ndarray]:
    """Candidate sets from long-format rows (one block of rows per request id), and the ids.

    Raises
    ------
    InvalidRequestError
        A request's rows are not contiguous, or a set has more than 1/ε candidates.
    """
    codes, uniques = pd.factorize(ids, sort=False)
    steps = np.diff(codes)
    if np.any(steps < 0):
        split = np.flatnonzero(steps < 0)
        offenders = sorted({str(ids[i + 1]) for i in split})
        raise InvalidRequestError(
            f"candidate rows of {len(offenders)} request(s) are not contiguous in column "
            f"{EVENT_ID!r} (e.g. {offenders[:_N_EXAMPLES]}); send each request's candidates as "
            "one block"
        )
    sizes = np.bincount(codes, minlength=len(uniques))
    floor = exploration_floor
    too_big = sizes * floor > 1.0 + 1e-12
    if floor > 0 and too_big.any():
        raise InvalidRequestError(
            f"{int(too_big.sum())} request(s) have more than {int(np.floor(1 / floor))} "
            f"candidates, the most the exploration floor ε={floor:g} allows (kε ≤ 1), e.g. "
            f"{[str(u) for u in np.asarray(uniques)[too_big][:_N_EXAMPLES]]}"
        )
    return CandidateSets.from_sizes(X, sizes), np.asarray(uniques).astype(str)


def parse_params(params: dict[str, Any] | None) -> tuple[int | None, bool]:
    """``(seed or None, return_distribution)`` from the request params.

    Raises
    ------
    InvalidRequestError
        Unknown params, a seed that is not an integer ≥ −1, a non-boolean flag.
    """
    params = dict(params or {})
    unknown = sorted(set(params) - {"seed", "return_distribution"})
    if unknown:
        raise InvalidRequestError(
            f"unknown params {unknown}; allowed: ['return_distribution', 'seed']"
        )
    seed = UNSEEDED if params.get("seed") is None else params["seed"]
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < UNSEEDED:
        raise InvalidRequestError(
            f"param 'seed' must be an integer ≥ 0 (or -1 for unseeded), got {seed!r}"
        )
    flag = params.get("return_distribution", False)
    if not isinstance(flag, (bool, np.bool_)):
        raise InvalidRequestError(f"param 'return_distribution' must be a boolean, got {flag!r}")
    return (None if seed == UNSEEDED else int(seed)), bool(flag)
