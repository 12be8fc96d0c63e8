"""``check`` on a log as a set of partitions (DESIGN §8); a log in memory is one partition.

Every check runs here, once, whatever the layout: :func:`check_pieces` maps
:func:`~data_checks.partition.check_partition` (the stages of :mod:`data_checks.stages`:
front door, GX suite + row rules, quarantine, :class:`~poem.data.LoggedBandit`, propensity
summary) over a partition set (:class:`~poem.io.partitions.LocalPartitions`, or
:class:`~poem._dask.ClusterPartitions` on a Dask cluster) and adds up the small results: the
partitions' :class:`~data_checks.report.DataCheckReport`
(:func:`~data_checks.report.merge_reports`) and
:class:`~poem.diagnostics.propensity_summary.PropensitySummary` (merged, then one
:class:`~poem.diagnostics.propensity.PropensityReport`). A partition is a Parquet row group
(:class:`~poem.io.partitions.LogPartition`, read where it is checked) or a
:class:`~poem.io.logs.LogTable` already read (``check`` in memory: one partition). So k
partitions give the report of one: the same counts, quarantined rows, reasons and messages.

Checks of the whole log are done on the totals: the row count, the partitions' resolved
metadata agreeing, and event ids unique *across* partitions (:mod:`data_checks.event_ids`:
those rows are quarantined as duplicated, as in one partition). Quarantined rows go to
``quarantine.parquet`` (one partition) or ``quarantine/part-NNNNN.parquet``; Data Docs only
for one partition (they need every row).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from data_checks.event_ids import rows_elsewhere
from data_checks.partition import PartitionResult, check_partition, describe, kept_partitions
from data_checks.report import DataCheckReport, ExpectationFailure, merge_reports
from data_checks.runner import row_count_failure
from data_checks.stages import (
    CheckSettings,
    failed_report,
    read_stage,
)
from poem._dask import ClusterPartitions
from poem.diagnostics.propensity import PropensityReport
from poem.diagnostics.propensity_summary import (
    merge_summaries,
    summary_report,
)
from poem.exceptions import InvalidLogError
from poem.io.logs import log_files
from poem.io.parquet import skipped_log_files
from poem.io.partitions import LocalPartitions, log_partitions

__all__ = [
    "PartitionOptions",
    "check_partitioned",
    "check_pieces",
    "open_client",
    "partition_set",
    "use_partitions",
]


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


def partition_set(items: list, client: Any = None) -> Any:
    """The items as a partition set: in this process, or on the cluster of ``client``."""
    if client is None:
        return LocalPartitions(list(items))
    return ClusterPartitions(client, list(items))


def _comparable(metadata: str) -> str:
    """Resolved metadata without ``min_propensity`` (it may change with the served policy)."""
    meta = json.loads(metadata)
    meta.pop("min_propensity", None)
    return json.dumps(meta, sort_keys=True)


def _metadata_failure(results: list[PartitionResult], names: list[str], n: int) -> list:
    metas = [_comparable(r.metadata) if r.metadata else None for r in results]
    if len(set(metas) - {None}) < 2:
        return []
    first = sorted(set(metas) - {None})[0]
    bad = [name for m, name in zip(metas, names, strict=True) if m is not None and m != first]
    return [
        ExpectationFailure(
            "metadata",
            "partitions_agree",
            "dataset",
            f"{len(bad)} partitions resolve to different metadata than the first "
            f"(e.g. {bad[0]}); declare n_actions / loss_bounds for the whole log",
            0,
            n,
        )
    ]


def check_pieces(
    pieces: Any,
    settings: CheckSettings,
    *,
    source: str,
    skipped: tuple = (),
    out_dir: str | Path | None = None,
    target_policy: Any = None,
    rows_per_bucket: int = 1_000_000,
    docs: bool = False,
    context: Any = None,
) -> tuple[DataCheckReport, PropensityReport | None, dict, list[PartitionResult]]:
    """Check a log given as a partition set of pieces (see the module docstring).

    Parameters
    ----------
    pieces : LocalPartitions or ClusterPartitions
        Its items: :class:`~poem.io.partitions.LogPartition` or
        :class:`~poem.io.logs.LogTable`, in read order. Only ``map`` is used.
    settings : CheckSettings
        The check's settings.
    source : str
        The log's name.
    skipped : tuple of str, default=()
        Files skipped as not data (named in the report).
    out_dir : str or Path or None, default=None
        Quarantined rows go to ``out_dir/quarantine.parquet`` (one partition) or
        ``out_dir/quarantine/part-NNNNN.parquet``; Data Docs to ``out_dir/data_docs``.
    target_policy : StochasticPolicy or None, default=None
        For the ESS and clipping checks.
    rows_per_bucket : int, default=1,000,000
        Rows per hash bucket of the cross-partition event-id check.
    docs : bool, default=False
        Write GX Data Docs (one partition and ``out_dir`` only).
    context : GX context or None, default=None
        Reused GX context (a local set only).

    Returns
    -------
    report : DataCheckReport
        Merged report (``row_reasons`` not kept: the quarantine is already written).
    propensity : PropensityReport or None
        None when the report failed.
    files : dict
        ``quarantine`` (file or folder) when rows were quarantined; ``data_docs``.
    results : list of PartitionResult
        One per partition (for :func:`kept_partitions`).
    """
    described = pieces.map(describe, gather=True)
    sizes, names = [n for n, _ in described], [name for _, name in described]
    k, one = len(sizes), len(sizes) == 1
    out = None if out_dir is None else Path(out_dir)
    quarantine = None if out is None else out / ("quarantine.parquet" if one else "quarantine")
    if quarantine is not None and quarantine.is_dir():
        shutil.rmtree(quarantine)  # a previous run's files would break the reconciliation
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    elsewhere = rows_elsewhere(pieces, sizes, out, rows_per_bucket)
    paths = [
        None
        if quarantine is None
        else str(quarantine if one else quarantine / f"part-{j:05d}.parquet")
        for j in range(k)
    ]
    empty = [sum(sizes) == 0 and j == 0 for j in range(k)]
    docs_dir = str(out / "data_docs") if docs and one and out is not None else None
    results = pieces.map(
        check_partition,
        elsewhere,
        paths,
        empty,
        gather=True,
        settings=settings,
        target_policy=target_policy,
        docs_dir=docs_dir,
        one=one,
        context=context,
    )
    reports = [r.report for r in results if r.report is not None]
    merged = (
        merge_reports(reports, source=source)
        if reports
        else failed_report(
            source, ValueError("the log has no partitions (no row group in any file)")
        )
    )
    n = merged.n_rows
    count = [] if one else [f for f in [row_count_failure(n, max(1, settings.min_rows))] if f]
    failures = (*count, *merged.failures, *_metadata_failure(results, names, n))
    report = replace(merged, failures=failures, row_reasons=None, skipped_files=tuple(skipped))
    files = {} if report.docs_path is None else {"data_docs": report.docs_path}
    if quarantine is not None and quarantine.exists():
        files["quarantine"] = str(quarantine)
    prop = None
    if report.passed:
        summaries = [r.summary for r in results if r.summary is not None]
        prop = summary_report(merge_summaries(summaries), thresholds=settings.thresholds)
    return report, prop, files, results


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
    in_memory: bool = False,
    context: Any = None,
) -> tuple:
    """Check a log: one partition per Parquet row group, or (``in_memory``) the whole log.

    Parameters
    ----------
    path : str or Path
        Parquet file or folder of them (``in_memory``: also a CSV file).
    settings : CheckSettings
        The check's settings.
    out_dir, target_policy, rows_per_bucket, context
        As in :func:`check_pieces` (Data Docs when ``in_memory``).
    client : distributed.Client or None, default=None
        Cluster to run on; None runs the partitions one after the other in this process.
    keep : bool, default=False
        Also return the kept rows, one :class:`~poem.data.LoggedBandit` per partition, held
        in the workers' memory on a cluster (:func:`load_kept_partition`, after the check).
    restart : bool, default=False
        With ``keep`` and a client: restart the workers between the check and the load (only
        for a cluster started for this run: it drops everything the workers hold).
    in_memory : bool, default=False
        Read the whole log through :func:`~data_checks.stages.read_stage`: one partition.

    Returns
    -------
    report, propensity, files
        As in :func:`check_pieces`.
    kept : LocalPartitions or ClusterPartitions or None
        Only with ``keep=True`` (None when the report failed).
    """
    if in_memory:
        table, failure = read_stage(path, settings)
        found, skipped = [table], () if table is None else table.skipped
    else:
        failure, skipped = None, tuple(str(f) for f in skipped_log_files(path))
        try:
            found = log_partitions(path)
        except (InvalidLogError, OSError, pa.ArrowException) as exc:
            failure = replace(failed_report(str(path), exc), skipped_files=skipped)
    if failure is not None:
        return (failure, None, {}) + ((None,) if keep else ())
    pieces = partition_set(found, client)
    report, prop, files, results = check_pieces(
        pieces,
        settings,
        source=str(path),
        skipped=skipped,
        out_dir=out_dir,
        target_policy=target_policy,
        rows_per_bucket=rows_per_bucket,
        docs=in_memory,
        context=context,
    )
    kept = None
    if keep and report.passed:  # after the check: its memory and the kept rows never coexist
        if client is not None and restart:
            client.restart()  # fresh workers: the check's leftovers (GX) are not kept
        kept = kept_partitions(pieces, results, settings)
        if client is not None:
            from distributed import wait

            wait(kept.items)  # loaded when the check returns
    return (report, prop, files) + ((kept,) if keep else ())
