"""Benchmark: IPS + SNIPS + t intervals from per-partition sums vs one numpy pass in memory.

Usage::

    .venv/bin/python benchmarks/estimators_pass.py [--rows 10000000] [--partitions 20] [--repeats 5]

On the same arrays (δ ∈ {0, 1}, log-normal weights with 20 % zeros), in one process, medians of
``--repeats`` (the contenders alternate within each repeat):

- ``map-reduce``: :func:`poem.estimators.partitioned.weight_statistics` on each of
  ``--partitions`` equal partitions (the map, input checks included), ``sum`` (the reduce),
  then :func:`~poem.estimators.partitioned.ips_from_statistics` and
  :func:`~poem.estimators.partitioned.snips_from_statistics` (values, standard errors, t
  intervals, ESS);
- ``numpy pass``: ``np.mean(losses * weights)`` on the whole arrays — the IPS value alone;
- ``in memory``: :func:`poem.estimators.ips.ips` + :func:`~poem.estimators.ips.snips`.

Prints the times and the ratio map-reduce / numpy pass (issue #13: ≤ 3). On a loaded machine
OpenBLAS's threads dominate the dot products: compare with ``OPENBLAS_NUM_THREADS=1``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from poem.estimators.ips import ips, snips
from poem.estimators.partitioned import (
    ips_from_statistics,
    snips_from_statistics,
    weight_statistics,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.rows
    weights = rng.lognormal(0.0, 1.0, n) * (rng.random(n) < 0.8)
    losses = rng.integers(0, 2, n).astype(np.float64)
    edges = np.linspace(0, n, args.partitions + 1).astype(int)

    def map_reduce():
        stats = sum(
            weight_statistics(losses[a:b], weights[a:b])
            for a, b in zip(edges[:-1], edges[1:], strict=True)
        )
        return ips_from_statistics(stats), snips_from_statistics(stats)

    def numpy_pass():
        return float(np.mean(losses * weights))

    def in_memory():
        return ips(losses, weights), snips(losses, weights)

    fns = {"map-reduce": map_reduce, "numpy pass": numpy_pass, "in memory": in_memory}
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    for _ in range(args.repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    a, b = map_reduce()
    print(a, b, sep="\n")
    print(
        f"{n:,} rows, {args.partitions} partitions: map-reduce IPS+SNIPS+intervals "
        f"{med['map-reduce'] * 1e3:.1f} ms | one numpy pass {med['numpy pass'] * 1e3:.1f} ms | "
        f"in-memory ips()+snips() {med['in memory'] * 1e3:.1f} ms | "
        f"ratio map-reduce/numpy pass {med['map-reduce'] / med['numpy pass']:.2f}"
    )


if __name__ == "__main__":
    main()
