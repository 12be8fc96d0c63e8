"""SIGKILL inside ``DecisionLog.flush``, then the rerun/repair checks (used by fault_injection.py).

Each trial starts a child process on a fresh log folder that adds ``n_batches`` batches of
decisions (with feedback; every batch crosses midnight, so each flush writes two ``date=``
files) and flushes after each batch. The child dies by SIGKILL either at a named point inside
the write (``before-write``, ``mid-write``: half the bytes written, ``before-rename``,
``after-rename``; at a random write call), or at a random moment (the parent kills it after a
delay drawn uniformly over the length of an unkilled run). Then:

1. **visible files**: every file the readers take as data (:func:`poem.io.parquet.list_log_files`)
   must read completely, page checksums verified — a truncated or corrupt visible file counts;
2. **repair**: a new process replays every batch (an application re-sending the decisions it
   cannot confirm were logged) and flushes;
3. **audit**: rows in the folder, duplicated event ids (rows − distinct ids), decisions missing,
   hidden temporary files left over, and ``poem-pipeline check``'s verdict (``check_logs``).

Run it alone (no retrain kill points, no concurrency)::

    .venv/bin/python benchmarks/fault_injection.py --points --concurrency --decision-log-kills 24

``--code DIR`` runs the children on another checkout of the project (e.g. the previous commit,
to measure the defects this guards against).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

NAMED = ("before-write", "mid-write", "before-rename", "after-rename")

DRIVER = r"""
import os, signal, sys
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from poem.io.decisions import DecisionLog

folder, point, at, n_batches, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
FEATURES = ["f0", "f1", "f2"]
T0 = pd.Timestamp("2026-03-01T23:00:00Z")
calls = []

def die():
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)

def counted(name):
    calls.append(name)
    return calls.count(name) == at

if point in ("before-write", "mid-write"):
    real_write = pq.write_table
    def write(table, where, **kwargs):
        if counted("write"):
            if point == "before-write":
                die()
            buffer = pa.BufferOutputStream()
            real_write(table, buffer, **kwargs)
            data = buffer.getvalue().to_pybytes()
            if hasattr(where, "write"):
                where.write(data[: len(data) // 2]); where.flush()
            else:
                with open(where, "wb") as fh:
                    fh.write(data[: len(data) // 2])
            die()
        return real_write(table, where, **kwargs)
    pq.write_table = write
elif point in ("before-rename", "after-rename"):
    real_replace = os.replace
    def replace(src, dst, *args, **kwargs):
        hit = counted("rename")
        if hit and point == "before-rename":
            die()
        out = real_replace(src, dst, *args, **kwargs)
        if hit:
            die()
        return out
    os.replace = replace

def batch(b):
    rng = np.random.default_rng(b)
    ids = [f"b{b}-{i}" for i in range(size)]
    request = pd.DataFrame(rng.normal(size=(size, 3)), columns=FEATURES)
    request.insert(0, "event_id", ids)
    times = [T0 + pd.Timedelta(minutes=(7 * i) % 120) for i in range(size)]  # crosses midnight
    decisions = pd.DataFrame({"event_id": ids, "action": rng.integers(0, 4, size),
                              "propensity": 0.25, "model_version": "1", "timestamp": times})
    return request, decisions, rng.random(size)

log = DecisionLog(folder, "discrete", FEATURES, (0.0, 1.0), n_actions=4)
print("ready", flush=True)
for b in range(n_batches):
    request, decisions, losses = batch(b)
    log.add_decisions(request, decisions)
    log.add_feedback(decisions["event_id"], losses)
    print(f"flush-start {b}", flush=True)
    report = log.flush(now=T0 + pd.Timedelta(hours=3))
    print(f"flush-end {b} {report.n_written} {getattr(report, 'n_already_logged', 0)}", flush=True)
print("done", flush=True)
"""


def _start(code: Path, folder: Path, point: str, at: int, n_batches: int, size: int):
    env = {**os.environ, "PYTHONPATH": str(code)}
    return subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(folder), point, str(at), str(n_batches), str(size)],
        env=env,
        cwd=code,  # ``-c`` puts the working folder first on sys.path: the checkout's poem wins
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _visible_damage(folder: Path) -> tuple[int, int]:
    """(visible data files, of which unreadable: truncated or failing their checksums)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from poem.exceptions import InvalidLogError
    from poem.io.parquet import list_log_files

    try:
        files = list_log_files(folder)
    except InvalidLogError:  # nothing written yet
        return 0, 0
    bad = 0
    for f in files:
        try:
            pq.read_table(f, page_checksum_verification=True)
        except (pa.ArrowException, OSError):
            bad += 1
    return len(files), bad


def _audit(folder: Path, expected: int, check: bool) -> dict:
    from data_checks.check import check_logs
    from poem.io.parquet import read_frame

    frame = read_frame(folder)
    ids = frame["event_id"].astype(str)
    temps = sum(1 for p in folder.rglob(".*.tmp"))
    row = {
        "rows": len(frame),
        "duplicated": len(frame) - ids.nunique(),
        "missing": expected - ids.nunique(),
        "temp_left": temps,
    }
    if check:
        row["check_passed"] = check_logs(folder, plots=False, min_rows=1).passed
    return row


def decision_log_kills(
    workdir: Path,
    n_random: int,
    *,
    code: Path,
    n_batches: int = 16,
    size: int = 40,
    seed: int = 0,
    check: bool = True,
) -> list[dict]:
    """Named kill points (each once), then kills at random moments until ``n_random`` of them
    landed inside ``flush`` (at most ``3 n_random`` tries; module docstring)."""
    rng = random.Random(seed)
    base = workdir / "decision-log"
    shutil.rmtree(base, ignore_errors=True)
    expected = n_batches * size
    # the length of an unkilled run (from "ready"), to draw random kill moments over
    probe = base / "probe"
    started = None
    proc = _start(code, probe, "none", 0, n_batches, size)
    span = 0.0
    for line in proc.stdout:
        if line.startswith("ready"):
            started = time.monotonic()
        elif line.startswith("done"):
            span = time.monotonic() - started
    proc.wait()
    trials = [(p, rng.randint(1, 2 * n_batches)) for p in NAMED]
    rows: list[dict] = []
    k = 0
    # random moments until n_random kills landed inside flush (at most 3 n_random tries)
    while k < len(trials) + 3 * n_random and (
        k < len(trials) or sum(r["killed_in"] == "flush" for r in rows[len(NAMED) :]) < n_random
    ):
        point, at = trials[k] if k < len(trials) else ("random", 0)
        folder = base / f"trial-{k:03d}"
        proc = _start(code, folder, point, at, n_batches, size)
        lines = [proc.stdout.readline()]  # "ready"
        delay = None
        if point == "random":
            delay = rng.uniform(0.0, span)
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        lines += out.splitlines()
        last = lines[-1].split(" ")[0] if lines and lines[-1] else "-"
        n_visible, n_bad = _visible_damage(folder)
        repair = _start(code, folder, "none", 0, n_batches, size)
        repair_out, repair_err = repair.communicate()
        written = [ln.split() for ln in repair_out.splitlines() if ln.startswith("flush-end")]
        row = {
            "trial": k,
            "point": point if point == "random" else f"{point}#{at}",
            "delay_s": None if delay is None else round(delay, 2),
            "sigkilled": proc.returncode == -signal.SIGKILL,
            "killed_in": "flush" if last == "flush-start" else last,
            "visible_files": n_visible,
            "visible_unreadable": n_bad,
            "repair_exit": repair.returncode,
            "repair_written": sum(int(w[2]) for w in written),
            "repair_already_logged": sum(int(w[3]) for w in written),
        }
        if repair.returncode != 0:
            row["repair_error"] = repair_err.strip().splitlines()[-1:] or ["?"]
        try:
            row.update(_audit(folder, expected, check))
        except Exception as exc:  # noqa: BLE001 - the figure is the failure
            row.update({"audit_error": f"{type(exc).__name__}: {str(exc)[:160]}"})
        rows.append(row)
        print(row, flush=True)
        k += 1
    return rows


def summary(rows: list[dict]) -> dict:
    """Totals over the trials (the figures the README reports)."""
    in_flush = [r for r in rows if r["killed_in"] == "flush"]
    return {
        "kills": sum(r["sigkilled"] for r in rows),
        "kills_inside_flush": sum(r["sigkilled"] for r in in_flush),
        "visible_unreadable_files": sum(r["visible_unreadable"] for r in rows),
        "duplicated_decisions": sum(r.get("duplicated", 0) for r in rows),
        "missing_decisions_after_repair": sum(r.get("missing", 0) for r in rows),
        "check_failed_after_repair": sum(1 for r in rows if r.get("check_passed") is False),
        "audit_errors": sum(1 for r in rows if "audit_error" in r),
        "hidden_temp_files_left": sum(r.get("temp_left", 0) for r in rows),
    }
