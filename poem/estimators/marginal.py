r"""Per-label (marginal) importance weights of a multilabel policy against a known logger.

When the loss of a label vector is a sum of per-label terms (the Hamming loss is) and the
logger π₀ draws the labels independently (every factorized policy of DESIGN §4.7 does), the
risk of a factorized policy π is

.. math::

    R(\pi) = E_{\pi_0}\big[\delta_i\, m_i\big], \qquad
    m_i = \sum_{l=1}^{q} \frac{\pi_l(y_{il}|x_i)}{\pi_{0,l}(y_{il}|x_i)} - q + 1

(the pseudoinverse estimator of Swaminathan, Krishnamurthy, Agarwal, Dudík, Langford, Jose &
Zitouni 2017, "Off-policy evaluation for slate recommendation", Eq. 5, for independent
slots): E[δ·π_l/π₀,l] counts label l under π and every other label under π₀, and the
−(q − 1) removes the q − 1 surplus copies of E_{π₀}[δ]. Eᵢ[mᵢ] = 1, so IPS and SNIPS with the
weights mᵢ are the usual estimators with rᵢ = π(yᵢ|xᵢ)/pᵢ replaced by mᵢ. The joint weight
rᵢ is a product of q label ratios, whose variance grows geometrically in q; mᵢ is a sum, whose
variance grows linearly. mᵢ can be negative (a label π puts less mass on than π₀ did).

The logger's per-label probabilities are those of a known policy (the champion that served
the rows): :func:`marginal_weights` checks that it reproduces every row's propensity.
Biased when the loss is not additive over labels, which is why the gate
(:mod:`poem.gate`) never uses these weights: they serve the search and the selection only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from poem.estimators.ips import Estimate
from poem.estimators.reliability import interval_flags

__all__ = [
    "LOGGER_RTOL",
    "MarginalWeights",
    "check_logger",
    "known_logger",
    "label_ratios",
    "logged_by",
    "marginal_scores",
    "marginal_weights",
    "propensity_mismatch",
]

LOGGER_RTOL = 1e-6  # |π₀(yᵢ|xᵢ)/pᵢ − 1| allowed for the policy said to have logged row i


def propensity_mismatch(joint: Any, propensities: Any, rtol: float = LOGGER_RTOL) -> tuple:
    """``(rows, largest error)``: rows where |π₀(yᵢ|xᵢ)/pᵢ − 1| > ``rtol`` (NaN counts), its max."""
    error = np.abs(np.asarray(joint, dtype=float) / np.asarray(propensities, dtype=float) - 1.0)
    bad = int(np.count_nonzero(~(error <= rtol)))
    return bad, float(np.nanmax(error)) if bad else 0.0


def check_logger(logger: Any, log: Any, what: str = "rows") -> np.ndarray:
    """π₀,l(1|xᵢ) of ``logger`` on the log's rows, after checking it logged every one.

    Raises
    ------
    ValueError
        If the log is not multilabel, or ``logger`` does not reproduce a row's propensity
        (relative error > :data:`LOGGER_RTOL`); the message gives the count.
    """
    policy = getattr(logger, "policy_", logger)
    if log.family != "multilabel" or getattr(policy, "family", None) is None:
        raise ValueError(
            f"per-label weights need a multilabel log and its logging policy, got a "
            f"{log.family!r} log and {type(logger).__name__}"
        )
    bad, largest = propensity_mismatch(policy.log_action_probability_on(log), log.propensities)
    if bad:
        raise ValueError(
            f"the logging policy does not reproduce the propensity of {bad} of {log.n_rows} "
            f"{what} (largest relative error {largest:.3g} > {LOGGER_RTOL:g}): "
            "they were not logged by it, so its per-label probabilities are not the logger's"
        )
    return policy.predict_proba(log.contexts)


def logged_by(policy: Any, log: Any, rtol: float = LOGGER_RTOL) -> bool:
    """Whether ``policy`` (as served) reproduces every row's propensity pᵢ of ``log``.

    |π(yᵢ|xᵢ)/pᵢ − 1| ≤ ``rtol`` on every row: the rows were logged by it (to round-off).
    False for another family or shape, and for an empty log.
    """
    policy = getattr(policy, "policy_", policy)
    family = getattr(policy, "family", None)
    if family is None or log is None or log.n_rows == 0 or family.name != log.family:
        return False
    if (family.n_features, family.n_actions) != (log.n_features, log.n_actions):
        return False
    joint = policy.log_action_probability_on(log)
    return propensity_mismatch(joint, log.propensities, rtol)[0] == 0


def known_logger(policy: Any, *logs: Any) -> Any:
    """``policy`` when it logged every row of every multilabel log given, else None.

    The search and the selection then score with per-label weights (:func:`marginal_scores`,
    ``poem.learners.learning_evidence.paired_terms``); None keeps the joint weights.
    """
    if policy is None or not logs or any(log is None or log.family != "multilabel" for log in logs):
        return None
    return policy if all(logged_by(policy, log) for log in logs) else None


def marginal_weights(policy: Any, logger_marginals: np.ndarray, log: Any) -> np.ndarray:
    r"""mᵢ = Σ_l π_l(yᵢ_l|xᵢ)/π₀,l(yᵢ_l|xᵢ) − q + 1 of ``policy`` on the log's rows.

    ``logger_marginals`` is π₀,l(1|xᵢ), shape (n, q) (:func:`check_logger`).
    """
    Y = np.asarray(log.actions) > 0
    sig = policy.predict_proba(log.contexts)
    return np.sum(label_ratios(sig, Y, logger_marginals), axis=1) - Y.shape[1] + 1.0


def label_ratios(sig: np.ndarray, Y: np.ndarray, logger_marginals: np.ndarray) -> np.ndarray:
    """rᵢ_l = π_l(yᵢ_l|xᵢ)/π₀,l(yᵢ_l|xᵢ) from both policies' P(label l on), shape (n, q)."""
    on = np.asarray(Y) > 0
    return np.where(on, sig, 1.0 - sig) / np.where(on, logger_marginals, 1.0 - logger_marginals)


@dataclass(frozen=True)
class MarginalWeights:
    """A policy scored with per-label weights against ``logger`` (for partitioned rows).

    :meth:`weights_on` is what :func:`poem.log_rows.policy_weight_rows` computes on each
    partition where its rows live, the logger checked on every row.
    """

    policy: Any
    logger: Any

    def weights_on(self, log: Any) -> np.ndarray:
        """mᵢ of ``policy`` on ``log``'s rows (ValueError unless ``logger`` logged them)."""
        return marginal_weights(self.policy, check_logger(self.logger, log), log)


def marginal_scores(
    losses: Any, weights: Any, loss_bounds: tuple[float, float], confidence_level: float = 0.95
) -> tuple[Estimate, Estimate]:
    r"""IPS and SNIPS estimates with the per-label weights mᵢ (t intervals, two-sided).

    .. math::

        \hat R = c + \frac{1}{n}\sum_i (\delta_i - c)\, m_i, \qquad
        \hat R_{SN} = c + \frac{\sum_i (\delta_i - c)\, m_i}{\sum_i m_i}, \qquad
        n_e = \frac{(\sum_i m_i)^2}{\sum_i m_i^2}

    with c = δ_max (the translation of :func:`poem.estimators.ips.evaluate_rows`), the
    standard errors of the terms (δᵢ − c)mᵢ and, for SNIPS, of the delta-method terms
    mᵢ(δᵢ − c − (R̂_SN − c))/m̄, and n_e the effective sample size. SNIPS is NaN when Σmᵢ ≤ 0
    (it ranks last, as an undefined SNIPS does). The estimators are those of
    :func:`~poem.learners._trials.rows_scores` with rᵢ replaced by mᵢ.
    """
    level = float(confidence_level)
    c = float(loss_bounds[1])
    d = np.asarray(losses, dtype=np.float64) - c
    m = np.asarray(weights, dtype=np.float64)
    n = d.size
    if n < 2 or m.shape != d.shape or not np.all(np.isfinite(m)):
        raise ValueError(f"need >= 2 rows of finite weights, got {m.shape} for {d.shape} losses")
    t = float(stats.t.ppf(0.5 + level / 2.0, n - 1))
    total = float(m.sum())
    ess = total**2 / float(m @ m) if total > 0 else 0.0
    u = d * m
    out = []
    for name, value, terms in (
        ("ips", float(u.mean()), u),
        ("snips", *_ratio(u, m, total)),
    ):
        se = float(terms.std(ddof=1) / math.sqrt(n)) if np.all(np.isfinite(terms)) else math.nan
        flags = interval_flags(terms, np.abs(m)) if np.isfinite(se) else ()
        out.append(
            Estimate(name, value + c, se, value + c - t * se, value + c + t * se, int(n), level,
                     ess, 0.0, "t", flags)
        )  # fmt: skip
    return out[0], out[1]


def _ratio(u: np.ndarray, m: np.ndarray, total: float) -> tuple[float, np.ndarray]:
    """SNIPS Σuᵢ/Σmᵢ and its delta-method terms (NaN when Σmᵢ ≤ 0)."""
    if not total > 0:
        return math.nan, np.full(u.shape, math.nan)
    value = float(u.sum()) / total
    return value, (u - m * value) / (total / u.size)
