"""Off-policy estimators: importance weights, IPS / clipped IPS / SNIPS, bounds, the gate's math.

Pure functions returning frozen results (STYLE §5); ``dr.py`` adds the direct method and
doubly robust estimators, ``criteo.py`` the Criteo test-bed metric.
"""

from poem.estimators.bounds import (
    bootstrap_interval,
    confidence_interval,
    empirical_bernstein_bound,
    sample_variance,
    standard_error,
)
from poem.estimators.compare import PolicyComparison, compare_policies
from poem.estimators.criteo import ClippingSweep, clipping_sweep, criteo_ips
from poem.estimators.dr import (
    LossPredictions,
    direct_method,
    doubly_robust,
    evaluate_policy_dr,
    fit_loss_model,
    self_normalized_doubly_robust,
)
from poem.estimators.ips import Estimate, clipped_ips, evaluate_policy, evaluate_rows, ips, snips
from poem.estimators.weights import (
    clip_weights,
    clipped_fraction,
    effective_sample_size,
    importance_weights,
)

__all__ = [
    "ClippingSweep",
    "Estimate",
    "LossPredictions",
    "PolicyComparison",
    "bootstrap_interval",
    "clip_weights",
    "clipped_fraction",
    "clipped_ips",
    "clipping_sweep",
    "compare_policies",
    "confidence_interval",
    "criteo_ips",
    "direct_method",
    "doubly_robust",
    "effective_sample_size",
    "empirical_bernstein_bound",
    "evaluate_policy",
    "evaluate_policy_dr",
    "evaluate_rows",
    "fit_loss_model",
    "importance_weights",
    "ips",
    "sample_variance",
    "self_normalized_doubly_robust",
    "snips",
    "standard_error",
]
