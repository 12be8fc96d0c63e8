"""What a log declares about its logging policy before any row is read (DESIGN §5).

The gate's weight bound must be known before the test rows are seen: the logger's declared
minimum propensity (metadata key ``min_propensity``, written by logs whose policy knows its
floor), or ``checks.min_propensity`` from the config. :func:`declared_min_propensity` reads
the metadata of a log's files (Parquet footers, a CSV's ``.meta.json``) without reading rows;
:func:`gate_min_propensity` combines it with the configured floor.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from poem.io._metadata import METADATA_KEY, LogMetadata, check_metadata
from poem.io.logs import log_files

__all__ = ["declared_min_propensity", "gate_min_propensity"]


def _declared(file: Path) -> float | None:
    if file.suffix.lower() == ".parquet":
        raw = (pq.read_schema(file).metadata or {}).get(METADATA_KEY.encode())
    elif file.name.endswith(".meta.json"):
        raw = file.read_bytes()
    else:
        return None
    if not raw:
        return None
    return check_metadata(LogMetadata.from_dict(json.loads(raw))).min_propensity


def declared_min_propensity(path: str | Path) -> float | None:
    """The smallest ``min_propensity`` the log's files declare; None if any declares none.

    A log whose partitions come from several logging policies is bounded by the smallest of
    their floors; one partition without a declaration leaves the log without a bound.

    Raises
    ------
    InvalidLogError
        When a file's metadata is invalid (naming the key).
    """
    files = [f for f in log_files(path) if f.suffix.lower() != ".csv"]
    floors = [_declared(f) for f in files]
    if not floors or any(f is None for f in floors):
        return None
    return min(f for f in floors if f is not None)


def gate_min_propensity(declared: float | None, configured: float) -> float | None:
    """The floor the gate may assume: the larger of the declared and the configured one.

    ``configured`` is ``checks.min_propensity`` (0: none). Rows below either are
    quarantined by the checks before the gate sees the log, so every remaining weight is
    ≤ 1 / the returned value. None when neither is declared.
    """
    known = [v for v in (declared, configured if configured > 0 else None) if v is not None]
    return max(known) if known else None
