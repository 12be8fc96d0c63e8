"""One partition of a log through the stages of :mod:`data_checks.stages` (runs where it lives).

:func:`check_partition` reads (a Parquet row group through the front door, or a
:class:`~poem.io.logs.LogTable` already read), validates, quarantines, builds and summarises
one partition and returns only small results (:class:`PartitionResult`);
:func:`load_kept_partition` reads its kept rows again after the check.
:func:`data_checks.check.check_pieces` maps both over a partition set.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from data_checks.quarantine import write_quarantine
from data_checks.report import DataCheckReport
from data_checks.stages import (
    CheckSettings,
    build_stage,
    failed_report,
    quarantine_stage,
    validate_stage,
    with_placeholder_propensities,
)
from poem.diagnostics.propensity import PropensitySummary, propensity_summary
from poem.exceptions import InvalidLogError
from poem.io.logs import LogTable, table_from_frame
from poem.io.partitions import LogPartition, read_partition_frame

__all__ = [
    "PartitionResult",
    "check_partition",
    "describe",
    "kept_partitions",
    "load_kept_partition",
]


@dataclass(frozen=True)
class PartitionResult:
    """What one partition sends back (small whatever its size).

    Attributes
    ----------
    report : DataCheckReport or None
        Its data-check report without per-row reasons (None: an empty partition, not checked).
    summary : PropensitySummary or None
        Its propensity summary (None when empty or when a dataset-level check failed).
    metadata : str
        The resolved metadata (JSON), to check the partitions agree.
    quarantined_rows : ndarray of int
        Positions (in the partition) of the rows it quarantined.
    """

    report: DataCheckReport | None
    summary: PropensitySummary | None = None
    metadata: str = ""
    quarantined_rows: Any = None


def _name(piece: LogPartition | LogTable) -> str:
    if isinstance(piece, LogTable):
        return piece.source
    return f"{piece.path} (row group {piece.row_group})"


def _read_table(piece: LogPartition | LogTable, settings: CheckSettings) -> LogTable:
    """The partition through the front door (a table already read is returned as is)."""
    if isinstance(piece, LogTable):
        return piece  # read by read_stage (placeholder propensities included)
    table = table_from_frame(
        read_partition_frame(piece),
        family=settings.family,
        window=settings.window,
        source=_name(piece),
        files=(piece.path,),
        **settings.overrides,
    )
    return with_placeholder_propensities(table, settings)


def describe(piece: LogPartition | LogTable) -> tuple[int, str]:
    """Rows and name of a partition."""
    return piece.n_rows, _name(piece)


def check_partition(
    piece: LogPartition | LogTable,
    elsewhere: np.ndarray,
    quarantine_path: str | None,
    validate_empty: bool,
    *,
    settings: CheckSettings,
    target_policy: Any = None,
    docs_dir: str | None = None,
    one: bool = True,
    context: Any = None,
) -> PartitionResult:
    """Read, validate, quarantine, build and summarise one partition (runs where it lives).

    Parameters
    ----------
    piece : LogPartition or LogTable
        The partition.
    elsewhere : ndarray of int
        Its rows whose event id occurs in another partition (quarantined as duplicated).
    quarantine_path : str or None
        Parquet file for its quarantined rows (not written when None).
    validate_empty : bool
        Validate even without rows (the first partition of a log whose partitions are all
        empty).
    settings, target_policy, context
        As in :func:`data_checks.check.check_pieces`.
    docs_dir : str or None, default=None
        Folder for GX Data Docs.
    one : bool, default=True
        The log is this one partition (else the row count is checked on the total).

    Returns
    -------
    PartitionResult
    """
    if piece.n_rows == 0 and not validate_empty:
        return PartitionResult(None)
    try:
        table = _read_table(piece, settings)
    except (InvalidLogError, ValueError, OSError, pa.ArrowException) as exc:
        return PartitionResult(failed_report(_name(piece), exc))
    # a fresh GX context per partition: a reused one keeps every validation's data (RSS grows)
    report = validate_stage(
        table, settings, context=context, docs_dir=docs_dir, elsewhere=elsewhere, partition=not one
    )
    kept, quarantined = quarantine_stage(table, report)
    if quarantined is not None and quarantine_path is not None:
        if settings.propensity == "estimate":  # the placeholder is not the log's
            quarantined = quarantined.drop(columns="propensity")
        write_quarantine(quarantined, quarantine_path)
    log, report = build_stage(kept, report)
    summary = None
    if log is not None:
        summary = propensity_summary(
            log, target_policy=target_policy, thresholds=settings.thresholds
        )
    dropped = np.zeros(0, np.int64)
    if quarantined is not None:
        dropped = np.flatnonzero(report.row_reasons[0] >= 0)
    report = replace(report, row_reasons=None)  # keep it small
    return PartitionResult(report, summary, table.meta.to_json(), dropped)


def load_kept_partition(
    piece: LogPartition | LogTable, quarantined_rows: np.ndarray, *, settings: CheckSettings
) -> Any:
    """The kept rows of a checked partition as a :class:`~poem.data.LoggedBandit` (or None).

    Reads the partition again through the same front door as :func:`check_partition` and
    drops the rows it quarantined (``PartitionResult.quarantined_rows``), so the kept rows
    equal the check's without its memory (the GX validation) and the log's rows coexisting.
    Event ids are dropped: they serve the checks only, and cost memory.
    """
    if piece.n_rows == 0:
        return None
    table = _read_table(piece, settings)
    keep = np.ones(table.n_rows, dtype=bool)
    keep[quarantined_rows] = False
    if not keep.any():
        return None
    frame = table.frame.loc[keep] if not keep.all() else table.frame
    return replace(table, frame=frame.drop(columns="event_id", errors="ignore")).to_log()


def kept_partitions(pieces: Any, results: list[PartitionResult], settings: CheckSettings) -> Any:
    """The kept rows of every checked partition, as a partition set like ``pieces``."""
    none = np.zeros(0, np.int64)
    rows = [none if r.quarantined_rows is None else r.quarantined_rows for r in results]
    return pieces.map(load_kept_partition, rows, settings=settings)
