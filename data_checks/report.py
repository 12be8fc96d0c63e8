"""One report per validated log: :class:`DataCheckReport` (DESIGN §2 "validate", STYLE §6).

Every failed expectation becomes an :class:`ExpectationFailure`. Row-level failures are
quarantined (:mod:`data_checks.quarantine`); the report reconciles
``n_kept + n_quarantined == n_rows`` and counts quarantined rows per (first) reason.
:func:`raise_for_failures` turns the hard failures into :class:`poem.InvalidLogError`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from poem.exceptions import InvalidLogError, Violation

__all__ = [
    "DataCheckReport",
    "ExpectationFailure",
    "merge_reports",
    "mistyped_reason",
    "raise_for_failures",
]


@dataclass(frozen=True)
class ExpectationFailure:
    """One failed expectation (or one unreadable file).

    Parameters
    ----------
    column : str
        Column (or file) concerned.
    expectation : str
        GX expectation type, e.g. ``"expect_column_values_to_be_between"``.
    level : {"dataset", "row", "warning"}
        Dataset-level failures are always hard; row-level ones can be quarantined; warnings
        (counted rows that are kept, e.g. timestamps later than the run's clock) never fail.
    reason : str
        What is wrong, in words (the quarantine ``reason``).
    unexpected_count : int
        Number of offending rows (0 for dataset-level failures).
    element_count : int
        Number of rows checked.
    examples : tuple
        Up to five example event ids.
    observed : str
        Observed value for dataset-level failures (e.g. the dtype), else ``""``.
    """

    column: str
    expectation: str
    level: str
    reason: str
    unexpected_count: int
    element_count: int
    examples: tuple = ()
    observed: str = ""

    def __str__(self) -> str:
        if self.level in ("row", "warning") and self.unexpected_count:
            counts = f"{self.unexpected_count:,} of {self.element_count:,} rows"
            text = f"{self.column}: {counts}: {self.reason}"
        else:
            text = f"{self.column}: {self.reason}"
            if self.observed:
                text += f" (observed {self.observed})"
        if self.examples:
            text += f"; first event ids: {list(self.examples)}"
        return text

    def to_violation(self) -> Violation:
        """Convert to a :class:`poem.Violation` (dataset-level: ``n_invalid=0``)."""
        n_invalid = self.unexpected_count if self.level == "row" else 0
        return Violation(
            self.column,
            n_invalid,
            self.element_count,
            tuple(self.examples),
            self.reason + (f" (observed {self.observed})" if self.observed else ""),
        )


@dataclass(frozen=True)
class DataCheckReport:
    """Result of validating one log against its suite.

    Parameters
    ----------
    suite : str
        Suite name.
    n_rows : int
        Rows in the input.
    n_expectations : int
        Expectations evaluated.
    failures : tuple of ExpectationFailure
        Every failed expectation, in suite order.
    n_quarantined : int
        Rows with at least one row-level failure.
    quarantined_by_reason : dict
        Quarantined rows per first failing reason; sums to ``n_quarantined``.
    max_quarantine_fraction : float
        Above this fraction of quarantined rows the run fails hard.
    extra_columns : tuple of str
        Columns the suite does not know (allowed; reported).
    source : str
        The file or directory checked.
    docs_path : str or None
        Data Docs ``index.html`` written, if any.
    row_reasons : tuple
        Per input row, the index into ``reasons`` of its first row-level failure, or -1
        (used by the quarantine split; not serialised).
    skipped_files : tuple of str
        Files below the log folder that look like data (``*.parquet``) but are not read, each
        with the reason (the data-file rule of :mod:`poem.io._folder`).
    rewards : bool
        The log gave rewards, converted once to losses δ = −reward (its resolved metadata's
        ``rewards``, the same in every partition): reports show rewards, not losses.
    """

    suite: str
    n_rows: int
    n_expectations: int
    failures: tuple[ExpectationFailure, ...] = ()
    n_quarantined: int = 0
    quarantined_by_reason: dict[str, int] = field(default_factory=dict)
    max_quarantine_fraction: float = 0.0
    extra_columns: tuple[str, ...] = ()
    source: str = ""
    docs_path: str | None = None
    row_reasons: Any = field(default=None, repr=False, compare=False)
    skipped_files: tuple[str, ...] = ()
    rewards: bool = False

    @property
    def warnings(self) -> tuple[ExpectationFailure, ...]:
        """Warning-level findings (rows kept, run not failed)."""
        return tuple(f for f in self.failures if f.level == "warning")

    @property
    def n_kept(self) -> int:
        """Rows that pass every row-level expectation."""
        return self.n_rows - self.n_quarantined

    @property
    def quarantine_fraction(self) -> float:
        """Fraction of input rows quarantined."""
        return self.n_quarantined / self.n_rows if self.n_rows else 0.0

    @property
    def hard_failures(self) -> tuple[ExpectationFailure, ...]:
        """Dataset-level failures, plus a synthetic one when too many rows are quarantined."""
        hard = tuple(f for f in self.failures if f.level == "dataset")
        if self.n_rows and self.quarantine_fraction > self.max_quarantine_fraction:
            hard += (
                ExpectationFailure(
                    "quarantine",
                    "max_quarantine_fraction",
                    "dataset",
                    f"{self.n_quarantined:,} of {self.n_rows:,} rows "
                    f"({self.quarantine_fraction:.2%}) failed row-level "
                    f"checks, more than the allowed {self.max_quarantine_fraction:.2%}",
                    self.n_quarantined,
                    self.n_rows,
                ),
            )
        return hard

    @property
    def passed(self) -> bool:
        """True when there is no hard failure (quarantined rows within the limit are allowed)."""
        return not self.hard_failures

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (examples converted to plain values)."""
        return {
            "suite": self.suite,
            "source": self.source,
            "passed": self.passed,
            "n_rows": self.n_rows,
            "n_kept": self.n_kept,
            "n_quarantined": self.n_quarantined,
            "quarantined_by_reason": dict(self.quarantined_by_reason),
            "max_quarantine_fraction": self.max_quarantine_fraction,
            "n_expectations": self.n_expectations,
            "extra_columns": list(self.extra_columns),
            "docs_path": self.docs_path,
            "failures": [
                {**asdict(f), "examples": [_plain(e) for e in f.examples]} for f in self.failures
            ],
            "hard_failures": [str(f) for f in self.hard_failures],
            "warnings": [str(f) for f in self.warnings],
            "skipped_files": list(self.skipped_files),
            "rewards": self.rewards,
        }

    def to_json(self, **kwargs: Any) -> str:
        """JSON text of :meth:`to_dict`."""
        return json.dumps(self.to_dict(), **{"indent": 2, **kwargs})

    def to_markdown(self) -> str:
        """Summarise as markdown: status, reconciliation and one table row per failure."""
        status = "PASSED" if self.passed else "FAILED"
        lines = [
            f"**Data checks {status}** — `{self.source or self.suite}`: {self.n_rows:,} rows, "
            f"{self.n_expectations} expectations, {len(self.failures)} failed.",
            "",
            f"Rows: {self.n_kept:,} kept + {self.n_quarantined:,} quarantined = "
            f"{self.n_rows:,} input.",
        ]
        if self.extra_columns:
            lines.append(f"Extra columns (allowed, not checked): {', '.join(self.extra_columns)}.")
        lines += [f"Skipped (not data): `{f}`." for f in self.skipped_files]
        if self.failures:
            lines += [
                "",
                "| level | column | problem | unexpected | rows | example event ids |",
                "|---|---|---|---:|---:|---|",
            ]
            for f in self.failures:
                reason = f.reason + (f" (observed {f.observed})" if f.observed else "")
                lines.append(
                    f"| {f.level} | {f.column} | {reason} | {f.unexpected_count:,} | "
                    f"{f.element_count:,} | {', '.join(str(e) for e in f.examples)} |"
                )
        if self.quarantined_by_reason:
            lines += ["", "| quarantine reason | rows |", "|---|---:|"]
            lines += [f"| {r} | {n:,} |" for r, n in self.quarantined_by_reason.items()]
        for f in self.hard_failures:
            if f.column == "quarantine":
                lines += ["", f"Hard failure: {f.reason}."]
        return "\n".join(lines)


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def raise_for_failures(report: DataCheckReport, *, quarantine: bool = True) -> DataCheckReport:
    """Raise :class:`poem.InvalidLogError` for the report's failures.

    Parameters
    ----------
    report : DataCheckReport
        Validation result.
    quarantine : bool, default=True
        When True only hard failures raise (row-level failures are quarantined within
        ``max_quarantine_fraction``); when False every failure raises.

    Returns
    -------
    DataCheckReport
        The same report, when nothing is raised.

    Raises
    ------
    InvalidLogError
        One :class:`poem.Violation` per failure, naming column, counts and example event ids;
        the deciding reasons first (dataset-level failures, then the quarantine limit).
    """
    # the deciding reasons first (dataset-level failures, the quarantine limit), then the
    # row-level failures that are refused too (without quarantine) or explain the limit
    hard = report.hard_failures
    failures = (
        hard
        if quarantine
        else hard + tuple(f for f in report.failures if f.level not in ("warning", "dataset"))
    )
    if failures:
        raise InvalidLogError([f.to_violation() for f in failures])
    return report


# findings about one file (counted on its rows), not about every row of the log
FILE_SCOPED = frozenset({"timestamp_in_partition_folder"})
_MISTYPED = "expect_column_values_to_be_in_type_list"


def mistyped_reason(reason: str, count: int) -> str:
    """The wrong-type reason with the number of values that are not numbers."""
    return f"{reason}: {count:,} values are not numbers" if count else reason


def _key(f: ExpectationFailure) -> tuple:
    reason = f.reason.rsplit(": ", 1)[0] if f.expectation == _MISTYPED else f.reason
    return (f.column, f.expectation, f.level, reason)


def _in_order(lists: list[list]) -> list:
    """The items of ``lists`` in the order every list has them (each a subsequence of it).

    Each partition lists its failures in the one order of the checks (suite order, then the
    row rules); items no list orders relative to each other keep their first appearance.
    """
    seen = list(dict.fromkeys(x for items in lists for x in items))
    before = {x: set() for x in seen}
    for items in lists:
        for a, b in zip(items[:-1], items[1:], strict=True):
            before[b].add(a)
    out: list = []
    while seen:
        x = next((x for x in seen if before[x] <= set(out)), seen[0])  # seen[0]: a cycle
        out.append(x)
        seen.remove(x)
    return out


def merge_reports(reports: Sequence[DataCheckReport], *, source: str = "") -> DataCheckReport:
    """Add up the reports of the partitions of one log, checked one partition at a time.

    Counts (rows, quarantined rows, per reason, per failure) are summed, failures of the same
    column, expectation and reason become one with the first five examples (in the order of
    the checks) and a row-level check counts every row of the log (``element_count``). Checks
    of the whole log (event ids unique across partitions, the row count) and the per-row
    reasons are :func:`data_checks.check.check_pieces`'s.

    Parameters
    ----------
    reports : sequence of DataCheckReport
        One per partition, in partition order, from the same suite and settings.
    source : str, default=""
        The whole log's name.

    Returns
    -------
    DataCheckReport
    """
    if not reports:
        raise ValueError("merge_reports needs at least one report")
    n = sum(r.n_rows for r in reports)
    merged: dict[tuple, ExpectationFailure] = {}
    for f in (f for r in reports for f in r.failures):
        old = merged.get(_key(f))
        merged[_key(f)] = (
            f
            if old is None
            else replace(
                old,
                unexpected_count=old.unexpected_count + f.unexpected_count,
                element_count=old.element_count + f.element_count,
                examples=(old.examples + f.examples)[:5],
            )
        )
    failures = [
        replace(merged[k], reason=mistyped_reason(k[3], merged[k].unexpected_count))
        if k[1] == _MISTYPED
        else replace(merged[k], element_count=n)
        if k[2] != "dataset" and k[1] not in FILE_SCOPED
        else merged[k]
        for k in _in_order([[_key(f) for f in r.failures] for r in reports])
    ]
    order = [f.reason for f in failures if f.level == "row"]
    by_reason = {
        reason: sum(r.quarantined_by_reason.get(reason, 0) for r in reports)
        for reason in sorted(
            {k for r in reports for k in r.quarantined_by_reason},
            key=lambda reason: order.index(reason) if reason in order else len(order),
        )
    }
    first = reports[0]
    return DataCheckReport(
        suite=first.suite,
        n_rows=n,
        n_expectations=first.n_expectations,
        failures=tuple(failures),
        n_quarantined=sum(r.n_quarantined for r in reports),
        quarantined_by_reason=by_reason,
        max_quarantine_fraction=first.max_quarantine_fraction,
        extra_columns=tuple(dict.fromkeys(c for r in reports for c in r.extra_columns)),
        source=source,
        docs_path=first.docs_path,
        skipped_files=tuple(dict.fromkeys(f for r in reports for f in r.skipped_files)),
    )
