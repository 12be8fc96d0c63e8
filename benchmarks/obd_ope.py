"""Off-policy evaluation on OBD: estimate the bts logger's click rate from the `random` logs.

The evaluation policy is the `bts` logger itself (Bernoulli Thompson sampling with the ZOZOTOWN
priors of obd/prior_bts.yaml: one draw per item from Beta(α_i, β_i), the three highest items at
positions 1-3). Its probability of (item, position) is computed by Monte Carlo. IPS, SNIPS, DM and
DR (cross-fitted logistic loss model on the OBD candidate features) estimate its click rate on the
`random` logs; the ground truth is the on-policy click rate of the `bts` logs. Relative error on the
full sample and its mean over bootstrap resamples of the `random` rows (loss model refitted each
time).

Usage:
    .venv/bin/python benchmarks/obd_ope.py --data-dir ../shared/data --campaign all \
        --json obd_ope_all.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml

from poem.estimators import (
    direct_method,
    doubly_robust,
    fit_loss_model,
    importance_weights,
    ips,
    snips,
)
from poem.io.obd import CAMPAIGNS, N_POSITIONS, obd_to_log, read_obd_table

# Saito et al. (2021), Open Bandit Pipeline, small-sample OPE benchmark (quoted for comparison only)
PUBLISHED_RELATIVE_ERROR = {"IPW": 0.31, "DR": 0.29, "DM": 0.16}


def bts_action_distribution(alpha, beta, n_draws: int, seed: int) -> np.ndarray:
    """P[k, item] = probability that Thompson sampling shows `item` at position k+1 (MC)."""
    rng = np.random.default_rng(seed)
    alpha, beta = np.asarray(alpha, float), np.asarray(beta, float)
    K = alpha.size
    counts = np.zeros((N_POSITIONS, K))
    chunk = 20_000
    for start in range(0, n_draws, chunk):
        m = min(chunk, n_draws - start)
        theta = rng.beta(alpha, beta, size=(m, K))
        top = np.argsort(-theta, axis=1)[:, :N_POSITIONS]
        for k in range(N_POSITIONS):
            counts[k] += np.bincount(top[:, k], minlength=K)
    return counts / n_draws


def estimate_all(log, positions, P, n_folds, seed):
    """Click-rate estimates (and intervals) of the bts policy by IPS, SNIPS, DM and DR on `log`."""
    K = P.shape[1]
    target_all = P[positions - 1].reshape(-1)  # π_e(c | position of row i), rows stacked
    target_logged = P[positions - 1, np.asarray(log.actions)]
    weights = importance_weights(target_logged, log.propensities)
    predictions = fit_loss_model(log, n_folds=n_folds, random_state=seed)
    model_values = predictions.expected_loss(target_all)
    assert model_values.size * K == target_all.size
    risks = {
        "IPS": ips(log.losses, weights),
        "SNIPS": snips(log.losses, weights),
        "DM": direct_method(model_values),
        "DR": doubly_robust(log.losses, weights, predictions.logged, model_values),
    }
    # risks are expected losses δ = −click: the click rate is −risk
    return {
        name: (-e.value, (-e.upper, -e.lower), e.effective_sample_size) for name, e in risks.items()
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
        "--n-draws", type=int, default=100_000, help="Monte Carlo draws for the bts distribution"
    )
    parser.add_argument(
        "--n-bootstrap", type=int, default=30, help="bootstrap resamples of the random rows"
    )
    parser.add_argument(
        "--n-folds", type=int, default=5, help="cross-fitting folds of the loss model"
    )
    parser.add_argument(
        "--seed", type=int, default=12345, help="seed of Monte Carlo, folds and bootstrap"
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()

    data_dir = Path(args.data_dir)
    priors = yaml.safe_load((data_dir / "obd" / "prior_bts.yaml").read_text())[args.campaign]
    P = bts_action_distribution(priors["alpha"], priors["beta"], args.n_draws, args.seed)
    random_table = read_obd_table(data_dir, "random", args.campaign)
    bts_table = read_obd_table(data_dir, "bts", args.campaign)
    ground_truth = float(np.mean(bts_table.clicks))
    # event ids dropped so that bootstrap resamples (repeated rows) are valid logs
    log = replace(obd_to_log(random_table), event_ids=None)
    positions = random_table.positions

    full = estimate_all(log, positions, P, args.n_folds, args.seed)
    rng = np.random.default_rng(args.seed)
    boot = {name: [] for name in full}
    for b in range(args.n_bootstrap):
        rows = rng.integers(0, log.n_rows, size=log.n_rows)
        result = estimate_all(log.take(rows), positions[rows], P, args.n_folds, args.seed + b + 1)
        for name, (value, _, _) in result.items():
            boot[name].append(abs(value - ground_truth) / ground_truth)

    out = {
        "campaign": args.campaign,
        "ground_truth": ground_truth,
        "n_random_rows": int(log.n_rows),
        "n_bts_rows": int(bts_table.n_rows),
        "n_draws": int(args.n_draws),
        "n_bootstrap": int(args.n_bootstrap),
        "seed": int(args.seed),
        "bts_zero_probability_cells": int(np.sum(P == 0)),
        "estimators": {},
        "published_obp_relative_error_small_sample": PUBLISHED_RELATIVE_ERROR,
        "seconds": None,
    }
    for name, (value, (lower, upper), ess) in full.items():
        errs = np.asarray(boot[name])
        out["estimators"][name] = {
            "estimate": value,
            "interval_95": [lower, upper],
            "effective_sample_size": ess,
            "relative_error": abs(value - ground_truth) / ground_truth,
            "relative_error_bootstrap_mean": float(errs.mean()) if errs.size else None,
            "relative_error_bootstrap_std": float(errs.std(ddof=1)) if errs.size > 1 else None,
        }
    out["seconds"] = time.perf_counter() - start

    print(
        f"OBD campaign={args.campaign}: bts on-policy click rate (ground truth) = "
        f"{ground_truth:.5f} "
        f"({bts_table.n_rows} bts rows); estimated from {log.n_rows} random rows"
    )
    print(
        f"{'estimator':<8} {'estimate':>9} {'95% interval':>22} {'ESS':>8} {'rel.err':>8} "
        f"{'boot mean':>9} {'boot sd':>8}"
    )
    for name, row in out["estimators"].items():
        lo, hi = row["interval_95"]
        print(
            f"{name:<8} {row['estimate']:>9.5f} [{lo:>9.5f}, {hi:>9.5f}] "
            f"{row['effective_sample_size']:>8.0f} "
            f"{row['relative_error']:>8.3f} "
            f"{row['relative_error_bootstrap_mean'] or float('nan'):>9.3f} "
            f"{row['relative_error_bootstrap_std'] or float('nan'):>8.3f}"
        )
    print(
        "published OBP small-sample relative errors (for comparison, not computed here):",
        PUBLISHED_RELATIVE_ERROR,
    )
    print(f"{out['seconds']:.1f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
