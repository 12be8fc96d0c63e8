r"""The gate on a log whose propensities are estimated (issue 38; DESIGN §5).

When the log recorded no propensities (``propensity_source: estimated`` in its metadata) the
gate's options (``ips``, ``clipped_ips``, ``snips``) are not valid: each needs the logger's
true π₀(yᵢ|xᵢ). The gate then decides on doubly robust terms with a margin for the propensity
model's error (:mod:`poem.estimators.estimated_terms`), whatever ``gate.estimator`` says, and
labels the decision ``propensity_source: estimated``.

What is guaranteed, exactly. Condition on the test window's contexts and on the *fit rows*
(rows of the same log that are not test rows: the validation split in the flow), from which
the gate fits a loss model μ̂ and a propensity model π̂₀ (poem.logging_policy's default
model, multinomial logistic regression, Laplace-smoothed). If, at every test context x and
every action a, the true logging probability satisfies |π₀(a|x)/π̂₀(a|x) − 1| ≤ η, and the
test rows are independent draws from π₀ given their contexts, then over the test rows and the
attempt's fresh entropy the chance that an attempt promotes a challenger whose window-average
risk is not below the champion's is at most the attempt's α. The loss model needs no
assumption (any μ̂ in the loss bounds keeps the terms conservative).

Which η. A declared one (``propensity_error_value``) makes the condition the caller's stated
assumption. By default η = η̂ (:func:`poem.estimators.estimated_terms.propensity_error`): the
propensity model's relative calibration error measured on the fit rows cross-fitted (5 folds,
every fit row predicted by a model that did not see it), per action in 5 bins of π̂₀ and 5
bins of the gate's weight |Δ(a|x)|/π̂₀(a|x) (Δ = champion − challenger; the challenger
against the logger), **less the bins' sampling noise** (Bonferroni z at β = 0.05): the
miscalibration the held-out rows demonstrate. A calibrated model gets η̂ = 0 with
probability about 0.95, and then the decision rests on the double robustness of the terms:
their bias given x is
Σ_a Δ(a)(μ − μ̂)(a)(π₀/π̂₀ − 1)(a), a *product* of the two models' errors (Dudík, Langford &
Li 2011, Theorem 1), not bounded by anything the gate measures.

What is **not** guaranteed: that the η condition holds, with η̂ in particular: η̂ estimates
the model's error, it is not an upper bound on sup_x |π₀/π̂₀ − 1| (a model wrong inside a bin
or at a few contexts can look calibrated; the noise subtracted hides an error smaller than
it; a well-specified model's finite-sample error is not added). What holds instead is
measured (``benchmarks/gate_estimated.py``: false promotion on exact A/A within 5 % + 2 s.e.
with a well-specified and a misspecified propensity model, n = 2,000 and 20,000; docs/gate.md).
Only the discrete family is supported; other families are refused with one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sklearn.base import clone, is_classifier
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold

from poem.estimators._loss_model import loss_model_features
from poem.estimators.betting import betting_lower_bound
from poem.estimators.bounds import confidence_interval, standard_error
from poem.estimators.compare import PolicyComparison
from poem.estimators.estimated_terms import estimated_dr_terms, propensity_error
from poem.estimators.improvement import decision_coin, shuffle_rows
from poem.estimators.ips import Estimate
from poem.estimators.weights import effective_sample_size
from poem.ledger import Attempt, TestWindow, attempt_entropy, attempt_reasons, window_of
from poem.logging_policy import _class_probabilities, _model

__all__ = ["ESTIMATED_LABEL", "EstimatedGateRows", "estimated_gate_decision", "estimated_gate_rows"]

ESTIMATED_LABEL = "rests on estimated propensities"
_ETA_FOLDS = 5  # folds of the fit rows for the cross-fitted η̂


@dataclass(frozen=True)
class EstimatedGateRows:
    """What the gate decides from when the propensities are estimated (discrete family).

    Attributes
    ----------
    losses, actions : ndarray of shape (n_samples,)
        δᵢ and yᵢ of the test rows.
    challenger, champion : ndarray of shape (n_samples, K)
        π_c(·|xᵢ) and π_h(·|xᵢ) (champion None: the logging policy).
    logger : ndarray of shape (n_samples, K)
        π̂₀(·|xᵢ) of the propensity model fitted on the fit rows.
    loss_model : ndarray of shape (n_samples, K)
        μ̂(xᵢ, ·) of the loss model fitted on the fit rows.
    loss_bounds : tuple of float
        (δ_min, δ_max).
    propensity_error : float
        η of the margin.
    window : TestWindow or None
        The test rows' identity (the ledger's key).
    provenance : dict
        How the models were fitted (fit rows, model, η and where it came from).
    """

    losses: np.ndarray
    actions: np.ndarray
    challenger: np.ndarray
    champion: np.ndarray | None
    logger: np.ndarray
    loss_model: np.ndarray
    loss_bounds: tuple[float, float]
    propensity_error: float
    window: TestWindow | None = None
    provenance: dict | None = None


def _propensity_model(random_state: int) -> Any:
    # poem.logging_policy's default model (multinomial logistic regression, L2 by held-out
    # log loss) and its Laplace smoothing: the one definition of the propensity model

    return _model("logistic", None, random_state), _class_probabilities


def _loss_predictions(fit_log: Any, test_log: Any, loss_model: Any) -> np.ndarray:
    """μ̂(xᵢ, a) on the test rows of a model fitted on the fit rows' logged pairs only."""
    features, offsets = loss_model_features(fit_log)
    lo, hi = fit_log.loss_bounds
    target = (np.asarray(fit_log.losses, dtype=np.float64) - lo) / (hi - lo if hi > lo else 1.0)
    binary = bool(np.all((target == 0) | (target == 1)))
    if loss_model is None:
        loss_model = LogisticRegression(C=1.0, max_iter=1000) if binary else Ridge(alpha=1.0)
    logged = offsets[:-1] + np.asarray(fit_log.actions, dtype=np.int64)
    classifier = is_classifier(loss_model)
    if classifier:
        target = target.astype(int)
    if classifier and np.unique(target).size < 2:
        values = np.full(test_log.n_rows * test_log.n_actions, float(target[0]))
    else:
        fitted = clone(loss_model).fit(features[logged], target)
        test_features, _ = loss_model_features(test_log)
        values = (
            fitted.predict_proba(test_features)[:, 1]
            if classifier
            else fitted.predict(test_features)
        )
    return np.clip(lo + (hi - lo) * values, lo, hi).reshape(test_log.n_rows, test_log.n_actions)


def estimated_gate_rows(
    challenger: Any,
    champion: Any,
    fit_log: Any,
    test_log: Any,
    *,
    propensity_error_value: float | None = None,
    propensity_model: Any = None,
    loss_model: Any = None,
    random_state: int = 0,
) -> EstimatedGateRows:
    """Fit the nuisance models on ``fit_log`` (never the test rows) and score ``test_log``.

    The propensity model π̂₀ (default: poem.logging_policy's) is fitted on every fit row and
    predicts π̂₀(·|x) at the test contexts; η is :func:`propensity_error` (per-action bins
    of p̂ and of the gate's weight |Δ(a|x)|/p̂(a|x), sampling noise subtracted) of the fit
    rows' out-of-fold predictions, 5 folds (unless ``propensity_error_value`` declares it).
    The loss model (default as :func:`poem.estimators.dr.fit_loss_model`) is
    fitted on the fit rows' logged pairs.

    Parameters
    ----------
    challenger, champion : StochasticPolicy (champion None: the logging policy)
        The two policies.
    fit_log, test_log : LoggedBandit
        Discrete-family logs: rows to fit on (not test rows) and the test rows.
    propensity_error_value : float or None, default=None
        A declared η ≥ 0 (the caller's assumption |π₀/π̂₀ − 1| ≤ η); None measures η̂.
    propensity_model : scikit-learn classifier or None, default=None
        Replaces poem.logging_policy's default model (e.g. a misspecified one, to measure).
    loss_model : scikit-learn estimator or None, default=None
        As for :func:`poem.estimators.dr.fit_loss_model`.
    random_state : int, default=0
        Seed of the folds and of the models.

    Returns
    -------
    EstimatedGateRows

    Raises
    ------
    ValueError
        One line when the family is not discrete, a log has too few rows or the declared η
        is negative or not finite.
    """
    for role, log in (("fit", fit_log), ("test", test_log)):
        if log.family != "discrete":
            raise ValueError(
                f"the gate on estimated propensities supports the discrete family only, the "
                f"{role} rows are {log.family!r}: log the propensities (data.propensity: logged)"
            )
    if fit_log.n_rows < 20:
        raise ValueError(
            f"the gate on estimated propensities needs >= 20 fit rows (not test rows) to fit its "
            f"models, got {fit_log.n_rows}"
        )
    est, probabilities = _propensity_model(random_state)
    if propensity_model is not None:
        est = propensity_model
    K = int(test_log.n_actions)
    X, y = np.asarray(fit_log.contexts, dtype=np.float64), np.asarray(fit_log.actions)
    Xt = np.asarray(test_log.contexts, dtype=np.float64)
    P = probabilities(est, X, y, Xt, K)
    eta, source = propensity_error_value, "declared"
    if eta is not None and not (np.isfinite(eta) and eta >= 0):
        raise ValueError(
            f"propensity_error_value (gate on estimated propensities) must be a finite number "
            f">= 0 or None (measure it), got {propensity_error_value!r}"
        )
    if eta is None:
        # cross-fitted: every fit row's p̂ from a model that did not see it (all fit rows
        # held out once, not half of them: less noise in the bins)
        out_of_fold = np.empty((y.size, K))
        folds = KFold(n_splits=_ETA_FOLDS, shuffle=True, random_state=random_state)
        for train, held in folds.split(X):
            out_of_fold[held] = probabilities(est, X[train], y[train], X[held], K)
        # bins also by the gate's weight |Δ(a|x)|/p̂(a|x) at the fit rows: where the DR
        # terms lean on the model (a model that ignores x is calibrated in bins of p̂)
        pc_fit = np.asarray(challenger.predict_proba(X), dtype=np.float64)
        delta = pc_fit if champion is None else np.asarray(champion.predict_proba(X)) - pc_fit
        weight = np.abs(delta) / out_of_fold
        eta, source = propensity_error(out_of_fold, y, keys=weight), "cross-fitted"
    rows = EstimatedGateRows(
        np.asarray(test_log.losses, dtype=np.float64),
        np.asarray(test_log.actions, dtype=np.int64),
        np.asarray(challenger.predict_proba(Xt), dtype=np.float64),
        None if champion is None else np.asarray(champion.predict_proba(Xt), dtype=np.float64),
        P,
        _loss_predictions(fit_log, test_log, loss_model),
        tuple(float(v) for v in test_log.loss_bounds),
        float(eta),
        window_of(test_log),
        {
            "fit_rows": int(fit_log.n_rows),
            "propensity_model": type(est).__name__,
            "propensity_error": float(eta),
            "propensity_error_source": source,
            "propensity_error_folds": _ETA_FOLDS if source == "cross-fitted" else 0,
        },
    )
    return rows


def _eta_source(provenance: dict) -> str:
    source = provenance.get("propensity_error_source", "given")
    if source != "cross-fitted":
        return source
    return (
        f"cross-fitted: the model's calibration error beyond its sampling noise on "
        f"{provenance.get('propensity_error_folds', '?')} folds of the fit rows, an estimate, "
        "not a bound"
    )


def _estimate(name: str, terms: np.ndarray, level: float, ess: float) -> Estimate:
    value, se, n = float(terms.mean()), standard_error(terms), int(terms.size)
    lower, upper = confidence_interval(value, se, n, level, "t")
    return Estimate(name, value, se, lower, upper, n, level, float(ess), 0.0, "t")


def estimated_gate_decision(
    rows: EstimatedGateRows,
    *,
    attempt: Attempt | None,
    estimator: str = "ips",
    confidence_level: float = 0.95,
    min_improvement: float = 0.0,
    min_ess: float = 100.0,
    failed_checks: Sequence[str] = (),
    randomized: bool = False,
    order_seed: int | None = None,
) -> PolicyComparison:
    r"""The gate's decision on estimated propensities (module docstring: the guarantee).

    .. math::

        \text{promote} \iff -\hat I_{LB} < -\text{min\_improvement}, \qquad
        \hat I_{LB} = \sup\{m : \max_t K_t(m) \ge 1/\alpha\}

    where K is the betting capital of :func:`~poem.estimators.betting.betting_lower_bound`
    on the terms of :func:`~poem.estimators.estimated_terms.estimated_dr_terms` (DR with the
    margin η Σ_a |Δ(a|xᵢ)| m(xᵢ, a), each row's bet capped by its own lower bound Lᵢ, a
    function of xᵢ), in the random order drawn from the attempt's entropy, with α the
    attempt's. The capital is a nonnegative supermartingale under the null when the η
    condition holds (module docstring). The challenger's ESS (of π_c(yᵢ|xᵢ)/π̂₀(yᵢ|xᵢ)) must
    reach ``min_ess`` and no check may have failed. (Translated IPS terms,
    :func:`~poem.estimators.estimated_terms.estimated_translated_terms`, are not bet on: their
    bias is first order in the propensity error, and with per-row bounds the DR terms alone
    had the power; ``benchmarks/gate_estimated.py``.)

    Parameters
    ----------
    rows : EstimatedGateRows
        :func:`estimated_gate_rows`.
    attempt, confidence_level, min_improvement, min_ess, failed_checks, randomized, order_seed
        As for :func:`poem.gate.gate_decision`.
    estimator : str, default="ips"
        ``gate.estimator``: not used (each option needs known propensities); named in the
        reasons.

    Returns
    -------
    PolicyComparison
        ``propensity_source="estimated"``; the estimates are the DR ones (``dr``).
    """
    seed, given = attempt_entropy(attempt, order_seed)
    level = confidence_level if attempt is None else attempt.confidence_level
    parts = estimated_dr_terms(
        rows.losses,
        rows.actions,
        rows.challenger,
        rows.champion,
        rows.logger,
        rows.loss_model,
        rows.loss_bounds,
        rows.propensity_error,
    )
    a, b = rows.loss_bounds
    # the DR terms' lower bounds are per row (functions of xᵢ): shuffled with the terms
    dr_terms, dr_lower = shuffle_rows(seed, parts.capital.terms, parts.capital.lower)
    coin = decision_coin(seed) if randomized else None
    lcb = betting_lower_bound(
        dr_terms,
        dr_lower,
        level,
        scale=float(b - a) if b > a else 1.0,
        max_bet_fraction=parts.capital.max_bet_fraction,
        randomization=coin,
    )
    ucb = -float(lcb)
    n_rows = np.arange(rows.losses.size)
    weights = rows.challenger[n_rows, rows.actions] / rows.logger[n_rows, rows.actions]
    champ_w = (
        np.ones_like(weights)
        if rows.champion is None
        else rows.champion[n_rows, rows.actions] / rows.logger[n_rows, rows.actions]
    )
    challenger = _estimate("dr", parts.challenger_dr, level, effective_sample_size(weights))
    champion = _estimate("dr", parts.champion_dr, level, effective_sample_size(champ_w))
    difference = _estimate(
        "dr_difference",
        -parts.dr,
        level,
        min(challenger.effective_sample_size, champion.effective_sample_size),
    )
    epsilon = float(min_improvement)
    improves = bool(ucb < -epsilon)
    enough = bool(challenger.effective_sample_size >= float(min_ess))
    eta, prov = rows.propensity_error, rows.provenance or {}
    reasons = (
        f"{'passed' if improves else 'failed'}: improvement: the one-sided {100 * level:g}% "
        f"upper confidence bound of R(challenger) - R(champion) (doubly robust terms on "
        f"estimated propensities, margin eta = {eta:.3g}, betting bound valid at every n) is "
        f"{ucb:.4g}, {'below' if improves else 'not below'} -min_improvement = {-epsilon:.4g}",
        f"{'passed' if enough else 'failed'}: effective sample size: the challenger's is "
        f"{challenger.effective_sample_size:,.1f} of {rows.losses.size:,} rows (on estimated "
        f"propensities), {'at least' if enough else 'below'} min_ess = {float(min_ess):,.4g}",
        f"assumed: {ESTIMATED_LABEL}: every true logging probability within a factor "
        f"(1 +/- {eta:.3g}) of the propensity model's at the test contexts (eta "
        f"{_eta_source(prov)}, models fitted on {prov.get('fit_rows', '?')} rows that are not "
        "test rows); not guaranteed when the model is wrong beyond that",
        f"propensity_source: estimated: gate.estimator {estimator!r} needs known propensities, "
        "so the decision uses the doubly robust terms with the propensity-error margin",
    )
    reasons += attempt_reasons(seed, given, attempt, level)
    reasons += tuple(f"check did not pass: {c}" for c in failed_checks)
    comparison = PolicyComparison(
        challenger,
        champion,
        difference,
        ucb,
        improves and enough and not failed_checks,
        reasons,
        epsilon,
        float(min_ess),
        coin,
        order_seed=seed,
        seed_given=given,
        propensity_source="estimated",
    )
    if attempt is not None:
        comparison = replace(comparison, attempt=attempt.number, family_alpha=attempt.family_alpha)
    return comparison
