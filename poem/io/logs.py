"""One front door for log files: :func:`read_log_table` (DESIGN §2 "load", STYLE §13).

Every reader of logged data (``poem-pipeline check``, the ``retrain`` flow, scripts) goes through
:func:`read_log_table`. It reads exactly the files :func:`log_files` lists (the ones
:func:`log_fingerprint` hashes; the data-file rule of :mod:`poem.io._folder`), then, once and in
one place, resolves and checks the metadata, converts rewards to losses (δ = −reward) and parses
timestamps (ISO 8601 → naive UTC). The :class:`LogTable` it returns is what the data checks
validate and :meth:`LogTable.to_log` turns into a :class:`~poem.data.LoggedBandit`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from poem.data import LoggedBandit
from poem.exceptions import Violation
from poem.io._folder import check_regular_file
from poem.io._metadata import invalid_log
from poem.io.csv import metadata_path, read_csv_frame
from poem.io.log_format import (
    METADATA_KEY,
    LogMetadata,
    frame_metadata,
    frame_to_log,
    losses_from_rewards,
    own_columns,
    parse_timestamps,
)
from poem.io.parquet import WARNINGS_KEY, list_log_files, read_frame, skipped_log_files

__all__ = [
    "LogTable",
    "log_files",
    "log_fingerprint",
    "read_log",
    "read_log_table",
    "table_from_frame",
]


@dataclass(frozen=True)
class LogTable:
    """A log read through the front door: canonical frame plus its resolved metadata.

    Parameters
    ----------
    frame : DataFrame
        Canonical columns (losses, parsed timestamps); ``frame.attrs["poem"]`` holds ``meta``.
    meta : LogMetadata
        The resolved metadata (loss bounds always set).
    source : str
        The path given to :func:`read_log_table`.
    files : tuple of str
        The files read (the ones :func:`log_fingerprint` hashes).
    skipped : tuple of str
        Files below the folder that look like data but are not read, each with the reason
        (the data-file rule of :mod:`poem.io._folder`); the checks name them.
    warnings : tuple of Violation
        What the reader noticed without refusing the rows (rows dated outside their
        ``date=`` folder); the checks report them as warnings.
    """

    frame: pd.DataFrame = field(repr=False)
    meta: LogMetadata
    source: str = ""
    files: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    warnings: tuple[Violation, ...] = ()

    @property
    def n_rows(self) -> int:
        """Number of rows."""
        return len(self.frame)

    def take(self, mask: Any) -> LogTable:
        """Return the table of the rows where ``mask`` is true (input order kept)."""
        frame = self.frame.loc[np.asarray(mask, dtype=bool)]
        frame.attrs = dict(self.frame.attrs)
        return replace(self, frame=frame)

    def to_log(self) -> LoggedBandit:
        """Build the :class:`~poem.data.LoggedBandit` (raises :class:`InvalidLogError`)."""
        return frame_to_log(self.frame)


def log_files(path: str | Path) -> list[Path]:
    """The files a log consists of: a CSV (and its ``.meta.json``), or its Parquet files.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    InvalidLogError
        For a folder without data files, or a path that is not a regular file (a named pipe
        or a device is never opened).
    """
    path = Path(path)
    if path.suffix.lower() == ".csv":
        try:
            check_regular_file(path)
        except ValueError as exc:
            raise invalid_log(str(path), 0, str(exc)) from None
        side = metadata_path(path)
        return [path, side] if side.is_file() else [path]
    return list_log_files(path)


def _partition_base(path: Path) -> Path:
    """The folder above the ``key=value`` (``date=``) folders that ``path`` sits in."""
    base = path if path.is_dir() else path.parent
    while "=" in base.name and base.parent != base:
        base = base.parent
    return base


def log_fingerprint(path: str | Path) -> str:
    """SHA-256 over the names and bytes of exactly :func:`log_files`: the log's identity.

    Names are relative to the folder above any ``key=value`` partition folders, so the same
    files have one fingerprint whether given as their ``date=`` folder, as the folder holding
    only that partition, or staged by the scheduled flow (``retrain`` and the schedule
    recognise each other's runs). A file outside partition folders is named by its name.
    """
    path = Path(path).absolute()
    base = _partition_base(path)
    digest = hashlib.sha256()
    for file in log_files(path):
        name = file.absolute().relative_to(base)
        digest.update(name.as_posix().encode())
        with open(file, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def read_log_table(
    path: str | Path,
    *,
    family: str | None = None,
    window: tuple[Any, Any] | None = None,
    **overrides: Any,
) -> LogTable:
    """Read a Parquet or CSV log into a :class:`LogTable` (the one ingestion path).

    Parameters
    ----------
    path : str or Path
        Parquet file, folder of ``date=`` partitions (symlinks followed), or CSV file.
    family : str or None, default=None
        Expected family; required for a log without metadata (a plain CSV).
    window : tuple or None, default=None
        Accepted [start, end] of the timestamps; the log must then have timestamps.
    **overrides
        :class:`~poem.io.log_format.LogMetadata` fields replacing declared ones
        (``loss_bounds`` or ``reward_bounds``, ``n_actions``, ``context_columns``); None
        values are ignored.

    Returns
    -------
    LogTable

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    InvalidLogError
        Naming the file, column or metadata key: unreadable files, inconsistent partitions,
        invalid metadata, ``reward`` beside ``loss``, rewards without reward bounds, a window
        without timestamps.
    ValueError
        When ``family`` contradicts the declared family or is missing for a plain log.
    """
    files = log_files(path)
    csv = Path(path).suffix.lower() == ".csv"
    frame = read_csv_frame(path) if csv else read_frame(path)
    table = table_from_frame(
        frame, family=family, window=window, source=str(path), files=files, **overrides
    )
    return replace(table, skipped=tuple(str(s) for s in skipped_log_files(path)))


def table_from_frame(
    frame: pd.DataFrame,
    *,
    family: str | None = None,
    window: tuple[Any, Any] | None = None,
    source: str = "",
    files: Any = (),
    **overrides: Any,
) -> LogTable:
    """:func:`read_log_table`'s metadata, reward and timestamp steps on a frame already read.

    Parameters
    ----------
    frame : DataFrame
        The raw rows, with the declared metadata (if any) in ``frame.attrs["poem"]``.
    family, window, **overrides
        As in :func:`read_log_table`.
    source : str, default=""
        Name of the log (or partition) for reports.
    files : sequence of str, default=()
        The files the rows come from.

    Returns
    -------
    LogTable
    """
    warnings = tuple(frame.attrs.pop(WARNINGS_KEY, ()))
    meta = frame_metadata(frame, family=family, **overrides)
    frame.attrs[METADATA_KEY] = json.loads(meta.to_json())
    frame, meta = losses_from_rewards(own_columns(frame, meta), meta)
    if "loss" not in frame.columns:
        raise invalid_log(
            "loss",
            len(frame),
            "column is missing: the log has neither 'loss' nor 'reward'; its columns: "
            + ", ".join(str(c) for c in frame.columns[:12]),
            "Name your outcome column with --reward-column COLUMN --reward-bounds MIN MAX "
            "(data.reward_column, data.reward_bounds), or --loss-column COLUMN",
        )
    if meta.context_format == "none" and meta.family != "candidates":
        raise invalid_log(
            "context_columns",
            len(frame),
            f"the log has no feature columns (x_0, x_1, ... or x_indices/x_values), which the "
            f"{meta.family} family needs; its columns: "
            + ", ".join(str(c) for c in frame.columns[:12]),
            "Name yours with --context-columns a,b or a glob 'f_*' (data.context_columns)",
        )
    if "loss" in frame.columns and meta.loss_bounds is None:
        raise invalid_log(
            "loss",
            len(frame),
            "has no declared loss bounds",
            "Declare loss_bounds (or reward_bounds for a reward column)",
        )
    frame = parse_timestamps(frame)
    if window is not None and "timestamp" not in frame.columns:
        raise invalid_log(
            "timestamp",
            len(frame),
            f"column is missing, but a time window [{window[0]}, {window[1]}] is configured",
            "Log a timestamp column, or remove the window (data.window_start/window_end, --window)",
        )
    frame.attrs[METADATA_KEY] = json.loads(meta.to_json())
    return LogTable(frame, meta, source, tuple(str(f) for f in files), warnings=warnings)


def read_log(path: str | Path, *, family: str | None = None, **overrides: Any) -> LoggedBandit:
    """Read a Parquet or CSV log into a validated :class:`~poem.data.LoggedBandit`.

    Parameters
    ----------
    path, family, **overrides
        As in :func:`read_log_table`.

    Returns
    -------
    LoggedBandit
    """
    return read_log_table(path, family=family, **overrides).to_log()
