"""Per-request decision logging at the serving rate: ``DecisionLog.add_decisions`` one row at a time.

An application logs each served request as it is answered: one ``add_decisions`` call per
one-row request, ``add_feedback`` as losses arrive, a ``flush`` every ``--flush-every`` calls
(feedback of older requests in hand, newer ones still pending). The serving model answers a
request in a few ms (``mlflow models serve``: 2,000 one-row requests in 69 s, ~35 ms each from
one client), so logging must cost far less than that per call, and the same at call 2,000 as at
call 1. Printed: ms per call for the first and last 100 calls (add and feedback), the flush
times, and the audit of the folder (rows written vs expected, duplicated and missing ids).

Full version (about a minute)::

    .venv/bin/python benchmarks/decision_logging.py --calls 5000

``--calls 2000`` (the default) takes ~20 s on one core.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy.pyfunc import StochasticPolicyModel  # noqa: E402
from poem.io.decisions import DecisionLog  # noqa: E402
from poem.io.parquet import list_log_files, read_frame  # noqa: E402
from poem.policies import StochasticPolicy, make_family  # noqa: E402

FEATURES = [f"f{j}" for j in range(8)]


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; print the figures; exit 1 if rows were lost or doubled."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="one-row requests logged")
    parser.add_argument(
        "--flush-every",
        type=int,
        default=500,
        help="calls between flushes (0: only at the end, every decision pending)",
    )
    parser.add_argument("--window", type=int, default=100, help="calls timed at start and end")
    args = parser.parse_args(argv)

    rng = np.random.default_rng(0)
    family = make_family("discrete", len(FEATURES), 5, True)
    policy = StochasticPolicy(
        family,
        rng.normal(size=family.coef_shape),
        1.0,
        0.02,
        {"feature_names": FEATURES},
    )
    model = StochasticPolicyModel(policy, "7")
    t_start = pd.Timestamp("2026-03-01T12:00:00Z")
    add_ms, feedback_ms, flush_s = [], [], []
    with tempfile.TemporaryDirectory(prefix="poem-decision-bench-") as tmp:
        folder = Path(tmp) / "logs"
        log = DecisionLog(folder, "discrete", FEATURES, (0.0, 1.0), n_actions=5)
        sent: list[str] = []
        for i in range(args.calls):
            request = pd.DataFrame(rng.normal(size=(1, len(FEATURES))), columns=FEATURES)
            request.insert(0, "event_id", [f"req-{i:06d}"])
            decisions = model.predict(None, request, {"seed": i})
            when = [t_start + pd.Timedelta(seconds=i)]
            t0 = time.perf_counter()
            log.add_decisions(request, decisions, timestamps=when)
            add_ms.append(1e3 * (time.perf_counter() - t0))
            sent.append(f"req-{i:06d}")
            if i >= 10:  # feedback arrives ten requests later
                t0 = time.perf_counter()
                log.add_feedback([sent[i - 10]], [float(rng.uniform())])
                feedback_ms.append(1e3 * (time.perf_counter() - t0))
            if (i + 1) % 250 == 0:  # progress: figures survive a run stopped by a timeout
                print(
                    f"  after {i + 1} calls: last {args.window} add_decisions "
                    f"{np.mean(add_ms[-args.window :]):.2f} ms/call",
                    flush=True,
                )
            if args.flush_every and (i + 1) % args.flush_every == 0:
                t0 = time.perf_counter()
                log.flush(now=t_start)  # nothing timed out yet: only rows with feedback
                flush_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        log.flush(now=t_start, force=True)
        flush_s.append(time.perf_counter() - t0)
        ids = pd.concat([read_frame(f)[["event_id"]] for f in list_log_files(folder)])["event_id"]
        written, distinct = len(ids), ids.nunique()
        missing = len(set(sent) - set(ids))

    w = args.window
    every = f"every {args.flush_every} calls" if args.flush_every else "only at the end"
    print(f"decision logging: {args.calls} one-row add_decisions calls, flush {every}")
    print(
        f"  add_decisions ms/call (mean / median): first {w} {np.mean(add_ms[:w]):.2f} / "
        f"{np.median(add_ms[:w]):.2f}, last {w} {np.mean(add_ms[-w:]):.2f} / "
        f"{np.median(add_ms[-w:]):.2f} (max {np.max(add_ms):.1f})"
    )
    print(
        f"  add_feedback  ms/call: first {w} {np.mean(feedback_ms[:w]):.2f}, "
        f"last {w} {np.mean(feedback_ms[-w:]):.2f}"
    )
    print(f"  flush s: {', '.join(f'{s:.2f}' for s in flush_s)}")
    print(
        f"  rows written {written} of {args.calls} expected; duplicated ids "
        f"{written - distinct}; missing ids {missing}"
    )
    return 0 if written == distinct == args.calls and missing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
