"""Learning on the Open Bandit Dataset: POEM (BanditNet, hybrid) on `random` logs, held-out test.

The `random` log of one campaign is split by time into train (50%), validation (25%) and test
(25%). POEM (candidate-set family, L-BFGS; λ = c·λ*, L2), BanditNet (L2; its λ by its own
held-out SNIPS) and the hybrid learner (weighting, L2) are tuned on the validation split
(poem.learners.search), then evaluated on the test rows with IPS, SNIPS and DR (95% intervals),
beside the uniform logger (its test click rate), the bts policy (its IPS on the same test rows,
with its Monte-Carlo action distribution) and the bts logger's on-policy click rate (the bts
logs). The paired difference learned − logger is the counterfactual A/B gate
(poem.estimators.compare_policies). All values are click rates (higher is better).

Usage:
    .venv/bin/python benchmarks/obd_learning.py --data-dir ../shared/data --campaign all \
        --json obd_learning_all.json
"""

from __future__ import annotations

import argparse
import json
import time
import warnings
from pathlib import Path

import numpy as np
import yaml
from obd_ope import bts_action_distribution  # noqa: E402  (same folder)
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from poem.estimators import (
    compare_policies,
    evaluate_policy,
    evaluate_policy_dr,
    fit_loss_model,
    ips,
)
from poem.io.obd import CAMPAIGNS, obd_to_log, read_obd_table
from poem.learners import POEM, BanditNet, HybridLearner, search_hyperparameters


def clicks(estimate):
    """Risk (expected −click) → click rate with its interval."""
    return {
        "value": -estimate.value,
        "lower": -estimate.upper,
        "upper": -estimate.lower,
        "std_error": estimate.std_error,
        "effective_sample_size": estimate.effective_sample_size,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        default=str(Path(__file__).resolve().parents[2] / "shared" / "data"),
        help="folder holding obd/ (default: ../shared/data)",
    )
    parser.add_argument("--campaign", choices=CAMPAIGNS, default="all", help="OBD campaign")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the loss-model folds and Monte Carlo"
    )
    parser.add_argument(
        "--no-others", action="store_true", help="skip BanditNet and the hybrid learner"
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()

    data_dir = Path(args.data_dir)
    table = read_obd_table(data_dir, "random", args.campaign)
    log = obd_to_log(table)
    order = np.argsort(log.timestamps, kind="stable")
    n = log.n_rows
    train, val, test = (
        log.take(np.sort(order[a:b]))
        for a, b in ((0, n // 2), (n // 2, 3 * n // 4), (3 * n // 4, n))
    )
    test_positions = table.positions[np.sort(order[3 * n // 4 :])]

    # every learner is tuned on the validation split only (the test split is touched once, below)
    configs = {
        "POEM": (
            POEM(policy="candidates", solver="lbfgs", clip=None, variance_penalty="calibrated"),
            {"variance_scale": [0.0, 0.01, 0.1, 1.0], "l2_penalty": [0.0, 1e-3, 1e-2]},
            "ips",
        ),
    }
    if not args.no_others:
        # translations around the logged mean loss (−CTR ≈ −0.005), as BanditNet recommends;
        # BanditNet selects λ on its own held-out SNIPS, the search picks the L2 penalty
        configs["BanditNet"] = (
            BanditNet(
                policy="candidates",
                loss_translations=[-0.02, -0.01, -0.005, -0.002, 0.0],
                random_state=args.seed,
            ),
            {"l2_penalty": [1e-4, 1e-3, 1e-2]},
            "snips",
        )
        configs["Hybrid"] = (
            HybridLearner(clip=100.0),
            {
                "weighting": ["none", "clipped_inverse_propensity", "hybrid"],
                "l2_penalty": [1e-4, 1e-3, 1e-2],
            },
            "ips",
        )
    learners, searches = {}, {}
    for name, (template, grid, scoring) in configs.items():
        t = time.perf_counter()
        search = search_hyperparameters(template, train, val, grid, scoring=scoring)
        search_seconds = time.perf_counter() - t
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            est = clone(template).set_params(**search.best_params).fit(train)
        learners[name] = (est, time.perf_counter() - t)
        best = search.best_trial
        searches[name] = {
            "grid": grid,
            "scoring": scoring,
            "best_params": search.best_params,
            "best_validation_click_rate": -(best.ips if scoring == "ips" else best.snips).value,
            "seconds": search_seconds,
            "trials": [
                {
                    **tr.params,
                    "validation_ips_click_rate": -tr.ips.value,
                    "validation_snips_click_rate": -tr.snips.value,
                    "validation_ess": tr.effective_sample_size,
                }
                for tr in search.trials
            ],
        }

    predictions = fit_loss_model(test, n_folds=5, random_state=args.seed)
    results = {}
    for name, (est, seconds) in learners.items():
        policy = est.policy_
        weights = policy.log_action_probability_on(test) / test.propensities
        gate = compare_policies(test.losses, weights, np.ones(test.n_rows), confidence_level=0.95)
        results[name] = {
            "fit_seconds": seconds,
            "ips": clicks(evaluate_policy(policy, test, estimator="ips")),
            "snips": clicks(evaluate_policy(policy, test, estimator="snips")),
            "dr": clicks(evaluate_policy_dr(policy, test, estimator="dr", predictions=predictions)),
            "gain_over_logger_ips": -gate.difference.value,
            "gain_over_logger_interval": [-gate.difference.upper, -gate.difference.lower],
            "gate_promote": bool(gate.promote),
        }

    priors = yaml.safe_load((data_dir / "obd" / "prior_bts.yaml").read_text())[args.campaign]
    P = bts_action_distribution(priors["alpha"], priors["beta"], 100_000, args.seed)
    bts_weights = P[test_positions - 1, np.asarray(test.actions)] / test.propensities
    bts_table = read_obd_table(data_dir, "bts", args.campaign)
    out = {
        "campaign": args.campaign,
        "n_train": train.n_rows,
        "n_validation": val.n_rows,
        "n_test": test.n_rows,
        "n_test_clicks": int(-test.losses.sum()),
        "search": searches,
        "uniform_logger_test": clicks(ips(test.losses, np.ones(test.n_rows))),
        "bts_policy_ips_on_test": clicks(ips(test.losses, bts_weights)),
        "bts_on_policy_click_rate": float(np.mean(bts_table.clicks)),
        "learners": results,
        "seconds": None,
    }
    out["seconds"] = time.perf_counter() - t0

    def fmt(d):
        return f"{d['value']:.5f} [{d['lower']:.5f}, {d['upper']:.5f}]"

    print(
        f"OBD {args.campaign}: train {train.n_rows} / validation {val.n_rows} / "
        f"test {test.n_rows} rows "
        f"(split by time), {out['n_test_clicks']} test clicks; click rates with 95% intervals"
    )
    for name, sr in searches.items():
        print(
            f"{name} search ({sr['scoring']} on validation) over {sr['grid']}: "
            f"best {sr['best_params']} "
            f"(validation click rate {sr['best_validation_click_rate']:.5f}), "
            f"{sr['seconds']:.1f} s"
        )
        for tr in sr["trials"]:
            print(f"    {tr}")
    print(f"uniform logger (test)        {fmt(out['uniform_logger_test'])}")
    print(f"bts policy, IPS on test      {fmt(out['bts_policy_ips_on_test'])}")
    print(
        f"bts on-policy click rate     {out['bts_on_policy_click_rate']:.5f} "
        f"({bts_table.n_rows} bts rows)"
    )
    for name, r in results.items():
        lo, hi = r["gain_over_logger_interval"]
        print(
            f"{name:<10} IPS {fmt(r['ips'])}  SNIPS {fmt(r['snips'])}  DR {fmt(r['dr'])}  "
            f"ESS {r['ips']['effective_sample_size']:.0f}  "
            f"gain vs logger {r['gain_over_logger_ips']:+.5f} "
            f"[{lo:+.5f}, {hi:+.5f}] promote={r['gate_promote']}  fit {r['fit_seconds']:.1f} s"
        )
    print(f"{out['seconds']:.1f} s total")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
