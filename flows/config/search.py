"""``search:``: the hyperparameter grid searched on the validation split."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, field_validator

from flows.config._base import MAX_TEMPERATURES, MAX_TRIALS, TEMPERATURES, Scalar, Section
from flows.config._base import library_field as _of

__all__ = [
    "AUTO",
    "DEFAULT_CANDIDATES",
    "MARGINAL_CANDIDATE",
    "IPW_CANDIDATE",
    "IPW_CANDIDATE_LEARNERS",
    "CandidateLearner",
    "SearchConfig",
]

SELECTION = "poem.learners.selection:select_challenger"
SelectionRule = Literal["bonferroni", "simultaneous", "holdout", "uncorrected"]  # selection.RULES


# the default's convex reduction: propensities floored at p₍₁₀₎ (the joint propensities of a
# multilabel log span orders of magnitude), C on standardized features
IPW_CANDIDATE = {"params": {"clip": "p90/p10"}, "grid": {"C": [0.01, 0.1, 1.0, 10.0]}}
# the per-label IPW reduction on the multilabel paper sets was never served
# (benchmarks/paper_multilabel.py, 30 runs) and is worse than the sharpened h0 on yeast: it is
# not a multilabel default (opt in with search.candidates)
AUTO = "auto"  # search.candidates: auto = the default of data.family (resolved at load)
IPW_CANDIDATE_LEARNERS = {"ipw_classifier": IPW_CANDIDATE}
# multilabel: POEM(B) with per-label weights (objective: marginal), its logger the champion;
# fitted only when the champion logged every training row (flows.retrain skips it otherwise):
# with the per-label scoring it moved the gap beyond sharpening (benchmarks/paper_multilabel.py,
# seeds 0-9) on emotions / medical / yeast / TMC2007 from 44.0 / 0 / 2.1 / 37.7 % to
# 56.2 / 0 / 15.6 / 67.6 %, no run worse than the sharpened h0 (docs/results.md)
MARGINAL_CANDIDATE = {
    "params": {
        "policy": "multilabel",
        "objective": "marginal",
        "logging_policy": "champion",
        "warm_start": "champion",
        "solver": "lbfgs",
        "max_iter": 50,
        "tol": 1.0e-5,
        "variance_penalty": "calibrated",
        "clip": "p90/p10",
    },
    "grid": {"variance_scale": [0.0001, 0.001, 0.01]},
}
DEFAULT_CANDIDATES = {  # data.family -> its search.candidates: auto (others: {})
    "discrete": IPW_CANDIDATE_LEARNERS,
    "multilabel": {"poem_marginal": MARGINAL_CANDIDATE},
}


def _grid_checks(grid: dict[str, list[Scalar]], where: str) -> int:
    """Raise ValueError naming ``where`` for an empty grid or entry, or repeated values."""
    if not grid:
        raise ValueError(
            f"the {where} is empty (one trial would run silently); give at least one parameter "
            "with its values, e.g. variance_scale: [0.0, 0.1, 1.0] (one value = one trial)"
        )
    n_trials = 1
    for key, values in grid.items():
        if not values:
            raise ValueError(f"{where} entry {key!r} has no values")
        repeated = [v for i, v in enumerate(values) if v in values[:i]]
        if repeated:
            raise ValueError(f"{where} entry {key!r} repeats {repeated[:3]} (identical trials)")
        n_trials *= len(values)
    if n_trials > MAX_TRIALS:
        raise ValueError(f"the {where} has {n_trials:,} points; at most {MAX_TRIALS:,}")
    return n_trials


class CandidateLearner(Section):
    """One learner of ``search.candidates``: its fixed ``params`` and its own ``grid``.

    Its fits are trials of the same search as ``training.learner``'s grid, scored at the same
    serving temperatures and selected by the same rule (``selection_rule``: K counts them).
    ``exploration_floor`` defaults to ``training.params.exploration_floor`` (the challengers').
    """

    params: dict[str, Scalar] = Field(default_factory=dict)
    grid: dict[str, list[Scalar]]

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, grid: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        _grid_checks(grid, "grid")
        return grid


class SearchConfig(Section):
    """Hyperparameter grid searched on the validation split (selection by IPS or SNIPS).

    Trials whose validation ESS is below ``min_ess_fraction`` of the validation rows, or below
    ``min_ess`` rows, rank after the others (:func:`poem.learners.search.select_trial`). With a
    champion, ``learning_confidence_level`` is the level of
    :func:`flows.tasks.search.choose_challenger`, which decides whether a selected fit is served,
    by ``selection_rule`` (:data:`poem.learners.selection.RULES`).

    ``candidates`` are other learners (names of :data:`flows.learners.LEARNERS`) searched
    beside ``training.learner``'s ``grid``, each with its own grid (:class:`CandidateLearner`);
    ``{}`` searches ``training.learner`` alone. The default (``auto``, resolved at load by
    ``data.family``: :class:`~flows.config.pipeline.PipelineConfig`) is the IPW-weighted classifier
    (:mod:`poem.learners.ipw_classifier`, clip p90/p10) at C ∈ {0.01, 0.1, 1, 10} for discrete
    logs, POEM(B) with per-label weights (``poem_marginal``: ``objective: marginal``, the
    champion as logger, :data:`MARGINAL_CANDIDATE`) for multilabel logs
    (:data:`DEFAULT_CANDIDATES`), none for candidate-set logs.
    """

    grid: dict[str, list[Scalar]] = Field(
        default_factory=lambda: {
            "solver": ["adagrad", "lbfgs"],
            "warm_start": ["zeros", "champion"],
            "variance_scale": [0.0001, 0.001, 0.003, 0.01, 0.03],
            "clip": ["p90/p10"],
        }
    )
    candidates: dict[str, CandidateLearner] = Field(
        default_factory=lambda: {"ipw_classifier": CandidateLearner(**IPW_CANDIDATE)}
    )
    scoring: Literal["ips", "snips", "ips_ucb", "snips_ucb"] = "snips_ucb"
    temperatures: list[float] | None = Field(default_factory=lambda: list(TEMPERATURES))
    min_ess_fraction: float = Field(0.01, ge=0, lt=1)
    min_ess: float = Field(10.0, ge=0)
    # the defaults of :func:`poem.learners.selection.select_challenger`, written there once
    confidence_level: float = _of(SELECTION, "confidence_level", gt=0, lt=1)
    learning_confidence_level: float = _of(SELECTION, "learning_confidence_level", gt=0, lt=1)
    selection_rule: SelectionRule = "simultaneous"
    # a ranked-first fit the validation rows show better only uncorrected is served when its
    # configuration, refitted on k − 1 of k folds of the training rows, is shown better on the
    # held folds (each test at learning_confidence_level: a fit not better is served with
    # chance ≤ 2γ; poem.learners.crossfit); 0: off
    crossfit_folds: int = Field(5, ge=0, le=10)
    # a multilabel log the champion served: score with per-label weights where they vary less
    # (assumes a loss that adds per-label terms, as the Hamming loss; false: joint weights only)
    per_label_weights: bool = True
    max_workers: int = Field(2, ge=1, le=64)
    cache_expiration_hours: float = Field(24.0, gt=0, le=24 * 365 * 10)

    @field_validator("crossfit_folds")
    @classmethod
    def _not_one_fold(cls, folds: int) -> int:
        if folds == 1:
            raise ValueError("crossfit_folds must be 0 (off) or at least 2 folds, got 1")
        return folds

    @field_validator("grid")
    @classmethod
    def _non_empty(cls, grid: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        _grid_checks(grid, "grid")
        return grid

    @field_validator("candidates")
    @classmethod
    def _few_trials(cls, candidates: dict[str, CandidateLearner]) -> dict[str, CandidateLearner]:
        total = sum(math.prod(len(v) for v in c.grid.values()) for c in candidates.values())
        if total > MAX_TRIALS:
            raise ValueError(f"the candidates' grids have {total:,} points; at most {MAX_TRIALS:,}")
        return candidates

    @field_validator("temperatures")
    @classmethod
    def _temperatures(cls, values: list[float] | None) -> list[float] | None:
        if values is None:
            return None
        if not values:
            raise ValueError(
                "temperatures is empty; give at least one, e.g. [1.0], or null to serve at "
                "training.params.temperature"
            )
        bad = [t for t in values if not (math.isfinite(t) and t > 0)]
        if bad:
            raise ValueError(f"temperatures must be finite and > 0, got {bad[:3]}")
        repeated = [t for i, t in enumerate(values) if t in values[:i]]
        if repeated:
            raise ValueError(f"temperatures repeats {repeated[:3]}")
        if len(values) > MAX_TEMPERATURES:
            raise ValueError(f"{len(values)} temperatures; at most {MAX_TEMPERATURES}")
        return values
