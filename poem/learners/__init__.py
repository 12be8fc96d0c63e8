"""Learners: the CRM objective, the POEM estimator (AdaGrad / L-BFGS) and counterfactual search."""

from poem.learners.banditnet import BanditNet
from poem.learners.hybrid import HybridLearner
from poem.learners.objective import (
    CRMStatistics,
    crm_objective,
    crm_objective_from_statistics,
    crm_statistics,
    majorized_gradient,
    majorizer_coefficients,
)
from poem.learners.poem import POEM, calibrated_variance_penalty, resolve_clip
from poem.learners.search import (
    SearchResult,
    Trial,
    expand_grid,
    run_trial,
    search_hyperparameters,
    select_trial,
)

__all__ = [
    "POEM",
    "BanditNet",
    "HybridLearner",
    "CRMStatistics",
    "SearchResult",
    "Trial",
    "calibrated_variance_penalty",
    "crm_objective",
    "crm_objective_from_statistics",
    "crm_statistics",
    "expand_grid",
    "majorized_gradient",
    "majorizer_coefficients",
    "resolve_clip",
    "run_trial",
    "search_hyperparameters",
    "select_trial",
]
