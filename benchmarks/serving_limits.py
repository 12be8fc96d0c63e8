"""Oversized bodies against a real ``mlflow models serve``: how long they hold the server.

A discrete policy (3 features) is registered in a throw-away sqlite store and served with
``mlflow models serve --env-manager local`` on 127.0.0.1 (:class:`deploy.serve.ModelServer`).
Then, timed: a 2-row request alone; one ``--mb`` MB ``dataframe_split`` body alone; ``--bodies``
such bodies at once with a 2-row request sent one second after them. Printed: status and
seconds of each. The served model's body limit (8 MiB, ``POEM_SERVING_MAX_BODY_BYTES``) answers
413 before parsing; without it the 60 MB body was parsed and answered after 24 s and a 2-row
request behind three of them took 15.5 s.

Usage (about a minute)::

    source .ci/env.sh
    .venv/bin/python benchmarks/serving_limits.py [--mb 60] [--bodies 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

FEATURES = ["f_a", "f_b", "f_c"]


def main(argv: list[str] | None = None) -> int:
    """Serve, send the bodies, print the figures."""
    import mlflow
    from mlflow import MlflowClient

    from deploy.pyfunc import log_policy_model
    from deploy.serve import ModelServer
    from flows.tracking import tracking_uri_scope
    from poem.policies import StochasticPolicy, make_family

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=60.0, help="size of each large body, MB")
    parser.add_argument("--bodies", type=int, default=3, help="large bodies sent at once")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="poem-serving-limits-") as tmp:
        root = Path(tmp)
        uri = f"sqlite:///{root / 'mlflow.db'}"
        experiment = MlflowClient(uri).create_experiment(
            "limits", artifact_location=(root / "artifacts").as_uri()
        )
        family = make_family("discrete", 3, 4, True)
        coef = np.random.default_rng(0).normal(size=family.coef_shape)
        policy = StochasticPolicy(family, coef, 0.8, 0.05, {"feature_names": FEATURES})
        with tracking_uri_scope(uri), mlflow.start_run(experiment_id=experiment):
            log_policy_model(policy, "policy", registered_model_name="limits")
        server = ModelServer("models:/limits/1", uri, root / "server.log").start()
        try:

            def post(body: bytes) -> tuple[object, float]:
                t0 = time.perf_counter()
                try:
                    status = server.request("POST", "/invocations", body, timeout=600)[0]
                except OSError as exc:
                    status = type(exc).__name__
                return status, time.perf_counter() - t0

            small = json.dumps(
                {"dataframe_split": {"columns": FEATURES, "data": [[0.1, 0.2, 0.3]] * 2}}
            ).encode()
            row = "[0.123456789012,0.223456789012,0.323456789012],"
            n = int(args.mb * 1e6) // len(row)
            big = (
                '{"dataframe_split":{"columns":["f_a","f_b","f_c"],"data":['
                + row * n
                + "[0,0,0]]}}"
            ).encode()
            print(f"serving limits: bodies of {len(big):,} bytes", flush=True)
            for what, body in (("2-row request", small), ("one large body", big)):
                status, seconds = post(body)
                print(f"  {what} alone: status {status} in {seconds:.2f} s", flush=True)
            results: dict[int, tuple[object, float]] = {}
            threads = [
                threading.Thread(target=lambda i=i: results.__setitem__(i, post(big)))
                for i in range(args.bodies)
            ]
            for t in threads:
                t.start()
            time.sleep(1.0)
            status, seconds = post(small)
            print(
                f"  2-row request behind {args.bodies} large bodies: status {status} in "
                f"{seconds:.2f} s",
                flush=True,
            )
            for t in threads:
                t.join()
            for i, (status, seconds) in sorted(results.items()):
                print(f"  large body {i + 1} of {args.bodies}: status {status} in {seconds:.2f} s")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
