"""Learner registry: the ``training.learner`` name in ``mlflow.yml`` → a scikit-learn estimator.

Adding a learner is one line in :data:`LEARNERS`;
the estimator must follow STYLE §5 (``__init__`` stores params, ``fit(log)``, ``policy_``).
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

__all__ = [
    "LEARNERS",
    "build_learner",
    "check_learner_params",
    "learner_class",
    "learner_param_names",
]

# config name -> "module:Class"
LEARNERS: dict[str, str] = {
    "poem": "poem.learners.poem:POEM",
    "banditnet": "poem.learners.banditnet:BanditNet",
    "hybrid": "poem.learners.hybrid:HybridLearner",
}


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


def build_learner(
    name: str, params: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> Any:
    """Build an unfitted estimator with the fixed ``params``, then the trial ``overrides``."""
    return learner_class(name)(**{**dict(params), **dict(overrides or {})})


def check_learner_params(name: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``params`` with the learner's own checks (STYLE §13); return all its params.

    ``clone(est).set_params(**params).validate_params()``: the config does not mirror the
    learner's rules, it asks the learner.

    Raises
    ------
    ValueError, TypeError
        From the learner, naming the parameter and the allowed values.
    """
    from sklearn.base import clone

    estimator = clone(learner_class(name)()).set_params(**dict(params))
    estimator.validate_params()
    return estimator.get_params(deep=False)
