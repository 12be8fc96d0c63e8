"""Canonical Parquet logs: :func:`write_log` and :func:`read_frame` (Parquet frames only).

Logs are read through :func:`poem.io.logs.read_log_table`; the columns and the ``poem``
metadata are defined in :mod:`poem.io.log_format`. Partitioned logs are written as
``date=YYYY-MM-DD/part-00000.parquet`` and read back in (date, file) order, so a log whose
timestamps are in date order round-trips exactly (an unpartitioned file always does).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from poem.data import LoggedBandit
from poem.exceptions import InvalidLogError, Violation
from poem.io._folder import (
    READ_OPTIONS,
    SkippedFile,
    check_regular_file,
    looks_like_data,
    partition_date,
    scan_log_folder,
    write_parquet_atomic,
)
from poem.io._metadata import invalid_log
from poem.io.log_format import (
    METADATA_KEY,
    LogMetadata,
    frame_metadata,
    frame_to_log,
    log_to_frame,
    log_to_table,
    parse_timestamps,
)

__all__ = [
    "METADATA_KEY",
    "LogMetadata",
    "frame_metadata",
    "frame_to_log",
    "list_log_files",
    "log_to_frame",
    "partition_date",
    "read_frame",
    "scan_log_folder",
    "skipped_log_files",
    "write_log",
]

logger = logging.getLogger(__name__)

_PART = "part-00000.parquet"
_PER_FILE_KEYS = ("min_propensity",)
WARNINGS_KEY = "poem_warnings"  # frame.attrs: reader warnings (Violations) for the checks


def write_log(
    log: LoggedBandit, path: str | Path, *, partition_by_date: bool = True, overwrite: bool = False
) -> Path:
    """Write a log as canonical Parquet.

    Parameters
    ----------
    log : LoggedBandit
        The log to write.
    path : str or Path
        With ``partition_by_date=True``: a directory that receives
        ``date=YYYY-MM-DD/part-00000.parquet`` (rows grouped by the date of their timestamp,
        stable; a log without timestamps gets one ``part-00000.parquet``). Otherwise: the file.
    partition_by_date : bool, default=True
        Whether to partition by date.
    overwrite : bool, default=False
        Replace an existing file, or every ``*.parquet`` file below an existing directory
        (otherwise stale partitions of an older log would be read back with the new one).

    Returns
    -------
    Path
        The directory or file written.

    Raises
    ------
    FileExistsError
        When ``path`` already holds a log and ``overwrite`` is False.
    """
    path = Path(path)
    if path.is_dir():
        existing = list(scan_log_folder(path).files)
    else:
        existing = [path] if path.exists() else []
    if existing and not overwrite:
        raise FileExistsError(
            f"{path} already holds a log ({len(existing)} Parquet file(s)); pass overwrite=True"
        )
    if path.is_dir():  # symlinked partitions are unlinked, never emptied: their files are not ours
        for link in [p for p in path.rglob("*") if p.is_symlink()]:
            link.unlink()
        existing = sorted(p for p in path.rglob("*") if p.is_file() and looks_like_data(p.name))
    for old in existing:
        old.unlink()
    table = log_to_table(log)
    if not partition_by_date:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(table, path)
        return path
    path.mkdir(parents=True, exist_ok=True)
    if log.timestamps is None:
        write_parquet_atomic(table, path / _PART)
        return path
    days = log.timestamps.astype("datetime64[D]")
    order = np.argsort(days, kind="stable")
    sorted_days = days[order]
    starts = np.flatnonzero(np.r_[True, sorted_days[1:] != sorted_days[:-1]])
    for s, e in zip(starts, np.r_[starts[1:], len(order)], strict=True):
        folder = path / f"date={sorted_days[s]}"
        folder.mkdir(exist_ok=True)
        write_parquet_atomic(table.take(pa.array(order[s:e])), folder / _PART)
    return path


# -- reading ------------------------------------------------------------------------------------
def list_log_files(path: str | Path) -> list[Path]:
    """Parquet files of a log: the file itself, or the data files below a directory.

    Which files are data is decided by the one rule of :mod:`poem.io._folder` (files sorted by
    their path relative to ``path``); :func:`skipped_log_files` names the ones it leaves out.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    InvalidLogError
        For a folder without data files, or a path that is not a regular file (a named pipe,
        ``/dev/zero``: never opened, it could block forever).
    """
    path = Path(path)
    if path.is_dir():
        folder = scan_log_folder(path)
        if not folder.files:
            skipped = "".join(f"; skipped {s}" for s in folder.skipped[:5])
            raise invalid_log(str(path), 0, f"contains no *.parquet files{skipped}")
        return list(folder.files)
    try:
        return [check_regular_file(path)]
    except ValueError as exc:
        raise invalid_log(str(path), 0, str(exc)) from None


def skipped_log_files(path: str | Path) -> tuple[SkippedFile, ...]:
    """Files below a log folder that look like data (``*.parquet``) but are not read, and why."""
    path = Path(path)
    return scan_log_folder(path).skipped if path.is_dir() else ()


def _file_metadata(table: pa.Table) -> Any:
    raw = (table.schema.metadata or {}).get(METADATA_KEY.encode())
    return None if raw is None else json.loads(raw)


def _comparable(meta: Any) -> Any:
    """Declared metadata without the per-file keys that may differ between files of one log."""
    if not isinstance(meta, dict):
        return meta
    return {k: v for k, v in meta.items() if k not in _PER_FILE_KEYS}


def _combined_metadata(metas: list[Any]) -> Any:
    """The log's metadata: the first file's, with ``min_propensity`` the smallest of all files.

    It may change between files with the served policy; absent from one file, it is dropped.
    """
    meta = metas[0]
    if not isinstance(meta, dict) or "min_propensity" not in meta:
        return meta
    values = [m.get("min_propensity") if isinstance(m, dict) else None for m in metas]
    meta = dict(meta)
    if any(v is None for v in values):
        meta.pop("min_propensity")
    else:
        meta["min_propensity"] = min(values)
    return meta


def read_error(path: str | Path, exc: BaseException) -> Violation:
    """The violation for a Parquet file that cannot be read (checksum failures said so)."""
    text = str(exc)
    if "checksum" in text.lower() or "crc" in text.lower():
        message = (
            f"fails its Parquet page checksum: its bytes changed after it was written ({text})"
        )
        hint = "Restore the file from a copy or remove it; its values cannot be trusted"
    else:
        message, hint = f"cannot be read as Parquet ({text})", "Rewrite or remove the file"
    return Violation(str(path), 0, 0, (), message, hint)


def outside_folder_date(table: pa.Table, path: str | Path) -> Violation | None:
    """Rows of a file in a ``date=YYYY-MM-DD`` folder whose timestamp has another UTC date.

    Returns
    -------
    Violation or None
        Naming the file, the count and up to five event ids (a warning for the checks).
    """
    day, _ = partition_date(Path(path).parent.name)
    if day is None or "timestamp" not in table.column_names or table.num_rows == 0:
        return None
    frame = parse_timestamps(pd.DataFrame({"timestamp": table.column("timestamp").to_pandas()}))
    stamps = frame["timestamp"].to_numpy(dtype="datetime64[ns]")
    bad = ~np.isnat(stamps) & (stamps.astype("datetime64[D]") != np.datetime64(day, "D"))
    if not bad.any():
        return None
    if "event_id" in table.column_names:
        ids = table.column("event_id").to_pandas().to_numpy()[bad][:5]
        examples = tuple(v.item() if hasattr(v, "item") else v for v in ids)
    else:
        examples = tuple(int(i) for i in np.flatnonzero(bad)[:5])
    return Violation(
        "timestamp",
        int(bad.sum()),
        table.num_rows,
        examples,
        f"are dated outside their partition folder {Path(path).parent.name} (file {path})",
        "Move the rows to the folder of their date, or fix their timestamps",
    )


def _bad_metadata_json(path: Path, n_rows: int, exc: ValueError) -> Violation:
    """The file's ``poem`` metadata is not JSON (the Parquet itself was read)."""
    return Violation(
        str(path),
        0,
        n_rows,
        (),
        f"its '{METADATA_KEY}' metadata is not valid JSON ({exc})",
        f"Rewrite the file with write_log, or fix the JSON under the Parquet key '{METADATA_KEY}'",
    )


def _same_columns(table: pa.Table, ref: pa.Table) -> bool:
    """Same column names and types, in any order."""
    a, b = table.schema.remove_metadata(), ref.schema.remove_metadata()
    return sorted(a.names) == sorted(b.names) and all(
        a.field(n).type == b.field(n).type for n in b.names
    )


def read_frame(path: str | Path) -> pd.DataFrame:
    """Read a Parquet log (file or partitioned directory) into a DataFrame, without validation.

    List columns become ``pd.ArrowDtype`` columns; the declared :class:`LogMetadata` (as a
    dict) is in ``frame.attrs["poem"]`` when present.

    Raises
    ------
    InvalidLogError
        Naming every file that cannot be read or whose columns, types or declared metadata
        differ from the first readable file.
    """
    files = list_log_files(path)
    tables, violations, warnings = [], [], []
    ref: tuple[pa.Table, Path] | None = None
    for f in files:
        try:
            table = pq.read_table(f, **READ_OPTIONS)
        except (pa.ArrowException, OSError, ValueError) as exc:
            violations.append(read_error(f, exc))
            continue
        try:
            _file_metadata(table)
        except ValueError as exc:  # the Parquet is fine, its declared metadata is not
            violations.append(_bad_metadata_json(f, table.num_rows, exc))
            continue
        if ref is None:
            ref = (table, f)
        elif not _same_columns(table, ref[0]) or _comparable(_file_metadata(table)) != _comparable(
            _file_metadata(ref[0])
        ):
            violations.append(
                Violation(str(f), 0, table.num_rows, (), _schema_difference(table, ref[0], ref[1]))
            )
            continue
        if (warning := outside_folder_date(table, f)) is not None:
            warnings.append(warning)
        tables.append(table.select(ref[0].schema.names))  # same columns in the first file's order
    if violations:
        raise InvalidLogError(violations)
    meta = _combined_metadata([_file_metadata(t) for t in tables])
    table = pa.concat_tables([t.replace_schema_metadata(None) for t in tables])
    frame = table.to_pandas(
        types_mapper=lambda t: pd.ArrowDtype(t) if pa.types.is_list(t) else None
    )
    if meta is not None:
        frame.attrs[METADATA_KEY] = meta
    if warnings:
        frame.attrs[WARNINGS_KEY] = warnings
    return frame


def _schema_difference(table: pa.Table, ref: pa.Table, ref_file: Path) -> str:
    a, b = table.schema, ref.schema
    missing = [n for n in b.names if n not in a.names]
    extra = [n for n in a.names if n not in b.names]
    typed = [
        f"{n} is {a.field(n).type} not {b.field(n).type}"
        for n in a.names
        if n in b.names and a.field(n).type != b.field(n).type
    ]
    parts = (
        ([f"missing columns {missing}"] if missing else [])
        + ([f"extra columns {extra}"] if extra else [])
        + typed
    )
    if not parts:
        mine, theirs = _file_metadata(table), _file_metadata(ref)
        if not (isinstance(mine, dict) and isinstance(theirs, dict)):
            parts = [f"declared '{METADATA_KEY}' metadata {'present' if mine else 'absent'} here"]
        else:
            keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
            parts = [
                "declared metadata differs: "
                + "; ".join(f"{k} {mine.get(k)!r} vs {theirs.get(k)!r}" for k in keys[:5])
            ]
    return f"does not match {ref_file.name} of the same log: " + "; ".join(parts)
