"""Benchmark: one CRM objective + gradient pass against scikit-learn's multinomial loss pass.

Usage::

    .venv/bin/python benchmarks/objective_pass.py [--rows 1000000] [--features 10] [--actions 5]
        [--repeats 7] [--losses continuous binary] [--blas-threads N] [--sparse-features 1000]
        [--nnz 10] [--candidates 5] [--skip-sparse] [--skip-candidates]

All figures come from one process on the same arrays (float64, C-contiguous); the contenders
alternate within every repeat and the medians are printed. For each case:

- ``poem``: :func:`poem.learners.objective.crm_statistics` followed by
  :func:`~poem.learners.objective.crm_objective_from_statistics` (clip M = 10, λ = 0.5,
  μ = 1e-4) — what L-BFGS calls per iteration (it runs its blocks with one BLAS thread,
  :mod:`poem._blas`);
- ``sklearn``: ``LinearModelLoss(HalfMultinomialLoss(n_classes=K)).loss_gradient`` on the same
  X, W and actions (``n_threads=1``, BLAS threads as configured);
- ``floor``: the two bare matmuls (scores, and the 2K stacked products), the faster of the two
  orientations;

and the ratios poem / sklearn and poem / floor. ``--blas-threads 1`` (or
``OPENBLAS_NUM_THREADS=1``) gives scikit-learn one BLAS thread too: on shared cores OpenBLAS's
threads make its thin ``X @ coef.T`` several times slower, so report both. Cases: dense discrete
(the issue #13 criterion: ratio ≤ 1.0 at 1 M × 10 × 5), sparse discrete (CSR, ``--nnz``
non-zeros per row among ``--sparse-features``) and candidate sets (``--candidates`` per row,
``rows/candidates`` rows; scikit-learn has no ragged softmax, so its multinomial pass on the
same floats laid out as ``rows/candidates`` × (``--candidates``·d) is only a yardstick). Losses:
``continuous`` (every row has δ' < 0) and ``binary`` (70 % zeros, whose rows the gradient
skips).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import scipy.sparse as sp
from sklearn._loss.loss import HalfMultinomialLoss
from sklearn.linear_model._linear_loss import LinearModelLoss

from poem.data import CandidateSets
from poem.learners.objective import crm_objective_from_statistics, crm_statistics
from poem.policies.candidates import CandidateFamily
from poem.policies.discrete import DiscreteFamily

CLIP, LAM, MU = 10.0, 0.5, 1e-4


def _median_seconds(fns: dict, repeats: int) -> dict:
    """Median wall time of each callable; the callables alternate within every repeat, so a
    burst of load from other processes hits all of them alike."""
    for fn in fns.values():
        fn()  # warm-up (allocations, BLAS threads)
    times: dict = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


def _poem_pass(family, coef, inputs, actions, losses, props):
    def run():
        stats = crm_statistics(coef, family, inputs, actions, losses, props, CLIP)
        return crm_objective_from_statistics(stats, coef, LAM, MU)

    return run


def _sklearn_pass(X, y, coef, n_classes):
    loss = LinearModelLoss(base_loss=HalfMultinomialLoss(n_classes=n_classes), fit_intercept=False)
    sw = np.ones(X.shape[0])

    def run():
        return loss.loss_gradient(coef, X, y, sample_weight=sw, l2_reg_strength=MU)

    return run


def _floor_pass(X, coef, m):
    """The two bare matmuls: scores and the stacked products, in the faster orientation."""
    GT = np.ones((m, X.shape[0]))

    def run():
        return coef @ X.T, GT @ X

    return run


def _floor_pass_other(X, coef, m):
    """The same two matmuls in the (n, ·) orientation scikit-learn uses."""
    G = np.ones((X.shape[0], m))

    def run():
        return X @ coef.T, X.T @ G

    return run


def _bandit_arrays(rng, n, K, loss_kind):
    actions = rng.integers(0, K, size=n)
    props = rng.uniform(0.05, 0.6, size=n)
    if loss_kind == "binary":  # clicks: scaled δ' ∈ {−1, 0}, 70 % zeros
        losses = -(rng.random(n) < 0.3).astype(np.float64)
    else:  # every row carries a loss
        losses = -rng.random(n)
    return actions, props, losses


def _report(name, t):
    t_poem, t_sk = t["poem"], t.get("sklearn")
    t_floor = min(t["floor"], t["floor_other"])
    sk = f"{t_sk * 1e3:8.1f} ms" if t_sk is not None else "       —   "
    ratio = f"{t_poem / t_sk:5.2f}" if t_sk is not None else "  —  "
    print(
        f"{name:<40} poem {t_poem * 1e3:8.1f} ms | sklearn {sk} | floor {t_floor * 1e3:8.1f} ms"
        f" | poem/sklearn {ratio} | poem/floor {t_poem / t_floor:5.2f}",
        flush=True,
    )


def _run_case(name, family, coef, inputs, actions, losses, props, sk_args, X, coef2d, m, repeats):
    fns = {
        "poem": _poem_pass(family, coef, inputs, actions, losses, props),
        "sklearn": _sklearn_pass(*sk_args),
        "floor": _floor_pass(X, coef2d, m),
        "floor_other": _floor_pass_other(X, coef2d, m),
    }
    _report(name, _median_seconds(fns, repeats))


def discrete_case(rng, X, K, repeats, loss_kind, label):
    n, d = X.shape
    coef = 0.3 * rng.normal(size=(K, d))
    actions, props, losses = _bandit_arrays(rng, n, K, loss_kind)
    y = actions.astype(np.float64)
    _run_case(
        f"discrete {label}x{K}, {loss_kind} δ",
        DiscreteFamily(d, K),
        coef,
        X,
        actions,
        losses,
        props,
        (X, y, coef, K),
        X,
        coef,
        2 * K,
        repeats,
    )


def dense_case(rng, n, d, K, repeats, loss_kind):
    X = np.ascontiguousarray(rng.normal(size=(n, d)))
    discrete_case(rng, X, K, repeats, loss_kind, f"dense {n:,}x{d}")


def sparse_case(rng, n, d, nnz, K, repeats, loss_kind):
    cols = rng.integers(0, d, size=n * nnz)
    X = sp.csr_matrix(
        (rng.normal(size=n * nnz), cols, np.arange(0, n * nnz + 1, nnz)), shape=(n, d)
    )
    X.sum_duplicates()
    discrete_case(rng, X, K, repeats, loss_kind, f"CSR {n:,}x{d} ({nnz} nnz)")


def candidate_case(rng, n_candidates, d, k, repeats, loss_kind):
    n = n_candidates // k
    F = np.ascontiguousarray(rng.normal(size=(n * k, d)))
    cs = CandidateSets.from_sizes(F, np.full(n, k))
    coef = 0.3 * rng.normal(size=d)
    actions, props, losses = _bandit_arrays(rng, n, k, loss_kind)
    wide = F.reshape(n, k * d)
    _run_case(
        f"candidates {n:,} rows x {k} x{d}, {loss_kind} δ",
        CandidateFamily(d),
        coef,
        cs,
        actions,
        losses,
        props,
        (wide, actions.astype(np.float64), 0.3 * rng.normal(size=(k, k * d)), k),
        F,
        coef[None, :],
        2,
        repeats,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--actions", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sparse-features", type=int, default=1000)
    ap.add_argument("--nnz", type=int, default=10)
    ap.add_argument("--candidates", type=int, default=5)
    ap.add_argument(
        "--losses", nargs="+", default=["continuous", "binary"], choices=["continuous", "binary"]
    )
    ap.add_argument("--blas-threads", type=int, default=None)
    ap.add_argument("--skip-sparse", action="store_true")
    ap.add_argument("--skip-candidates", action="store_true")
    args = ap.parse_args()
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads)
    rng = np.random.default_rng(0)
    for loss_kind in args.losses:
        dense_case(rng, args.rows, args.features, args.actions, args.repeats, loss_kind)
    if not args.skip_sparse:
        for loss_kind in args.losses:
            sparse_case(
                rng,
                args.rows,
                args.sparse_features,
                args.nnz,
                args.actions,
                args.repeats,
                loss_kind,
            )
    if not args.skip_candidates:
        for loss_kind in args.losses:
            candidate_case(rng, args.rows, args.features, args.candidates, args.repeats, loss_kind)


if __name__ == "__main__":
    main()
