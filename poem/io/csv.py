"""CSV logs: the canonical columns of :mod:`poem.io.log_format` in a text file.

List columns (``x_indices``, ``x_values``, ``logging_distribution``, ``candidate_*``) hold
JSON arrays such as ``"[0.25, 0.75]"``. CSV has no key-value metadata, so the
:class:`~poem.io.log_format.LogMetadata` is written beside the file as ``<name>.meta.json``;
without it (a plain CSV exported from a warehouse), :func:`poem.io.logs.read_log_table`
needs ``family`` and ``loss_bounds`` (or ``reward_bounds``). This module only reads and
writes text; metadata, rewards and timestamps are resolved by :mod:`poem.io.logs`.
"""

from __future__ import annotations

import csv as _csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from poem.data import LoggedBandit
from poem.exceptions import InvalidLogError, Violation
from poem.io._metadata import invalid_log
from poem.io._row_checks import LIST_COLUMNS
from poem.io.log_format import METADATA_KEY, log_to_frame

__all__ = ["metadata_path", "read_csv_frame", "write_csv"]

_N_EXAMPLES = 5


def metadata_path(path: str | Path) -> Path:
    """Return the side-car metadata file of a CSV log: ``<name>.meta.json``."""
    path = Path(path)
    return path.with_name(path.name + ".meta.json")


def write_csv(log: LoggedBandit, path: str | Path) -> Path:
    """Write a log as CSV plus its ``<name>.meta.json`` metadata; returns the CSV path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame = log_to_frame(log)
    meta = frame.attrs.pop(METADATA_KEY)
    for col in LIST_COLUMNS:
        if col in frame.columns:
            frame[col] = [json.dumps(v) for v in pa.array(frame[col]).to_pylist()]
    if "timestamp" in frame.columns:
        frame["timestamp"] = frame["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%S.%f")
    frame.to_csv(path, index=False)
    metadata_path(path).write_text(json.dumps(meta, sort_keys=True, indent=1))
    return path


def _ragged_lines(path: Path) -> tuple[int, list[int], int]:
    """Header width, 1-based line numbers whose field count differs, number of data lines."""
    with path.open(newline="") as fh:
        reader = _csv.reader(fh)
        header = next(reader, None)
        width = len(header or [])
        bad, n = [], 0
        for n, row in enumerate(reader, start=1):  # noqa: B007
            if len(row) != width and row:
                bad.append(n + 1)
    return width, bad, n


def read_csv_frame(path: str | Path) -> pd.DataFrame:
    """Read a CSV log into a frame (no validation of values, timestamps left as text).

    Parameters
    ----------
    path : str or Path
        The CSV file.

    Returns
    -------
    DataFrame
        With the side-car metadata (decoded JSON) in ``frame.attrs["poem"]`` when present.

    Raises
    ------
    InvalidLogError
        Naming the file when it is empty or has rows whose number of fields differs from
        the header's (with their count and line numbers), or a list column with cells that
        are not JSON arrays.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"log {path} does not exist")
    if path.stat().st_size == 0:
        raise InvalidLogError([Violation(str(path), 0, 0, (), "is empty (no header, no rows)")])
    width, bad, n = _ragged_lines(path)
    if bad:
        raise InvalidLogError(
            [
                Violation(
                    str(path),
                    len(bad),
                    n,
                    tuple(bad[:_N_EXAMPLES]),
                    f"do not have the header's {width} fields (first rows are CSV line numbers)",
                    "Fix the quoting or the delimiter of those lines",
                )
            ]
        )
    frame = pd.read_csv(path)
    side = metadata_path(path)
    if side.exists():
        try:
            frame.attrs[METADATA_KEY] = json.loads(side.read_text())
        except ValueError as exc:
            raise invalid_log(str(side), len(frame), f"is not valid JSON ({exc})") from None
    ids = frame["event_id"].to_numpy() if "event_id" in frame.columns else np.arange(len(frame))
    violations = []
    for col in LIST_COLUMNS:
        if col in frame.columns:
            parsed, bad_rows = [], []
            for i, cell in enumerate(frame[col].tolist()):
                try:
                    value = json.loads(cell)
                    if not isinstance(value, list):
                        raise ValueError(cell)
                except (TypeError, ValueError):
                    bad_rows.append(i)
                    value = None
                parsed.append(value)
            if bad_rows:
                violations.append(
                    Violation(
                        col,
                        len(bad_rows),
                        len(frame),
                        tuple(ids[bad_rows[:_N_EXAMPLES]].tolist()),
                        "are not JSON arrays",
                    )
                )
            else:
                arr = pa.array(parsed)
                frame[col] = pd.Series(pd.arrays.ArrowExtensionArray(arr), index=frame.index)
    if violations:
        raise InvalidLogError(violations)
    return frame
