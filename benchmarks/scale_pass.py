"""Benchmark: the map-reduce CRM pass and L-BFGS training on a Dask LocalCluster, by log size.

Usage::

    .venv/bin/python benchmarks/make_large_logs.py /tmp/big --rows 10000000 --features 50
    .venv/bin/python benchmarks/scale_pass.py /tmp/big [--rows 1000000 3000000 10000000]
        [--workers 1 2] [--repeats 3] [--train-rows 10000000] [--train-workers 2]
        [--lbfgs-iter 20] [--memory-budget-gib 7.5]

For each row count (a prefix of the log's ``part-*.parquet`` partitions) and worker count, it
starts a ``LocalCluster`` (processes, one thread each, glibc's settings of the product's
clusters: :data:`poem._dask_cluster.WORKER_MALLOC`), reads the partitions on the workers
(:class:`poem._dask.ClusterPartitions`, prepared there by
:func:`poem.learners.prepared.prepare_training`), and times one objective + gradient pass at a
random w (:meth:`~poem.learners.prepared.PreparedTraining.statistics`: map, reduce, then J,
∇J; median of ``--repeats``). Then L-BFGS
(``--lbfgs-iter`` iterations, λ = 0.1, M = 100) on ``--train-rows`` rows with
``--train-workers`` workers. Each worker's Dask memory limit is ``--memory-budget-gib`` divided
by the number of workers. Memory: peak RSS (``VmHWM``) of every worker process plus the
client process, summed — the whole footprint. The pass of the in-memory path is timed on the
smallest size for reference (same arrays, one process). Each line carries the 1-minute load
average (other jobs on the machine make the speed-up noisy); a summary prints seconds per
million rows by size (constant = linear growth) and the speed-up of the last worker count over
the first.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from pathlib import Path

import numpy as np

from poem._dask import ClusterPartitions
from poem._dask_cluster import WORKER_MALLOC
from poem.io.partitions import log_partitions, read_partition
from poem.learners._lbfgs import lbfgs_statistics
from poem.learners.objective import crm_objective_from_statistics, crm_statistics
from poem.learners.prepared import prepare_training
from poem.log_rows import PartitionedSplit

CLIP, LAM, MU = 100.0, 0.1, 1e-6


def _peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def _pieces_for(pieces, rows):
    out, total = [], 0
    for p in pieces:
        if total >= rows:
            break
        out.append(p)
        total += p.n_rows
    return out, total


def _cluster(workers, memory_limit):
    import dask
    from distributed import Client, LocalCluster

    # the partitions must stay in memory: no spilling to disk (it would time the disk)
    dask.config.set(
        {
            "distributed.worker.memory.target": False,
            "distributed.worker.memory.spill": False,
            "distributed.worker.memory.pause": 0.95,
            # the product's allocator settings (poem._dask_cluster.local_client)
            **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in WORKER_MALLOC.items()},
        }
    )
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        memory_limit=memory_limit,
        dashboard_address=None,
        silence_logs=40,
    )
    return cluster, Client(cluster)


def _footprint(client) -> float:
    workers = client.run(_peak_mib)
    return sum(workers.values()) + _peak_mib()


def load_partitions(client, pieces):
    """Every row of the pieces, read and prepared (no standardization) on the workers."""
    source = ClusterPartitions(client, client.map(read_partition, pieces, pure=False))
    everything = {"train": [np.arange(p.n_rows) for p in pieces]}
    everything.update({k: [np.zeros(0, np.int64)] * len(pieces) for k in ("validation", "test")})
    split = PartitionedSplit(source, everything, "all", {})
    return prepare_training(split, fit_intercept=False, standardize=False)[0]


def time_pass(path, pieces, rows, workers, repeats, memory_limit):
    sub, n = _pieces_for(pieces, rows)
    cluster, client = _cluster(workers, memory_limit)
    try:
        t0 = time.perf_counter()
        data = load_partitions(client, sub)
        from distributed import wait

        wait(data.partitions.items)
        t_load = time.perf_counter() - t0
        w = 0.01 * np.random.default_rng(0).normal(size=data.family.coef_shape)

        def provider(coef):
            return data.statistics(coef, CLIP)

        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            crm_objective_from_statistics(provider(w), w, LAM, MU)
            times.append(time.perf_counter() - t0)
        median = statistics.median(times)
        print(
            f"pass   {n:>11,} rows  {workers} worker(s): {median:7.3f} s/pass "
            f"= {median / (n / 1e6):6.4f} s per million rows (median of {repeats}; "
            f"read {t_load:6.1f} s; {len(sub)} partitions; "
            f"peak {_footprint(client) / 1024:5.2f} GiB summed; "
            f"load average {os.getloadavg()[0]:.2f})",
            flush=True,
        )
        return n, median
    finally:
        client.close()
        cluster.close()


def train(pieces, rows, workers, max_iter, memory_limit):
    sub, n = _pieces_for(pieces, rows)
    cluster, client = _cluster(workers, memory_limit)
    try:
        t0 = time.perf_counter()
        data = load_partitions(client, sub)
        res = lbfgs_statistics(
            lambda coef: data.statistics(coef, CLIP),
            np.zeros(data.family.coef_shape),
            variance_penalty=LAM,
            l2_penalty=MU,
            max_iter=max_iter,
            tol=1e-9,
        )
        wall = time.perf_counter() - t0
        print(
            f"train  {n:>11,} rows  {workers} worker(s): L-BFGS {res.n_iter} iterations, "
            f"J = {res.objective:.6f}, {wall:7.1f} s including the read "
            f"(peak {_footprint(client) / 1024:5.2f} GiB summed)",
            flush=True,
        )
    finally:
        client.close()
        cluster.close()


def in_memory_pass(pieces, rows, repeats):
    from poem.policies import family_from_log

    sub, n = _pieces_for(pieces, rows)
    logs = [read_partition(p) for p in sub]
    family = family_from_log(logs[0])
    X = np.concatenate([family.inputs_from_log(log) for log in logs])
    a, d, p = (
        np.concatenate([np.asarray(getattr(log, f)) for log in logs])
        for f in ("actions", "losses", "propensities")
    )
    d = np.concatenate([log.scaled_losses() for log in logs])
    w = 0.01 * np.random.default_rng(0).normal(size=family.coef_shape)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        crm_objective_from_statistics(crm_statistics(w, family, X, a, d, p, CLIP), w, LAM, MU)
        times.append(time.perf_counter() - t0)
    print(f"memory {n:>11,} rows  in-process: {statistics.median(times):7.3f} s/pass", flush=True)


def summary(medians: dict, workers: list[int]) -> None:
    """Seconds per million rows by size (linear growth: constant) and the speed-up by workers."""
    print("\nrows         " + "  ".join(f"{w} worker(s) s/M rows" for w in workers) + "  speed-up")
    for rows in sorted({r for r, _ in medians}):
        per_m = [medians[rows, w][1] / (medians[rows, w][0] / 1e6) for w in workers]
        ratio = per_m[0] / per_m[-1] if len(per_m) > 1 else float("nan")
        cells = "  ".join(f"{v:20.4f}" for v in per_m)
        print(f"{medians[rows, workers[0]][0]:>11,}  {cells}  {ratio:6.2f}x", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", type=Path)
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 3_000_000, 10_000_000])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train-rows", type=int, default=None)
    ap.add_argument("--train-workers", type=int, default=2)
    ap.add_argument("--lbfgs-iter", type=int, default=20)
    ap.add_argument("--memory-budget-gib", type=float, default=7.5)
    ap.add_argument("--skip-in-memory", action="store_true")
    args = ap.parse_args()
    pieces = log_partitions(args.logs)
    if not args.skip_in_memory:
        in_memory_pass(pieces, min(args.rows), args.repeats)
    medians = {}
    for rows in args.rows:
        for workers in args.workers:
            limit = f"{args.memory_budget_gib / workers:.2f}GiB"
            medians[rows, workers] = time_pass(
                args.logs, pieces, rows, workers, args.repeats, limit
            )
    summary(medians, args.workers)
    if args.train_rows:
        limit = f"{args.memory_budget_gib / args.train_workers:.2f}GiB"
        train(pieces, args.train_rows, args.train_workers, args.lbfgs_iter, limit)


if __name__ == "__main__":
    main()
