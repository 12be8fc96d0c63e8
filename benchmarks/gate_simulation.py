"""Error rates of the counterfactual A/B gate (DESIGN §5) by simulation.

A discrete problem with known expected losses μ(x, a) (K = 5 actions, Bernoulli losses) and a
softmax logging policy π₀. Each replicate draws a fresh test log of n rows from π₀ and runs
the gate exactly as the flow does (:func:`poem.gate.counterfactual_ab_test` →
:func:`poem.estimators.compare.compare_policies`, IPS, one-sided t bound at 1 − α = 0.95).
True risks are computed exactly on a large fixed population of contexts.

Scenarios (200 replicates each unless ``--reps``):

- ``A/A identical``: challenger = champion (a trained-like policy, not the logger).
- ``A/A equal risk``: a *different* challenger with exactly the champion's true risk.
- ``A/A vs logger``: champion = the logging policy (weights ≡ 1), challenger with equal risk.
- ``worse +2%``: challenger's true risk 2% above the champion's (must not be promoted).
- ``better -2%``: 2% below (power for a small improvement).
- ``better -5%``: challenger's true risk 5% below the champion's (power at n = 20,000).

Usage: ``python benchmarks/gate_simulation.py [--reps 200] [--n 20000] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from poem.data import LoggedBandit
from poem.gate import counterfactual_ab_test
from poem.policies import StochasticPolicy, make_family

K, D = 5, 4


def _softmax_policy(coef: np.ndarray) -> StochasticPolicy:
    return StochasticPolicy(make_family("discrete", D, K, fit_intercept=False), coef)


def _risk(policy: StochasticPolicy, X: np.ndarray, mu: np.ndarray) -> float:
    return float(np.mean(np.sum(policy.predict_proba(X) * mu, axis=1)))


def _mixture_coef(good, bad, target, X, mu):
    """Policy with coefficients t·good + (1−t)·bad whose true risk equals ``target`` (bisection)."""
    lo, hi = 0.0, 1.0
    r = lambda t: _risk(_softmax_policy(t * good + (1 - t) * bad), X, mu)  # noqa: E731
    if not min(r(lo), r(hi)) <= target <= max(r(lo), r(hi)):
        raise ValueError(f"target risk {target:.4f} outside [{r(hi):.4f}, {r(lo):.4f}]")
    for _ in range(40):
        mid = (lo + hi) / 2
        if (r(mid) > target) == (r(lo) > r(hi)):
            lo = mid
        else:
            hi = mid
    return _softmax_policy((lo + hi) / 2 * good + (1 - (lo + hi) / 2) * bad)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--confidence-level", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--only", default=None, help="comma-separated scenario names to run")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    theta = rng.normal(size=(K, D))
    population = rng.normal(size=(50_000, D))
    expected = lambda X: 1 / (1 + np.exp(-(X @ theta.T)))  # noqa: E731 - μ(x, a)
    mu = expected(population)
    logger = _softmax_policy(0.3 * rng.normal(size=(K, D)))
    good = -1.5 * theta  # prefers low-loss actions
    bad = 1.5 * theta
    champion = _mixture_coef(
        good,
        bad,
        0.5 * (_risk(_softmax_policy(good), population, mu) + _risk(logger, population, mu)),
        population,
        mu,
    )
    r_champ, r_logger = _risk(champion, population, mu), _risk(logger, population, mu)
    # challengers live on another line of policies: "equal risk" is a genuinely different policy
    other_good = good + rng.normal(size=(K, D))
    other_bad = bad + rng.normal(size=(K, D))
    other = lambda target: _mixture_coef(other_good, other_bad, target, population, mu)  # noqa: E731
    scenarios = {
        "A/A identical": (champion, champion),
        "A/A equal risk": (other(r_champ), champion),
        "A/A vs logger": (other(r_logger), None),
        "worse +2%": (other(1.02 * r_champ), champion),
        "better -2%": (other(0.98 * r_champ), champion),
        "better -5%": (other(0.95 * r_champ), champion),
    }
    alpha = 1 - args.confidence_level
    print(
        f"n = {args.n:,} rows per test log, {args.reps} replicates, α = {alpha:.2f}; "
        f"true risks: champion {r_champ:.4f}, logger {r_logger:.4f}"
    )
    out = {"n": args.n, "reps": args.reps, "alpha": alpha, "scenarios": {}}
    chosen = set(args.only.split(",")) if args.only else set(scenarios)
    for name, (challenger, champ) in scenarios.items():
        if name not in chosen:
            continue
        true_chal = _risk(challenger, population, mu)
        true_champ = r_logger if champ is None else _risk(champ, population, mu)
        start, promoted, ucbs = time.perf_counter(), 0, []
        for _ in range(args.reps):
            X = population[rng.integers(0, len(population), args.n)]
            actions, probs = logger.sample(X, random_state=rng)
            losses = (rng.random(args.n) < expected(X)[np.arange(args.n), actions]).astype(float)
            log = LoggedBandit(X, actions, losses, probs, loss_bounds=(0.0, 1.0), n_actions=K)
            cmp = counterfactual_ab_test(
                challenger, champ, log, confidence_level=args.confidence_level
            )
            promoted += cmp.promote
            ucbs.append(cmp.upper_bound)
        rate = promoted / args.reps
        se = np.sqrt(rate * (1 - rate) / args.reps)
        print(
            f"{name:15s} true risk {true_chal:.4f} vs {true_champ:.4f} "
            f"({true_chal / true_champ - 1:+.1%}): "
            f"promoted {promoted:3d}/{args.reps} = {rate:.3f} ± {se:.3f}   "
            f"({time.perf_counter() - start:.1f}s)"
        )
        out["scenarios"][name] = {
            "true_challenger_risk": true_chal,
            "true_champion_risk": true_champ,
            "promoted": int(promoted),
            "rate": rate,
            "se": float(se),
            "mean_upper_bound": float(np.mean(ucbs)),
        }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
