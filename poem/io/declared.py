"""What a log declares about its logging policy before any row is read (DESIGN §5).

The gate's weight bound must be known before the test rows are seen: the logger's declared
minimum propensity (metadata key ``min_propensity``, :func:`declared_min_propensity`, read
from the files' metadata only), or ``checks.min_propensity`` from the config
(:func:`gate_min_propensity` combines the two).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from poem.io._metadata import METADATA_KEY, LogMetadata, check_metadata
from poem.io.logs import log_files
from poem.io.parquet import _combined_metadata

__all__ = ["declared_min_propensity", "gate_min_propensity"]


def _declared_metadata(file: Path) -> Any:
    """The metadata a Parquet footer or a ``.meta.json`` declares (None: none)."""
    if file.suffix.lower() == ".parquet":
        raw = (pq.read_schema(file).metadata or {}).get(METADATA_KEY.encode())
    else:
        raw = file.read_bytes()
    return json.loads(raw) if raw else None


def declared_min_propensity(path: str | Path) -> float | None:
    """The ``min_propensity`` the log declares: the smallest of its files', None if one has none.

    Read from the Parquet footers or a CSV's ``.meta.json`` without reading rows, and combined
    as reading the log does (:func:`poem.io.parquet._combined_metadata`).

    Raises
    ------
    InvalidLogError
        When the declared metadata is invalid (naming the key).
    """
    files = [f for f in log_files(path) if f.suffix.lower() == ".parquet" or _sidecar(f)]
    metas = [_declared_metadata(f) for f in files]
    meta = _combined_metadata(metas) if metas else None
    if not isinstance(meta, dict) or meta.get("min_propensity") is None:
        return None
    return check_metadata(LogMetadata.from_dict(meta)).min_propensity


def _sidecar(file: Path) -> bool:
    return file.name.endswith(".meta.json")


def gate_min_propensity(declared: float | None, configured: float) -> float | None:
    """The floor the gate may assume: the larger of the declared and the configured one.

    ``configured`` is ``checks.min_propensity`` (0: none). Rows below either are kept by
    the checks (a warning) and the gate blocks on them (a failed precondition,
    :func:`poem.gate.gate_decision`), so a decision is only made when every test weight is
    ≤ 1 / the returned value. None when neither is declared.
    """
    known = [v for v in (declared, configured if configured > 0 else None) if v is not None]
    return max(known) if known else None
