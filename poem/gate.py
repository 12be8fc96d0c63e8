"""The counterfactual A/B gate on a log: challenger vs champion policy (DESIGN §5).

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

from poem.estimators.compare import PolicyComparison, compare_policies
from poem.estimators.weights import _check_values, importance_weights
from poem.ledger import Attempt

__all__ = [
    "GateRows",
    "counterfactual_ab_test",
    "decision_coin",
    "gate_decision",
    "gate_rows",
    "policy_total_variation",
    "weight_bound",
]


def decision_coin(policy: Any) -> float:
    r"""The U ∈ (0, 1] of a randomized gate decision, reproducible from the challenger itself.

    .. math:: U = (h + 1) / 2^{64}

    where h is the first 64 bits of the SHA-256 of what the policy serves (family,
    coefficients w, temperature and exploration floor: :meth:`StochasticPolicy.digest`). The
    challenger is fitted without the test rows, so U is independent of the test log, as the
    randomized decision (``randomization=`` of
    :func:`~poem.estimators.compare.compare_policies`) needs; re-running the gate gives the
    same U, so a rejected challenger cannot draw again.

    Parameters
    ----------
    policy : StochasticPolicy
        The challenger.

    Returns
    -------
    float
        U in (0, 1].

    References
    ----------
    Ramdas & Manole (2023), Randomized and exchangeable improvements of Markov's,
    Chebyshev's and Chernoff's inequalities, arXiv:2304.02611, §4 (randomized Ville).
    """
    return (int(policy.digest()[:16], 16) + 1) / 2.0**64


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
        TV(xᵢ) = ½ Σ_y |π_c(y|xᵢ) − π_h(y|xᵢ)| (:func:`policy_total_variation`); None when
        the champion is the logging policy or the policies' full distributions are unknown.
    """

    losses: np.ndarray
    propensities: np.ndarray
    challenger_probabilities: np.ndarray
    champion_probabilities: np.ndarray | None
    loss_bounds: tuple[float, float]
    total_variation: np.ndarray | None = None


_TV_CHUNK = 1_000_000  # probabilities (rows × actions) held at once per policy


def policy_total_variation(challenger: Any, champion: Any, log: Any) -> np.ndarray | None:
    r"""The two policies' total variation distance at each row's context.

    .. math:: \mathrm{TV}(x_i) = \tfrac12 \textstyle\sum_y |\pi_c(y|x_i) - \pi_h(y|x_i)|

    computed from the served distributions (``predict_proba``) of discrete-action policies on
    the log's contexts, in chunks of rows. It depends on the contexts only, never on the
    logged actions or losses, so the gate may use it before the rows' outcomes are seen.

    Returns
    -------
    ndarray of shape (n_samples,) or None
        TV(xᵢ) (for a :class:`~poem.log_rows.RowsView` of two
        :class:`~poem.log_rows.FixedProbabilities`, the TV its workers computed). None when
        ``champion`` is None (the logging policy), either policy is not a discrete-action
        :class:`StochasticPolicy` or the log has no contexts.
    """
    if champion is None:
        return None
    policies = (challenger, champion)
    contexts = getattr(log, "contexts", None)
    given = getattr(log, "total_variation", None)  # computed where the rows live
    if given is not None and all(hasattr(p, "probabilities") for p in policies):
        return np.asarray(given, dtype=np.float64)
    if contexts is None:
        return None
    if any(getattr(getattr(p, "family", None), "name", None) != "discrete" for p in policies):
        return None
    n = int(contexts.shape[0])
    step = max(1, _TV_CHUNK // max(int(getattr(challenger.family, "n_actions", 1) or 1), 1))
    out = np.empty(n)
    for start in range(0, n, step):
        rows = contexts[start : start + step]
        pc, ph = (np.asarray(p.predict_proba(rows), dtype=np.float64) for p in policies)
        out[start : start + step] = 0.5 * np.abs(pc - ph).sum(axis=1)
    return np.clip(out, 0.0, 1.0)


def gate_rows(challenger: Any, champion: Any, log: Any) -> GateRows:
    """The :class:`GateRows` of two policies on a log (or on a partitioned test split's view).

    ``champion`` None is the logging policy; policies need ``log_action_probability_on``;
    discrete-action policies on a log with contexts also give :func:`policy_total_variation`.
    """
    return GateRows(
        np.asarray(log.losses, dtype=np.float64),
        np.asarray(log.propensities, dtype=np.float64),
        np.asarray(challenger.log_action_probability_on(log), dtype=np.float64),
        None if champion is None else np.asarray(champion.log_action_probability_on(log)),
        tuple(float(v) for v in log.loss_bounds),
        policy_total_variation(challenger, champion, log),
    )


def weight_bound(propensities: Any, min_propensity: float | None) -> float | None:
    """The declared weight bound B = 1 / ``min_propensity`` (None: none declared).

    Raises
    ------
    ValueError
        If ``min_propensity`` is not in (0, 1], or rows have a propensity below it (then the
        declaration is wrong: ``check`` reports and quarantines such rows).
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


def gate_decision(
    rows: GateRows,
    *,
    estimator: str = "ips",
    clip: float | None = None,
    confidence_level: float = 0.95,
    min_improvement: float = 0.0,
    min_ess: float = 100.0,
    interval: str = "t",
    failed_checks: Sequence[str] = (),
    randomization: float | None = None,
    min_propensity: float | None = None,
    order_seed: int | None = 0,
    attempt: Attempt | None = None,
) -> PolicyComparison:
    r"""Decide whether the challenger should replace the champion, from the rows' vectors.

    .. math::

        \text{promote} \iff U < -\text{min\_improvement}, \qquad
        P\Big(U < \tfrac1n \textstyle\sum_i \big(R_i(\text{chal}) - R_i(\text{champ})\big)
        \Big) \le \alpha_k

    where U is the betting upper confidence bound of
    :func:`~poem.estimators.compare.compare_policies` on the importance weights
    rᵢ = π(yᵢ|xᵢ)/pᵢ (r^{champ} ≡ 1 for the logging policy) with the weight bound
    B = 1/``min_propensity``, Rᵢ the risks at row i's context and time and αₖ the α of this
    attempt on the window (``attempt``; else 1 − ``confidence_level``). The challenger's ESS
    must also reach ``min_ess`` and no check may have failed.

    Parameters
    ----------
    rows : GateRows
        The test rows' vectors (:func:`gate_rows`).
    estimator, clip, min_improvement, min_ess, interval, randomization, order_seed
        As for :func:`~poem.estimators.compare.compare_policies` (``randomization``, e.g.
        from :func:`decision_coin`).
    confidence_level : float, default=0.95
        One-sided level 1 − α when there is no ``attempt``, i.e. 1 − α.
    failed_checks : sequence of str, default=()
        Names of data or propensity checks that did not pass; any blocks promotion.
    min_propensity : float or None, default=None
        The logger's minimum propensity as *declared* before the rows were seen (log
        metadata ``min_propensity`` or ``checks.min_propensity``), so every weight is
        ≤ 1/min_propensity; None: no bound (only terms that need none are used).
    attempt : Attempt or None, default=None
        This attempt on the window (:func:`poem.ledger.next_attempt`): its α replaces
        1 − ``confidence_level`` for the decision and the reported intervals.

    Returns
    -------
    PolicyComparison
        As :func:`~poem.estimators.compare.compare_policies`'s, with the attempt recorded.

    Raises
    ------
    ValueError
        As :func:`~poem.estimators.compare.compare_policies`, and when a propensity is
        below the declared ``min_propensity``.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). JMLR 16, arXiv:1502.02362, Eq. (1) (IPS).
    Waudby-Smith & Ramdas (2024), JRSS-B 86(1), arXiv:2010.09686 (the bound).
    """
    bound = weight_bound(rows.propensities, min_propensity)
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
        randomization=randomization,
        order_seed=order_seed,
        total_variation=None if rows.champion_probabilities is None else rows.total_variation,
    )
    reasons = tuple(comparison.reasons)
    if attempt is not None:
        reasons += (
            f"attempt {attempt.number} on this test window against this champion: "
            f"alpha = {attempt.alpha:.4g} of the window's {attempt.family_alpha:.4g}",
        )
        comparison = replace(comparison, attempt=attempt.number, family_alpha=attempt.family_alpha)
    reasons += tuple(f"check did not pass: {c}" for c in failed_checks)
    return replace(comparison, reasons=reasons, promote=comparison.promote and not failed_checks)


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
        The keyword arguments of :func:`gate_decision`.

    Returns
    -------
    PolicyComparison
    """
    return gate_decision(gate_rows(challenger, champion, log), **options)
