"""Valid and malformed requests against a real ``mlflow models serve`` of the policy pyfunc.

A discrete policy over the 64 digits features (α = 0.8, ε = 0.02, coefficients of the scale a
trained policy has) is registered in a throw-away sqlite store and served with
``mlflow models serve -m models:/fuzz-policy@champion --env-manager local`` on 127.0.0.1
(:class:`deploy.serve.ModelServer`). Then:

- ``--requests`` valid one-row requests (random features, some with ``event_id`` and params)
  over ``--concurrency`` threads, one keep-alive connection each;
- ``--malformed`` malformed bodies cycling through the kinds below (each kind several times
  with other sizes or values), sent sequentially;
- a final valid request, to show the server survived.

Reported: status counts per group (2xx / 4xx / 5xx / connection errors), non-finite or
out-of-(0, 1] propensities among 200 answers, p50 / p99 latency of the valid requests, and the
malformed kinds with their status codes. Goal: 0 5xx, 0 non-finite propensities.

Usage::

    source .ci/env.sh
    .venv/bin/python benchmarks/serving_fuzz.py [--requests 10000] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

N_FEATURES = 64
NAMES = [f"x{j}" for j in range(N_FEATURES)]


def _register(tmp: Path, uri: str) -> None:
    import mlflow
    from mlflow import MlflowClient

    from deploy.pyfunc import log_policy_model
    from poem.policies import StochasticPolicy, make_family

    family = make_family("discrete", N_FEATURES, 10, True)
    coef = np.random.default_rng(0).normal(scale=0.3, size=family.coef_shape)
    policy = StochasticPolicy(family, coef, 0.8, 0.02, {"feature_names": NAMES})
    mlflow.set_tracking_uri(uri)
    experiment = MlflowClient(uri).create_experiment(
        "fuzz", artifact_location=(tmp / "artifacts").as_uri()
    )
    with mlflow.start_run(experiment_id=experiment):
        info = log_policy_model(policy, "policy", registered_model_name="fuzz-policy")
    MlflowClient(uri, uri).set_registered_model_alias(
        "fuzz-policy", "champion", info.registered_model_version
    )


def _split(rows: list, columns: list | None = None, params: dict | None = None) -> bytes:
    body: dict = {"dataframe_split": {"columns": columns or NAMES, "data": rows}}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


def _row(rng: np.random.Generator) -> list[float]:
    return rng.uniform(0, 16, N_FEATURES).round(3).tolist()


def malformed_bodies(n: int, seed: int = 0) -> list[tuple[str, bytes, str]]:
    """``n`` (kind, body, content type) triples cycling through the malformed kinds."""
    rng = np.random.default_rng(seed)
    json_type = "application/json"

    def nan_row() -> bytes:
        r = _row(rng)
        r[int(rng.integers(N_FEATURES))] = None
        return _split([r])

    def literal(value: str) -> bytes:
        r = [str(v) for v in _row(rng)]
        r[int(rng.integers(N_FEATURES))] = value
        return (
            b'{"dataframe_split": {"columns": '
            + json.dumps(NAMES).encode()
            + (b', "data": [[' + ",".join(r).encode() + b"]]}}")
        )

    def overflow() -> bytes:
        r = _row(rng)
        r[0], r[1] = 1e308, -1e308
        return _split([r])

    def nested(depth: int) -> bytes:
        return b'{"dataframe_split": ' + b"[" * depth + b"]" * depth + b"}"

    kinds = [
        ("missing-columns", lambda: _split([_row(rng)[:10]], NAMES[:10]), json_type),
        ("string-value", lambda: _split([["abc"] + _row(rng)[1:]]), json_type),
        ("null-value", nan_row, json_type),
        ("1e400-literal", lambda: literal("1e400"), json_type),
        ("NaN-literal", lambda: literal("NaN"), json_type),
        ("overflow-1e308", overflow, json_type),
        ("int-4301-digits", lambda: literal("9" * int(rng.integers(4301, 20000))), json_type),
        ("nested", lambda: nested(int(rng.integers(1_000, 100_000))), json_type),
        ("truncated-json", lambda: _split([_row(rng)])[: int(rng.integers(1, 100))], json_type),
        ("not-utf8", lambda: b'{"dataframe_split": "\xff\xfe\xfa"}', json_type),
        ("empty-body", lambda: b"", json_type),
        ("json-list", lambda: b"[1, 2, 3]", json_type),
        ("data-not-list", lambda: _split(5), json_type),  # type: ignore[arg-type]
        ("data-dict", lambda: _split({"a": 1}), json_type),  # type: ignore[arg-type]
        ("no-rows", lambda: _split([]), json_type),
        ("ragged-rows", lambda: _split([_row(rng), _row(rng)[:5]]), json_type),
        ("duplicate-columns", lambda: _split([_row(rng)], NAMES[:-1] + NAMES[:1]), json_type),
        ("seed-negative", lambda: _split([_row(rng)], params={"seed": -7}), json_type),
        ("seed-string", lambda: _split([_row(rng)], params={"seed": "x"}), json_type),
        ("seed-huge", lambda: _split([_row(rng)], params={"seed": 10**30}), json_type),
        ("unknown-param", lambda: _split([_row(rng)], params={"temperature": 9}), json_type),
        ("params-not-dict", lambda: _split([_row(rng)], params=[1]), json_type),  # type: ignore[arg-type]
        ("huge-string", lambda: _split([["x" * 1_000_000] + _row(rng)[1:]]), json_type),
        ("wrong-content-type", lambda: _split([_row(rng)]), "text/plain"),
        ("bad-csv", lambda: b"x0,x1\n1,2,3\n\x00", "text/csv"),
        ("unknown-format", lambda: b'{"records": [[1, 2]]}', json_type),
    ]
    return [
        (kinds[i % len(kinds)][0], kinds[i % len(kinds)][1](), kinds[i % len(kinds)][2])
        for i in range(n)
    ]


def _post(conn: http.client.HTTPConnection, body: bytes, content_type: str) -> tuple[int, bytes]:
    conn.request("POST", "/invocations", body=body, headers={"Content-Type": content_type})
    response = conn.getresponse()
    return response.status, response.read()


def _bad_propensities(raw: bytes) -> int:
    """Count propensities that are not finite numbers in (0, 1] (NaN parses as a float here)."""
    try:
        rows = json.loads(raw)["predictions"]
    except (ValueError, KeyError, TypeError):
        return 1
    bad = 0
    for row in rows:
        p = row.get("propensity")
        if not isinstance(p, float | int) or not math.isfinite(p) or not 0 < p <= 1:
            bad += 1
    return bad


def valid_load(port: int, n: int, concurrency: int, deadline: float) -> dict:
    statuses: Counter = Counter()
    latencies: list[float] = []
    bad = [0]
    lock = threading.Lock()

    def worker(k: int) -> None:
        rng = np.random.default_rng(100 + k)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in range(k, n, concurrency):
            if time.monotonic() > deadline:
                break
            params = {"seed": int(i)} if i % 3 == 0 else None
            row = _row(rng)
            body = _split([row], params=params)
            if i % 2:
                body = json.dumps(
                    {
                        "dataframe_split": {
                            "columns": ["event_id", *NAMES],
                            "data": [[f"e{i}", *row]],
                        }
                    }
                ).encode()
            started = time.perf_counter()
            try:
                status, raw = _post(conn, body, "application/json")
            except OSError:
                status, raw = -1, b""
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            elapsed = time.perf_counter() - started
            with lock:
                statuses[status] += 1
                latencies.append(elapsed)
                if status == 200:
                    bad[0] += _bad_propensities(raw)
        conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    return {
        "sent": len(latencies),
        "statuses": dict(statuses),
        "bad_propensities": bad[0],
        "p50_ms": float(np.percentile(ms, 50)),
        "p99_ms": float(np.percentile(ms, 99)),
        "throughput_per_s": len(latencies) / wall,
    }


def malformed_load(port: int, n: int, deadline: float) -> dict:
    statuses: Counter = Counter()
    by_kind: dict[str, Counter] = {}
    bad = 0
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    for kind, body, content_type in malformed_bodies(n):
        if time.monotonic() > deadline:
            break
        try:
            status, raw = _post(conn, body, content_type)
        except OSError:
            status, raw = -1, b""
            conn.close()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        statuses[status] += 1
        by_kind.setdefault(kind, Counter())[status] += 1
        if status == 200:
            bad += _bad_propensities(raw)
    conn.close()
    return {
        "sent": sum(statuses.values()),
        "statuses": dict(statuses),
        "bad_propensities": bad,
        "by_kind": {k: dict(v) for k, v in by_kind.items()},
    }


def _group(statuses: dict) -> dict:
    out: Counter = Counter()
    for status, count in statuses.items():
        key = "error" if status < 0 else f"{status // 100}xx"
        out[key] += count
    return dict(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--malformed", type=int, default=260)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--time-limit", type=float, default=900.0, help="seconds, in all")
    args = parser.parse_args()
    from deploy.serve import ModelServer

    deadline = time.monotonic() + args.time_limit
    with tempfile.TemporaryDirectory(prefix="poem-fuzz-") as tmp:
        tmp_path = Path(tmp)
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
        _register(tmp_path, uri)
        with ModelServer("models:/fuzz-policy@champion", uri, tmp_path / "server.log") as server:
            valid = valid_load(server.port, args.requests, args.concurrency, deadline)
            bad = malformed_load(server.port, args.malformed, deadline)
            final = server.request("POST", "/invocations", _split([[1.0] * N_FEATURES]))[0]
    print(f"valid requests: {valid['sent']:,} at concurrency {args.concurrency}")
    print(f"  statuses: {_group(valid['statuses'])}")
    print(f"  non-finite or out-of-(0, 1] propensities: {valid['bad_propensities']}")
    print(
        f"  latency p50 {valid['p50_ms']:.1f} ms, p99 {valid['p99_ms']:.1f} ms, "
        f"{valid['throughput_per_s']:.0f} requests/s"
    )
    print(f"malformed bodies: {bad['sent']:,} ({len(bad['by_kind'])} kinds)")
    print(f"  statuses: {_group(bad['statuses'])}")
    print(f"  non-finite or out-of-(0, 1] propensities in 200 answers: {bad['bad_propensities']}")
    for kind, statuses in bad["by_kind"].items():
        print(f"    {kind:20s} {statuses}")
    print(f"valid request after the fuzzing: HTTP {final}")
    n5xx = sum(c for s, c in {**valid["statuses"]}.items() if s >= 500) + sum(
        c for s, c in bad["statuses"].items() if s >= 500
    )
    print(f"5xx in all: {n5xx}")


if __name__ == "__main__":
    main()
