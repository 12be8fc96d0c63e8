"""``check`` on a Parquet log read as partitions (DESIGN §8): never the whole log in one place.

Each partition (one Parquet row group, :func:`poem.io.partitions.log_partitions`) goes through
the same stages as a whole log (:mod:`data_checks.stages`: front door, GX suite + row rules,
quarantine, :class:`~poem.data.LoggedBandit`) in :func:`check_partition`, which writes its
quarantined rows to ``quarantine/part-NNNNN.parquet`` and returns only small results: the
partition's :class:`~data_checks.report.DataCheckReport` (without the per-row reasons) and its
:class:`~poem.diagnostics.propensity_summary.PropensitySummary`. The client adds them up
(:func:`~data_checks.report.merge_reports`, :func:`~poem.diagnostics.propensity_summary.
merge_summaries`) into the same reports as the in-memory check; reconciliation
(kept + quarantined = input) stays exact.

Event ids unique *across* partitions cannot be checked per partition: every partition writes
its ids, bucketed by a 64-bit hash, to a scratch folder, and one task per bucket (about
``rows_per_bucket`` rows) finds the ids that occur in more than one partition. Those rows are
reported as a dataset-level (hard) failure naming the count and the first ids; they are not
quarantined, because the partitions' quarantine is already written (duplicates *within* a
partition are quarantined as in memory).

Differences from the in-memory check: the propensity quantiles, the suggested clip and the
clipped fraction come from a sketch (error bound in :mod:`poem.diagnostics.propensity_summary`);
no Data Docs and no plots (they need the whole log); the row-count minimum is checked on the
total.

The scheduler is any ``map``: :func:`map_partitions` runs in this process without a client, or
on a Dask ``distributed.Client`` (a ``LocalCluster`` or a scheduler address, see
:func:`open_client`).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from data_checks.quarantine import write_quarantine
from data_checks.report import DataCheckReport, ExpectationFailure, merge_reports
from data_checks.stages import CheckSettings, failed_report, quarantine_stage, validate_stage
from poem.diagnostics.propensity_summary import (
    PropensitySummary,
    merge_summaries,
    propensity_summary,
    summary_report,
)
from poem.exceptions import InvalidLogError
from poem.io.logs import log_files, table_from_frame
from poem.io.parquet import skipped_log_files
from poem.io.partitions import (
    LocalPartitions,
    LogPartition,
    log_partitions,
    read_partition_frame,
)

__all__ = [
    "PartitionOptions",
    "PartitionResult",
    "check_partition",
    "check_partitioned",
    "duplicate_ids_in_bucket",
    "load_kept_partition",
    "map_partitions",
    "open_client",
    "partition_set",
    "use_partitions",
]

_N_EXAMPLES = 5


@dataclass(frozen=True)
class PartitionOptions:
    """When and where ``check`` runs on partitions (``mlflow.yml`` ``partitions:``).

    Parameters
    ----------
    mode : {"auto", "always", "never"}, default="auto"
        ``auto`` uses partitions for a Parquet log of at least ``min_bytes`` on disk.
    min_bytes : int, default=1 GiB
        Size above which ``auto`` switches to partitions.
    scheduler : str, default="local"
        ``"local"``: a ``LocalCluster`` of ``n_workers`` processes; ``"sync"``: one partition
        after the other in this process (no Dask needed); else a scheduler address
        (``tcp://host:8786``).
    n_workers : int, default=2
        Workers of the ``LocalCluster``.
    rows_per_bucket : int, default=1,000,000
        Rows per hash bucket of the cross-partition event-id check.
    """

    mode: str = "auto"
    min_bytes: int = 1 << 30
    scheduler: str = "local"
    n_workers: int = 2
    rows_per_bucket: int = 1_000_000

    def __post_init__(self) -> None:
        if self.mode not in ("auto", "always", "never"):
            raise ValueError(f"partitions mode must be auto, always or never, got {self.mode!r}")
        if self.min_bytes < 0 or self.n_workers < 1 or self.rows_per_bucket < 1:
            raise ValueError(
                f"partitions: min_bytes >= 0, n_workers >= 1 and rows_per_bucket >= 1 needed, "
                f"got {self.min_bytes}, {self.n_workers}, {self.rows_per_bucket}"
            )


def use_partitions(path: str | Path, options: PartitionOptions | None) -> bool:
    """Whether to check ``path`` as partitions: never for CSV; by ``options.mode`` and size."""
    if options is None or options.mode == "never" or Path(path).suffix.lower() == ".csv":
        return False
    if options.mode == "always":
        return True
    try:
        size = sum(f.stat().st_size for f in log_files(path))
    except (FileNotFoundError, InvalidLogError):
        return False  # the in-memory path reports the problem
    return size >= options.min_bytes


def open_client(options: PartitionOptions) -> Any:
    """A ``distributed.Client`` for ``options.scheduler`` (None for ``"sync"``)."""
    if options.scheduler == "sync":
        return None
    from distributed import Client, LocalCluster

    if options.scheduler == "local":
        cluster = LocalCluster(
            n_workers=options.n_workers, threads_per_worker=1, dashboard_address=None
        )
        return Client(cluster)
    return Client(options.scheduler)


def map_partitions(fn: Callable, items: Iterable, client: Any = None, **kwargs: Any) -> list:
    """``[fn(item, **kwargs) for item in items]``, on the cluster of ``client`` when given."""
    items = list(items)
    if client is None:
        return [fn(item, **kwargs) for item in items]
    return client.gather(client.map(fn, items, pure=False, **kwargs))


@dataclass(frozen=True)
class PartitionResult:
    """What one partition sends back to the client (small whatever its size).

    Attributes
    ----------
    index : int
        Partition number (read order).
    n_rows : int
        Rows read.
    report : DataCheckReport or None
        Its data-check report without per-row reasons (None for an empty partition).
    summary : PropensitySummary or None
        Its propensity summary (None when empty or when a dataset-level check failed).
    n_quarantine_written : int
        Rows written to its quarantine file.
    metadata : str
        The resolved metadata (JSON), to check the partitions agree.
    quarantined_rows : ndarray of int
        Positions (in the partition) of the rows it quarantined.
    """

    index: int
    n_rows: int
    report: DataCheckReport | None
    summary: PropensitySummary | None = None
    n_quarantine_written: int = 0
    metadata: str = ""
    quarantined_rows: Any = None


def _name(piece: LogPartition) -> str:
    return f"{piece.path} (row group {piece.row_group})"


def check_partition(
    job: tuple[int, LogPartition],
    *,
    settings: CheckSettings,
    quarantine_dir: str | None,
    ids_dir: str | None,
    n_buckets: int,
    target_policy: Any = None,
    keep_empty: bool = False,
) -> PartitionResult:
    """Read, validate, quarantine, build and summarise one partition (runs on a worker).

    Parameters
    ----------
    job : tuple of (int, LogPartition)
        Partition number and piece.
    settings : CheckSettings
        The check's settings (``min_rows`` is checked on the total, not here).
    quarantine_dir : str or None
        Folder for ``part-NNNNN.parquet`` of the quarantined rows (not written when None).
    ids_dir : str or None
        Scratch folder for the event-id buckets (no cross-partition check when None).
    n_buckets : int
        Number of hash buckets.
    target_policy : StochasticPolicy or None, default=None
        For the ESS and clipping checks.
    keep_empty : bool, default=False
        Validate even when the partition has no rows (for a log whose partitions are all
        empty).

    Returns
    -------
    PartitionResult
    """
    index, piece = job
    if piece.n_rows == 0 and not keep_empty:
        return PartitionResult(index, 0, None)
    try:
        table = _read_table(piece, settings)
    except (InvalidLogError, ValueError, OSError, pa.ArrowException) as exc:
        return PartitionResult(index, piece.n_rows, failed_report(_name(piece), exc))
    # a fresh GX context per partition: a reused one keeps every validation's data (RSS grows)
    report = validate_stage(table, replace(settings, min_rows=0))
    kept, quarantined = quarantine_stage(table, report)
    written = 0
    if quarantined is not None and quarantine_dir is not None:
        write_quarantine(quarantined, Path(quarantine_dir) / f"part-{index:05d}.parquet")
        written = len(quarantined)
    if ids_dir is not None and "event_id" in table.frame.columns:
        _write_id_buckets(table.frame["event_id"], index, Path(ids_dir), n_buckets)
    summary = None
    if kept is not None and kept.n_rows and not any(f.level == "dataset" for f in report.failures):
        try:
            summary = propensity_summary(
                kept.to_log(), target_policy=target_policy, thresholds=settings.thresholds
            )
        except (InvalidLogError, ValueError) as exc:
            extra = failed_report(report.source, exc, "LoggedBandit").failures
            report = replace(report, failures=report.failures + extra)
    reasons, names = report.row_reasons if report.row_reasons is not None else (None, ())
    dropped = np.zeros(0, np.int64) if quarantined is None else np.flatnonzero(reasons >= 0)
    report = replace(report, row_reasons=(np.zeros(0, np.int64), names))  # keep it small
    return PartitionResult(
        index, table.n_rows, report, summary, written, table.meta.to_json(), dropped
    )


def _read_table(piece: LogPartition, settings: CheckSettings) -> Any:
    """The partition through the front door (the table the checks validate)."""
    return table_from_frame(
        read_partition_frame(piece),
        family=settings.family,
        window=settings.window,
        source=_name(piece),
        files=(piece.path,),
        **settings.overrides,
    )


def load_kept_partition(
    piece: LogPartition, quarantined_rows: np.ndarray, *, settings: CheckSettings
) -> Any:
    """The kept rows of a checked partition as a :class:`~poem.data.LoggedBandit` (or None).

    Reads the partition again through the same front door as :func:`check_partition` and
    drops the rows it quarantined (``PartitionResult.quarantined_rows``), so the kept rows
    equal the check's without its memory (the GX validation) and the log's rows coexisting.
    Event ids are dropped: they serve the checks only, and as Python strings they cost about
    as much memory as 8 float features a row.
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


def _write_id_buckets(ids: pd.Series, index: int, folder: Path, n_buckets: int) -> None:
    """Write the partition's non-null event ids, with their row, into one file per hash bucket."""
    rows = np.flatnonzero(ids.notna().to_numpy())
    values = ids.iloc[rows]
    bucket = pd.util.hash_pandas_object(values, index=False).to_numpy() % np.uint64(n_buckets)
    for b in np.unique(bucket):
        sel = bucket == b
        out = folder / f"bucket={int(b):05d}"
        out.mkdir(parents=True, exist_ok=True)
        frame = pd.DataFrame({"event_id": values.to_numpy()[sel], "part": index, "row": rows[sel]})
        pq.write_table(
            pa.Table.from_pandas(frame, preserve_index=False), out / f"part-{index:05d}.parquet"
        )


def duplicate_ids_in_bucket(folder: str) -> tuple[int, list[tuple[int, int, Any]]]:
    """Rows of one hash bucket whose event id occurs in more than one partition.

    Returns
    -------
    count : int
        Such rows (every occurrence counts, as in GX's uniqueness expectation).
    examples : list of (part, row, event_id)
        The first five such rows in read order.
    """
    frame = pq.read_table(folder).to_pandas()
    n_parts = frame.groupby("event_id", sort=False)["part"].transform("nunique")
    dup = frame.loc[n_parts.to_numpy() > 1].sort_values(["part", "row"])
    examples = [
        (int(p), int(r), e.item() if hasattr(e, "item") else e)
        for p, r, e in dup[["part", "row", "event_id"]].head(_N_EXAMPLES).itertuples(index=False)
    ]
    return len(dup), examples


def check_partitioned(
    path: str | Path,
    settings: CheckSettings,
    *,
    out_dir: str | Path | None = None,
    client: Any = None,
    target_policy: Any = None,
    rows_per_bucket: int = 1_000_000,
    keep: bool = False,
    restart: bool = False,
) -> tuple:
    """Check a Parquet log partition by partition (see the module docstring).

    Parameters
    ----------
    path : str or Path
        Parquet file or folder of them.
    settings : CheckSettings
        As for the in-memory check.
    out_dir : str or Path or None, default=None
        When given, quarantined rows go to ``out_dir/quarantine/part-NNNNN.parquet``.
    client : distributed.Client or None, default=None
        Cluster to run on; None runs the partitions one after the other in this process.
    target_policy : StochasticPolicy or None, default=None
        For the ESS and clipping checks.
    rows_per_bucket : int, default=1,000,000
        Rows per hash bucket of the cross-partition event-id check.
    keep : bool, default=False
        Also return the kept rows, one :class:`~poem.data.LoggedBandit` per partition, held
        in the workers' memory on a cluster (:func:`load_kept_partition`, after the check):
        the partitioned flow's log.
    restart : bool, default=False
        With ``keep`` and a client: restart the workers between the check and the load (only
        for a cluster started for this run: it drops everything the workers hold).

    Returns
    -------
    report : DataCheckReport
        Merged report (``row_reasons`` not kept: the quarantine is already written).
    propensity : PropensityReport or None
        None when the report failed.
    files : dict
        ``quarantine`` (the folder) when rows were quarantined.
    kept : LocalPartitions or ClusterPartitions or None
        Only with ``keep=True`` (None when the report failed).
    """
    source = str(path)
    try:
        pieces = log_partitions(path)
    except (InvalidLogError, OSError, pa.ArrowException) as exc:
        report = replace(
            failed_report(source, exc),
            skipped_files=tuple(str(f) for f in skipped_log_files(path)),
        )
        return (report, None, {}) + ((None,) if keep else ())
    n_total = sum(p.n_rows for p in pieces)
    qdir = None if out_dir is None else Path(out_dir) / "quarantine"
    if qdir is not None and qdir.exists():
        shutil.rmtree(qdir)  # a previous run's files would break the reconciliation
    n_buckets = max(1, -(-n_total // rows_per_bucket))
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
    # workers write the id buckets here: on a remote cluster, out_dir must be on a shared disk
    scratch = Path(tempfile.mkdtemp(prefix="poem-ids-", dir=out_dir))
    try:
        jobs = list(enumerate(pieces))
        kwargs = dict(
            settings=settings,
            quarantine_dir=None if qdir is None else str(qdir),
            ids_dir=str(scratch),
            n_buckets=n_buckets,
            target_policy=target_policy,
        )
        results = map_partitions(check_partition, jobs, client, **kwargs)
        if all(r.report is None for r in results) and jobs:
            results = [check_partition(jobs[0], **kwargs, keep_empty=True)]
        buckets = sorted(str(b) for b in scratch.glob("bucket=*"))
        duplicates = map_partitions(duplicate_ids_in_bucket, buckets, client)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = _merge(results, source, settings, duplicates, pieces)
    report = replace(report, skipped_files=tuple(str(f) for f in skipped_log_files(path)))
    files = {}
    if qdir is not None and qdir.exists():
        files["quarantine"] = str(qdir)
    prop = kept = None
    if report.passed:
        summaries = [r.summary for r in results if r.summary is not None]
        prop = summary_report(merge_summaries(summaries), thresholds=settings.thresholds)
        if keep:  # after the check: its memory and the kept rows never coexist
            if client is not None and restart:
                client.restart()  # fresh workers: the check's leftovers (GX) are not kept
            dropped = {r.index: r.quarantined_rows for r in results}
            none = np.zeros(0, np.int64)
            rows = [none if dropped.get(i) is None else dropped[i] for i, _ in jobs]
            kept = partition_set(pieces, client).map(load_kept_partition, rows, settings=settings)
            if client is not None:
                from distributed import wait

                wait(kept.items)  # loaded when the check returns
    return (report, prop, files) + ((kept,) if keep else ())


def partition_set(items: list, client: Any = None) -> Any:
    """The items as a partition set: in this process, or on the cluster of ``client``."""
    if client is None:
        return LocalPartitions(list(items))
    from poem._dask import ClusterPartitions

    return ClusterPartitions(client, list(items))


def _comparable(metadata: str) -> str:
    """Resolved metadata without ``min_propensity`` (it may change with the served policy)."""
    meta = json.loads(metadata)
    meta.pop("min_propensity", None)
    return json.dumps(meta, sort_keys=True)


def _merge(
    results: list[PartitionResult],
    source: str,
    settings: CheckSettings,
    duplicates: list[tuple[int, list]],
    pieces: list[LogPartition],
) -> DataCheckReport:
    reports = [r.report for r in results if r.report is not None]
    merged = merge_reports(reports, source=source)
    n = merged.n_rows
    # a row-level expectation is evaluated on every row: its element count is the total
    failures = [
        replace(f, element_count=n) if f.level in ("row", "warning") else f for f in merged.failures
    ]
    metas = {_comparable(r.metadata) for r in results if r.metadata}
    if len(metas) > 1:
        first = sorted(metas)[0]
        bad = [
            _name(pieces[r.index])
            for r in results
            if r.metadata and _comparable(r.metadata) != first
        ]
        failures.append(
            ExpectationFailure(
                "metadata",
                "partitions_agree",
                "dataset",
                f"{len(bad)} partitions resolve to different metadata than the first "
                f"(e.g. {bad[0]}); declare n_actions / loss_bounds for the whole log",
                0,
                n,
            )
        )
    if n < settings.min_rows:
        failures.append(
            ExpectationFailure(
                "(table)",
                "expect_table_row_count_to_be_between",
                "dataset",
                f"{n:,} rows, fewer than min_rows = {settings.min_rows:,}",
                0,
                n,
            )
        )
    n_dup = sum(c for c, _ in duplicates)
    if n_dup:
        examples = sorted(e for _, ex in duplicates for e in ex)[:_N_EXAMPLES]
        failures.append(
            ExpectationFailure(
                "event_id",
                "expect_column_values_to_be_unique_across_partitions",
                "dataset",
                f"{n_dup:,} rows have an event_id that occurs in more than one partition "
                "(not quarantined: deduplicate the log)",
                n_dup,
                n,
                tuple(e for _, _, e in examples),
            )
        )
    return replace(merged, failures=tuple(failures), row_reasons=None)
