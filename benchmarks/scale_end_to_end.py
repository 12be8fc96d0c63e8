"""Benchmark: check → split → 6-point search → refit → gate of a large log on a Dask cluster.

Usage::

    .venv/bin/python benchmarks/scale_end_to_end.py /tmp/big --rows 10000000 --features 50
        [--actions 5] [--workers 2] [--grid 1e-4 1e-3 3e-3 1e-2 3e-2 0.1] [--max-iter 15]
        [--memory-budget-gib 7.5] [--out /tmp/big-run]

Generates the log with ``benchmarks/make_large_logs.py`` (discrete family, Parquet partitions
of ``--partition-rows`` = 250,000 rows, event ids) unless ``LOGS`` already holds ``--rows`` rows, then runs the stages
through the library functions the ``retrain`` flow calls on its Dask path:

1. ``check``: :func:`data_checks.check.check_partitioned` with ``keep=True`` (GX suite
   and row rules per partition, merged report, quarantine per partition; then the workers
   restart and read the kept rows into their memory, the log of the next stages);
2. ``split``: :func:`poem.log_rows.split_partitioned` (by time, 50/25/25);
3. ``search``: :func:`~poem.learners.training_rows.training_rows` (standardized
   training rows kept on the workers) and one
   :func:`~poem.learners.search.run_trial` per grid point
   (``variance_scale``; the raw training rows are replaced by the prepared ones in the same
   pass, ``release=True``, so each row is held once; POEM with L-BFGS, ``--max-iter`` iterations, calibrated λ, clip
   p90/p10, intercept, standardization — the shipped ``training:`` defaults otherwise),
   selection by SNIPS (:func:`poem.learners.search.select_trial`);
4. ``train``: the refit of the selected point (:func:`~poem.learners.training_rows.
   fit_on_rows` on the prepared training rows, ``refit_on: train``);
5. ``gate``: :func:`poem.gate.gate_decision` on :func:`poem.log_rows.partitioned_gate_rows`
   against the logging policy (IPS terms, betting bound, 95 %).

Memory: a thread samples, every 0.2 s, the resident set size of this process and every
descendant (the ``LocalCluster``'s scheduler runs in this process; its nannies and workers
are children), summed; each stage prints its wall time and the peak of that sum. Workers
never spill to disk (a spill would time the disk and hide the memory), use the system
allocator for Arrow (freed memory returns to the system) and glibc's settings of the product's
clusters (:data:`poem._dask_cluster.WORKER_MALLOC`).
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path

import psutil
from check_partitioned import tree_rss  # benchmarks/ is this script's folder
from scale_retrain import ensure_logs

from data_checks.check import check_partitioned
from data_checks.stages import CheckSettings
from poem._dask_cluster import WORKER_MALLOC
from poem.diagnostics.propensity import PropensityThresholds
from poem.gate import gate_decision
from poem.io.partitions import log_partitions
from poem.learners.poem import POEM
from poem.learners.search import run_trial, select_trial
from poem.learners.training_rows import fit_on_rows, training_rows
from poem.log_rows import partitioned_gate_rows, split_partitioned

GIB = 2**30
# memory freed by the workers goes back to the system (not kept by Arrow's mimalloc pool)
WORKER_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system"}
TRAINING = dict(  # mlflow.yml training.params (max_iter from --max-iter)
    policy="discrete",
    solver="lbfgs",
    variance_penalty="calibrated",
    l2_penalty=0.0,
    tol=1e-5,
    standardize=True,
    fit_intercept=True,
    exploration_floor=0.01,
    random_state=0,
)


class MemorySampler(threading.Thread):
    """Peak of the summed RSS of this process and all its descendants, per stage."""

    def __init__(self, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.interval, self.peak, self.overall, self._stop = interval, 0, 0, threading.Event()

    def _total(self) -> int:
        return tree_rss(psutil.Process())

    def run(self) -> None:
        while not self._stop.is_set():
            now = self._total()
            self.peak, self.overall = max(self.peak, now), max(self.overall, now)
            time.sleep(self.interval)

    def stage(self) -> int:
        """Return the peak since the last call and restart it at the current sum."""
        peak, self.peak = max(self.peak, self._total()), self._total()
        return peak

    def stop(self) -> None:
        self._stop.set()


def _cluster(workers: int, budget_gib: float):
    import dask
    from distributed import Client, LocalCluster

    dask.config.set(
        {
            "distributed.worker.memory.target": False,
            "distributed.worker.memory.spill": False,
            "distributed.worker.memory.pause": False,
            "distributed.worker.memory.terminate": False,
            # the product's allocator settings (poem._dask_cluster.local_client)
            **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()},
        }
    )
    cluster = LocalCluster(
        env=WORKER_ENV,
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=f"{budget_gib / workers:.2f}GiB",
        dashboard_address=None,
        silence_logs=40,
    )
    return cluster, Client(cluster)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", type=Path)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--actions", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--partition-rows", type=int, default=250_000, help="when generating")
    ap.add_argument("--grid", type=float, nargs="+", default=[1e-4, 1e-3, 3e-3, 1e-2, 3e-2, 0.1])
    ap.add_argument("--max-iter", type=int, default=15)
    ap.add_argument("--memory-budget-gib", type=float, default=7.5)
    ap.add_argument("--out", type=Path, default=None, help="quarantine folder (default: none)")
    args = ap.parse_args()
    ensure_logs(args.logs, args.rows, args.features, args.actions, args.partition_rows)
    sampler = MemorySampler()
    sampler.start()
    cluster, client = _cluster(args.workers, args.memory_budget_gib)
    print(
        f"{args.rows:,} rows x {args.features} features x {args.actions} actions, "
        f"{len(log_partitions(args.logs))} partitions, {args.workers} workers "
        f"(1 thread each), L-BFGS max_iter={args.max_iter}, grid variance_scale={args.grid}; "
        f"load average at start {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    sampler.stage()
    table = []

    def done(stage: str, start: float, detail: str) -> None:
        wall, peak = time.perf_counter() - start, sampler.stage() / GIB
        table.append((stage, wall, peak))
        print(f"{stage:<7} {wall:8.1f} s   peak {peak:5.2f} GiB summed   {detail}", flush=True)

    try:
        t = time.perf_counter()
        settings = CheckSettings(
            family="discrete",
            min_rows=100,
            max_quarantine_fraction=0.01,
            thresholds=PropensityThresholds(),
        )
        report, propensity, _, kept = check_partitioned(
            args.logs, settings, out_dir=args.out, client=client, keep=True, restart=True
        )
        done(
            "check",
            t,
            f"{report.n_rows:,} rows, passed={report.passed}, "
            f"{report.n_quarantined:,} quarantined, {len(propensity.warnings)} warnings",
        )
        t = time.perf_counter()
        split = split_partitioned(kept, validation_fraction=0.25, test_fraction=0.25, by_time=True)
        done("split", t, str(split.summary()))
        t = time.perf_counter()
        template = POEM(**TRAINING, max_iter=args.max_iter)
        rows, split = training_rows(split, template, release=True)  # refit_on: train
        del kept  # the split holds the remaining (validation, test) rows
        validation = (split.source, split.rows_for("validation"))
        trials = []
        for scale in args.grid:
            trial = run_trial(template, {"variance_scale": scale}, rows, validation)
            trials.append(trial)
            print(
                f"  trial variance_scale={scale:g}: {trial.n_iter} it, {trial.seconds:6.1f} s, "
                f"snips {trial.snips.value:.5f}, ess {trial.effective_sample_size:,.0f}",
                flush=True,
            )
        best = select_trial(
            trials, scoring="snips", min_effective_sample_size=0.01 * split.n_rows("validation")
        )
        done("search", t, f"{len(trials)} trials, selected {trials[best].params}")
        t = time.perf_counter()
        model = fit_on_rows(POEM(**TRAINING, max_iter=args.max_iter, **trials[best].params), rows)
        done("train", t, f"{model.n_iter_} iterations, J = {model.objective_:.6f}")
        t = time.perf_counter()
        rows = partitioned_gate_rows(split.source, split.rows_for("test"), model.policy_, None)
        gate = gate_decision(
            rows, attempt=None, estimator="ips", confidence_level=0.95, min_ess=100.0
        )
        done(
            "gate",
            t,
            f"{gate.decision}: challenger {gate.challenger.value:.5f} vs logger "
            f"{gate.champion.value:.5f}, bound {gate.upper_bound:+.5f}",
        )
    finally:
        client.close()
        cluster.close()
        sampler.stop()
    total = sum(w for _, w, _ in table)
    print(
        f"total   {total:8.1f} s   peak {sampler.overall / GIB:5.2f} GiB summed over all "
        f"processes (budget 8 GiB); load average at end {os.getloadavg()[0]:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
