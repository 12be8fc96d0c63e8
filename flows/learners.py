"""Learner registry: the ``training.learner`` name in ``mlflow.yml`` → a scikit-learn estimator.

Adding a learner is one line in :data:`LEARNERS`;
the estimator must follow STYLE §5 (``__init__`` stores params, ``fit(log)``, ``policy_``).
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Mapping
from typing import Any

__all__ = [
    "LEARNERS",
    "LEARNER_KEY",
    "CHAMPION",
    "LOGGER",
    "build_learner",
    "champion_fits",
    "candidate_params",
    "learner_families",
    "trial_learner",
    "check_learner_params",
    "learner_class",
    "learner_param_names",
    "resolve_warm_start",
    "same_fits",
]

CHAMPION = "champion"  # training.params.warm_start value: start at the champion's coefficients

# config name -> "module:Class"
LEARNERS: dict[str, str] = {
    "poem": "poem.learners.poem:POEM",
    "poem_marginal": "poem.learners.poem:POEM",  # search.candidates' name for objective: marginal
    "banditnet": "poem.learners.banditnet:BanditNet",
    "hybrid": "poem.learners.hybrid:HybridLearner",
    "ipw_classifier": "poem.learners.ipw_classifier:IPWClassifier",
}
LOGGER = "logging_policy"  # a learner param that may be "champion": the logger of the rows
LEARNER_KEY = "learner"  # a search.candidates trial's params: which learner fitted it
FLOOR = "exploration_floor"  # a candidate's default: training.params' (the challengers' ε)


def learner_class(name: str) -> type:
    """Import the estimator class registered under ``name``.

    Raises
    ------
    ValueError
        If ``name`` is not in :data:`LEARNERS`.
    """
    if name not in LEARNERS:
        raise ValueError(f"unknown learner {name!r}; choose one of {sorted(LEARNERS)}")
    module, _, cls = LEARNERS[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def learner_param_names(name: str) -> set[str]:
    """Return the learner's constructor parameter names (what ``training.params`` may set)."""
    sig = inspect.signature(learner_class(name).__init__)
    return {p for p in sig.parameters if p != "self"}


def champion_fits(champion: Any, log: Any) -> bool:
    """Whether the champion has the log's family, feature count and action count."""
    family = getattr(champion, "family", None)
    return family is not None and (family.name, family.n_features, family.n_actions) == (
        log.family,
        log.n_features,
        log.n_actions,
    )


def resolve_warm_start(params: Mapping[str, Any], champion: Any, log: Any) -> dict[str, Any]:
    """Replace ``warm_start: champion`` by the champion policy, or ``"zeros"`` without one.

    ``logging_policy: champion`` (the marginal objective's logger) likewise becomes the
    champion, or None without one. The champion is used only when it fits the log (same
    family, feature and action counts).
    """
    out = dict(params)
    fits = champion_fits(champion, log)
    if out.get("warm_start") == CHAMPION:
        out["warm_start"] = champion if fits else "zeros"
    if out.get(LOGGER) == CHAMPION:
        out[LOGGER] = champion if fits else None
    return out


def same_fits(
    grid: list[Mapping[str, Any]], params: Mapping[str, Any], champion: Any, log: Any
) -> list[int]:
    """For each grid point, the index of the first grid point that is the same fit.

    Two points are the same fit when the fixed ``params`` updated by each are equal once
    ``warm_start: champion`` is resolved (:func:`resolve_warm_start`): without a champion that
    fits ``log`` it is ``warm_start: zeros``, so the grid's ``[zeros, champion]`` is one fit.
    """
    first: dict[str, int] = {}
    out = []
    for i, point in enumerate(grid):
        merged = {**dict(params), **dict(point)}
        if merged.get("warm_start") == CHAMPION:
            resolved = resolve_warm_start(merged, champion, log)["warm_start"]
            merged["warm_start"] = CHAMPION if resolved is champion else resolved
        out.append(first.setdefault(json.dumps(merged, sort_keys=True, default=repr), i))
    return out


def build_learner(
    name: str,
    params: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    champion: Any = None,
    log: Any = None,
) -> Any:
    """Build an unfitted estimator with the fixed ``params``, then the trial ``overrides``.

    ``warm_start: champion`` is resolved against ``log`` by :func:`resolve_warm_start`.
    """
    merged = resolve_warm_start({**dict(params), **dict(overrides or {})}, champion, log)
    return learner_class(name)(**merged)


def check_learner_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``params`` with the learner's own checks (STYLE §13); return all its params.

    Raises
    ------
    ValueError, TypeError
        From the learner, naming the parameter and the allowed values.
    """
    from sklearn.base import clone

    params = dict(params)
    if params.get("warm_start") == CHAMPION:  # resolved against the registry at run time
        params["warm_start"] = "zeros"
    if params.get(LOGGER) == CHAMPION:
        params[LOGGER] = None
    estimator = clone(learner_class(name)()).set_params(**params)
    estimator.validate_params()
    return estimator.get_params(deep=False)


def learner_families(name: str) -> tuple[str, ...] | None:
    """The log families learner ``name`` fits (its class's ``families``; None: any)."""
    families = getattr(learner_class(name), "families", None)
    return None if families is None else tuple(families)


def candidate_params(name: str, spec_params: Mapping[str, Any], training_params: Mapping) -> dict:
    """A ``search.candidates`` learner's fixed params: its own, and the challengers' ε.

    ``exploration_floor`` (when the learner has it and the spec does not set it) is
    ``training.params.exploration_floor``, so every fit of the search serves with one floor.
    """
    out = dict(spec_params)
    if FLOOR not in out and FLOOR in training_params and FLOOR in learner_param_names(name):
        out[FLOOR] = training_params[FLOOR]
    return out


def trial_learner(
    params: Mapping[str, Any], training: Any, search: Any = None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(learner name, fixed params, trial overrides)`` of a trial's recorded ``params``.

    A trial of ``training.learner``'s grid has no :data:`LEARNER_KEY`; a trial of
    ``search.candidates`` names its learner there (its fixed params are
    :func:`candidate_params`).

    Raises
    ------
    ValueError
        If the named learner is not in ``search.candidates``.
    """
    overrides = dict(params)
    name = overrides.pop(LEARNER_KEY, None)
    if name is None:
        return training.learner, dict(training.params), overrides
    candidates = {} if search is None else search.candidates
    if name not in candidates:
        raise ValueError(
            f"trial learner {name!r} is not in search.candidates ({sorted(candidates)}); "
            "add it there or select a trial of training.learner"
        )
    return name, candidate_params(name, candidates[name].params, training.params), overrides
