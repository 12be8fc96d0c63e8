"""A canonical Parquet log as row partitions: one Parquet row group each (DESIGN §8).

:func:`log_partitions` lists the pieces of a log (every row group of every file, in the order
:func:`poem.io.parquet.read_frame` concatenates them) without reading any rows;
:func:`read_partition` reads one piece into a :class:`~poem.data.LoggedBandit` with the log's
declared metadata. Concatenating the pieces gives the whole log.

**The partition-set protocol** ("the rows of a log, wherever they live"): every stage after the
check sees a log only through ``len(parts)``;
``parts.map(fn, *per_partition_args, gather=False, consume=False, **kwargs)``, ``fn`` on every
partition where it lives, the results kept there as a new set or (``gather``) returned as a
list in partition order; and ``parts.fold(fn, state, plan, **kwargs)``, a small state handed
from partition to partition (AdaGrad's epoch). :class:`LocalPartitions` holds the objects in
this process (a log in memory is one partition), :class:`poem._dask.ClusterPartitions` in a
Dask cluster's workers; nothing else distinguishes the two.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from poem.data import LoggedBandit
from poem.io._folder import READ_OPTIONS
from poem.io.log_format import METADATA_KEY, frame_to_log
from poem.io.parquet import WARNINGS_KEY, list_log_files, outside_folder_date

__all__ = [
    "LocalPartitions",
    "LogPartition",
    "log_partitions",
    "read_partition",
    "read_partition_frame",
]


@dataclass(frozen=True)
class LogPartition:
    """One row group of one Parquet file of a log.

    Attributes
    ----------
    path : str
        The Parquet file.
    row_group : int
        Row-group index within the file.
    n_rows : int
        Rows in the row group (from the file footer).
    """

    path: str
    row_group: int
    n_rows: int


def log_partitions(path: str | Path) -> list[LogPartition]:
    """Every row group of every Parquet file of a log, in read order (footers only).

    Parameters
    ----------
    path : str or Path
        A ``*.parquet`` file or a (date-partitioned) directory of them.

    Returns
    -------
    list of LogPartition
        Files with zero row groups give no partition; row groups with zero rows are kept.
    """
    pieces = []
    for f in list_log_files(path):
        meta = pq.ParquetFile(f, **READ_OPTIONS).metadata
        pieces += [
            LogPartition(str(f), g, meta.row_group(g).num_rows) for g in range(meta.num_row_groups)
        ]
    return pieces


def read_partition(
    partition: LogPartition, *, family: str | None = None, **overrides: Any
) -> LoggedBandit | None:
    """Read one partition into a :class:`~poem.data.LoggedBandit` (None when it has no rows).

    Parameters
    ----------
    partition : LogPartition
        The piece to read.
    family : str or None, default=None
        Expected family (as in :func:`poem.io.logs.read_log`).
    **overrides
        Passed to :func:`~poem.io.log_format.frame_to_log`.

    Returns
    -------
    LoggedBandit or None
        The partition's rows, validated like a whole log; None for zero rows.
    """
    if partition.n_rows == 0:
        return None
    return frame_to_log(read_partition_frame(partition), family=family, **overrides)


def read_partition_frame(partition: LogPartition) -> pd.DataFrame:
    """Read one partition's rows as a raw frame (declared metadata in ``attrs["poem"]``).

    Page checksums are verified; rows dated outside their ``date=`` folder are listed in
    ``attrs["poem_warnings"]`` (as by :func:`poem.io.parquet.read_frame`).
    """
    table = pq.ParquetFile(partition.path, **READ_OPTIONS).read_row_group(partition.row_group)
    warning = outside_folder_date(table, partition.path)
    raw = (table.schema.metadata or {}).get(METADATA_KEY.encode())
    frame = table.replace_schema_metadata(None).to_pandas(
        types_mapper=lambda t: pd.ArrowDtype(t) if pa.types.is_list(t) else None
    )
    if raw is not None:
        try:
            frame.attrs[METADATA_KEY] = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"its '{METADATA_KEY}' metadata is not valid JSON ({exc})") from None
    if warning is not None:
        frame.attrs[WARNINGS_KEY] = [warning]
    return frame


@dataclass(frozen=True)
class LocalPartitions:
    """A partition set held in this process (see the module docstring).

    Attributes
    ----------
    items : list
        One object per partition (None for an empty one), in read order.
    """

    items: list

    def __len__(self) -> int:
        return len(self.items)

    def map(
        self,
        fn: Callable,
        *iterables: Iterable,
        gather: bool = False,
        consume: bool = False,
        **kwargs: Any,
    ) -> LocalPartitions | list:
        """``fn(item, *per_partition_args, **kwargs)`` on every partition.

        Parameters
        ----------
        fn : callable
            The per-partition function.
        *iterables : iterable
            Per-partition extra arguments (one element per partition).
        gather : bool, default=False
            Return the results as a list (True) or as a new partition set (False).
        consume : bool, default=False
            Move the partitions into the result: this set is left empty and each partition
            is freed once its result exists (the two never all coexist in memory).
        **kwargs
            Passed to every call.
        """
        extra = [list(it) for it in iterables]
        out = []
        for k in range(len(self.items)):
            item = self.items[k]
            if consume:
                self.items[k] = None
            out.append(fn(item, *(e[k] for e in extra), **kwargs))
        if consume:
            self.items.clear()
        return out if gather else LocalPartitions(out)

    def fold(
        self, fn: Callable, state: Any, plan: Sequence[tuple[int, dict]], **kwargs: Any
    ) -> Any:
        """``state = fn(state, items[k], **extra, **kwargs)`` for each ``(k, extra)`` in order."""
        for k, extra in plan:
            state = fn(state, self.items[k], **extra, **kwargs)
        return state
