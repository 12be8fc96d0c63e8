"""The gate's bound on the improvement of a challenger over the champion (DESIGN §5).

:func:`improvement_lower_bound` bets (:func:`poem.estimators.betting.betting_lower_bound`) on
each option's per-row terms (:mod:`poem.estimators.gate_options`) with the rows in a
uniformly random order (:func:`shuffle_rows`) drawn from fresh entropy at each attempt
(:func:`draw_entropy`), so that the bets test the window's average even when the logged
(time) order drifts (``benchmarks/gate_calibration.py``). The gate records the entropy
(``order_seed``), which replays the decision exactly; a fixed seed makes the order a
function of the rows' values, and the level then holds only on average over seeds.

Every function takes arrays whose last axis is the rows, so the calibration benchmark runs
thousands of simulated logs through exactly the code the gate runs on one.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from poem.estimators.betting import betting_lower_bound
from poem.estimators.gate_options import GATE_ESTIMATORS, Capital, gate_option

__all__ = [
    "GATE_ESTIMATORS",
    "decision_coin",
    "draw_entropy",
    "improvement_capitals",
    "improvement_lower_bound",
    "shuffle_rows",
]


def draw_entropy() -> int:
    """Fresh entropy for one gate attempt: 128 bits from the operating system (``secrets``).

    The gate's random order (:func:`shuffle_rows`) and its coin (:func:`decision_coin`) are
    drawn from it; recorded with the decision, it replays the decision exactly.
    """
    return secrets.randbits(128)


def decision_coin(entropy: Any) -> np.ndarray | float:
    r"""The U ∈ (0, 1] of a randomized gate decision, from the attempt's entropy.

    .. math:: U = 1 - V, \qquad V \sim \mathrm{Uniform}[0, 1)

    with V the first draw of ``numpy.random.default_rng(SeedSequence(e, spawn_key=(1,)))``
    (a stream independent of the one the order is drawn from). Fresh entropy e
    (:func:`draw_entropy`) makes U independent of the test log, as the randomized Ville
    inequality needs; a recorded e gives the same U again (a replay).

    Parameters
    ----------
    entropy : int or sequence of int
        e, one per log.

    Returns
    -------
    float or ndarray
        U, one per entropy.
    """
    if np.ndim(entropy) == 0:
        seq = np.random.SeedSequence(int(entropy), spawn_key=(1,))
        return float(1.0 - np.random.default_rng(seq).random())
    return np.array([decision_coin(e) for e in entropy])


def shuffle_rows(order_seed: Any, *arrays: Any) -> tuple[np.ndarray, ...]:
    """The arrays with their rows (last axis) in the random order drawn from ``order_seed``.

    The rows are first put in a canonical order (sorted by their values, ``arrays`` in turn
    as keys; tied rows are equal in every array), then permuted by
    ``numpy.random.default_rng(seed).permutation(n)``, so the result depends on the rows and
    the seed only, never on the order they were given in. ``order_seed``: one seed for every
    log (each log along the leading axes gets the same permutation of its canonical order,
    as the same seed gives one log), or a sequence of seeds, one per log (flattened leading
    axes); None keeps the given order.

    Only a seed drawn fresh and independently of the rows (:func:`draw_entropy`) makes the
    order a uniformly random permutation independent of the data, which the bound's validity
    needs: with a fixed seed the order is a fixed function of the rows' values (a replay).
    """
    arrays = tuple(np.asarray(a, dtype=np.float64) for a in arrays)
    if order_seed is None:
        return arrays
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    full = tuple(np.broadcast_to(a, shape) for a in arrays)
    canonical = np.lexsort(full[::-1], axis=-1)  # first array is the primary key
    n, logs = shape[-1], int(np.prod(shape[:-1], dtype=np.int64))
    seeds = [order_seed] * logs if np.ndim(order_seed) == 0 else list(order_seed)
    if len(seeds) != logs:
        raise ValueError(f"order_seed has {len(seeds)} seeds for {logs} logs (one per log)")
    same = np.ndim(order_seed) == 0
    perms = (
        np.broadcast_to(np.random.default_rng(int(order_seed)).permutation(n), (logs, n))
        if same
        else np.stack([np.random.default_rng(int(s)).permutation(n) for s in seeds])
    )
    index = np.take_along_axis(canonical, perms.reshape(shape), axis=-1)
    return tuple(np.take_along_axis(a, index, axis=-1) for a in full)


def improvement_capitals(
    losses: Any,
    challenger_weights: Any,
    champion_weights: Any,
    *,
    estimator: str,
    loss_bounds: tuple[float, float],
    max_weight: float | None = None,
    clip: float | None = None,
    total_variation: Any = None,
) -> list[Capital]:
    r"""The capital processes of ``estimator``'s bound on the rows in the order given.

    .. math:: E[X_i \mid \text{rows} < i] \le R_i(\text{champion}) - R_i(\text{challenger}),
        \qquad X_i \ge L_i

    where Rᵢ are the risks of row i's context (and time) and Lᵢ is known before row i; see
    :mod:`poem.estimators.gate_options` for each option's terms.

    Parameters
    ----------
    losses : array-like of shape (..., n_samples)
        Logged losses, i.e. δᵢ.
    challenger_weights : array-like of shape (..., n_samples)
        Challenger's importance weights, i.e. r^c_i.
    champion_weights : array-like of shape (..., n_samples)
        Champion's importance weights (all 1 for the logging policy), i.e. r^h_i.
    estimator : {"ips", "clipped_ips", "snips"}
        The gate option.
    loss_bounds : tuple of float
        (δ_min, δ_max), i.e. (a, b).
    max_weight : float or None, default=None
        Declared bound B ≥ 1 on every importance weight (1 / the logger's declared minimum
        propensity); None: no bound is known, and only terms that need none are used.
    clip : float or None, default=None
        Cap M of the challenger's weights for ``"clipped_ips"``.
    total_variation : array-like of shape (..., n_samples) or None, default=None
        TV(xᵢ) = ½ Σ_y |π_c(y|xᵢ) − π_h(y|xᵢ)| per row (or an upper bound in [0, 1]); with a
        policy champion the bound then uses terms that need no weight bound and keep the
        paired terms' power (:func:`~poem.estimators.gate_options.total_variation_terms`).

    Returns
    -------
    list of Capital
        One per capital process (their capitals are averaged).

    References
    ----------
    Swaminathan & Joachims (2015), JMLR 16, arXiv:1502.02362, Eq. (1) and §4.3.
    Waudby-Smith & Ramdas (2024), JRSS-B 86(1), arXiv:2010.09686, §4.
    """
    a, b = (float(v) for v in loss_bounds)
    d = np.asarray(losses, dtype=np.float64)
    rc = np.asarray(challenger_weights, dtype=np.float64)
    rh = np.asarray(champion_weights, dtype=np.float64)
    tv = None if total_variation is None else np.asarray(total_variation, dtype=np.float64)
    return gate_option(estimator).capitals(
        d,
        rc,
        rh,
        loss_bounds=(a, b),
        max_weight=max_weight,
        clip=clip,
        logger=bool(np.all(rh == 1.0)),
        total_variation=tv,
    )


def improvement_lower_bound(
    losses: Any,
    challenger_weights: Any,
    champion_weights: Any,
    *,
    estimator: str = "ips",
    loss_bounds: tuple[float, float],
    max_weight: float | None = None,
    clip: float | None = None,
    confidence_level: float = 0.95,
    randomization: Any = None,
    order_seed: Any,
    total_variation: Any = None,
) -> np.ndarray | float:
    r"""Lower confidence bound on the window's average R(champion) − R(challenger).

    .. math::

        P\Big(\hat I_{LB} > \tfrac1n \textstyle\sum_i \big(R_i(\text{champion})
        - R_i(\text{challenger})\big)\Big) \le \alpha

    where Î_LB = sup{m : maxₜ Kₜ(m) ≥ 1/α}, Kₜ(m) the average over the option's capitals
    (:func:`improvement_capitals`) of Π_{i≤t}(1 + λᵢ(m)(X_{σ(i)} − m)) with the rows in a
    uniformly random order σ drawn from ``order_seed``, predictable plug-in bets
    λᵢ(m) ≤ κ/(m − L) (:func:`~poem.estimators.betting.betting_lower_bound`), Rᵢ the
    risks of row i's context and time, and 1 − α the level.
    Assumptions: given the window's contexts the rows are independent draws from the logging
    policy of their time, the propensities are correct, losses lie in ``loss_bounds`` and,
    where the option needs one (``GateOption.needs_weight_bound``), every weight is ≤
    ``max_weight``. The order of the rows as given does not matter.

    Parameters
    ----------
    losses, challenger_weights, champion_weights : array-like of shape (..., n_samples)
        δᵢ, r^c_i and r^h_i, as for :func:`improvement_capitals`.
    estimator, loss_bounds, max_weight, clip, total_variation
        As for :func:`improvement_capitals` (``estimator`` defaults to ``"ips"`` here).
    confidence_level : float, default=0.95
        Probability that the bound holds, in (0, 1), i.e. 1 − α.
    randomization : float or array-like of shape (...), optional
        U ~ Uniform(0, 1] independent of the log: m is also rejected when Kₙ(m) ≥ U/α
        (randomized Ville inequality); None: deterministic.
    order_seed : int, sequence of int or None
        Seed of the random order σ (:func:`shuffle_rows`: one for all logs or one per log),
        required: the bound is valid over σ only when the seed is drawn fresh
        (:func:`draw_entropy`); None keeps the given order (only for rows already in a
        uniformly random order independent of their values).

    Returns
    -------
    float or ndarray of shape (...)
        The lower bound Î_LB in loss units.

    References
    ----------
    Waudby-Smith & Ramdas (2024), Estimating means of bounded random variables by betting,
    JRSS-B 86(1), arXiv:2010.09686, Eq. (12), §5.1.
    Ramdas & Manole (2023), Randomized and exchangeable improvements of Markov's,
    Chebyshev's and Chernoff's inequalities, arXiv:2304.02611, §4 (randomized Ville).
    """
    arrays = (losses, challenger_weights, champion_weights)
    if total_variation is None:
        (d, rc, rh), tv = shuffle_rows(order_seed, *arrays), None
    else:
        d, rc, rh, tv = shuffle_rows(order_seed, *arrays, total_variation)
    options = dict(estimator=estimator, loss_bounds=loss_bounds, max_weight=max_weight, clip=clip)
    capitals = improvement_capitals(d, rc, rh, total_variation=tv, **options)
    a, b = loss_bounds
    terms = np.stack([c.terms for c in capitals])
    lower = np.stack([np.broadcast_to(c.lower, c.terms.shape) for c in capitals])
    return betting_lower_bound(
        terms,
        lower,
        confidence_level,
        scale=float(b - a) if b > a else 1.0,
        mixture=True,
        max_bet_fraction=[c.max_bet_fraction for c in capitals],
        randomization=randomization,
    )
