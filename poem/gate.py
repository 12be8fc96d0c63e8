"""The counterfactual A/B gate on a log: challenger vs champion policy (DESIGN §5).

The guarantee (stated exactly in :func:`gate_decision`): over the test rows given their
contexts and over fresh entropy drawn for the attempt (the rows' random order, and the coin
of a randomized decision), the chance that any attempt on one test window promotes a
challenger whose window-average risk is not below the champion's is at most the window's α.

The gate decides from per-row vectors only (:class:`GateRows`: losses, logged propensities,
each policy's probability of the logged action), so the in-memory and the partitioned paths
give the same decision from the same vectors; the math lives in
:func:`poem.estimators.compare.compare_policies`. Before any promotion the champion is the
logging policy itself, whose weights are identically 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from poem.data import LoggedBandit
from poem.estimators.compare import PolicyComparison, compare_policies
from poem.estimators.improvement import decision_coin
from poem.estimators.weights import _check_values, importance_weights
from poem.ledger import Attempt, TestWindow, attempt_entropy, attempt_reasons, window_of
from poem.policies import StochasticPolicy

__all__ = [
    "GateRows",
    "counterfactual_ab_test",
    "floor_violations",
    "gate_decision",
    "gate_rows",
    "policy_total_variation",
    "weight_bound",
]


@dataclass(frozen=True)
class GateRows:
    """The per-row vectors the gate decides from (one row per test decision, log order).

    Attributes
    ----------
    losses : ndarray of shape (n_samples,)
        δᵢ.
    propensities : ndarray of shape (n_samples,)
        Logged pᵢ.
    challenger_probabilities : ndarray of shape (n_samples,)
        π_c(yᵢ|xᵢ).
    champion_probabilities : ndarray of shape (n_samples,) or None
        π_h(yᵢ|xᵢ); None when the champion is the logging policy.
    loss_bounds : tuple of float
        Declared (δ_min, δ_max).
    total_variation : ndarray of shape (n_samples,) or None, default=None
        U(xᵢ) ≥ TV(xᵢ) = ½ Σ_y |π_c(y|xᵢ) − π_h(y|xᵢ)| (:func:`policy_total_variation`);
        None when the champion is the logging policy or the policies' full distributions are
        unknown.
    window : TestWindow or None, default=None
        The rows' identity for the attempt ledger (:func:`poem.ledger.window_of`).
    """

    losses: np.ndarray
    propensities: np.ndarray
    challenger_probabilities: np.ndarray
    champion_probabilities: np.ndarray | None
    loss_bounds: tuple[float, float]
    total_variation: np.ndarray | None = None
    window: TestWindow | None = None


_TV_CHUNK = 1_000_000  # probabilities (rows × actions) held at once per policy
_TV_FAMILIES = ("discrete", "candidates", "multilabel")  # full per-row distributions


def _row_total_variation(family: Any, pc: np.ndarray, ph: np.ndarray, inputs: Any) -> np.ndarray:
    """U(x) ≥ TV(x) per row from two served distributions of one family (see the caller)."""
    gap = np.abs(pc - ph)
    if family.name == "discrete":
        return 0.5 * gap.sum(axis=1)
    if family.name == "candidates":
        offsets = np.asarray(inputs.offsets)
        return 0.5 * np.add.reduceat(gap, offsets[:-1]) if gap.size else np.zeros(0)
    # multilabel: per-label marginals; 1 − Π_l (1 − |Δ_l|) by the product coupling
    return -np.expm1(np.sum(np.log1p(-np.minimum(gap, 1.0)), axis=1))


def policy_total_variation(
    challenger: StochasticPolicy, champion: StochasticPolicy | None, log: LoggedBandit
) -> np.ndarray | None:
    r"""An upper bound U(xᵢ) on the two policies' total variation distance at each row's context.

    .. math::

        U(x_i) = \mathrm{TV}(x_i) = \tfrac12 \textstyle\sum_y |\pi_c(y|x_i) - \pi_h(y|x_i)|
        \quad \text{(discrete actions, candidate sets)}, \qquad
        U(x_i) = 1 - \textstyle\prod_{l=1}^q \big(1 - |\sigma^c_l(x_i) - \sigma^h_l(x_i)|\big)
        \ \ge\ \mathrm{TV}(x_i) \quad \text{(multilabel)}

    from the served distributions (``predict_proba``), where σ_l are the per-label
    marginals of a multilabel policy (independent labels). For multilabel policies the
    distributions on the 2^q label vectors are products, and coupling each label maximally
    (they agree with probability 1 − |σ^c_l − σ^h_l|) and the labels independently gives a
    coupling whose vectors agree with probability Π_l(1 − |Δ_l|); TV ≤ P(vectors differ)
    (coupling inequality), so U ≥ TV, and U ≤ min(1, Σ_l |Δ_l|). Any U ≥ TV keeps the
    total-variation terms conservative
    (:func:`~poem.estimators.gate_options.total_variation_terms`). U depends on the contexts
    only, never on the logged actions or losses, so the gate may use it before the rows'
    outcomes are seen. Computed in chunks of rows.

    Parameters
    ----------
    challenger, champion : StochasticPolicy
        The two policies (``champion`` None: the logging policy, no TV needed).
    log : LoggedBandit
        The rows (their contexts, or candidate sets).

    Returns
    -------
    ndarray of shape (n_samples,) or None
        U(xᵢ) in [0, 1]. None when ``champion`` is None (the logging policy), the two
        policies are of different families or of a family without full per-row
        distributions, or the log has neither contexts nor candidate sets.

    Raises
    ------
    TypeError
        When a policy is not a :class:`~poem.policies.StochasticPolicy` (the gate computes
        its vectors from served policies, nothing else).
    """
    if champion is None:
        return None
    for role, policy in (("challenger", challenger), ("champion", champion)):
        if not isinstance(policy, StochasticPolicy):
            raise TypeError(
                f"{role} must be a StochasticPolicy (the gate's vectors come from served "
                f"policies), got {type(policy).__name__}"
            )
    family = challenger.family
    if family.name != champion.family.name or family.name not in _TV_FAMILIES:
        return None
    if family.name == "candidates":
        if log.candidates is None:
            return None
        inputs = family.inputs_from_log(log)
        pc, ph = (p.family.predict_proba(p.coef, inputs, **p._kw()) for p in (challenger, champion))
        return np.clip(_row_total_variation(family, pc, ph, inputs), 0.0, 1.0)
    if log.contexts is None:
        return None
    n = int(log.contexts.shape[0])
    step = max(1, _TV_CHUNK // max(int(getattr(family, "n_actions", 1) or 1), 1))
    out = np.empty(n)
    for start in range(0, n, step):
        rows = log.contexts[start : start + step]
        pc, ph = (
            np.asarray(p.predict_proba(rows), dtype=np.float64) for p in (challenger, champion)
        )
        out[start : start + step] = _row_total_variation(family, pc, ph, rows)
    return np.clip(out, 0.0, 1.0)


def gate_rows(challenger: Any, champion: Any, log: Any) -> GateRows:
    """The :class:`GateRows` of two policies on a log (in memory, or one partition's rows).

    ``champion`` None is the logging policy; policies need ``log_action_probability_on``;
    policies of the discrete, candidate-set and multilabel families on a log with contexts
    (or candidate sets) also give :func:`policy_total_variation`. The window
    (:func:`poem.ledger.window_of`) identifies the rows for the attempt ledger.
    """
    return GateRows(
        np.asarray(log.losses, dtype=np.float64),
        np.asarray(log.propensities, dtype=np.float64),
        np.asarray(challenger.log_action_probability_on(log), dtype=np.float64),
        None if champion is None else np.asarray(champion.log_action_probability_on(log)),
        tuple(float(v) for v in log.loss_bounds),
        policy_total_variation(challenger, champion, log),
        window_of(log),
    )


def weight_bound(propensities: Any, min_propensity: float | None) -> float | None:
    """The declared weight bound B = 1 / ``min_propensity`` (None: none declared).

    Raises
    ------
    ValueError
        If ``min_propensity`` is not in (0, 1], or rows have a propensity below it (then the
        declaration is wrong; :func:`gate_decision` blocks on such rows instead).
    """
    if min_propensity is None:
        return None
    value = float(min_propensity)
    if not 0.0 < value <= 1.0:
        raise ValueError(f"min_propensity must be in (0, 1], got {min_propensity!r}")
    p = np.asarray(propensities, dtype=np.float64)
    _check_values(
        p < value * (1 - 1e-12), "propensity", f"are below the declared min_propensity {value:g}"
    )
    return 1.0 / value


def floor_violations(propensities: Any, min_propensity: float | None) -> np.ndarray | int:
    """How many rows (per log, last axis) have a propensity below the declared floor.

    Any such row is a failed gate precondition (:func:`gate_decision` blocks): the bound
    that trusts B = 1/floor is not valid on such a log, and dropping the rows would leave a
    sample conditioned on the well-logged actions. 0 when no floor is declared.

    Raises
    ------
    ValueError
        If ``min_propensity`` is not in (0, 1].
    """
    p = np.asarray(propensities, dtype=np.float64)
    if min_propensity is None:
        return np.zeros(p.shape[:-1], dtype=np.int64) if p.ndim > 1 else 0
    weight_bound(np.ones(1), min_propensity)  # the value itself must be in (0, 1]
    below = np.sum(p < float(min_propensity) * (1 - 1e-12), axis=-1)
    return below if p.ndim > 1 else int(below)


def _below_floor(propensities: np.ndarray, min_propensity: float | None) -> str | None:
    """The failed-precondition line when rows are below the declared floor (None: none are)."""
    if not floor_violations(propensities, min_propensity):
        return None
    below = propensities < float(min_propensity) * (1 - 1e-12)
    return (
        f"failed: precondition: {int(below.sum()):,} of {below.size:,} test rows have a "
        f"propensity below the declared min_propensity {float(min_propensity):g} (smallest "
        f"{float(propensities[below].min()):.3g}): the declared floor is wrong, so the bound "
        "it gives is not valid; the gate does not decide on such a log. Fix the log's "
        "metadata min_propensity or checks.min_propensity (or declare none)"
    )


def gate_decision(
    rows: GateRows,
    *,
    attempt: Attempt | None,
    estimator: str = "ips",
    clip: float | None = None,
    confidence_level: float = 0.95,
    min_improvement: float = 0.0,
    min_ess: float = 100.0,
    interval: str = "t",
    failed_checks: Sequence[str] = (),
    randomized: bool = False,
    min_propensity: float | None = None,
    order_seed: int | None = None,
) -> PolicyComparison:
    r"""Decide whether the challenger should replace the champion, from the rows' vectors.

    .. math::

        \text{promote} \iff U_\sigma < -\text{min\_improvement}, \qquad
        P_{\sigma, V, \text{rows}}\Big(U_\sigma < \tfrac1n \textstyle\sum_i
        \big(R_i(\text{chal}) - R_i(\text{champ})\big)\Big) \le \alpha_k

    where U_σ is the betting upper confidence bound of
    :func:`~poem.estimators.compare.compare_policies` on the importance weights
    rᵢ = π(yᵢ|xᵢ)/pᵢ (r^{champ} ≡ 1 for the logging policy) with the rows in the random
    order σ (and, with ``randomized``, the coin V) drawn from the attempt's fresh entropy,
    Rᵢ the risks at row i's context and time and αₖ the α of this attempt on the window
    (``attempt``; else 1 − ``confidence_level``, spent outside any ledger). The probability
    is over the test rows given their contexts *and* over the fresh draw: a seed given by
    the caller is a replay of one draw, not a fresh attempt. The challenger's ESS must also
    reach ``min_ess``, no check may have failed, and no test row may lie below the declared
    ``min_propensity`` (a failed precondition: the gate does not decide on such rows).

    Parameters
    ----------
    rows : GateRows
        The test rows' vectors (:func:`gate_rows`).
    attempt : Attempt or None
        This attempt on the window (:func:`poem.ledger.next_attempt`, with the entropy of
        its order and coin): its α replaces 1 − ``confidence_level``. Required: None says
        the decision spends the full α outside any ledger (and the result says so).
    estimator, clip, min_improvement, min_ess, interval
        As for :func:`~poem.estimators.compare.compare_policies`.
    confidence_level : float, default=0.95
        One-sided level 1 − α when there is no ``attempt``, i.e. 1 − α.
    failed_checks : sequence of str, default=()
        Names of data or propensity checks that did not pass; any blocks promotion.
    randomized : bool, default=False
        Also promote when the final capital reaches U/α, with U
        (:func:`~poem.estimators.improvement.decision_coin`) drawn from the same entropy.
    min_propensity : float or None, default=None
        The logger's minimum propensity as *declared* before the rows were seen (log
        metadata ``min_propensity`` or ``checks.min_propensity``), so every weight is
        ≤ 1/min_propensity; None: no bound (only terms that need none are used).
    order_seed : int or None, default=None
        Only without ``attempt`` (an attempt carries its own): a given seed replays that
        draw (recorded as given); None draws fresh entropy.

    Returns
    -------
    PolicyComparison
        As :func:`~poem.estimators.compare.compare_policies`'s, with the attempt and the
        entropy recorded.

    Raises
    ------
    ValueError
        As :func:`~poem.estimators.compare.compare_policies`; when ``order_seed`` is given
        with an ``attempt``.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). JMLR 16, arXiv:1502.02362, Eq. (1) (IPS).
    Waudby-Smith & Ramdas (2024), JRSS-B 86(1), arXiv:2010.09686 (the bound).
    Ramdas & Manole (2023), arXiv:2304.02611, §4 (randomized Ville).
    """
    seed, given = attempt_entropy(attempt, order_seed)
    precondition = _below_floor(rows.propensities, min_propensity)
    bound = None if precondition else weight_bound(rows.propensities, min_propensity)
    chal_w = importance_weights(rows.challenger_probabilities, rows.propensities)
    if rows.champion_probabilities is None:
        champ_w = np.ones(rows.losses.size)  # the logging policy: r_i = p_i / p_i
    else:
        champ_w = importance_weights(rows.champion_probabilities, rows.propensities)
    level = confidence_level if attempt is None else attempt.confidence_level
    comparison = compare_policies(
        rows.losses,
        chal_w,
        champ_w,
        confidence_level=level,
        min_improvement=min_improvement,
        min_ess=min_ess,
        estimator=estimator,
        clip=clip,
        interval=interval,
        loss_baseline=rows.loss_bounds[1],  # translated losses δ − δ_max ≤ 0 (DESIGN §4.1)
        loss_bounds=rows.loss_bounds,
        max_weight=bound,
        randomization=decision_coin(seed) if randomized else None,
        order_seed=seed,
        total_variation=None if rows.champion_probabilities is None else rows.total_variation,
    )
    reasons = tuple(comparison.reasons)
    if precondition:
        reasons += (precondition,)
    reasons += attempt_reasons(seed, given, attempt, level)
    if attempt is not None:
        comparison = replace(comparison, attempt=attempt.number, family_alpha=attempt.family_alpha)
    reasons += tuple(f"check did not pass: {c}" for c in failed_checks)
    promote = comparison.promote and not failed_checks and not precondition
    return replace(comparison, reasons=reasons, promote=promote, seed_given=given)


def counterfactual_ab_test(
    challenger: Any, champion: Any, log: Any, **options: Any
) -> PolicyComparison:
    """:func:`gate_decision` on :func:`gate_rows` of ``challenger`` and ``champion`` on ``log``.

    Parameters
    ----------
    challenger : StochasticPolicy
        The newly trained policy.
    champion : StochasticPolicy or None
        The production policy; None means the logging policy (weights ≡ 1).
    log : LoggedBandit
        The held-out test log (never used for training or selection).
    **options
        The keyword arguments of :func:`gate_decision` (``attempt`` required).

    Returns
    -------
    PolicyComparison
    """
    return gate_decision(gate_rows(challenger, champion, log), **options)
