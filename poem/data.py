"""The logged-bandit data model: :class:`LoggedBandit` and its invariants.

A log holds, for each row i, a context xᵢ, the logged action yᵢ, its loss δᵢ and the
propensity pᵢ = π₀(yᵢ|xᵢ) (DESIGN §3), for one of three action structures (:data:`FAMILIES`):
``"discrete"`` (an action index), ``"multilabel"`` (a 0/1 vector over q labels) and
``"candidates"`` (an index into the row's own candidate list, :class:`CandidateSets`;
contexts optional, not used by the policy). Rewards are converted to losses exactly once, by
:meth:`LoggedBandit.from_rewards`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from poem.exceptions import InvalidLogError, Violation

__all__ = [
    "FAMILIES",
    "CandidateSets",
    "Exclusion",
    "LoggedBandit",
    "check_logged_bandit",
    "check_loss_bounds",
    "exclude_rows",
    "scale_losses",
]

logger = logging.getLogger(__name__)

FAMILIES = ("discrete", "multilabel", "candidates")
_N_EXAMPLES = 5
_PROPENSITY_HINT = "Propensities must be the logging policy's probability of the logged action"
# smallest propensity whose importance weight 1/p is finite (below it, 1/p overflows to inf)
MIN_PROPENSITY = float(np.finfo(np.float64).tiny)
# largest |loss bound| whose square (sample variances) stays finite in float64
MAX_ABS_LOSS_BOUND = 1e150
_OPTIONAL_ROWS = ("timestamps", "event_ids", "logging_distribution")  # per-row, may be None


def _readonly(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        a.setflags(write=False)
    return a


def _as_matrix(x: Any, name: str) -> np.ndarray | sp.csr_matrix:
    if sp.issparse(x):
        return sp.csr_matrix(x, dtype=np.float64)
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
    arr = np.asarray(arr, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be 2-dimensional (n_samples, n_features), got shape {arr.shape}"
        )
    return arr


@dataclass(frozen=True, eq=False)
class CandidateSets:
    """Ragged per-row candidate feature vectors ψ_{i,c} (the candidate-set family).

    Parameters
    ----------
    features : array-like or sparse matrix of shape (n_candidates_total, n_features)
        Candidate feature vectors of all rows, stacked row after row, i.e. ψ_{i,c}.
    offsets : array-like of shape (n_rows + 1,)
        Row i owns candidates ``offsets[i]:offsets[i+1]``; ``offsets[0] == 0``.
    """

    features: Any
    offsets: np.ndarray

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "features", _readonly(_as_matrix(self.features, "candidate features"))
        )
        offsets = np.asarray(self.offsets)
        if offsets.ndim != 1 or offsets.size < 1 or offsets.dtype.kind not in "iu":
            raise ValueError("candidate offsets must be a 1-d integer array of length n_rows + 1")
        offsets = offsets.astype(np.int64)
        if offsets[0] != 0 or offsets[-1] != self.features.shape[0]:
            raise ValueError(
                f"candidate offsets must start at 0 and end at the number of candidate rows "
                f"({self.features.shape[0]}), got {offsets[0]} and {offsets[-1]}"
            )
        if np.any(np.diff(offsets) < 0):
            raise ValueError("candidate offsets must be non-decreasing")
        object.__setattr__(self, "offsets", _readonly(offsets))

    @classmethod
    def from_sizes(cls, features: Any, sizes: Any) -> CandidateSets:
        """Build from stacked features and the number of candidates of each row."""
        return cls(features, np.concatenate([[0], np.cumsum(np.asarray(sizes, dtype=np.int64))]))

    @property
    def n_rows(self) -> int:
        """Number of rows (decisions)."""
        return int(self.offsets.size - 1)

    @property
    def n_features(self) -> int:
        """Dimension of each candidate vector."""
        return int(self.features.shape[1])

    @property
    def sizes(self) -> np.ndarray:
        """Number of candidates kᵢ of each row, shape (n_rows,)."""
        return np.diff(self.offsets)

    @property
    def row_of_candidate(self) -> np.ndarray:
        """Row index of every stacked candidate, shape (n_candidates_total,)."""
        return np.repeat(np.arange(self.n_rows), self.sizes)

    def take(self, rows: Any) -> CandidateSets:
        """Return the candidate sets of the given rows, in that order."""
        rows = np.asarray(rows, dtype=np.int64)
        sizes = self.sizes[rows]
        ends = np.cumsum(sizes)
        idx = np.repeat(self.offsets[rows] - (ends - sizes), sizes) + np.arange(sizes.sum())
        return CandidateSets(self.features[idx], np.concatenate([[0], ends]))


@dataclass(frozen=True)
class Exclusion:
    """Record of rows removed from a log by :func:`exclude_rows`."""

    reason: str
    n_rows: int
    row_examples: tuple = ()


@dataclass(frozen=True, eq=False)
class LoggedBandit:
    """Immutable logged bandit feedback (xᵢ, yᵢ, δᵢ, pᵢ), validated at construction.

    Parameters
    ----------
    contexts : array-like or sparse matrix of shape (n_samples, n_features) or None
        Contexts xᵢ. Required for the discrete and multilabel families.
    actions : array-like of shape (n_samples,) or (n_samples, n_labels)
        Logged actions yᵢ, in the family's form (see the module docstring).
    losses : array-like of shape (n_samples,)
        Observed losses δᵢ (lower is better), inside ``loss_bounds``.
    propensities : array-like of shape (n_samples,)
        Logging probabilities pᵢ = π₀(yᵢ|xᵢ), in (0, 1].
    loss_bounds : tuple of float
        Declared bounds [δ_min, δ_max] of the loss (DESIGN §4.1).
    family : {"discrete", "multilabel", "candidates"}, default="discrete"
        Policy family / action structure.
    n_actions : int or None, default=None
        Number of actions K (discrete) or labels q (multilabel); inferred when None.
    candidates : CandidateSets or None, default=None
        Per-row candidate vectors ψ_{i,c}; required for the candidate-set family.
    timestamps : array-like of shape (n_samples,) or None, default=None
        Decision times (converted to ``datetime64[ns]``).
    event_ids : array-like of shape (n_samples,) or None, default=None
        Unique identifiers of the decisions.
    logging_model_version : str or None, default=None
        Version of the logging policy π₀.
    logging_distribution : array-like of shape (n_samples, n_actions) or None, default=None
        Full logging distribution π₀(·|xᵢ), discrete family only.
    feature_names : tuple of str or None, default=None
        Names of the context (or candidate) features.
    action_ids : tuple of str or None, default=None
        The log's own ids of the actions (discrete): ``action_ids[k]`` is action k. Carried
        to the learned policy's metadata, so the served model answers with them.

    Raises
    ------
    InvalidLogError
        When any invariant of :func:`check_logged_bandit` is violated; all columns are
        checked before raising.
    """

    contexts: Any
    actions: Any
    losses: Any
    propensities: Any
    loss_bounds: tuple[float, float]
    family: str = "discrete"
    n_actions: int | None = None
    candidates: CandidateSets | None = None
    timestamps: Any = None
    event_ids: Any = None
    logging_model_version: str | None = None
    logging_distribution: Any = None
    feature_names: tuple[str, ...] | None = field(default=None)
    action_ids: tuple[str, ...] | None = field(default=None)

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {FAMILIES}, got {self.family!r}")
        set_ = object.__setattr__
        if self.contexts is not None:
            set_(self, "contexts", _readonly(_as_matrix(self.contexts, "contexts")))
        elif self.family != "candidates":
            raise ValueError(f"contexts are required for the {self.family} family")
        if self.family == "candidates" and not isinstance(self.candidates, CandidateSets):
            raise ValueError("the candidates family needs candidates=CandidateSets(...)")
        actions = np.asarray(self.actions)
        finite_floats = actions.dtype.kind == "f" and actions.size and np.all(np.isfinite(actions))
        if actions.dtype.kind == "b" or (finite_floats and np.all(actions == np.round(actions))):
            actions = actions.astype(np.int64)
        set_(self, "actions", _readonly(actions))
        for name in ("losses", "propensities"):
            arr = np.asarray(getattr(self, name))
            if arr.dtype.kind not in "biuf":
                raise TypeError(f"{name} must be numeric, got dtype {arr.dtype}")
            set_(self, name, _readonly(arr.astype(np.float64).reshape(-1)))
        set_(self, "loss_bounds", check_loss_bounds(self.loss_bounds))
        n_actions = None if self.n_actions is None else int(self.n_actions)
        if n_actions is None and self.family == "multilabel" and actions.ndim == 2:
            n_actions = int(actions.shape[1])
        elif n_actions is None and self.family == "discrete" and actions.size:
            n_actions = int(actions.max()) + 1 if actions.dtype.kind in "iu" else None
        set_(self, "n_actions", n_actions)
        if self.timestamps is not None:
            set_(self, "timestamps", _readonly(np.asarray(self.timestamps, dtype="datetime64[ns]")))
        if self.event_ids is not None:
            ids = np.asarray(self.event_ids)
            if ids.dtype.kind in "US":  # as Python objects: "<U{max}" costs n × the longest id
                ids = ids.astype(object)
            set_(self, "event_ids", _readonly(ids))
        if (dist := self.logging_distribution) is not None:
            set_(self, "logging_distribution", _readonly(np.asarray(dist, dtype=np.float64)))
        if self.feature_names is not None:
            set_(self, "feature_names", tuple(str(f) for f in self.feature_names))
        if self.action_ids is not None:
            ids = tuple(str(a) for a in self.action_ids)
            if self.family != "discrete" or len(set(ids)) != len(ids):
                raise ValueError(
                    f"action_ids: distinct ids of a discrete log's actions, got {list(ids)[:5]} "
                    f"for the {self.family} family"
                )
            if n_actions is not None and len(ids) != n_actions:
                raise ValueError(f"action_ids lists {len(ids)} ids for {n_actions} actions")
            set_(self, "action_ids", ids)
        check_logged_bandit(self)

    # -- constructors -------------------------------------------------------------------------
    @classmethod
    def from_rewards(
        cls, *, rewards: Any, reward_bounds: tuple[float, float], **kwargs: Any
    ) -> LoggedBandit:
        """Build a log from rewards: δᵢ = −rewardᵢ, bounds [−r_max, −r_min] (DESIGN §3).

        Parameters
        ----------
        rewards : array-like of shape (n_samples,)
            Observed rewards (higher is better), e.g. clicks.
        reward_bounds : tuple of float
            Declared bounds [r_min, r_max] of the reward.
        **kwargs
            Every other :class:`LoggedBandit` field except ``losses`` and ``loss_bounds``.

        Returns
        -------
        LoggedBandit
            The log with losses.
        """
        r = np.asarray(rewards)
        if r.dtype.kind not in "biuf":
            raise TypeError(f"rewards must be numeric, got dtype {r.dtype}")
        lo, hi = reward_bounds
        return cls(losses=-r.astype(np.float64), loss_bounds=(-float(hi), -float(lo)), **kwargs)

    # -- shape helpers ------------------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        """Number of logged decisions n."""
        return int(self.losses.shape[0])

    @property
    def n_features(self) -> int:
        """Feature dimension used by the policy family."""
        if self.family == "candidates":
            assert self.candidates is not None
            return self.candidates.n_features
        return int(self.contexts.shape[1])

    @property
    def row_ids(self) -> np.ndarray:
        """Event ids when present, else positions 0..n-1 (used in error messages)."""
        return self.event_ids if self.event_ids is not None else np.arange(self.n_rows)

    def scaled_losses(self) -> np.ndarray:
        """Losses mapped to [−1, 0] by :func:`scale_losses` with this log's bounds."""
        return scale_losses(self.losses, self.loss_bounds)

    def take(self, rows: Any) -> LoggedBandit:
        """Return the sub-log of the given row positions (in that order)."""
        rows = np.asarray(rows)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        sub = {"candidates": None if self.candidates is None else self.candidates.take(rows)}
        for name in ("contexts", "actions", "losses", "propensities", *_OPTIONAL_ROWS):
            value = getattr(self, name)
            sub[name] = None if value is None else value[rows]
        return replace(self, **sub)


def scale_losses(losses: Any, loss_bounds: tuple[float, float]) -> np.ndarray:
    r"""Map losses to [−1, 0] (paper §4.3, DESIGN §4.1).

    .. math:: \delta'_i = (\delta_i - \delta_{max}) / (\delta_{max} - \delta_{min})

    where δᵢ is the loss and [δ_min, δ_max] the declared loss bounds.

    Parameters
    ----------
    losses : array-like of shape (n_samples,)
        Losses δᵢ.
    loss_bounds : tuple of float
        Declared bounds (δ_min, δ_max).

    Returns
    -------
    ndarray of shape (n_samples,)
        Scaled losses δ'ᵢ ∈ [−1, 0].
    """
    lo, hi = loss_bounds
    return (np.asarray(losses, dtype=np.float64) - hi) / (hi - lo)


def check_loss_bounds(bounds: Any, name: str = "loss_bounds") -> tuple[float, float]:
    """Return declared bounds as two floats, or raise naming ``name`` and what is wrong.

    Bounds must be two numbers with min < max and ``|bound| <= 1e150``, so that the loss range
    and the squared losses of every variance (DESIGN §4.2) are finite in float64.

    Parameters
    ----------
    bounds : sequence of two numbers
        Declared bounds [min, max], i.e. [δ_min, δ_max] (or reward bounds).
    name : str, default="loss_bounds"
        Key named in the error message.

    Returns
    -------
    tuple of float
        ``(min, max)``.

    Raises
    ------
    ValueError
        When ``bounds`` is not two numbers, is reversed, non-finite or overflowing.
    """
    if isinstance(bounds, (str, bytes)) or not hasattr(bounds, "__len__") or len(bounds) != 2:
        raise ValueError(f"{name} must be two numbers [min, max], got {bounds!r}")
    try:
        lo, hi = (float(b) for b in bounds)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be two numbers [min, max], got {bounds!r}") from None
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise ValueError(f"{name} must be finite, got {list(bounds)!r}")
    if max(abs(lo), abs(hi)) > MAX_ABS_LOSS_BOUND:
        raise ValueError(
            f"{name} {[lo, hi]} overflow: |bound| must be <= {MAX_ABS_LOSS_BOUND:g} so that "
            "squared losses (variances) are finite; rescale the losses"
        )
    if not lo < hi:
        raise ValueError(f"{name} must have min < max, got {[lo, hi]}")
    return lo, hi


def _examples(mask: np.ndarray, row_ids: np.ndarray) -> tuple:
    idx = np.flatnonzero(mask)[:_N_EXAMPLES]
    return tuple(v.item() if hasattr(v, "item") else v for v in row_ids[idx])


def _add_violation(out: list, column, mask, row_ids, message, hint="") -> None:
    """Append the :class:`Violation` of the rows where ``mask`` holds to ``out`` (if any)."""
    mask = np.asarray(mask, dtype=bool)
    n_bad = int(mask.sum())
    if n_bad:
        out.append(
            Violation(column, n_bad, int(mask.size), _examples(mask, row_ids), message, hint)
        )


def _nonfinite_rows(x: Any) -> np.ndarray:
    if sp.issparse(x):
        x = sp.csr_matrix(x)
        bad = ~np.isfinite(x.data)
        rows = np.repeat(np.arange(x.shape[0]), np.diff(x.indptr))
        return np.bincount(rows[bad], minlength=x.shape[0]) > 0
    return ~np.all(np.isfinite(x), axis=1)


def check_logged_bandit(
    log: LoggedBandit, *, min_rows: int = 1, min_distinct_actions: int = 1
) -> LoggedBandit:
    """Check every invariant of a log; raise one error listing all violations.

    Invariants (STYLE §6, DESIGN §4.6 "hard"): at least ``min_rows`` rows; equal lengths;
    finite contexts; integer actions within range for the family (multilabel: 0/1 vectors of
    width ``n_actions``; candidates: inside the row's non-empty candidate set); propensities
    finite and in (0, 1]; losses finite and inside ``loss_bounds``; unique event ids; at least
    ``min_distinct_actions`` distinct actions (discrete and multilabel families).

    Parameters
    ----------
    log : LoggedBandit
        The log to check.
    min_rows : int, default=1
        Minimum number of rows; learners pass 2.
    min_distinct_actions : int, default=1
        Minimum number of distinct logged actions; learners pass 2.

    Returns
    -------
    LoggedBandit
        The same log, for chaining.

    Raises
    ------
    InvalidLogError
        Listing each violated column with the number of bad rows and up to five row ids.
    """
    n = int(np.asarray(log.losses).shape[0])
    if n < max(1, min_rows):
        message = f"the log has {n} row(s); at least {max(1, min_rows)} are needed"
        raise InvalidLogError([Violation("rows", 0, n, (), message)])
    lengths = {"losses": n, "propensities": np.asarray(log.propensities).shape[0]}
    actions = np.asarray(log.actions)
    lengths["actions"] = actions.shape[0] if actions.ndim else 0
    for name in ("contexts", "candidates", *_OPTIONAL_ROWS):
        value = getattr(log, name)
        if value is not None:
            lengths[name] = value.n_rows if name == "candidates" else value.shape[0]
    if len(set(lengths.values())) > 1:
        hint = "All columns must have one entry per row"
        raise InvalidLogError(
            [
                Violation(col, 0, n, (), f"has {length:,} rows but losses has {n:,}", hint)
                for col, length in lengths.items()
                if length != n
            ]
        )

    row_ids = log.event_ids if log.event_ids is not None else np.arange(n)
    violations: list[Violation] = []

    p = log.propensities
    outside = ~(np.isfinite(p) & (p > 0) & (p <= 1))
    _add_violation(violations, "propensity", outside, row_ids, "outside (0, 1]", _PROPENSITY_HINT)
    subnormal = ~outside & (p < MIN_PROPENSITY)
    message = f"below {MIN_PROPENSITY:.3g} (subnormal: the importance weight 1/p overflows)"
    _add_violation(violations, "propensity", subnormal, row_ids, message, _PROPENSITY_HINT)

    d = log.losses
    lo, hi = log.loss_bounds
    finite, nonfinite = np.isfinite(d), "not finite (NaN or inf)"
    hint = "Losses must be observed numbers"
    _add_violation(violations, "loss", ~finite, row_ids, nonfinite, hint)
    tol = 1e-9 * max(1.0, hi - lo)
    out_of_bounds = finite & ((d < lo - tol) | (d > hi + tol))
    message = f"outside the declared loss bounds [{lo:g}, {hi:g}]"
    hint = "Check the loss bounds, or whether rewards were given where losses are declared"
    _add_violation(violations, "loss", out_of_bounds, row_ids, message, hint)

    x = log.contexts
    if x is not None and sp.issparse(x):
        _add_violation(violations, "x_values", _nonfinite_rows(x), row_ids, nonfinite)
    elif x is not None:
        bad = ~np.isfinite(x)
        for j in np.flatnonzero(bad.any(axis=0)):
            _add_violation(violations, f"x_{j}", bad[:, j], row_ids, nonfinite)
    if (cand := log.candidates) is not None:
        rows = np.zeros(n, dtype=bool)
        rows[cand.row_of_candidate[_nonfinite_rows(cand.features)]] = True
        _add_violation(violations, "candidate_features", rows, row_ids, nonfinite)

    violations.extend(_check_actions(log, actions, row_ids, min_distinct_actions))

    if log.event_ids is not None:
        _, first = np.unique(np.asarray(log.event_ids), return_index=True)
        dup_mask = np.ones(n, dtype=bool)
        dup_mask[first] = False
        hint = "Event ids must be unique"
        _add_violation(
            violations, "event_id", dup_mask, row_ids, "repeat an earlier event id", hint
        )
    if log.timestamps is not None:
        _add_violation(violations, "timestamp", np.isnat(log.timestamps), row_ids, "missing (NaT)")
    dist = log.logging_distribution
    if dist is not None and (
        log.family != "discrete" or dist.ndim != 2 or dist.shape[1] != log.n_actions
    ):
        message = "must have shape (n_rows, n_actions) and the discrete family"
        violations.append(Violation("logging_distribution", 0, n, (), message))
    if violations:
        raise InvalidLogError(violations)
    return log


def _check_actions(
    log: LoggedBandit, actions: np.ndarray, row_ids: np.ndarray, min_distinct: int
) -> list[Violation]:
    n = actions.shape[0]
    out: list[Violation] = []
    if actions.dtype.kind not in "iu":
        examples = tuple(row_ids[:_N_EXAMPLES].tolist())
        message = f"are not integers (dtype {actions.dtype})"
        hint = "Actions must be integer ids (or 0/1 label vectors for the multilabel family)"
        return [Violation("action", n, n, examples, message, hint)]
    if log.family == "discrete":
        if actions.ndim != 1:
            message = f"must be one integer per row, got shape {actions.shape}"
            return [Violation("action", n, n, (), message)]
        K = log.n_actions
        outside = (actions < 0) | (actions >= K)
        _add_violation(out, "action", outside, row_ids, f"outside the action range 0..{K - 1}")
        n_distinct = np.unique(actions).size
    elif log.family == "multilabel":
        q = log.n_actions
        if actions.ndim != 2 or actions.shape[1] != q:
            width = actions.shape[1] if actions.ndim == 2 else 1
            hint = "Every multilabel action must be a 0/1 vector of the same width"
            return [Violation("action", n, n, (), f"have width {width}, expected {q} labels", hint)]
        not_bits = np.any((actions != 0) & (actions != 1), axis=1)
        _add_violation(out, "action", not_bits, row_ids, "have entries other than 0/1")
        if q <= 62 and actions.size and not not_bits.any():  # fast path: a row in one integer
            bits = np.int64(1) << np.arange(q, dtype=np.int64)
            n_distinct = int(np.unique(actions.astype(np.int64) @ bits).size)
        else:
            n_distinct = int(np.unique(actions, axis=0).shape[0])
    else:
        assert log.candidates is not None
        sizes = log.candidates.sizes
        hint = "Every decision needs at least one candidate"
        _add_violation(out, "candidates", sizes < 1, row_ids, "have zero candidates", hint)
        if actions.ndim != 1:
            message = f"must be one index per row, got shape {actions.shape}"
            return out + [Violation("action", n, n, (), message)]
        outside = (sizes >= 1) & ((actions < 0) | (actions >= sizes))
        _add_violation(out, "action", outside, row_ids, "index outside the row's candidate set")
        n_distinct = min_distinct  # indexes into different sets are not comparable actions
    if n_distinct < min_distinct:
        message = f"has only {n_distinct} distinct value(s); at least {min_distinct} are needed"
        hint = "A log that always takes the same action carries no counterfactual information"
        out.append(Violation("action", n, n, (), message, hint))
    return out


def exclude_rows(log: LoggedBandit, mask: Any, reason: str) -> tuple[LoggedBandit, Exclusion]:
    """Remove rows explicitly, returning the reduced log and a record of what was removed.

    Parameters
    ----------
    log : LoggedBandit
        The log.
    mask : array-like of bool of shape (n_samples,)
        True for rows to remove.
    reason : str
        Why the rows are removed (logged to MLflow by the flows).

    Returns
    -------
    log : LoggedBandit
        The log without the masked rows.
    exclusion : Exclusion
        Reason, number of rows removed and up to five example row ids.

    Raises
    ------
    ValueError
        If the mask has the wrong length or would remove every row.
    """
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != (log.n_rows,):
        raise ValueError(f"mask must have shape ({log.n_rows},), got {mask.shape}")
    if mask.all():
        raise ValueError(f"exclude_rows would remove all {log.n_rows} rows ({reason})")
    exclusion = Exclusion(reason, int(mask.sum()), _examples(mask, log.row_ids))
    logger.info("excluding %d rows: %s", exclusion.n_rows, reason)
    return log.take(~mask), exclusion
