"""Decisions and bounds of ``poem.gate.gate_decision`` on seeded logs, as JSON (issue 34 item 5).

Run it on two trees and compare the outputs: a refactor of the gate's plumbing must leave every
decision, bound, estimate, interval and reason unchanged.

Usage::

    PYTHONPATH=/tmp/gate-old python benchmarks/gate_refactor_equivalence.py --out old.json
    PYTHONPATH=. python benchmarks/gate_refactor_equivalence.py --out new.json
    python benchmarks/gate_refactor_equivalence.py --compare old.json new.json

Each log (``--logs``, default 300) draws n ∈ {40, 200, 1000} rows, K ∈ {2, 5} actions, a
logger, a challenger and (half the time) a policy champion with total variation per row, a
declared floor or none, and is decided for every option (ips, snips, clipped_ips with M = 5)
with and without the coin, at a fixed order seed.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _cases(n_logs: int):
    for k in range(n_logs):
        rng = np.random.default_rng(10_000 + k)
        n = int(rng.choice([40, 200, 1000]))
        K = int(rng.choice([2, 5]))
        logger = rng.dirichlet(np.full(K, 2.0), size=n) * 0.9 + 0.1 / K
        actions = np.array([rng.choice(K, p=p) for p in logger])
        props = logger[np.arange(n), actions]
        rare = rng.random() < 0.3
        better = rng.random() < 0.5  # losses on action 0 only; the challenger avoids it
        rate = np.where(actions == 0, 0.8, 0.1) if better else (0.02 if rare else 0.4)
        losses = (rng.random(n) < rate).astype(float)
        chal = rng.dirichlet(np.ones(K), size=n)
        if better:
            chal[:, 0] = 0.01
            chal /= chal.sum(1, keepdims=True)
        policy_champ = rng.random() < 0.5
        champ = rng.dirichlet(np.ones(K), size=n) if policy_champ else None
        tv = None
        if policy_champ and rng.random() < 0.7:
            tv = 0.5 * np.abs(chal - champ).sum(1)
        floor = (
            float(props.min()) * float(rng.choice([1.0, 0.5, 2.0])) if rng.random() < 0.6 else None
        )
        yield (
            k,
            dict(
                losses=losses,
                propensities=props,
                challenger_probabilities=chal[np.arange(n), actions],
                champion_probabilities=None if champ is None else champ[np.arange(n), actions],
                loss_bounds=(0.0, 1.0),
                total_variation=tv,
            ),
            floor,
        )


def _run(n_logs: int) -> list:
    from poem.gate import GateRows, gate_decision

    out = []
    for k, fields, floor in _cases(n_logs):
        rows = GateRows(**fields)
        for estimator, clip in (("ips", None), ("snips", None), ("clipped_ips", 5.0)):
            for randomized in (False, True):
                options = dict(
                    attempt=None,
                    estimator=estimator,
                    clip=clip,
                    min_ess=10.0,
                    randomized=randomized,
                    min_propensity=floor,
                    order_seed=1_000 + k,
                )
                try:
                    result = gate_decision(rows, **options).to_dict()
                except ValueError as error:
                    result = {"error": str(error)}
                out.append({"log": k, "estimator": estimator, "randomized": randomized, **result})
    out += _run_policies(max(n_logs // 6, 1))
    return out


def _run_policies(n_logs: int) -> list:
    """counterfactual_ab_test on StochasticPolicy pairs (discrete, multilabel, candidate sets)."""
    from poem.data import CandidateSets, LoggedBandit
    from poem.gate import counterfactual_ab_test
    from poem.policies import StochasticPolicy, make_family

    out = []
    for k in range(n_logs):
        rng = np.random.default_rng(50_000 + k)
        n, kind = int(rng.choice([60, 400])), ("discrete", "multilabel", "candidates")[k % 3]
        if kind == "discrete":
            family, X = make_family("discrete", 3, 4), rng.normal(size=(n, 3))
            log = LoggedBandit(
                X, rng.integers(0, 4, n), rng.random(n), np.full(n, 0.25), (0.0, 1.0), n_actions=4
            )
        elif kind == "multilabel":
            family, X = make_family("multilabel", 3, 3), rng.normal(size=(n, 3))
            log = LoggedBandit(
                X,
                rng.integers(0, 2, (n, 3)),
                rng.random(n),
                np.full(n, 0.125),
                (0.0, 1.0),
                family="multilabel",
            )
        else:
            sizes = rng.integers(2, 5, size=n)
            cands = CandidateSets.from_sizes(rng.normal(size=(int(sizes.sum()), 3)), sizes)
            family = make_family("candidates", 3)
            log = LoggedBandit(
                None,
                np.array([rng.integers(0, s) for s in sizes]),
                rng.random(n).round(),
                1.0 / sizes,
                (0.0, 1.0),
                family="candidates",
                candidates=cands,
            )
        pc, ph = (StochasticPolicy(family, rng.normal(size=family.coef_shape)) for _ in range(2))
        for champion in (None, ph):
            for estimator in ("ips", "snips"):
                result = counterfactual_ab_test(
                    pc,
                    champion,
                    log,
                    attempt=None,
                    estimator=estimator,
                    min_ess=5.0,
                    order_seed=7 + k,
                    min_propensity=None,
                ).to_dict()
                out.append(
                    {
                        "log": -1 - k,
                        "estimator": estimator,
                        "randomized": champion is None,
                        **result,
                    }
                )
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--logs", type=int, default=300)
    parser.add_argument("--out")
    parser.add_argument("--compare", nargs=2)
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.load(open(p)) for p in args.compare)
        # fields the later tree added (e.g. propensity_source) are not compared
        b = [
            {
                k: ({m: v[m] for m in x[k]} if k == "metrics" and k in x else v)
                for k, v in y.items()
                if k in x
            }
            for x, y in zip(a, b, strict=False)
        ]
        diff = [
            (x["log"], x["estimator"], x["randomized"])
            for x, y in zip(a, b, strict=False)
            if x != y
        ]
        promoted = sum(bool(x.get("promote")) for x in a)
        print(f"{len(a)} decisions ({promoted} promoted), {len(diff)} differ: {diff[:10]}")
        return int(bool(diff) or len(a) != len(b))
    records = _run(args.logs)
    json.dump(records, open(args.out, "w"), sort_keys=True, default=float)
    print(f"{len(records)} decisions written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
