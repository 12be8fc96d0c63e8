"""Latency of the served policy vs a trivial identity pyfunc, both under ``mlflow models serve``.

Both models are registered in a throw-away sqlite store with the same input signature (64 float
columns, the digits contexts) and served, one after the other, with
``mlflow models serve -m models:/<name>@champion --env-manager local`` on 127.0.0.1. Each gets
``--warmup`` unmeasured requests, then ``--requests`` one-row requests sent sequentially over a
keep-alive connection, then the same number spread over ``--concurrency`` threads (one
connection each). Both servers run side by side and the measurements alternate between them in
``--blocks`` blocks, so load from other processes on a shared machine affects both alike. Reported: p50 / p99 / mean latency (ms), throughput, and errors (any non-200).
Goal: served-policy p50 ≤ 1.2 × identity p50, 0 errors.

Usage::

    source .ci/env.sh
    .venv/bin/python benchmarks/serving_latency.py [--requests 2000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd

IDENTITY_CODE = """
import mlflow


class Identity(mlflow.pyfunc.PythonModel):
    def predict(self, context, model_input, params=None):
        return model_input


mlflow.models.set_model(Identity())
"""


def _register(tmp: Path, uri: str) -> list[str]:
    import mlflow
    from mlflow import MlflowClient
    from mlflow.models import infer_signature

    from deploy.pyfunc import feature_names_of, log_policy_model
    from poem.datasets import load_dataset
    from poem.simulate import fit_logging_policy

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(
        experiment_id=MlflowClient(uri).create_experiment(
            "latency", artifact_location=(tmp / "artifacts").as_uri()
        )
    )
    ds = load_dataset("digits")
    h0 = fit_logging_policy(
        ds.X_train, ds.Y_train, family="discrete", fraction=0.05, random_state=0
    )
    policy = h0.with_serving(temperature=1.0, exploration_floor=0.01)
    names = feature_names_of(policy)
    example = pd.DataFrame(ds.X_test[:2], columns=names)
    code = tmp / "identity_model.py"
    code.write_text(IDENTITY_CODE)
    with mlflow.start_run():
        log_policy_model(
            policy, "policy", registered_model_name="latency-policy", input_example=example
        )
        mlflow.pyfunc.log_model(
            name="identity",
            python_model=str(code),
            registered_model_name="latency-identity",
            signature=infer_signature(example, example),
            input_example=example,
            pip_requirements=[f"mlflow=={mlflow.__version__}"],
        )
    client = MlflowClient(uri, uri)
    for name in ("latency-policy", "latency-identity"):
        client.set_registered_model_alias(name, "champion", "1")
    return [
        json.dumps({"dataframe_split": {"columns": names, "data": [row.tolist()]}}).encode()
        for row in ds.X_test
    ]


def _measure(port: int, bodies: list[bytes], n: int, threads: int) -> tuple[np.ndarray, int, float]:
    """Latencies (s) of n requests over `threads` keep-alive connections; error count; wall time."""
    per = [list(range(t, n, threads)) for t in range(threads)]
    latencies = np.zeros(n)
    errors = [0] * threads

    def worker(t: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in per[t]:
            start = time.perf_counter()
            try:
                conn.request(
                    "POST",
                    "/invocations",
                    body=bodies[i % len(bodies)],
                    headers={"Content-Type": "application/json"},
                )
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except OSError:
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            latencies[i] = time.perf_counter() - start
            errors[t] += not ok
        conn.close()

    started = time.perf_counter()
    pool = [threading.Thread(target=worker, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return latencies, sum(errors), time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="measured requests per mode")
    parser.add_argument("--concurrency", type=int, default=8, help="threads of the concurrent mode")
    parser.add_argument("--warmup", type=int, default=100, help="unmeasured requests first")
    parser.add_argument(
        "--blocks", type=int, default=10, help="interleaved blocks per mode and model"
    )
    args = parser.parse_args(argv)
    from deploy.serve import ModelServer

    rows = []
    names = ("latency-policy", "latency-identity")
    with tempfile.TemporaryDirectory(prefix="serving-latency-") as tmp_name:
        tmp = Path(tmp_name)
        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        bodies = _register(tmp, uri)
        servers = {n: ModelServer(f"models:/{n}@champion", uri, tmp / f"{n}.log") for n in names}
        try:
            for server in servers.values():
                server.start()
                _measure(server.port, bodies, args.warmup, 1)
            for mode, threads in (
                ("sequential", 1),
                (f"concurrency {args.concurrency}", args.concurrency),
            ):
                # interleaved blocks, alternating which model goes first, so that load from other
                # processes on the machine hits both models alike
                lat = {n: [] for n in names}
                errors = dict.fromkeys(names, 0)
                wall = dict.fromkeys(names, 0.0)
                per_block = args.requests // args.blocks
                for block in range(args.blocks):
                    for n in names if block % 2 == 0 else names[::-1]:
                        got, err, seconds = _measure(servers[n].port, bodies, per_block, threads)
                        lat[n].append(got)
                        errors[n] += err
                        wall[n] += seconds
                for n in names:
                    ms = np.concatenate(lat[n]) * 1e3
                    rows.append(
                        {
                            "model": n.removeprefix("latency-"),
                            "mode": mode,
                            "requests": int(ms.size),
                            "p50_ms": float(np.percentile(ms, 50)),
                            "p99_ms": float(np.percentile(ms, 99)),
                            "mean_ms": float(ms.mean()),
                            "throughput_rps": ms.size / wall[n],
                            "errors": errors[n],
                        }
                    )
        finally:
            for server in servers.values():
                server.stop()
    print(
        f"{'model':<9} {'mode':<15} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'req/s':>8} {'errors':>6}"
    )
    for r in rows:
        print(
            f"{r['model']:<9} {r['mode']:<15} {r['p50_ms']:8.2f} {r['p99_ms']:8.2f} {r['mean_ms']:8.2f} "
            f"{r['throughput_rps']:8.0f} {r['errors']:6d}"
        )
    by = {(r["model"], r["mode"]): r for r in rows}
    for mode in ("sequential", f"concurrency {args.concurrency}"):
        ratio = by[("policy", mode)]["p50_ms"] / by[("identity", mode)]["p50_ms"]
        print(f"{mode}: policy p50 / identity p50 = {ratio:.2f} (goal ≤ 1.2)")
    print(json.dumps(rows))
    return 0 if all(r["errors"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
