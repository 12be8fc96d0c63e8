"""Event ids unique across the partitions of a log (DESIGN §8): hash buckets on disk.

Duplicates *within* a partition are found where it is checked
(:func:`data_checks.stages.duplicated_rows`); across partitions, every partition writes its
ids, bucketed by a 64-bit hash, to a scratch folder and each bucket (about ``rows_per_bucket``
rows) lists the rows whose id occurs in more than one partition. Both run as ``map`` over the
partition set, so the ids never meet in one process.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from poem.io._folder import READ_OPTIONS
from poem.io.logs import LogTable
from poem.io.partitions import LogPartition

__all__ = ["rows_elsewhere"]


def _write_id_buckets(piece: LogPartition | LogTable, index: int, *, folder: str, n_buckets: int):
    """Write the partition's non-null event ids, with their row, into one file per hash bucket."""
    if isinstance(piece, LogTable):
        ids = piece.frame["event_id"] if "event_id" in piece.frame.columns else None
    else:
        try:
            file = pq.ParquetFile(piece.path, **READ_OPTIONS)
            if "event_id" not in file.schema_arrow.names:
                return
            ids = file.read_row_group(piece.row_group, columns=["event_id"]).to_pandas()["event_id"]
        except (OSError, pa.ArrowException):
            return  # the check reports the unreadable partition
    if ids is None:
        return
    rows = np.flatnonzero(ids.notna().to_numpy())
    values = ids.iloc[rows]
    bucket = pd.util.hash_pandas_object(values, index=False).to_numpy() % np.uint64(n_buckets)
    for b in np.unique(bucket):
        sel = bucket == b
        out = Path(folder) / f"bucket={int(b):05d}"
        out.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame({"event_id": values.to_numpy()[sel], "part": index, "row": rows[sel]})
        pq.write_table(
            pa.Table.from_pandas(frame, preserve_index=False), out / f"part-{index:05d}.parquet"
        )


def _rows_elsewhere(_piece: Any, folders: list[str]) -> np.ndarray:
    """``(part, row)`` of the rows of these buckets whose id occurs in more than one partition.

    Mapped over the partitions, each taking a share of the buckets (``_piece`` unused).
    """
    found = [np.zeros((0, 2), np.int64)]
    for folder in folders:
        frame = pq.read_table(folder).to_pandas()
        n_parts = frame.groupby("event_id", sort=False)["part"].transform("nunique")
        found.append(frame.loc[n_parts.to_numpy() > 1, ["part", "row"]].to_numpy(np.int64))
    return np.concatenate(found)


def rows_elsewhere(pieces: Any, sizes: list[int], out: Path | None, rows_per_bucket: int) -> list:
    """Per partition, its rows whose event id occurs in another partition."""
    k = len(sizes)
    if k < 2:
        return [np.zeros(0, np.int64)] * k
    n_buckets = max(1, -(-sum(sizes) // rows_per_bucket))
    # workers write the id buckets here: on a remote cluster, out_dir must be on a shared disk
    scratch = Path(tempfile.mkdtemp(prefix="poem-ids-", dir=out))
    try:
        pieces.map(
            _write_id_buckets, range(k), gather=True, folder=str(scratch), n_buckets=n_buckets
        )
        buckets = sorted(str(b) for b in scratch.glob("bucket=*"))
        shares = [buckets[j::k] for j in range(k)]
        found = np.concatenate(pieces.map(_rows_elsewhere, shares, gather=True))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [np.sort(found[found[:, 0] == j, 1]) for j in range(k)]
