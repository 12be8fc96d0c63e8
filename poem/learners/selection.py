r"""The challenger selection, in one place: the flow's and the benchmarks' served policy.

:func:`select_challenger` takes the search's fitted trials (each fit already served at its
validation-chosen temperature, :func:`~poem.learners.search.run_trial`) and the champion, and
returns what the flow serves (:class:`ChallengerSelection`):

1. **Champion candidates.** The champion re-tempered at every serving temperature, no refit
   (:func:`~poem.learners.champion_candidates.champion_trials`), join the fits.
2. **Rank.** :func:`~poem.learners._trials.select_trial` (``scoring``, the ESS guard) over
   fits and candidates.
3. **Confirm a fit, corrected for multiplicity.** A first-ranked fit is served only when the
   paired doubly robust difference R(fit) − R(best candidate) and its model term both have
   one-sided upper bounds < 0, the DR bound with the share of the fit's mass the rows did not
   see valued at the loss range (weights whose mean is shown < 1 at the fixed
   :data:`~poem.learners.learning_evidence.COVERAGE_LEVEL`;
   :func:`~poem.learners.learning_evidence.confirm_fit`), at the Bonferroni-corrected level

   .. math:: 1 - \gamma / K, \qquad K = n_{fits},

   where γ = 1 − ``learning_confidence_level`` and n_fits the distinct fits: the selected fit
   is the best of K fits scored on the same validation rows, and a union bound over them keeps
   the chance of serving a fit that is not better than the candidate at most γ whichever was
   selected (the winner's curse of a small validation log with many candidates). Each fit's
   serving temperature is also chosen on these rows, but the temperatures of one fit move one
   direction w/α and their paired differences are nearly perfectly dependent, so they are not
   counted by default: counting them (``per_temperature=True``, K = n_fits·|𝒜|, the strict
   union bound) kept the champion on emotions where the fit was 0.53 Hamming loss better
   (z = 2.9 against a threshold of 3.2 at K = 100; README).
4. **Confirm a re-tempering.** A candidate at α ≠ 1 (the champion sharpened or flattened) is
   served only when the same paired test at level 1 − γ/(|𝒜| − 1) shows it better than the
   champion as served (α = 1); otherwise the champion itself (α = 1) is the challenger, which
   the gate then has no reason to promote.

**The simultaneous rule** (``rule="simultaneous"``) replaces Bonferroni's 1 − γ/K by the
max-t level of the K paired comparisons
(:func:`~poem.learners.learning_evidence.simultaneous_level`): the fits of one grid differ
little, their paired differences with the candidate are strongly correlated, and the 1 − γ
quantile of the largest of K correlated t statistics (Gaussian multiplier bootstrap over the
validation clusters) bounds all K at once. K independent fits give about Bonferroni's level,
K copies of one fit the uncorrected one. The re-tempering's confirmation (step 4) uses the
max-t level over the other temperatures.

**The held-out confirm rule** (``rule="holdout"``) pays no multiplicity cost: the evidence
validation rows are split once, by cluster (``groups``: a context and all its replays) and
seeded, into a *selection* part 𝒮 and a *confirm* part 𝒞 (:func:`confirm_split`,
``confirm_fraction`` of the clusters in 𝒞). Every fit is re-scored on 𝒮 at every serving
temperature (no refit: the fits learned on the training rows only) and served at the
temperature 𝒮 picks; the champion candidates are scored on 𝒮; steps 2–4 then run with the
ranking on 𝒮 and one **un-corrected** paired bound at level 1 − γ on 𝒞 for the single
winner (the fit against the best candidate; a re-tempering against the champion as served).
No row of 𝒞 chose the winner, so its bound is a valid one-sided test whatever was tried on 𝒮.

**Evidence from the training rows** (``crossfit_folds=k``, the flow's
``search.crossfit_folds``): when step 3's validation evidence falls short, the ranked-first
fit's configuration is refitted on k − 1 of k folds of the evidence training rows and compared
with the same candidate on each held fold (:func:`~poem.learners.crossfit.crossfit_evidence`,
pooled). No row of it chose anything, so it is tested at 1 − γ uncorrected, with the same
intersection of bounds. It speaks for the configuration, and an unstable one (AdaGrad from
zeros at a low temperature) can have good refits and a bad full fit, so the served fit's own
validation bounds must pass too, at 1 − γ uncorrected (emotions seeds 109 and 207: CV bounds
< 0, full fits 0.22 and 0.12 worse than h₀; the uncorrected validation bounds refuse both). The
fit is served when step 3 passes or both of these do: by the union bound a fit not better than
the candidate is served with chance ≤ 2γ (the gate's own bound still stands before any
promotion).

When the evidence is weak the result says so (:attr:`ChallengerSelection.reason`,
:meth:`ChallengerSelection.tags`), and the flow logs it to MLflow. Plain library code: the
flow's task (:mod:`flows.tasks.search`), ``benchmarks/paper_multilabel.py`` and
``benchmarks/vw_compare.py`` call this one function.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from sklearn.base import clone

from poem.estimators._loss_model import row_cluster_codes
from poem.learners._trials import Trial, select_trial
from poem.learners.champion_candidates import (
    LEARNED,
    RETEMPERED,
    challenger_kind,
    champion_trials,
    selected_champion_policy,
)
from poem.learners.crossfit import crossfit_evidence
from poem.learners.learning_evidence import (
    LearningEvidence,
    confirm_fit,
    evidence_model,
    learning_evidence,
    simultaneous_level,
)
from poem.learners.search import policy_scores

__all__ = [
    "RULES",
    "ChallengerSelection",
    "confirm_split",
    "corrected_level",
    "n_compared",
    "select_challenger",
]

RULES = ("bonferroni", "simultaneous", "holdout", "uncorrected")  # select_challenger's rule=

# reasons (the MLflow tag ``selection_reason``)
FIT_SHOWN = "fit shown better than the champion re-tempered"
FIT_NOT_SHOWN = "fit not shown better (multiplicity-corrected): champion kept"
FIT_NOT_COVERED = (  # both bounds < 0, but not with the unseen share of the weights' mass
    "fit not shown better once its weights' unseen mass is valued at the loss range: champion kept"
)
FIT_SHOWN_CROSSFIT = (
    "fit shown better on the validation rows only uncorrected, and its configuration refitted "
    "and cross-fitted on the training rows is shown better"
)
NO_CHAMPION = "fit ranked first; no champion to compare with (the gate decides)"
CANDIDATE_FIRST = "champion re-tempered ranked first"
RETEMPER_SHOWN = "re-tempering shown better than the champion as served"
RETEMPER_NOT_SHOWN = "re-tempering not shown better (multiplicity-corrected): champion as served"
HOLDOUT = {  # the same sentences under rule="holdout"
    FIT_SHOWN: "fit shown better than the champion re-tempered on the held-out confirm rows",
    FIT_NOT_SHOWN: "fit not shown better on the held-out confirm rows: champion kept",
    FIT_NOT_COVERED: (
        "fit not shown better on the held-out confirm rows once its weights' unseen mass is "
        "valued at the loss range: champion kept"
    ),
    RETEMPER_SHOWN: "re-tempering shown better than the champion as served on the confirm rows",
    RETEMPER_NOT_SHOWN: "re-tempering not shown better on the confirm rows: champion as served",
}


@dataclass(frozen=True)
class ChallengerSelection:
    """What :func:`select_challenger` serves, and why.

    Attributes
    ----------
    trials : tuple of Trial
        The fits, then the champion candidates (what the flow records, one run per trial).
    ranked_first : int
        Index in ``trials`` the validation scores rank first (before any confirmation).
    selected : int
        Index of the served trial.
    policy : StochasticPolicy
        The served policy: the fit's, or the champion re-tempered at the selected α.
    estimator : object or None
        The fitted estimator of a served fit (None for a champion candidate).
    evidence : LearningEvidence or None
        The fit against the best candidate (None: no fit ranked first, or no champion).
    retemper_evidence : LearningEvidence or None
        The selected α ≠ 1 candidate against the champion as served (None: not needed).
    n_compared : int
        K, the fits (or (fit, temperature) pairs) the fit's confirmation is corrected for
        (1 under ``rule="holdout"``: one test on rows that chose nothing).
    confidence_level : float
        The corrected level 1 − γ/K of ``evidence`` (NaN when there was no comparison).
    reason : str
        One sentence: why the served trial is served.
    rule : str
        The selection rule (:data:`RULES`).
    n_confirm : int
        Evidence validation rows held out for the confirmation (0 unless ``rule="holdout"``).
    crossfit_evidence : LearningEvidence or None
        The ranked-first configuration against the same candidate, refitted and cross-fitted
        on the training rows (:mod:`poem.learners.crossfit`; None: not computed).
    """

    trials: tuple[Trial, ...]
    ranked_first: int
    selected: int
    policy: Any
    estimator: Any
    evidence: LearningEvidence | None
    retemper_evidence: LearningEvidence | None
    n_compared: int
    confidence_level: float
    reason: str
    rule: str = "bonferroni"
    n_confirm: int = 0
    crossfit_evidence: LearningEvidence | None = None

    @property
    def kind(self) -> str:
        """``learned`` or ``champion_retempered`` (the served trial's challenger kind)."""
        return challenger_kind(self.trials[self.selected].params)

    @property
    def selected_trial(self) -> Trial:
        """The served trial."""
        return self.trials[self.selected]

    @property
    def shown_on_training_folds(self) -> bool:
        """Whether the fit is served on the cross-fitted evidence (not the corrected one)."""
        return bool(
            self.crossfit_evidence is not None
            and self.crossfit_evidence.learned
            and not (self.evidence is not None and self.evidence.learned)
        )

    @property
    def champion_kept(self) -> bool:
        """Whether a fit ranked first but the evidence kept the champion (re-tempered or not)."""
        return (
            self.kind == RETEMPERED
            and challenger_kind(self.trials[self.ranked_first].params) == LEARNED
        )

    def metrics(self) -> dict[str, float]:
        """Flat metrics the flow logs: ``learning_*`` and ``retemper_*`` (when compared)."""
        out = {
            "learning_n_compared": float(self.n_compared),
            "learning_corrected_level": float(self.confidence_level),
            "learning_champion_kept": float(self.champion_kept),
            "learning_holdout": float(self.rule == "holdout"),
            "learning_n_confirm": float(self.n_confirm),
        }
        if self.evidence is not None:
            out.update({f"learning_{k}": v for k, v in self.evidence.to_dict().items()})
        if self.retemper_evidence is not None:
            out.update({f"retemper_{k}": v for k, v in self.retemper_evidence.to_dict().items()})
        if self.crossfit_evidence is not None:
            out.update({f"crossfit_{k}": v for k, v in self.crossfit_evidence.to_dict().items()})
        return out

    def tags(self) -> dict[str, str]:
        """Tags: ``learning_evidence`` (shown / not shown / none), ``selection_reason/_rule``."""
        shown = "none" if self.evidence is None else "not shown"
        if self.evidence is not None and self.evidence.learned:
            shown = "shown"
        elif self.shown_on_training_folds:
            shown = "shown (cross-fitted)"
        return {
            "learning_evidence": shown,
            "selection_reason": self.reason,
            "selection_rule": self.rule,
        }


def n_compared(
    fits: Sequence[Trial], temperatures: Sequence[float] | None, per_temperature: bool = False
) -> int:
    """K: the distinct fits (≥ 1), times the serving temperatures with ``per_temperature``.

    Fits with identical validation scores (one fit recorded under several grid points, as the
    flow records :func:`flows.learners.same_fits`) count once.
    """
    distinct = {(t.ips.value, t.snips.value, t.effective_sample_size) for t in fits}
    return max(1, len(distinct)) * (max(1, len(temperatures or ())) if per_temperature else 1)


def corrected_level(level: float, k: int) -> float:
    """Bonferroni: 1 − (1 − ``level``)/k, the per-comparison level of k comparisons."""
    return 1.0 - (1.0 - float(level)) / max(1, int(k))


def confirm_split(
    n_rows: int, groups: Any = None, confirm_fraction: float = 0.5, random_state: int = 0
) -> tuple[Any, Any]:
    """Rows of the selection part 𝒮 and the confirm part 𝒞 of ``n_rows`` validation rows.

    A seeded permutation of the clusters (``groups``; None: every row its own) puts
    ``round(confirm_fraction · G)`` of the G clusters, with all their rows, in 𝒞, at least one
    and at most G − 1.

    Returns
    -------
    select, confirm : ndarray of int
        Sorted row indices of 𝒮 and 𝒞.

    Raises
    ------
    ValueError
        If ``confirm_fraction`` is not in (0, 1), ``groups`` does not label every row, or
        there are fewer than 4 clusters (each part needs 2 for a paired bound).
    """
    if not 0.0 < float(confirm_fraction) < 1.0:
        raise ValueError(f"confirm_fraction must be in (0, 1), got {confirm_fraction!r}")
    codes = row_cluster_codes(n_rows, groups)
    g = int(codes.max(initial=-1)) + 1
    if g < 4:
        raise ValueError(
            f"the held-out confirm rule needs at least 4 validation clusters (2 per part), got "
            f"{g}; use rule='bonferroni'"
        )
    order = np.random.default_rng(random_state).permutation(g)
    n_confirm = min(g - 2, max(2, int(round(float(confirm_fraction) * g))))
    in_confirm = np.zeros(g, dtype=bool)
    in_confirm[order[:n_confirm]] = True
    mask = in_confirm[codes]
    return np.flatnonzero(~mask), np.flatnonzero(mask)


def _rescored(
    fits: Sequence[Trial], log: Any, temperatures, rule: dict, scoring: str, level, logger=None
):
    """Each fit re-scored on ``log`` at every temperature, served at the one ``log`` picks."""
    out, policies = [], []
    for t in fits:
        if t.estimator is None:
            raise ValueError(
                "rule='holdout' re-scores every fit on the selection rows: keep the fits' "
                "estimators (run_trial(keep_estimator=True))"
            )
        base = t.estimator.policy_
        temps = [float(a) for a in temperatures] if temperatures else [float(base.temperature)]
        served = [base.with_serving(temperature=a) for a in temps]
        options = [
            replace(
                t,
                params={**t.params, "temperature": a} if temperatures else dict(t.params),
                ips=ips,
                snips=snips,
                effective_sample_size=float(ips.effective_sample_size),
            )
            for a, (ips, snips) in zip(
                temps, policy_scores(served, log, level, logger), strict=True
            )
        ]
        best = select_trial(options, scoring, **rule)
        out.append(options[best])
        policies.append(served[best])
    return out, policies


def _fit_policies(fits: Sequence[Trial], first: Any, ranked: int, fit=None) -> list:
    """The fits' served policies (``first`` is the ranked-first fit's estimator).

    A fit that kept no estimator is refitted by ``fit`` (``params ↦ fitted estimator``).
    """
    out = []
    for i, t in enumerate(fits):
        estimator = first if i == ranked else t.estimator
        if estimator is None and fit is not None:
            estimator = fit(t.params)
        if estimator is None:
            raise ValueError(
                "rule='simultaneous' compares every fit with the candidate: keep the fits' "
                "estimators (run_trial(keep_estimator=True))"
            )
        out.append(estimator.policy_)
    return out


def select_challenger(
    fits: Sequence[Trial],
    champion: Any,
    validation: Any,
    *,
    scoring: str,
    min_effective_sample_size: float = 0.0,
    temperatures: Sequence[float] | None = None,
    exploration_floor: float | None = None,
    confidence_level: float = 0.95,
    learning_confidence_level: float = 0.9,
    evidence_logs: tuple | None = None,
    fit: Callable[[Mapping[str, Any]], Any] | None = None,
    groups: Any = None,
    multiplicity: bool = True,
    per_temperature: bool = False,
    rule: str | None = None,
    confirm_fraction: float = 0.5,
    random_state: int = 0,
    logger: Any = None,
    crossfit_folds: int = 0,
    refit: Callable[[Mapping[str, Any], Any], Any] | None = None,
    train_groups: Any = None,
    crossfit_exclude: Any = None,
) -> ChallengerSelection:
    """Rank fits and champion candidates, confirm with multiplicity-safe evidence, serve.

    Parameters
    ----------
    fits : sequence of Trial
        The search's fitted trials (each at its chosen temperature); their ``estimator`` is used
        when kept, else ``fit(params)`` refits it.
    champion : StochasticPolicy or None
        The champion (None: the logging policy, no candidates and no confirmation).
    validation : LoggedBandit or (partition set, rows)
        The validation rows the candidates are scored on (as the fits were).
    scoring, min_effective_sample_size
        The search's rule (:func:`~poem.learners._trials.select_trial`).
    temperatures : sequence of float or None, default=None
        The serving temperatures α (None: α = 1 only).
    exploration_floor : float or None, default=None
        ε the candidates are served with (the challengers' floor).
    confidence_level : float, default=0.95
        Level of the candidates' reported intervals.
    learning_confidence_level : float, default=0.9
        1 − γ before the multiplicity correction (``search.learning_confidence_level``).
    evidence_logs : (LoggedBandit, LoggedBandit or None) or None, default=None
        (validation rows, training rows) of the paired comparison; None: ``validation`` when it
        is a log, with no training rows.
    fit : callable or None, default=None
        ``params ↦ fitted estimator`` for a trial whose estimator was not kept.
    groups : array-like or None, default=None
        Cluster label of each evidence validation row (rows sharing a context).
    multiplicity : bool, default=True
        Correct the fit's confirmation for K and confirm a re-tempering (steps 3–4); False is
        the uncorrected rule of earlier releases (``learning_confidence_level`` as is, any α
        served), kept to measure the correction against.
    per_temperature : bool, default=False
        Count every (fit, temperature) pair in K (the strict union bound), not every fit.
    rule : {"bonferroni", "simultaneous", "holdout", "uncorrected"} or None, default=None
        The selection rule (module docstring); None: ``"bonferroni"``, or ``"uncorrected"``
        with ``multiplicity=False``. ``"simultaneous"`` and ``"holdout"`` need every fit's
        estimator; ``"holdout"`` the evidence validation rows as a log.
    confirm_fraction : float, default=0.5
        Share of the validation clusters held out to confirm (``rule="holdout"``).
    random_state : int, default=0
        Seed of the confirm split (``rule="holdout"``) and of the max-t draws
        (``rule="simultaneous"``).
    logger : StochasticPolicy or None, default=None
        The policy that logged the multilabel validation rows (the champion that served them,
        :func:`poem.estimators.marginal.known_logger`): the candidates' scores and every paired
        comparison use the per-label weights mᵢ (:mod:`poem.estimators.marginal`), as the
        fits' scores must (``run_trial(logger=)``); None: the joint weights.
    crossfit_folds : int, default=0
        k > 1: a ranked-first fit the validation rows show better only uncorrected (at
        ``learning_confidence_level``) is served when its configuration, refitted on k − 1 of
        k folds of the evidence training rows, is shown better than the same candidate on the
        held folds (:func:`~poem.learners.crossfit.
        crossfit_evidence`, the same intersection of bounds, at ``learning_confidence_level``):
        by the union bound over the two tests a fit not better is served with chance ≤ 2γ
        (γ/2 each cost yeast all it gains: docs/pipeline.md). 0: off.
    refit : callable or None, default=None
        ``(params, rows) ↦ fitted estimator`` of a configuration on a training log; None:
        a clone of the ranked-first fit's kept estimator, fitted on the rows.
    train_groups : array-like or None, default=None
        Cluster label of each evidence training row (the folds keep clusters whole).
    crossfit_exclude : array-like of int or None, default=None
        Evidence training rows no fold is evaluated on (e.g. rows the champion was fitted on).

    Returns
    -------
    ChallengerSelection

    Raises
    ------
    ValueError
        When there is nothing to select, or a fit must be served but neither its estimator
        nor ``fit`` is there.
    """
    if rule is None:
        rule = "bonferroni" if multiplicity else "uncorrected"
    if rule not in RULES:
        raise ValueError(f"rule must be one of {list(RULES)}, got {rule!r}")
    multiplicity = rule != "uncorrected"
    if evidence_logs is None:
        evidence_logs = (validation, None)
    guard = {"min_effective_sample_size": min_effective_sample_size}
    served_fits, n_confirm = None, 0
    if rule == "holdout" and champion is not None and fits:
        log = evidence_logs[0]
        if isinstance(log, tuple):
            raise ValueError("rule='holdout' needs the evidence validation rows as a log")
        select_rows, confirm_rows = confirm_split(
            log.n_rows, groups, confirm_fraction, random_state
        )
        validation = log.take(select_rows)
        share = select_rows.size / log.n_rows  # the ESS guard scales with the rows scored
        guard = {"min_effective_sample_size": float(min_effective_sample_size) * share}
        fits, served_fits = _rescored(
            fits, validation, temperatures, guard, scoring, confidence_level, logger
        )
        evidence_logs = (log.take(confirm_rows), evidence_logs[1])
        if groups is not None:
            groups = np.asarray(groups)[confirm_rows]
        n_confirm = int(confirm_rows.size)
    candidates = champion_trials(
        champion,
        validation,
        temperatures,
        confidence_level=confidence_level,
        exploration_floor=exploration_floor,
        logger=logger,
    )
    trials = (*fits, *candidates)
    if not trials:
        raise ValueError("no trials to select from: the grid gave 0 fits and there is no champion")
    rule_kw = guard
    ranked = select_trial(trials, scoring, **rule_kw)
    k = n_compared(fits, temperatures, per_temperature) if rule in RULES[:2] else 1
    gamma = 1.0 - float(learning_confidence_level)
    holdout = n_confirm > 0
    crossfit = (
        int(crossfit_folds) > 1 and multiplicity and evidence_logs[1] is not None and bool(fits)
    )
    fit_level = float(learning_confidence_level)
    evidence = retemper = model = cv = None
    level, selected, estimator = float("nan"), ranked, None
    if challenger_kind(trials[ranked].params) == LEARNED:
        estimator = trials[ranked].estimator
        fit_policy = None if served_fits is None else served_fits[ranked]
        if estimator is None:
            if fit is None:
                raise ValueError("the ranked-first fit kept no estimator; pass fit=")
            estimator = fit(trials[ranked].params)
        reason = NO_CHAMPION
        if candidates:
            model = evidence_model(*evidence_logs, groups=groups, logger=logger)
            level = corrected_level(fit_level, k)
            if rule == "simultaneous":
                level = simultaneous_level(
                    _fit_policies(fits, estimator, ranked, fit),
                    selected_champion_policy(
                        candidates[select_trial(candidates, scoring, **rule_kw)].params,
                        champion,
                        exploration_floor,
                    ),
                    evidence_logs[0],
                    model,
                    confidence_level=fit_level,
                    random_state=random_state,
                )
            reference, evidence = confirm_fit(
                estimator.policy_ if fit_policy is None else fit_policy,
                candidates,
                champion,
                *evidence_logs,
                scoring=scoring,
                exploration_floor=exploration_floor,
                confidence_level=level,
                model=model,
                **rule_kw,
            )
            reason = FIT_SHOWN
            candidate = selected_champion_policy(
                candidates[reference].params, champion, exploration_floor
            )
            if (
                not evidence.learned
                and crossfit
                and learning_evidence(  # the served fit's own rows agree, uncorrected
                    estimator.policy_ if fit_policy is None else fit_policy,
                    candidate,
                    evidence_logs[0],
                    confidence_level=fit_level,
                    model=model,
                ).learned
            ):
                cv = _crossfit(
                    trials[ranked],
                    candidate,
                    evidence_logs[1],
                    model_log=evidence_logs[0],
                    refit=refit,
                    folds=int(crossfit_folds),
                    groups=train_groups,
                    exclude=crossfit_exclude,
                    confidence_level=fit_level,
                    random_state=random_state,
                    logger=logger,
                )
            if not evidence.learned and not (cv is not None and cv.learned):
                reason = FIT_NOT_COVERED if evidence.refused_for_coverage else FIT_NOT_SHOWN
                selected, estimator = len(fits) + reference, None
            if holdout:
                reason = HOLDOUT[reason]
            if not evidence.learned and cv is not None and cv.learned:
                reason = FIT_SHOWN_CROSSFIT
    else:
        reason = CANDIDATE_FIRST
    params = trials[selected].params
    if challenger_kind(params) == RETEMPERED:
        alpha = float(params["temperature"])
        as_served = [i for i, c in enumerate(candidates) if float(c.params["temperature"]) == 1.0]
        if multiplicity and alpha != 1.0 and as_served:
            if model is None:
                model = evidence_model(*evidence_logs, groups=groups, logger=logger)
            others = 1 if holdout else max(1, len(candidates) - 1)
            as_served_policy = selected_champion_policy(
                candidates[as_served[0]].params, champion, exploration_floor
            )
            retemper_level = 1.0 - gamma / others
            if rule == "simultaneous":
                retemper_level = simultaneous_level(
                    [
                        selected_champion_policy(c.params, champion, exploration_floor)
                        for i, c in enumerate(candidates)
                        if i != as_served[0]
                    ],
                    as_served_policy,
                    evidence_logs[0],
                    model,
                    confidence_level=learning_confidence_level,
                    random_state=random_state,
                )
            retemper = learning_evidence(
                selected_champion_policy(params, champion, exploration_floor),
                as_served_policy,
                evidence_logs[0],
                confidence_level=retemper_level,
                model=model,
            )
            if retemper.learned:
                reason += "; " + (HOLDOUT[RETEMPER_SHOWN] if holdout else RETEMPER_SHOWN)
            else:
                selected = len(fits) + as_served[0]
                reason += "; " + (HOLDOUT[RETEMPER_NOT_SHOWN] if holdout else RETEMPER_NOT_SHOWN)
        policy = selected_champion_policy(trials[selected].params, champion, exploration_floor)
    elif served_fits is not None:
        policy = served_fits[selected]
        estimator = copy.copy(estimator)  # the fit's own estimator stays as the search left it
        estimator.policy_ = policy
        if "temperature" in getattr(estimator, "get_params", dict)(deep=False):
            estimator.set_params(temperature=policy.temperature)
    else:
        policy = estimator.policy_
    return ChallengerSelection(
        trials=trials,
        ranked_first=ranked,
        selected=selected,
        policy=policy,
        estimator=estimator,
        evidence=evidence,
        retemper_evidence=retemper,
        n_compared=k,
        confidence_level=level,
        reason=reason,
        rule=rule,
        n_confirm=n_confirm,
        crossfit_evidence=cv,
    )


def _crossfit(trial: Trial, candidate: Any, training_log: Any, *, refit, **options):
    """:func:`~poem.learners.crossfit.crossfit_evidence` of ``trial``'s configuration."""
    params = dict(trial.params)
    if refit is None and trial.estimator is None:
        raise ValueError(
            "cross-fitted evidence refits the ranked-first configuration: keep its estimator "
            "or pass refit="
        )
    return crossfit_evidence(
        (lambda rows: clone(trial.estimator).fit(rows))
        if refit is None
        else (lambda rows: refit(params, rows)),
        candidate,
        training_log,
        temperature=params.get("temperature"),
        **options,
    )
