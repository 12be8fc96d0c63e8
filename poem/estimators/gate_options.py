"""The gate's options as small objects: per-row terms, their lower bound, what they assume.

Each option of ``gate.estimator`` is one :class:`GateOption` in :data:`GATE_OPTIONS`: the
capital processes its bound bets on (:class:`Capital`: terms Xᵢ whose conditional mean is at
most the improvement R(champion) − R(challenger), lower bounds Lᵢ ≤ Xᵢ fixed before the test
rows are seen, a cap κ on the bets), whether it needs a declared weight bound B, and its
config checks (:meth:`GateOption.check_config`, which ``gate:`` in the flow's config calls),
and the estimates the report states (:meth:`GateOption.estimate` for each policy,
:meth:`GateOption.paired_difference` for their difference, with their intervals).
:func:`poem.estimators.improvement.improvement_lower_bound` turns the capitals into the bound;
nothing else branches on the option's name: a new option is one subclass added to
:data:`GATE_OPTIONS`.

The weight bound B (every importance weight ≤ B) must be known before the test rows are
seen: 1 / the logger's declared minimum propensity, never the largest weight a log happens to
show. Without B, only terms bounded below whatever the weights are used
(:func:`bound_free_terms`); against a policy champion whose distributions are known,
:func:`total_variation_terms` need no B and keep the paired terms' power (README).

All functions take arrays whose last axis is the rows (leading axes: independent logs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from poem.estimators.bounds import standard_error
from poem.estimators.ips import (
    Estimate,
    _interval,
    _mean_statistic,
    _ratio_statistic,
    _snips_value_and_influence,
    clipped_ips,
    ips,
    snips,
)
from poem.estimators.reliability import interval_flags
from poem.estimators.weights import _check_clip

__all__ = [
    "GATE_ESTIMATORS",
    "GATE_OPTIONS",
    "Capital",
    "GateOption",
    "bound_free_terms",
    "gate_option",
    "paired_terms",
    "snips_baseline_terms",
    "total_variation_terms",
]

_PRIOR_ROWS = 1.0  # the SNIPS baselines start at δ_max with the weight of one pseudo-row


@dataclass(frozen=True)
class Capital:
    """One capital process: terms Xᵢ ≥ Lᵢ and the cap κ of its bets.

    Attributes
    ----------
    terms : ndarray of shape (..., n_samples)
        Xᵢ, with conditional mean at most R(champion) − R(challenger) given rows < i.
    lower : ndarray broadcastable to ``terms``
        Lᵢ ≤ Xᵢ, known before row i is seen.
    max_bet_fraction : float
        κ in (0, 1).
    """

    terms: np.ndarray
    lower: np.ndarray
    max_bet_fraction: float


def paired_terms(losses, rc, rh, loss_bounds, max_weight, logger):
    r"""Xᵢ = (b − δᵢ)(r^c_i − r^h_i) and their lower bound.

    .. math:: X_i = (b - \delta_i)(r^c_i - r^h_i) \ge L = -(b - a)\,\max(0, -D_{lo})

    where δᵢ ∈ [a, b], r^c and r^h the challenger's and champion's weights and D_lo the
    smallest possible r^c − r^h: −1 against the logging policy (r^h ≡ 1, r^c ≥ 0), −B
    against a policy with every weight ≤ B. The mean is exactly the improvement
    (Swaminathan & Joachims 2015, Eq. (1), translated by δ_max as in §4.3).
    """
    a, b = loss_bounds
    terms = (b - losses) * (rc - rh)
    floor = -(b - a) * (1.0 if logger else float(max_weight))
    return terms, np.full(terms.shape[:-1] + (1,), floor)


def bound_free_terms(losses, rc, rh, loss_bounds):
    r"""Terms bounded below by −(b − a) whatever the weights: no weight bound needed.

    .. math:: X_i = (b - \delta_i)\, r^c_i + (\delta_i - a)\, r^h_i - (b - a) \ge -(b - a)

    because both products are ≥ 0. E[(b − δ) r^c] = b − R(challenger) and
    E[(δ − a) r^h] = R(champion) − a, so the mean is R(champion) − R(challenger). Against
    the logging policy (r^h ≡ 1) they equal :func:`paired_terms`; against a policy they add
    the mean-zero noise (b − a)(r^h − 1) to them (less power, no assumption).
    """
    a, b = loss_bounds
    terms = (b - losses) * rc + (losses - a) * rh - (b - a)
    return terms, np.full(terms.shape[:-1] + (1,), -(b - a))


def total_variation_terms(losses, rc, rh, loss_bounds, total_variation):
    r"""Paired terms with a control variate: bounded below by −(b − a)·TV, no weight bound.

    .. math::

        X_i = (b - \delta_i)\,(r^c_i - r^h_i)_+ + (\delta_i - a)\,(r^h_i - r^c_i)_+
              - (b - a)\,\mathrm{TV}(x_i) \ \ge\ -(b - a)\,\mathrm{TV}(x_i)

    where TV(x) = ½ Σ_y |π_c(y|x) − π_h(y|x)| is the two policies' total variation distance
    at row i's context (known before the row's action and loss are seen). They are
    :func:`paired_terms` plus the control variate (b − a)[(r^h − r^c)₊ − TV(x)], whose
    conditional mean given xᵢ is ≤ 0 (E[(r^h − r^c)₊ | x] ≤ TV(x), with equality when the
    logger can take every action), so E[Xᵢ | xᵢ] is at most the improvement at xᵢ, for any
    logger and without a weight bound. The lower bound uses the window's max TV (fixed given
    the window's contexts); any upper bound on TV(x) in [0, 1] keeps the terms valid.
    """
    a, b = loss_bounds
    gap = rc - rh
    terms = (b - losses) * np.maximum(gap, 0.0) + (losses - a) * np.maximum(-gap, 0.0)
    tv = np.broadcast_to(np.asarray(total_variation, dtype=np.float64), terms.shape)
    terms = terms - (b - a) * tv
    return terms, -(b - a) * np.max(tv, axis=-1, keepdims=True)


def _predictable_snips(losses: np.ndarray, weights: np.ndarray, start: float) -> np.ndarray:
    """ĉᵢ = (s·δ_max + Σ_{j<i} δⱼrⱼ) / (s + Σ_{j<i} rⱼ): SNIPS on the rows before i."""
    num = np.cumsum(losses * weights, axis=-1) - losses * weights
    den = np.cumsum(weights, axis=-1) - weights
    return (_PRIOR_ROWS * start + num) / (_PRIOR_ROWS + den)


def snips_baseline_terms(losses, rc, rh, loss_bounds, max_weight, logger):
    r"""Terms with each policy's SNIPS estimate on the rows before i as baseline.

    .. math::

        X_i = \big[c^h_i + (\delta_i - c^h_i)\, r^h_i\big]
              - \big[c^c_i + (\delta_i - c^c_i)\, r^c_i\big], \qquad
        L_i = \min_{\delta \in [a, b],\ r^c - r^h \in [D_{lo}, D_{hi}],\ r^h \in [l_h, B_h]} X_i

    where c^c_i, c^h_i are fixed before row i (so E[Xᵢ | rows < i] is the improvement,
    E[r] = 1), D ∈ [−1, B − 1] and r^h ∈ [1, 1] against the logging policy, D ∈ [−B, B] and
    r^h ∈ [0, B] against a policy; B is the declared weight bound (required). X is bilinear
    in (δ, D), so its minimum over the box is at a corner.
    """
    a, b = loss_bounds
    bound = float(max_weight)
    lo_d, hi_d, lo_h, hi_h = (
        (-1.0, bound - 1.0, 1.0, 1.0) if logger else (-bound, bound, 0.0, bound)
    )
    cc = _predictable_snips(losses, rc, b)
    ch = np.ones_like(losses) * _predictable_snips(losses, rh, b)
    terms = (ch + (losses - ch) * rh) - (cc + (losses - cc) * rc)
    corner = np.minimum(
        np.minimum((cc - a) * lo_d, (cc - a) * hi_d), np.minimum((cc - b) * lo_d, (cc - b) * hi_d)
    )
    champ = np.minimum((cc - ch) * lo_h, (cc - ch) * hi_h)
    return terms, (ch - cc) + corner + champ


class GateOption:
    """One value of ``gate.estimator``: the capitals its bound bets on and what it assumes.

    Subclasses set :attr:`name` and implement :meth:`capitals`; :meth:`needs_weight_bound`,
    :meth:`check` and :meth:`check_config` say what they need (``uses_clip``: a clip value M
    is required; ``needs_declared_floor``: the flow's config must declare
    ``checks.min_propensity`` > 0); :meth:`estimate` and :meth:`paired_difference` are the
    estimates the report states (IPS unless overridden). Registered in :data:`GATE_OPTIONS`
    (one entry per option; config validation and the report read it when they run).
    """

    name: ClassVar[str] = ""
    uses_clip: ClassVar[bool] = False
    needs_declared_floor: ClassVar[bool] = False

    def needs_weight_bound(self, logger: bool) -> bool:
        """Whether a declared weight bound B is needed (``logger``: champion is the logger)."""
        return not logger

    def check(self, clip: float | None, max_weight: float | None) -> None:
        """Config checks: ``clip`` only with the options that use one, > 0 there.

        Raises
        ------
        ValueError
            Naming the option and the value.
        """
        if self.uses_clip and clip is None:
            raise ValueError(f"estimator {self.name!r} needs a clip value")
        if self.uses_clip and not (np.isfinite(float(clip)) and float(clip) > 0):
            raise ValueError(f"clip must be > 0, got {clip!r}")
        if not self.uses_clip and clip is not None:
            users = " or ".join(repr(o.name) for o in GATE_OPTIONS.values() if o.uses_clip)
            raise ValueError(f"clip is only used by estimator {users}, not {self.name!r}")

    def check_config(self, clip: float | None, min_propensity: float | None = None) -> None:
        """The checks of the flow's ``gate:`` config (``checks.min_propensity`` when given).

        Raises
        ------
        ValueError
            One line naming the keys and what to set.
        """
        if self.uses_clip and clip is None:
            raise ValueError(f"estimator {self.name!r} needs a clip value")
        if not self.uses_clip and clip is not None:
            users = [o.name for o in GATE_OPTIONS.values() if o.uses_clip]
            raise ValueError(
                f"gate.clip ({clip}) is only used by estimator "
                f"{' or '.join(repr(u) for u in users)}, but gate.estimator is {self.name!r}; "
                f"set gate.clip: null or gate.estimator: {users[0]}"
            )
        if self.needs_declared_floor and min_propensity is not None and min_propensity <= 0:
            raise ValueError(
                f"gate.estimator {self.name!r} needs a declared weight bound: set "
                "checks.min_propensity > 0 (the logger's floor), or use gate.estimator: ips"
            )

    def _check_reported_clip(self, clip: float | None) -> None:
        """``clip`` given exactly to the options that use one (the report's estimates)."""
        if self.uses_clip and clip is None:
            raise ValueError(f"clip is required when estimator={self.name!r}")
        if not self.uses_clip and clip is not None:
            users = [o.name for o in GATE_OPTIONS.values() if o.uses_clip]
            raise ValueError(
                f"clip is only used by estimator={' or '.join(repr(u) for u in users)}, got "
                f"clip={clip!r} with estimator={self.name!r}"
            )

    def estimate(self, losses, weights, clip, **options) -> Estimate:
        """One policy's reported risk on the (translated) losses: :func:`~poem.estimators.ips.ips`.

        ``options``: ``confidence_level``, ``interval``, ``random_state`` of the interval.
        It is reported, it does not decide (the bound does).
        """
        self._check_reported_clip(clip)
        return ips(losses, weights, **options)

    def paired_difference(self, losses, rc, rh, clip, level, interval, random_state) -> Estimate:
        r"""The reported paired difference R(challenger) − R(champion), interval and flags.

        .. math:: d_i = (\delta_i - c)(r^c_i - r^h_i)

        (DESIGN §5), the mean with its ``interval`` at ``level`` and reliability flags
        (:func:`poem.estimators.reliability.interval_flags`). Reported, not deciding.
        """
        terms = losses * (rc - rh)  # paired differences dᵢ (DESIGN §5)
        return self._paired(
            terms,
            float(terms.mean()),
            _mean_statistic,
            losses,
            rc,
            rh,
            level,
            interval,
            random_state,
        )

    def _paired(self, terms, value, per_policy, d, wc, wh, level, interval, random_state):
        def statistic(loss, a, b):
            return per_policy(loss, a) - per_policy(loss, b)

        se, n, arrays = standard_error(terms), int(d.size), (d, wc, wh)
        lower, upper = _interval(statistic, arrays, value, se, n, level, interval, random_state)
        flags = interval_flags(terms, np.maximum(wc, wh))
        name = f"{self.name}_difference"
        return Estimate(name, float(value), se, lower, upper, n, level, 0.0, 0.0, interval, flags)

    def capitals(
        self, losses, rc, rh, *, loss_bounds, max_weight, clip, logger, total_variation=None
    ) -> list[Capital]:
        """The capital processes of the bound (their capitals are averaged).

        ``total_variation``: TV(xᵢ) of the two policies per row (:func:`total_variation_terms`),
        or None when only the logged actions' probabilities are known.
        """
        raise NotImplementedError

    def assumption(
        self, logger: bool, max_weight: float | None, total_variation: bool = False
    ) -> str:
        """What the guarantee assumes beyond independent rows, correct propensities and losses."""
        if not logger and total_variation:
            return (
                "no weight bound: the terms (b - δ)(r^c - r^h)+ + (δ - a)(r^h - r^c)+ - "
                "(b - a)TV(x) >= -(b - a), TV(x) the policies' total variation at each row's "
                "context"
            )
        if max_weight is not None and (self.needs_weight_bound(logger)):
            return f"every importance weight <= the declared bound B = {max_weight:.4g}"
        if max_weight is None and not logger:
            return (
                "no weight bound (none declared): the terms (b - δ)r^c + (δ - a)r^h - (b - a) "
                ">= -(b - a) need none"
            )
        return "no weight bound (the champion is the logging policy)"


def _ips_capitals(losses, rc, rh, loss_bounds, max_weight, logger, total_variation):
    """The ``ips`` capitals, which ``clipped_ips`` and ``snips`` average their own with."""
    if logger:
        return [Capital(*paired_terms(losses, rc, rh, loss_bounds, None, True), 0.5)]
    if total_variation is not None:
        return [Capital(*total_variation_terms(losses, rc, rh, loss_bounds, total_variation), 0.5)]
    if max_weight is None:
        return [Capital(*bound_free_terms(losses, rc, rh, loss_bounds), 0.5)]
    return [Capital(*paired_terms(losses, rc, rh, loss_bounds, max_weight, False), 0.99)]


class IPSOption(GateOption):
    """``ips``: the paired terms (b − δ)(r^c − r^h).

    Against the logger L = −(b − a) and κ = ½. Against a policy with the policies'
    total variation per row, :func:`total_variation_terms` (no weight bound, κ = ½); else
    with a declared B, L = −(b − a)B and κ = 0.99 (the cap κ/(m − L) binds, so κ near 1
    keeps what power there is); else :func:`bound_free_terms` with κ = ½.
    """

    name = "ips"

    def capitals(
        self, losses, rc, rh, *, loss_bounds, max_weight, clip, logger, total_variation=None
    ):
        return _ips_capitals(losses, rc, rh, loss_bounds, max_weight, logger, total_variation)


class ClippedIPSOption(GateOption):
    """``clipped_ips``: ``ips`` with the challenger's weights capped at M, averaged with ``ips``.

    Because b − δ ≥ 0, capping only the challenger's weights lowers the terms: their mean is
    at most the improvement (pessimistic); the unclipped capital keeps the power a low clip
    would lose (at most log 2 of evidence). Against a policy with the policies' total
    variation per row it is ``ips`` (:func:`total_variation_terms` need no clip).
    """

    name = "clipped_ips"
    uses_clip = True

    def estimate(self, losses, weights, clip, **options) -> Estimate:
        """:func:`~poem.estimators.ips.clipped_ips` at M = ``clip`` (reported, not deciding)."""
        self._check_reported_clip(clip)
        return clipped_ips(losses, weights, clip, **options)

    def paired_difference(self, losses, rc, rh, clip, level, interval, random_state):
        r"""The paired difference on the clipped weights.

        .. math:: d_i = (\delta_i - c)(\min(M, r^c_i) - \min(M, r^h_i))
        """
        M = _check_clip(clip)
        return super().paired_difference(
            losses, np.minimum(M, rc), np.minimum(M, rh), None, level, interval, random_state
        )

    def capitals(
        self, losses, rc, rh, *, loss_bounds, max_weight, clip, logger, total_variation=None
    ):
        exact = _ips_capitals(losses, rc, rh, loss_bounds, max_weight, logger, total_variation)
        if not logger and total_variation is not None:
            return exact
        capped = np.minimum(float(clip), rc)
        return [*_ips_capitals(losses, capped, rh, loss_bounds, max_weight, logger, None), *exact]


class SNIPSOption(GateOption):
    """``snips``: SNIPS estimates reported; the decision bets on the ``ips`` capitals.

    The SNIPS-baseline terms (:func:`snips_baseline_terms`) have the improvement as mean only
    when E[r^c] = 1, i.e. every action the challenger uses is logged: with an action the
    logger never takes (a declared floor that is wrong where no row can show it), their mean
    exceeds the improvement by Σ_unlogged π_c(y)(μ(y) − c) (measured: 10 % false promotion,
    51 % with the coin, in ``gate_calibration.py``'s ``unlogged/logger`` cell). Correcting
    them by the control variate (b − c)(r^c − 1), the only one that needs no support, gives
    back exactly the ``ips`` terms, so the bound uses those (no weight bound against the
    logger or, with the policies' total variation, against a policy).
    """

    name = "snips"
    needs_declared_floor = True

    def estimate(self, losses, weights, clip, **options) -> Estimate:
        """:func:`~poem.estimators.ips.snips` (reported, not deciding)."""
        self._check_reported_clip(clip)
        return snips(losses, weights, **options)

    def paired_difference(self, losses, rc, rh, clip, level, interval, random_state):
        """The paired delta-method terms of the two SNIPS estimates (Owen 2013, §9.2)."""
        value_c, e_c = _snips_value_and_influence(losses, rc)
        value_h, e_h = _snips_value_and_influence(losses, rh)
        return self._paired(
            e_c - e_h,
            value_c - value_h,
            _ratio_statistic,
            losses,
            rc,
            rh,
            level,
            interval,
            random_state,
        )

    def capitals(
        self, losses, rc, rh, *, loss_bounds, max_weight, clip, logger, total_variation=None
    ):
        return _ips_capitals(losses, rc, rh, loss_bounds, max_weight, logger, total_variation)

    def assumption(
        self, logger: bool, max_weight: float | None, total_variation: bool = False
    ) -> str:
        return (
            "the ips terms (the snips baseline terms need every action the policies use to be "
            "logged, which no row can show): "
            + IPSOption().assumption(logger, max_weight, total_variation)
        )


GATE_OPTIONS: dict[str, GateOption] = {
    option.name: option for option in (IPSOption(), ClippedIPSOption(), SNIPSOption())
}
GATE_ESTIMATORS = tuple(GATE_OPTIONS)


def gate_option(name: Any) -> GateOption:
    """The registered :class:`GateOption` called ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not exactly one of the options in :data:`GATE_OPTIONS` (read when
        called: an option added there is accepted).
    """
    if not isinstance(name, str) or name not in GATE_OPTIONS:
        raise ValueError(f"estimator must be one of {list(GATE_OPTIONS)}, got {name!r}")
    return GATE_OPTIONS[name]
