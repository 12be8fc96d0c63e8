"""Benchmark: ``poem-pipeline check`` on 1,000,000 discrete rows vs one ``pandas.read_parquet``.

Usage::

    .venv/bin/python benchmarks/check_1m.py [--rows 1000000] [--repeats 3] [--workdir DIR]

Writes a synthetic date-partitioned log (K = 10 actions, d = 10 features, 7 days), then runs,
each in a fresh process and ``--repeats`` times: (a) the full ``check`` command (read,
GX suite with COMPLETE results, quarantine split, ``LoggedBandit``, propensity checks, plots,
Data Docs, JSON report) and (b) one ``pandas.read_parquet`` of the same directory. Reports the
median wall time (with and without the imports), the RSS after the imports and the peak RSS
during the work (``VmHWM`` of ``/proc/self/status``, reset after the imports), the peak of
pyarrow's memory pool (not seen by tracemalloc) and, in one extra run each, the
``tracemalloc`` peak of Python/NumPy allocations.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def make_log(path: Path, n: int, seed: int = 0) -> None:
    import numpy as np

    from poem.data import LoggedBandit
    from poem.io.parquet import write_log

    rng = np.random.default_rng(seed)
    K, d = 10, 10
    X = rng.normal(size=(n, d))
    logits = X @ rng.normal(size=(d, K)) * 0.5
    P = np.exp(logits - logits.max(1, keepdims=True))
    P /= P.sum(1, keepdims=True)
    a = (P.cumsum(1) < rng.random(n)[:, None]).sum(1).clip(max=K - 1)
    ts = np.datetime64("2026-11-01", "ns") + np.sort(rng.integers(0, 7 * 86400 * 10**9, n)).astype(
        "timedelta64[ns]"
    )
    log = LoggedBandit(
        X,
        a,
        rng.integers(0, 2, n).astype(float),
        P[np.arange(n), a],
        (0.0, 1.0),
        n_actions=K,
        timestamps=ts,
        event_ids=np.char.add("e", np.arange(n).astype(str)),
        logging_model_version="h0",
    )
    write_log(log, path)


def _status_mib(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS, VmHWM) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def child(task: str, path: str, out: str, trace: bool) -> None:
    import tracemalloc

    t0 = time.perf_counter()
    if task == "check":
        import great_expectations  # noqa: F401  (the command imports it; timed separately)

        from flows.cli import main
    else:
        import pandas as pd
    t1 = time.perf_counter()
    base = _status_mib("VmRSS")
    # reset the peak-RSS counter (VmHWM) so the peak below covers the work only (Linux >= 4.0);
    # resource.getrusage's ru_maxrss cannot be reset and survives fork + exec from the parent
    Path("/proc/self/clear_refs").write_text("5")
    if trace:
        tracemalloc.start()
    if task == "check":
        code = main(["check", path, "--out", out])
        assert code == 0, f"check exited with {code}"
    else:
        frame = pd.read_parquet(path)
        assert len(frame) > 0
    t2 = time.perf_counter()
    peak_trace = tracemalloc.get_traced_memory()[1] if trace else None
    rss = _status_mib("VmHWM")
    import pyarrow as pa

    arrow_peak = pa.default_memory_pool().max_memory()
    print(
        json.dumps(
            {
                "import_s": t1 - t0,
                "work_s": t2 - t1,
                "total_s": t2 - t0,
                "peak_rss_mb": rss,
                "rss_after_imports_mb": base,
                "arrow_pool_peak_mb": arrow_peak / 2**20,
                "tracemalloc_peak_mb": None if peak_trace is None else peak_trace / 2**20,
            }
        )
    )


def run_child(task: str, path: Path, out: Path, trace: bool = False) -> dict:
    cmd = [sys.executable, __file__, "--child", task, "--path", str(path), "--out", str(out)] + (
        ["--trace"] if trace else []
    )
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows of the synthetic log")
    parser.add_argument("--repeats", type=int, default=3, help="runs per task (median reported)")
    parser.add_argument(
        "--workdir", type=Path, default=Path("/tmp/check_1m"), help="where the log and outputs go"
    )
    parser.add_argument(
        "--child", choices=("check", "read", "make"), default=None, help=argparse.SUPPRESS
    )
    parser.add_argument("--path", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "make":
        make_log(Path(args.path), args.rows)
        return
    if args.child:
        child(args.child, args.path, args.out, args.trace)
        return
    path = args.workdir / f"log_{args.rows}"
    if not path.exists():
        t = time.perf_counter()
        # in a child process, so that this parent stays small (a forked child inherits it)
        subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "make",
                "--path",
                str(path),
                "--rows",
                str(args.rows),
            ],
            cwd=REPO,
            check=True,
        )
        print(f"wrote {args.rows:,} rows to {path} in {time.perf_counter() - t:.1f} s")
    size = sum(f.stat().st_size for f in path.rglob("*.parquet")) / 2**20
    print(f"log: {path} ({size:.1f} MiB Parquet)")
    results = {}
    for task in ("read", "check"):
        runs = [run_child(task, path, args.workdir / "out") for _ in range(args.repeats)]
        traced = run_child(task, path, args.workdir / "out", trace=True)
        results[task] = {
            k: statistics.median(r[k] for r in runs)
            for k in (
                "import_s",
                "work_s",
                "total_s",
                "peak_rss_mb",
                "rss_after_imports_mb",
                "arrow_pool_peak_mb",
            )
        }
        results[task]["tracemalloc_peak_mb"] = traced["tracemalloc_peak_mb"]
        results[task]["runs_work_s"] = [round(r["work_s"], 2) for r in runs]
    print(json.dumps(results, indent=2))
    print(f"\n{args.rows:,} rows, median of {args.repeats}:")
    for task, label in (("read", "pandas.read_parquet"), ("check", "check")):
        x = results[task]
        print(
            f"  {label:<20} {x['work_s']:.2f} s (+ {x['import_s']:.2f} s imports); "
            f"peak RSS {x['peak_rss_mb']:.0f} MiB (after imports {x['rss_after_imports_mb']:.0f}); "
            f"tracemalloc peak {x['tracemalloc_peak_mb']:.0f} MiB; "
            f"Arrow pool peak {x['arrow_pool_peak_mb']:.0f} MiB"
        )


if __name__ == "__main__":
    main()
