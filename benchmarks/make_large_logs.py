"""Write a large synthetic log as canonical Parquet partitions, chunk by chunk (bounded memory).

Usage::

    .venv/bin/python benchmarks/make_large_logs.py OUT_DIR [--family discrete] [--rows 10000000]
        [--features 50] [--actions 10] [--chunk-rows 500000] [--candidates 5] [--seed 0]
        [--event-ids] [--overwrite]

Each chunk of ``--chunk-rows`` rows is simulated from its own seed (``[seed, chunk]``), built as
a :class:`~poem.data.LoggedBandit` (so it passes the same checks as any log) and written with
the project's writer (:func:`poem.io.parquet.write_log`, one file ``part-NNNNN.parquet`` per
chunk, one row group each) — the partitions :mod:`poem.io.partitions` and :mod:`poem._dask`
read. Peak memory is about one chunk (≈ 0.5 GB at 500,000 × 50 dense). The families:

- ``discrete``: x ~ N(0, I_d), K actions, logging policy softmax(0.5·x·W₀ᵀ), click-like
  binary loss with P(δ = 0) = σ(x·θ_y) (losses in [0, 1]);
- ``multilabel``: q = ``--actions`` labels, per-label logistic logger σ(0.5·w₀ₗ·x), Hamming loss
  against labels y*ₗ = [x·θₗ > 0] (losses in [0, q]);
- ``candidates``: ``--candidates`` candidates per row with d features, softmax logger over
  the candidates, binary loss with P(δ = 0) = σ(ψ·θ − 1).

Timestamps increase across chunks (one day per 1,000,000 rows), so splits by time work.
Prints rows, files, bytes and seconds.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from poem.data import CandidateSets, LoggedBandit
from poem.io.parquet import write_log

DAY_NS = 86_400 * 10**9


def _softmax_rows(S: np.ndarray) -> np.ndarray:
    P = np.exp(S - S.max(axis=1, keepdims=True))
    return P / P.sum(axis=1, keepdims=True)


def _draw(P: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.minimum(
        (P.cumsum(axis=1) < rng.random(P.shape[0])[:, None]).sum(axis=1), P.shape[1] - 1
    )


def _timestamps(start: int, n: int, rng: np.random.Generator) -> np.ndarray:
    t = (start + np.arange(n)) * (DAY_NS // 1_000_000) + rng.integers(0, DAY_NS // 1_000_000, n)
    return np.datetime64("2026-11-01", "ns") + t.astype("timedelta64[ns]")


def make_chunk(family: str, start: int, n: int, args, params: dict) -> LoggedBandit:
    """The rows start … start+n−1 of the synthetic log."""
    rng = np.random.default_rng([args.seed, start])
    d, K = args.features, args.actions
    common = dict(
        timestamps=_timestamps(start, n, rng),
        logging_model_version="h0",
        event_ids=np.char.add("e", np.arange(start, start + n).astype(str))
        if args.event_ids
        else None,
    )
    if family == "discrete":
        X = rng.normal(size=(n, d))
        P = _softmax_rows(0.5 * X @ params["W0"].T)
        a = _draw(P, rng)
        click = 1.0 / (1.0 + np.exp(-np.einsum("ij,ij->i", X, params["theta"][a])))
        loss = (rng.random(n) >= click).astype(np.float64)
        return LoggedBandit(X, a, loss, P[np.arange(n), a], (0.0, 1.0), n_actions=K, **common)
    if family == "multilabel":
        X = rng.normal(size=(n, d))
        sig = 1.0 / (1.0 + np.exp(-0.5 * X @ params["W0"].T))
        Y = (rng.random(sig.shape) < sig).astype(np.int8)
        truth = (X @ params["theta"].T > 0).astype(np.int8)
        prob = np.exp(np.sum(np.where(Y == 1, np.log(sig), np.log1p(-sig)), axis=1))
        loss = np.sum(Y != truth, axis=1).astype(np.float64)
        return LoggedBandit(
            X, Y, loss, prob, (0.0, float(K)), family="multilabel", n_actions=K, **common
        )
    k = args.candidates
    F = rng.normal(size=(n * k, d))
    P = _softmax_rows((0.5 * F @ params["W0"][0]).reshape(n, k))
    a = _draw(P, rng)
    chosen = F.reshape(n, k, d)[np.arange(n), a]
    click = 1.0 / (1.0 + np.exp(-(chosen @ params["theta"][0] - 1.0)))
    loss = (rng.random(n) >= click).astype(np.float64)
    return LoggedBandit(
        None,
        a,
        loss,
        P[np.arange(n), a],
        (0.0, 1.0),
        family="candidates",
        candidates=CandidateSets.from_sizes(F, np.full(n, k)),
        **common,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument(
        "--family", choices=["discrete", "multilabel", "candidates"], default="discrete"
    )
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--actions", type=int, default=10, help="K actions or q labels")
    ap.add_argument("--candidates", type=int, default=5)
    ap.add_argument("--chunk-rows", type=int, default=500_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--event-ids", action="store_true")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args()
    existing = sorted(args.out.glob("part-*.parquet")) if args.out.exists() else []
    if existing and not args.overwrite:
        raise SystemExit(f"{args.out} already holds {len(existing)} part files; pass --overwrite")
    for f in existing:
        f.unlink()
    args.out.mkdir(parents=True, exist_ok=True)
    g = np.random.default_rng([args.seed, 2**31])
    n_out = 1 if args.family == "candidates" else args.actions
    params = {
        "W0": g.normal(size=(n_out, args.features)) / np.sqrt(args.features),
        "theta": g.normal(size=(n_out, args.features)) / np.sqrt(args.features),
    }
    t0 = time.perf_counter()
    files = 0
    for chunk, start in enumerate(range(0, args.rows, args.chunk_rows)):
        n = min(args.chunk_rows, args.rows - start)
        log = make_chunk(args.family, start, n, args, params)
        write_log(log, args.out / f"part-{chunk:05d}.parquet", partition_by_date=False)
        files += 1
        del log
    size = sum(f.stat().st_size for f in args.out.glob("part-*.parquet"))
    print(
        f"{args.family}: {args.rows:,} rows x {args.features} features in {files} files, "
        f"{size / 2**20:,.0f} MiB, {time.perf_counter() - t0:.1f} s -> {args.out}"
    )


if __name__ == "__main__":
    main()
