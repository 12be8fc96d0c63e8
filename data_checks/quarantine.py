"""Quarantine, never silent loss (DESIGN §2): rows failing row-level checks go to their own file.

The rows are split off with a ``reason`` column, their first failing reason as recorded by
:func:`data_checks.runner.validate_frame`, so the counts of ``reason`` equal
``DataCheckReport.quarantined_by_reason`` and ``len(kept) + len(quarantined) == n_rows``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from data_checks.report import DataCheckReport
from poem.io._folder import write_parquet_atomic
from poem.io.parquet import METADATA_KEY

__all__ = ["split_quarantine", "write_quarantine"]


def split_quarantine(
    frame: pd.DataFrame, report: DataCheckReport
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Split a validated frame into kept rows and quarantined rows (with ``reason``).

    Parameters
    ----------
    frame : DataFrame
        The frame given to :func:`~data_checks.runner.validate_frame`.
    report : DataCheckReport
        Its report.

    Returns
    -------
    kept : DataFrame
        Rows without row-level failures (metadata in ``attrs`` kept).
    quarantined : DataFrame
        The other rows, in input order, plus a ``reason`` column (first failing reason).

    Raises
    ------
    ValueError
        When the frame does not match the report (different number of rows).
    """
    if len(frame) != report.n_rows:
        raise ValueError(
            f"frame has {len(frame):,} rows but the report was made on {report.n_rows:,}"
        )
    if report.row_reasons is None:
        row_reason, reasons = np.full(len(frame), -1), ()
    else:
        row_reason, reasons = report.row_reasons
    bad = row_reason >= 0
    kept = frame.loc[~bad] if bad.any() else frame
    quarantined = frame.loc[bad].assign(
        reason=np.asarray(reasons, dtype=object)[row_reason[bad]] if bad.any() else []
    )
    quarantined.attrs = dict(frame.attrs)
    assert len(kept) + len(quarantined) == len(frame)
    return kept, quarantined


def write_quarantine(quarantined: pd.DataFrame, path: str | Path) -> Path:
    """Write quarantined rows (with ``reason``) as Parquet, keeping the log's ``poem`` metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pandas(quarantined, preserve_index=False)
    meta = quarantined.attrs.get(METADATA_KEY)
    table = table.replace_schema_metadata(
        {METADATA_KEY: json.dumps(meta)} if meta is not None else None
    )
    return write_parquet_atomic(table, path)
