"""``poem-pipeline check`` as a library call, on a log as a set of partitions (DESIGN §8).

:func:`check_pieces` maps :func:`~data_checks.partition.check_partition` (the stages of
:mod:`data_checks.stages`) over a partition set: Parquet row groups
(:class:`~poem.io.partitions.LogPartition`, on a Dask cluster or in this process) or one
:class:`~poem.io.logs.LogTable` read in memory (Data Docs and plots then). It merges the small
results (:func:`~data_checks.report.merge_reports`, the propensity summaries), so k partitions
give the report of one; checks of the whole log (row count, metadata agreeing, event ids
unique across partitions, :mod:`data_checks.event_ids`) are done on the totals.

:func:`check_logs` never raises for bad data: problems become dataset-level failures of the
returned :class:`CheckOutcome`, whose ``exit_code`` is 0 when the log is usable (warnings
allowed) and 1 on any hard failure.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa

from data_checks.estimation import Estimated, estimate_stage
from data_checks.event_ids import rows_elsewhere
from data_checks.partition import PartitionResult, check_partition, describe, kept_partitions
from data_checks.report import DataCheckReport, ExpectationFailure, merge_reports
from data_checks.runner import row_count_failure
from data_checks.stages import CheckSettings, failed_report, read_stage
from poem._dask import ClusterPartitions
from poem._dask_cluster import local_client
from poem.data import LoggedBandit
from poem.diagnostics.plots import save_diagnostic_plots
from poem.diagnostics.propensity import (
    PropensityReport,
    PropensityThresholds,
    merge_summaries,
    summary_report,
)
from poem.exceptions import InvalidLogError
from poem.io.estimates import write_estimates
from poem.io.logs import log_files
from poem.io.parquet import skipped_log_files
from poem.io.partitions import LocalPartitions, log_partitions

__all__ = [
    "CheckOutcome",
    "PartitionOptions",
    "check_logs",
    "check_partitioned",
    "check_pieces",
    "open_client",
    "use_partitions",
]

logger = logging.getLogger(__name__)


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
    if options.scheduler == "local":  # the flow's LocalCluster (workers' allocator, logs)
        return local_client(n_workers=options.n_workers, threads_per_worker=1, memory_limit="auto")
    from distributed import Client

    return Client(options.scheduler)


def _comparable(metadata: str) -> str:
    """Resolved metadata without ``min_propensity`` (it may change with the served policy)."""
    meta = json.loads(metadata)
    meta.pop("min_propensity", None)
    return json.dumps(meta, sort_keys=True)


def _metadata_failure(results: list[PartitionResult], names: list[str], n: int) -> list:
    """Partitions whose resolved metadata differs (e.g. some gave rewards, some losses)."""
    metas = [_comparable(r.metadata) if r.metadata else None for r in results]
    if len(set(metas) - {None}) < 2:
        return []
    first = sorted(set(metas) - {None})[0]
    bad = [(name, m) for m, name in zip(metas, names, strict=True) if m is not None and m != first]
    mine, theirs = json.loads(bad[0][1]), json.loads(first)
    keys = sorted(k for k in mine.keys() | theirs.keys() if mine.get(k) != theirs.get(k))
    differs = "; ".join(f"{k} {mine.get(k)!r} vs {theirs.get(k)!r}" for k in keys[:5])
    return [
        ExpectationFailure(
            "metadata",
            "partitions_agree",
            "dataset",
            f"{len(bad)} of {len(metas) - metas.count(None)} partitions resolve to different "
            f"metadata than the first (e.g. {bad[0][0]}: {differs}); declare n_actions / "
            "loss_bounds for the whole log",
            0,
            n,
        )
    ]


def _gave_rewards(results: list[PartitionResult]) -> bool:
    """The log gave rewards: every checked partition's resolved metadata says ``rewards``.

    Partitions that disagree (some rewards, some losses) are refused by
    :func:`_metadata_failure`, never resolved to one of the two.
    """
    gave = [json.loads(r.metadata).get("rewards", False) for r in results if r.metadata]
    return bool(gave) and all(gave)


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
        Merged report (``row_reasons`` not kept: the quarantine is already written), with
        ``rewards`` from the partitions' resolved metadata.
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
    report = replace(
        merged,
        failures=failures,
        row_reasons=None,
        skipped_files=tuple(skipped),
        rewards=_gave_rewards(results),
    )
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
    docs: bool = False,
    context: Any = None,
) -> tuple:
    """Check a log: one partition per Parquet row group, or (``in_memory``) the whole log.

    Parameters
    ----------
    path : str or Path
        Parquet file or folder of them (``in_memory``: also a CSV file).
    settings : CheckSettings
        The check's settings.
    out_dir, target_policy, rows_per_bucket, docs, context
        As in :func:`check_pieces` (Data Docs only ``in_memory``).
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
    pieces = LocalPartitions(found) if client is None else ClusterPartitions(client, found)
    report, prop, files, results = check_pieces(
        pieces,
        settings,
        source=str(path),
        skipped=skipped,
        out_dir=out_dir,
        target_policy=target_policy,
        rows_per_bucket=rows_per_bucket,
        docs=docs and in_memory,
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


@dataclass(frozen=True)
class CheckOutcome:
    """Everything ``check`` produced: reports, the kept log and the files written."""

    report: DataCheckReport
    propensity: PropensityReport | None = None
    log: LoggedBandit | None = field(default=None, repr=False)
    files: dict[str, str] = field(default_factory=dict)
    estimated: Estimated | None = field(default=None, repr=False)

    @property
    def passed(self) -> bool:
        """No hard data failure and no failed propensity check."""
        return (
            self.report.passed and self.propensity is not None and self.propensity.status != "fail"
        )

    @property
    def deciding_reason(self) -> str:
        """Why the log is refused, in one line (the first hard failure); empty when passed."""
        hard = self.report.hard_failures
        if hard:
            f = hard[0]
            return f"{f.column}: {f.reason}"
        failed = [] if self.propensity is None else list(self.propensity.failed)
        return f"propensity check {failed[0].name}: {failed[0].explanation}" if failed else ""

    @property
    def exit_code(self) -> int:
        """0 when passed (warnings allowed), else 1."""
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable summary (both reports and the files)."""
        return {
            "passed": self.passed,
            "data_checks": self.report.to_dict(),
            "propensity": None if self.propensity is None else self.propensity.to_dict(),
            "propensity_model": None if self.estimated is None else _model_dict(self.estimated),
            "files": self.files,
        }

    def to_text(self) -> str:
        """Format the outcome as a readable plain-text table for the terminal."""
        r = self.report
        n_warn = 0 if self.propensity is None else len(self.propensity.warnings)
        verdict = (
            "PASSED" + (f" with {n_warn} warning(s)" if n_warn else "")
            if self.passed
            else f"FAILED: {self.deciding_reason}"
        )
        lines = [
            f"check {r.source}: {r.n_rows:,} rows, suite {r.suite} ({r.n_expectations} "
            f"expectations) -> {verdict}",
            "",
        ]
        if r.failures:
            rows = [("level", "column", "bad rows", "of", "problem", "example event ids")]
            rows += [
                (
                    f.level,
                    f.column,
                    f"{f.unexpected_count:,}",
                    f"{f.element_count:,}",
                    f.reason + (f" (observed {f.observed})" if f.observed else ""),
                    ", ".join(str(e) for e in f.examples),
                )
                for f in r.failures
            ]
            lines += _table(rows) + [""]
        else:
            lines += ["all expectations passed", ""]
        lines.append(
            f"rows: {r.n_kept:,} kept + {r.n_quarantined:,} quarantined = {r.n_rows:,} input"
        )
        lines += [f"  quarantined {n:,}: {reason}" for reason, n in r.quarantined_by_reason.items()]
        if r.extra_columns:
            lines.append(f"extra columns (allowed, not checked): {', '.join(r.extra_columns)}")
        lines += [f"skipped, not data: {f}" for f in r.skipped_files]
        lines += [f"HARD FAILURE {f}" for f in r.hard_failures]
        if self.estimated is not None:
            e = self.estimated.metadata
            lines += [
                "",
                f"propensities ESTIMATED (data.propensity: estimate): {e['model']}, "
                f"{e['folds']} folds cross-fitted, calibration {e['calibration']}, "
                f"seed {e['seed']}",
            ]
            lines += [f"  {line}" for line in self.estimated.estimate.diagnostics.lines()]
        if self.propensity is not None:
            p = self.propensity
            lines += [
                "",
                f"propensity checks: {p.status.upper()} (suggested clip M = "
                f"{p.suggested_clip:.3g})",
            ]
            lines += _table(
                [("status", "check", "value", "explanation")]
                + [(c.status, c.name, f"{c.value:.4g}", c.explanation) for c in p.checks]
            )
        if self.files:
            lines += [""] + [f"{k}: {v}" for k, v in self.files.items()]
        return "\n".join(lines)


def _model_dict(estimated: Estimated) -> dict[str, Any]:
    d = estimated.estimate.diagnostics
    return {
        "metadata": estimated.metadata,
        "metrics": d.metrics(),
        "reliability": [list(row) for row in d.reliability],
        "rare_actions": [list(row) for row in d.rare_actions],
        "summary": d.lines(),
    }


def _table(rows: list[tuple]) -> list[str]:
    widths = [max(len(str(row[j])) for row in rows) for j in range(len(rows[0]))]
    return [
        "  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def check_logs(
    path: str | Path,
    *,
    family: str | None = None,
    out_dir: str | Path | None = None,
    window: tuple[Any, Any] | None = None,
    min_propensity: float = CheckSettings.min_propensity,
    min_rows: int = CheckSettings.min_rows,
    max_quarantine_fraction: float = CheckSettings.max_quarantine_fraction,
    thresholds: PropensityThresholds | None = None,
    target_policy: Any = None,
    context: Any = None,
    plots: bool = True,
    partitions: Any = None,
    client: Any = None,
    future_timestamps: str = CheckSettings.future_timestamps,
    now: Any = None,
    settings: CheckSettings | None = None,
    **overrides: Any,
) -> CheckOutcome:
    """Validate a log file or ``date=`` directory end to end.

    Parameters
    ----------
    path : str or Path
        Parquet file, partitioned directory or CSV file.
    family, window, min_propensity, min_rows, max_quarantine_fraction, thresholds
        The fields of :class:`~data_checks.stages.CheckSettings` (same defaults).
    future_timestamps, now
        Likewise; ``now=None`` reads the wall clock once, when the check starts.
    out_dir : str or Path or None, default=None
        When given: ``check_report.json``, ``quarantine.parquet`` (if any row is
        quarantined), ``data_docs/index.html`` and the PNG plots are written there.
    target_policy : StochasticPolicy or None, default=None
        Policy for the ESS check and the weight plot.
    context : GX context or None, default=None
        Reused GX context (tests); a new ephemeral one otherwise.
    plots : bool, default=True
        Whether to write the plots (needs ``out_dir``).
    partitions : PartitionOptions or None, default=None
        When (and where) to check a Parquet log partition by partition
        (see the module docstring); None always checks in memory.
    client : distributed.Client or None, default=None
        Cluster for the partitioned check, instead of the one ``partitions`` describes.
    settings : CheckSettings or None, default=None
        All of the above at once (``mlflow.yml``'s translation,
        :func:`flows.checking.check_settings`); then ``family``, ``window``,
        the thresholds and ``overrides`` must not be given.
    **overrides
        Metadata for logs without it (or replacing the declared one): ``loss_bounds``,
        ``reward_bounds``, ``n_actions``, ``context_columns``, ``reward_column``,
        ``loss_column``, ``action_ids``.

    Returns
    -------
    CheckOutcome
    """
    out = Path(out_dir) if out_dir is not None else None
    if settings is None:
        settings = CheckSettings(
            family=family,
            overrides={k: v for k, v in overrides.items() if v is not None},
            window=window,
            min_propensity=min_propensity,
            min_rows=min_rows,
            max_quarantine_fraction=max_quarantine_fraction,
            thresholds=thresholds,
            future_timestamps=future_timestamps,
        )
    settings = replace(settings, now=pd.Timestamp.now(tz="UTC") if now is None else now)
    estimating = settings.propensity == "estimate"  # cross-fitting sees every row at once
    always = partitions is not None and partitions.mode == "always"
    if estimating and (client is not None or always):
        problem = ValueError(
            "data.propensity: estimate fits the logging policy on the whole log in memory; "
            "check it without partitions (--partitions never)"
        )
        return _finish(CheckOutcome(failed_report(str(path), problem, "estimate")), out)
    memory = estimating or (client is None and not use_partitions(path, partitions))
    options = partitions or PartitionOptions(mode="always", scheduler="sync")
    own = not memory and client is None
    try:
        client = open_client(options) if own else client
        try:
            report, prop, files, *kept = check_partitioned(
                path,
                settings,
                out_dir=out,
                client=client,
                target_policy=target_policy,
                rows_per_bucket=options.rows_per_bucket,
                keep=memory,
                in_memory=memory,
                docs=memory,
                context=context,
            )
        finally:
            if own and client is not None:
                client.close()
                client.cluster.close()
        log = kept[0].items[0] if kept and kept[0] is not None else None
        estimated = None
        if estimating and log is not None:
            estimated = estimate_stage(log, report, settings)
            report, prop, log = estimated.report, estimated.propensity, estimated.log
        if out is not None and plots and log is not None:
            saved = save_diagnostic_plots(
                log,
                out / "plots",
                target_policy=target_policy,
                estimated=None if estimated is None else estimated.estimate.diagnostics,
            )
            files.update({k: str(v) for k, v in saved.items()})
        if out is not None and estimated is not None and estimated.log is not None:
            table = out / "estimated_propensities.parquet"  # joins back by event_id / row_digest
            write_estimates(estimated.estimate.propensities, estimated.log, table)
            files["estimated_propensities"] = str(table)
        return _finish(CheckOutcome(report, prop, log, files, estimated), out)
    except Exception as exc:  # noqa: BLE001 - a report, never a traceback
        logger.debug("check of %s failed unexpectedly", path, exc_info=True)
        problem = RuntimeError(f"unexpected {type(exc).__name__}: {exc} (please report this)")
        return _finish(CheckOutcome(failed_report(str(path), problem, "check")), out)


def _finish(outcome: CheckOutcome, out: Path | None) -> CheckOutcome:
    if out is None:
        return outcome
    out.mkdir(parents=True, exist_ok=True)
    files = dict(outcome.files, report=str(out / "check_report.json"))
    outcome = replace(outcome, files=files)
    (out / "check_report.json").write_text(json.dumps(outcome.to_dict(), indent=2, default=str))
    return outcome
