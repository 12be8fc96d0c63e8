"""The counterfactual A/B gate on a log: challenger vs champion policy (DESIGN §5).

:func:`counterfactual_ab_test` turns two policies and the held-out test log into importance
weights and delegates the decision rule to
:func:`poem.estimators.compare.compare_policies` (the gate's math lives there). Before any
promotion the champion is the logging policy itself, whose weights are identically 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from poem.data import LoggedBandit
from poem.estimators.compare import PolicyComparison, compare_policies
from poem.estimators.weights import importance_weights

__all__ = ["counterfactual_ab_test", "decision_coin"]


def decision_coin(policy: Any) -> float:
    r"""The U ∈ (0, 1] of a randomized gate decision, reproducible from the challenger itself.

    .. math:: U = (h + 1) / 2^{64}

    where h is the first 64 bits of the SHA-256 of the policy's family, coefficients w,
    temperature α and exploration floor ε (:meth:`StochasticPolicy.digest`), i.e. of what it
    serves. The randomized decision (``randomization=`` of
    :func:`~poem.estimators.compare.compare_policies`) needs U independent of the test
    log: the challenger is fitted on the training (and validation) rows only, so its digest
    is, and across challengers it is uniform for all practical purposes. Because U is a
    function of the challenger, re-running the gate — or retraining that reproduces the same
    w — gives the same U and the same decision; a rejected challenger cannot draw again.

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


def counterfactual_ab_test(
    challenger: Any,
    champion: Any,
    log: LoggedBandit,
    *,
    estimator: str = "ips",
    clip: float | None = None,
    confidence_level: float = 0.95,
    min_improvement: float = 0.0,
    min_ess: float = 100.0,
    interval: str = "t",
    failed_checks: Sequence[str] = (),
    randomization: float | None = None,
) -> PolicyComparison:
    r"""Decide whether ``challenger`` should replace ``champion``, on ``log`` only.

    .. math::

        \text{promote} \iff U < -\text{min\_improvement}, \qquad
        P\big(U < R(\text{chal}) - R(\text{champ})\big) \le \alpha \text{ at every } n

    where U is the betting upper confidence bound of :func:`compare_policies` on the
    importance weights rᵢ = π(yᵢ|xᵢ)/pᵢ of each policy (r^{champ} ≡ 1 when the champion is
    the logging policy) and the log's loss bounds, and 1 − α the confidence level; the
    challenger's ESS must also reach ``min_ess`` and no check may have failed.

    Parameters
    ----------
    challenger : StochasticPolicy
        The newly trained policy.
    champion : StochasticPolicy or None
        The production policy; None means the logging policy (weights ≡ 1).
    log : LoggedBandit
        The held-out test log (never used for training or selection).
    estimator : {"ips", "snips", "clipped_ips"}, default="ips"
        Risk estimator of the paired comparison.
    clip : float or None, default=None
        Weight cap M for ``"clipped_ips"``, i.e. M.
    confidence_level : float, default=0.95
        One-sided level 1 − α of the upper bound, i.e. 1 − α.
    min_improvement : float, default=0.0
        Required risk reduction (loss units).
    min_ess : float, default=100.0
        Minimum effective sample size of the challenger's weights.
    interval : {"t", "normal", "bootstrap"}, default="t"
        Method of the reported intervals (the decision uses the betting bound).
    failed_checks : sequence of str, default=()
        Names of data or propensity checks that did not pass; any blocks promotion.
    randomization : float or None, default=None
        U in (0, 1] for the randomized decision (typically :func:`decision_coin` of the
        challenger); None: deterministic.

    Returns
    -------
    PolicyComparison
        Both estimates, the difference, its upper bound, the decision and its reasons.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). JMLR 16, arXiv:1502.02362, Eq. (1) (IPS).
    Waudby-Smith & Ramdas (2024), JRSS-B 86(1), arXiv:2010.09686 (the bound).
    """
    chal_w = importance_weights(challenger.log_action_probability_on(log), log.propensities)
    if champion is None:
        champ_w = np.ones(log.n_rows)  # the logging policy: r_i = p_i / p_i
    else:
        champ_w = importance_weights(champion.log_action_probability_on(log), log.propensities)
    comparison = compare_policies(
        log.losses,
        chal_w,
        champ_w,
        confidence_level=confidence_level,
        min_improvement=min_improvement,
        min_ess=min_ess,
        estimator=estimator,
        clip=clip,
        interval=interval,
        loss_baseline=log.loss_bounds[1],  # translated losses δ − δ_max ≤ 0 (DESIGN §4.1)
        loss_bounds=log.loss_bounds,
        randomization=randomization,
    )
    if failed_checks:
        reasons = tuple(comparison.reasons) + tuple(
            f"check did not pass: {c}" for c in failed_checks
        )
        comparison = replace(comparison, promote=False, reasons=reasons)
    return comparison
