"""Policy families (discrete, multilabel, candidate set) and fitted stochastic policies."""

from poem.policies._base import PolicyFamily
from poem.policies.candidates import CandidateFamily
from poem.policies.discrete import DiscreteFamily
from poem.policies.multilabel import MultilabelFamily, expected_hamming_loss
from poem.policies.stochastic import StochasticPolicy, family_from_log, make_family

__all__ = [
    "CandidateFamily",
    "DiscreteFamily",
    "MultilabelFamily",
    "PolicyFamily",
    "StochasticPolicy",
    "expected_hamming_loss",
    "family_from_log",
    "make_family",
]
