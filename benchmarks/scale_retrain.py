"""``poem-pipeline retrain`` on a large Parquet log on Dask: time, memory, graphs, terminal.

Usage::

    nice -n 10 .venv/bin/python benchmarks/scale_retrain.py /tmp/big --rows 10000000
        [--features 50] [--actions 5] [--partition-rows 250000] [--graph-threshold 10MB]
        [--source CHECKOUT] [--workdir DIR] [--set KEY=VALUE ...]

Generates the log with ``benchmarks/make_large_logs.py`` (discrete family, one Parquet file of
``--partition-rows`` rows per partition, event ids) unless ``LOGS`` already holds ``--rows``
rows, then runs ``poem-pipeline retrain --logs LOGS`` with the packaged default config and
``--set dask.mode=always`` (the default ``auto`` starts the cluster above 2 GiB, which a
10 M × 50 log is) in a fresh work folder (its own Prefect home and MLflow store), and prints:

- wall time and the CLI's exit code;
- peak RSS summed over the CLI process and all its descendants (scheduler and nannies in the
  CLI process, the Dask workers, Prefect's temporary API server), polled every
  ``--interval`` s with psutil;
- the number of "Sending large graph" warnings ``distributed`` raised in the CLI process and
  their sizes: the CLI ignores warnings, so the command runs under a prelude that reports
  each such warning on a separate channel (a file) before handing it on — counted whatever
  the filters do (the prelude imports nothing else first). ``--graph-threshold`` sets ``distributed.admin.large-graph-warning-threshold``
  (Dask's default 10 MB; at 1 M rows, 1 MB flags what 10 MB flags at 10 M rows);
- the terminal: the number of lines the command printed (stdout + stderr) and how many of
  them come from ``distributed``.

``--source CHECKOUT`` runs the CLI of another checkout (e.g. the main branch exported with
``git archive``) for a before/after comparison.

Measured 2026-11-25 (2 cores shared, load average 9–12; default config, 20 trials, promoted,
same risks to the digit), ``--rows 1000000 --graph-threshold 1MB`` (4 partitions):

- before (main, aae8053): 1384 s, peak 2.20 GiB summed, 23 large graphs (7.63 MiB, 3.82 MiB,
  then 1.91 MiB per trial: the split's row positions, ×10 at 10 M rows);
- after (scatter once): 1335 s, peak 2.27 GiB, 0 large graphs, 0 ``distributed`` lines on the
  terminal (53 lines: the stage lines and the headline).

Measured 2026-11-28 on the default 10 M × 50 × 5 log (40 row groups), machine otherwise idle:
1,308.7 s, peak 7.05 GiB (check + load 270 s, 20 search trials 935 s); after the workers'
allocator setting (``poem._dask_cluster.WORKER_MALLOC``) and one fit per distinct grid point:
549.0 s, peak 7.08 GiB (check + load 80 s, 10 fits 380 s, refit 28 s, gate 9 s); both runs 0
large graphs, 0 ``distributed`` lines, promoted with the same risks (0.2822 vs 0.5031).

``--rows 200000 --partition-rows 50000 --graph-threshold 200kB --set 'search.grid={variance_scale:
[0.01]}'``: before 89 terminal lines, 55 from ``distributed`` (INFO and warnings), 4 large graphs;
after 34 lines, 0 from ``distributed``, 0 large graphs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from check_partitioned import tree_rss  # benchmarks/ is this script's folder

from poem.io.partitions import log_partitions

REPO = Path(__file__).resolve().parents[1]
GIB = 2**30

# Runs the CLI; reports each large-graph warning (distributed's client calls warnings.warn) to
# $POEM_BENCH_GRAPHS, then warns as before (one frame up: the warning keeps its origin). Imports
# nothing the CLI would not: importing distributed first would change how its loggers print.
PRELUDE = """
import os, sys, warnings
_warn = warnings.warn
def _reporting_warn(message, category=None, stacklevel=1, *args, **kwargs):
    if "large graph" in str(message):
        with open(os.environ["POEM_BENCH_GRAPHS"], "a") as f:
            f.write(str(message).splitlines()[0] + "\\n")
    return _warn(message, category, stacklevel + 1, *args, **kwargs)
warnings.warn = _reporting_warn
from flows.cli import main
sys.exit(main(sys.argv[1:]))
"""


def ensure_logs(path: Path, rows: int, features: int, actions: int, chunk: int) -> None:
    """Write the log with ``make_large_logs.py`` unless ``path`` already holds ``rows`` rows."""
    if path.exists() and sum(p.n_rows for p in log_partitions(path)) == rows:
        return
    script = Path(__file__).with_name("make_large_logs.py")
    cmd = [sys.executable, str(script), str(path), "--rows", str(rows), "--features"]
    cmd += [str(features), "--actions", str(actions), "--chunk-rows", str(chunk)]
    subprocess.run([*cmd, "--event-ids", "--overwrite"], check=True)


def run(args: argparse.Namespace, work: Path) -> dict:
    """One ``retrain``: wall time, exit code, peak summed RSS, graphs, terminal lines."""
    graphs = work / "large-graphs.txt"
    env = dict(os.environ)
    env |= {
        "PYTHONPATH": str(Path(args.source).resolve()),
        "PREFECT_HOME": str(work / "prefect"),
        "POEM_BENCH_GRAPHS": str(graphs),
        "DASK_DISTRIBUTED__ADMIN__LARGE_GRAPH_WARNING_THRESHOLD": args.graph_threshold,
    }
    env.pop("PREFECT_API_URL", None)  # the CLI starts its temporary server, as for a user
    env.pop("MLFLOW_TRACKING_URI", None)  # the config's store, in the work folder
    cmd = [sys.executable, "-c", PRELUDE, "retrain", "--logs", str(args.logs)]
    for item in ["dask.mode=always", *args.set]:
        cmd += ["--set", item]
    out, err = work / "stdout.txt", work / "stderr.txt"
    start = time.perf_counter()
    with out.open("w") as fo, err.open("w") as fe:
        proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=fo, stderr=fe)
        ps, peak = psutil.Process(proc.pid), 0
        while proc.poll() is None:
            peak = max(peak, tree_rss(ps))
            time.sleep(args.interval)
    seconds = time.perf_counter() - start
    lines = out.read_text().splitlines() + err.read_text().splitlines()
    sizes = graphs.read_text().splitlines() if graphs.exists() else []
    return {
        "code": proc.returncode,
        "seconds": seconds,
        "peak_gib": peak / GIB,
        "graphs": sizes,
        "lines": lines,
        "dask_lines": [line for line in lines if "distributed" in line],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", type=Path)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--actions", type=int, default=5)
    ap.add_argument("--partition-rows", type=int, default=250_000, help="when generating")
    ap.add_argument("--graph-threshold", default="10MB")
    ap.add_argument("--interval", type=float, default=0.5, help="seconds between RSS samples")
    ap.add_argument("--source", default=str(REPO), help="checkout whose CLI runs")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    ensure_logs(args.logs, args.rows, args.features, args.actions, args.partition_rows)
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="poem-scale-retrain-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(
        f"{args.rows:,} rows x {args.features} features x {args.actions} actions in "
        f"{len(log_partitions(args.logs))} partitions; CLI from {args.source}; work {work}",
        flush=True,
    )
    r = run(args, work)
    print(f"exit code {r['code']}; wall {r['seconds']:.1f} s; peak {r['peak_gib']:.2f} GiB summed")
    print(f"large-graph warnings (threshold {args.graph_threshold}): {len(r['graphs'])}")
    for line in r["graphs"]:
        print(f"  {line}")
    print(f"terminal: {len(r['lines'])} lines, {len(r['dask_lines'])} from distributed")
    for line in r["lines"]:
        print(f"  | {line}")


if __name__ == "__main__":
    main()
