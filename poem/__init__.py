"""poem: Counterfactual Risk Minimization (POEM) for logged bandit feedback.

A plain numpy/scipy/scikit-learn library; it never imports Prefect, MLflow or Great
Expectations.
"""

from poem.data import CandidateSets, Exclusion, LoggedBandit, check_logged_bandit, exclude_rows
from poem.exceptions import InvalidLogError, PropensityWarning, Violation

__all__ = [
    "CandidateSets",
    "Exclusion",
    "InvalidLogError",
    "LoggedBandit",
    "PropensityWarning",
    "Violation",
    "check_logged_bandit",
    "exclude_rows",
]
__version__ = "0.1.0"
