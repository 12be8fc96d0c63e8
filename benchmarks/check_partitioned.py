"""Benchmark: ``poem-pipeline check`` in memory vs on partitions (Dask), wall time and peak RSS.

Usage::

    .venv/bin/python benchmarks/check_partitioned.py LOG [--modes memory,local,sync]
        [--workers 2] [--interval 0.2]

``LOG`` is a Parquet log, e.g. written by ``benchmarks/make_large_logs.py`` (one row group per
file). Each mode runs the full ``check`` command in a fresh process (``--out`` to a temporary
folder): ``memory`` = ``--partitions never``; ``local`` = ``--partitions always --scheduler
local`` (a LocalCluster of ``--workers`` processes); ``sync`` = ``--partitions always
--scheduler sync`` (partitions one after the other in one process). The peak RSS is the
maximum over time of the RSS summed over the command's process tree (client, nanny and
worker processes), polled every ``--interval`` seconds. Prints one line per mode.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
FLAGS = {
    "memory": ["--partitions", "never"],
    "local": ["--partitions", "always", "--scheduler", "local"],
    "sync": ["--partitions", "always", "--scheduler", "sync"],
}


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run(log: str, mode: str, workers: int, interval: float) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "flows.cli", "check", log, "--out", out, "--json"]
        cmd += FLAGS[mode] + (["--workers", str(workers)] if mode == "local" else [])
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        ps, peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(ps))
            time.sleep(interval)
        stdout = proc.stdout.read()
        wall = time.perf_counter() - start
    report = json.loads(stdout)["data_checks"] if stdout else {}
    return {
        "mode": mode,
        "exit": proc.returncode,
        "wall_s": wall,
        "peak_rss_gib": peak / 2**30,
        "n_rows": report.get("n_rows"),
        "n_quarantined": report.get("n_quarantined"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("log")
    parser.add_argument("--modes", default="memory,local")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--interval", type=float, default=0.2)
    args = parser.parse_args()
    print("mode    exit  wall [s]  peak RSS, all processes [GiB]  rows  quarantined", flush=True)
    for mode in args.modes.split(","):
        r = run(args.log, mode, args.workers, args.interval)
        print(
            f"{r['mode']:<7} {r['exit']:>4}  {r['wall_s']:8.1f}  {r['peak_rss_gib']:29.2f}  "
            f"{r['n_rows']}  {r['n_quarantined']}",
            flush=True,
        )


if __name__ == "__main__":
    main()
