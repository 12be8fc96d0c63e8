"""Cost of the front door (poem.io.logs): row rules vs reading, and memory of a huge event id.

Prints, for a sparse discrete log of ``--rows`` rows: seconds of ``read_log_table``, of the row
rules (``row_problems``) and of ``to_log`` (rules + CSR + invariants), measured in one process,
and their ratio to the read; then the peak Python allocation (tracemalloc) of ``read_log`` on a
log whose event ids are short, and on the same log with one 1 MB id (a fixed-width ``<U``
array would need rows × 4 MB).

    python benchmarks/front_door.py --rows 200000
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from poem.data import LoggedBandit
from poem.io._row_checks import row_problems
from poem.io.logs import read_log, read_log_table
from poem.io.parquet import write_log


def _log(n: int, d: int, k: int, ids: np.ndarray) -> LoggedBandit:
    rng = np.random.default_rng(0)
    P = rng.dirichlet(np.ones(k), n)
    a = rng.integers(0, k, n)
    X = sp.random(n, d, density=0.02, random_state=0, format="csr")
    return LoggedBandit(
        X, a, rng.random(n), P[np.arange(n), a], (0, 1), n_actions=k, logging_distribution=P,
        event_ids=ids,
    )  # fmt: skip


def _peak_mb(path: Path) -> float:
    tracemalloc.start()
    try:
        read_log(path)
        return tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def main() -> None:
    """Write the logs to a temporary folder and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    args = parser.parse_args()
    n = args.rows
    ids = np.array([f"e{i}" for i in range(n)], dtype=object)
    with tempfile.TemporaryDirectory() as tmp:
        path = write_log(_log(n, 1000, 10, ids), Path(tmp) / "log.parquet", partition_by_date=False)
        t0 = time.perf_counter()
        table = read_log_table(path)
        t1 = time.perf_counter()
        row_problems(table.frame, table.meta)
        t2 = time.perf_counter()
        table.to_log()
        t3 = time.perf_counter()
        read, rules, build = t1 - t0, t2 - t1, t3 - t2
        print(f"{n:,} rows: read_log_table {read:.2f} s, row rules {rules:.2f} s "
              f"({rules / read:.2f}x the read), to_log {build:.2f} s ({build / read:.2f}x)")  # fmt: skip
        small = 5_000
        short = write_log(_log(small, 50, 10, ids[:small]), Path(tmp) / "short.parquet",
                          partition_by_date=False)  # fmt: skip
        huge_ids = ids[:small].copy()
        huge_ids[7] = "x" * 1_000_000
        huge = write_log(_log(small, 50, 10, huge_ids), Path(tmp) / "huge.parquet",
                         partition_by_date=False)  # fmt: skip
        print(f"{small:,} rows, read_log peak allocation: short ids {_peak_mb(short):.0f} MB, "
              f"one 1 MB id {_peak_mb(huge):.0f} MB (a <U array would need "
              f"{small * 4:,} MB)")  # fmt: skip


if __name__ == "__main__":
    main()
