"""False promotion of the gate on estimated propensities (issue 38 item 3): exact A/A.

Each replicate draws a fresh log from a stochastic logger that depends on x (K = 4 actions,
3 features, Bernoulli losses with known μ(x, a)): ``n`` fit rows (not test rows; the
validation split in the flow) and ``n`` test rows, hides the propensities, and runs the
flow's gate on estimated propensities (:func:`poem.gate_estimated.estimated_gate_rows`: poem.logging_policy's
default model fitted on the fit rows, η̂ cross-fitted on the fit rows (5 folds, per-action
bins, the bins' sampling noise subtracted: :func:`poem.estimators.estimated_terms.propensity_error`); then
:func:`poem.gate_estimated.estimated_gate_decision` with fresh entropy, α₁ = 0.05·(1 − 0.2)
of a first attempt, min_ess 100). The challenger is a mixture of two policies whose true
window-average risk on the test contexts equals the champion's exactly (exact A/A), so every
promotion is a false one. Champions: the logging policy, and another policy.

Cells: ``linear`` (the logger is a softmax of a linear score: the propensity model is well
specified), ``misspecified`` (the logger's score is quadratic in x, mixed with 10 % uniform:
the linear model is wrong) and ``both`` (that logger, and a loss whose logit is quadratic in
x: the loss model, linear per action, is wrong too; the doubly robust terms' bias, a product
of the two errors, is then not small). Columns: the gate as shipped (margin η̂ measured), the same with
η = 0 (no margin), the limit 5 % + 2 s.e. of the replicates, the mean η̂, the power of the
shipped gate for a clearly better challenger (0.7 × the policy preferring low μ(x, a) + 0.3 ×
the A/A challenger) on the same rows, the same power with η = 0, and the CPU seconds.

Usage: ``python benchmarks/gate_estimated.py [--reps 200] [--n 2000,20000]
[--cells linear,misspecified] [--champions logger,policy] [--seed 0]``
"""

from __future__ import annotations

import argparse
import time
import zlib
from dataclasses import replace

import numpy as np

from poem.data import LoggedBandit
from poem.gate_estimated import estimated_gate_decision, estimated_gate_rows

K, D = 4, 3
ALPHA1 = 0.05 * (1 - 0.2)  # first attempt, gate.retry_fraction 0.2


def _softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class _Softmax:
    """π(a|x) = softmax(features(x) W) (or a mixture of two such policies)."""

    def __init__(self, W=None, parts=None, t=1.0):
        self.W, self.parts, self.t = W, parts, t

    def predict_proba(self, X):
        if self.parts is not None:
            a, b = self.parts
            return self.t * a.predict_proba(X) + (1 - self.t) * b.predict_proba(X)
        return _softmax(X @ self.W)


def _logger_probs(X: np.ndarray, cell: str) -> np.ndarray:
    W = np.array([[1.2, -0.8, 0.3, -0.5], [-0.6, 1.0, -0.9, 0.4], [0.2, 0.5, -1.1, 0.8]])
    s = X @ W
    if cell in ("misspecified", "both"):
        s = s + 1.5 * np.column_stack(
            [X[:, 0] ** 2, -(X[:, 1] ** 2), X[:, 0] * X[:, 2], 0 * X[:, 0]]
        )
        return 0.9 * _softmax(s) + 0.1 / K  # every action at least 2.5 %
    return _softmax(s)  # a multinomial logit: the propensity model is well specified


def _mu(X: np.ndarray, cell: str = "linear") -> np.ndarray:
    V = np.array([[0.8, -0.4, 0.1, -0.9], [-0.3, 0.6, -0.7, 0.2], [0.5, -0.2, 0.4, -0.6]])
    s = X @ V - 0.3
    if cell == "both":  # the loss model (linear per action) is misspecified too
        s = s + 1.5 * np.column_stack(
            [X[:, 1] ** 2 - 1, -(X[:, 0] ** 2) + 1, X[:, 1] * X[:, 2], X[:, 0] * X[:, 1]]
        )
    return 1 / (1 + np.exp(-s))


def _log(rng, n, cell):
    X = rng.normal(size=(n, D))
    p0 = _logger_probs(X, cell)
    y = (p0.cumsum(1) < rng.random((n, 1))).sum(1)
    mu = _mu(X, cell)
    loss = (rng.random(n) < mu[np.arange(n), y]).astype(float)
    # propensities hidden: the gate never reads this column (estimated_gate_rows refits)
    return LoggedBandit(X, y, loss, np.ones(n), (0.0, 1.0), n_actions=K), p0, mu


def _equal_risk(X, mu, target, rng):
    """A mixture of two policies whose risk on these contexts is exactly ``target``."""
    risk = lambda pol: float(np.mean(np.sum(pol.predict_proba(X) * mu, 1)))  # noqa: E731
    while True:
        a, b = (_Softmax(rng.normal(scale=1.5, size=(D, K))) for _ in range(2))
        ra, rb = risk(a), risk(b)
        if min(ra, rb) < target < max(ra, rb):
            t = (target - rb) / (ra - rb)
            return _Softmax(parts=(a, b), t=t)


def run(reps, n, cell, champion_kind, seed=0):
    rng = np.random.default_rng(
        [seed, n, zlib.crc32(cell.encode()), zlib.crc32(champion_kind.encode())]
    )
    out = {"shipped": 0, "no_margin": 0, "power": 0, "power_no_margin": 0, "eta": []}
    for r in range(reps):
        fit, _, _ = _log(rng, n, cell)
        test, p0, mu = _log(rng, n, cell)
        X = test.contexts
        if champion_kind == "logger":
            champion, target = None, float(np.mean(np.sum(p0 * mu, 1)))
        else:
            champion = _Softmax(rng.normal(scale=1.0, size=(D, K)))
            target = float(np.mean(np.sum(champion.predict_proba(X) * mu, 1)))
        challenger = _equal_risk(X, mu, target, rng)
        rows = estimated_gate_rows(challenger, champion, fit, test, random_state=r)
        options = dict(attempt=None, confidence_level=1 - ALPHA1, min_ess=100.0)
        out["shipped"] += estimated_gate_decision(rows, **options).promote
        out["no_margin"] += estimated_gate_decision(
            replace(rows, propensity_error=0.0), **options
        ).promote
        out["eta"].append(rows.propensity_error)
        # power: the policy that prefers the actions of low expected loss (clearly better)
        better = replace(
            rows, challenger=0.7 * _softmax(-4.0 * mu) + 0.3 * challenger.predict_proba(X)
        )
        out["power"] += estimated_gate_decision(better, **options).promote
        out["power_no_margin"] += estimated_gate_decision(
            replace(better, propensity_error=0.0), **options
        ).promote
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--n", default="2000,20000")
    parser.add_argument("--cells", default="linear,misspecified")
    parser.add_argument("--champions", default="logger,policy")
    parser.add_argument("--seed", type=int, default=0, help="another seed: independent reps")
    args = parser.parse_args(argv)
    print(f"exact A/A, alpha_1 = {ALPHA1:.3f}, limit 5 % + 2 s.e.; {args.reps} reps per cell")
    print(
        f"{'cell':>13s} {'champion':>8s} {'n':>6s}  {'shipped':>8s} {'no margin':>9s}  "
        f"{'limit':>6s}  {'mean eta':>8s}  {'power':>6s} {'power η=0':>9s}  {'cpu s':>5s}"
    )
    for n in (int(v) for v in args.n.split(",")):
        for cell in args.cells.split(","):
            for champ in args.champions.split(","):
                start = time.process_time()
                res = run(args.reps, n, cell, champ, seed=args.seed)
                limit = 0.05 + 2 * np.sqrt(0.05 * 0.95 / args.reps)
                shipped, bare = res["shipped"] / args.reps, res["no_margin"] / args.reps
                flag = "" if shipped <= limit else "  OVER"
                print(
                    f"{cell:>13s} {champ:>8s} {n:>6d}  {shipped:8.3f} {bare:9.3f}  {limit:6.3f}  "
                    f"{np.mean(res['eta']):8.3f}  {res['power'] / args.reps:6.3f} "
                    f"{res['power_no_margin'] / args.reps:9.3f}  "
                    f"{time.process_time() - start:5.0f}{flag}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
