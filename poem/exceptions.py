"""Exceptions and warnings raised by :mod:`poem`.

Every data-contract violation is reported through :class:`InvalidLogError`, which
carries one :class:`Violation` per bad column so that callers (the CLI, the
flows, the Great Expectations bridge) can show column, counts and example rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["InvalidLogError", "PropensityWarning", "Violation"]


@dataclass(frozen=True)
class Violation:
    """One broken invariant of a logged-bandit table.

    Parameters
    ----------
    column : str
        Column (or file) the violation is about, e.g. ``"propensity"``.
    n_invalid : int
        Number of offending rows (0 for dataset-level problems such as a missing column).
    n_rows : int
        Number of rows inspected.
    row_examples : tuple
        Up to five offending row ids (event ids when known, else positions).
    message : str
        What is wrong, in words a user understands, without the counts.
    hint : str
        What the value must be instead.
    """

    column: str
    n_invalid: int
    n_rows: int
    row_examples: tuple = field(default_factory=tuple)
    message: str = "invalid values"
    hint: str = ""

    def __str__(self) -> str:
        if self.n_invalid:
            text = f"{self.column}: {self.n_invalid:,} of {self.n_rows:,} rows {self.message}"
        else:
            text = f"{self.column}: {self.message}"
        if self.row_examples:
            text += f"; first rows: {list(self.row_examples)}"
        if self.hint:
            text += f". {self.hint}"
        return text


class InvalidLogError(ValueError):
    """A log violates the data contract; lists every violation found.

    Parameters
    ----------
    violations : sequence of Violation
        All violations found (all columns are checked before raising).
    """

    def __init__(self, violations: Sequence[Violation]):
        self.violations = tuple(violations)
        super().__init__("\n".join(str(v) for v in self.violations) or "invalid log")

    @property
    def columns(self) -> tuple[str, ...]:
        """Names of the offending columns, in order of appearance."""
        return tuple(v.column for v in self.violations)


class PropensityWarning(UserWarning):
    """A statistical concern with the propensities (low ESS, weights far from 1, ...)."""
