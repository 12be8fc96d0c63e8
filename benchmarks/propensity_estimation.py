"""OBD with its propensity column removed: estimated vs logged propensities for OPE.

Each direction estimates one logger's on-policy click rate from the other logger's log:
- ``random→bts``: the bts policy (Thompson sampling with the ZOZOTOWN priors, its per-position
  item distribution by Monte Carlo, as ``obd_ope.py``) evaluated on the `random` log;
- ``bts→random``: the uniform random policy (1/K per item at every position) evaluated on the
  `bts` log.
The truth is the target logger's own on-policy click rate. Each estimator (IPS, SNIPS, DR with a
cross-fitted loss model) runs twice on the same rows: with the logged ``propensity_score`` and
with cross-fitted estimates from :func:`poem.logging_policy.estimate_propensities` (the library
function the pipeline's estimation stage calls), fitted on the log's own contexts (user features
and the position) and shown items only. Reported: relative error on the full log, and over
bootstrap resamples of the log (propensity and loss models refitted on each) the mean relative
error and the coverage of the 95 % interval of the truth.

Usage:
    .venv/bin/python benchmarks/propensity_estimation.py --data-dir ../shared/data \
        --campaign all --n-bootstrap 20 --json propensity_estimation.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from obd_ope import bts_action_distribution, estimate_all  # noqa: E402

from poem.io.obd import CAMPAIGNS, N_POSITIONS, obd_to_log, read_obd_table  # noqa: E402
from poem.logging_policy import check_stochastic_logger, estimate_propensities  # noqa: E402

ESTIMATORS = ("IPS", "SNIPS", "DR")


def logger_contexts(table, rows):
    """What the propensity model sees: user-feature codes and the position (one-hot)."""
    position = np.zeros((rows.size, N_POSITIONS))
    position[np.arange(rows.size), table.positions[rows] - 1] = 1.0
    return sp.hstack([table.user_features[rows], sp.csr_matrix(position)]).tocsr()


def one_direction(table, log, P, truth, n_folds, seed, rows):
    """Estimates from the sub-log ``rows`` with logged and with estimated propensities."""
    sub = log.take(rows)
    positions = table.positions[rows]
    fit = estimate_propensities(
        logger_contexts(table, rows), table.item_ids[rows], n_actions=P.shape[1], random_state=seed
    )
    out = {}
    for source, logged in (
        ("logged", sub),
        ("estimated", replace(sub, propensities=fit.propensities)),
    ):
        for name, (value, (lower, upper), ess) in estimate_all(
            logged, positions, P, n_folds, seed
        ).items():
            if name in ESTIMATORS:
                out[(source, name)] = (value, lower <= truth <= upper, ess)
    return out, fit


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        default=str(Path(__file__).resolve().parents[2] / "shared" / "data"),
        help="folder holding obd/ (default: ../shared/data)",
    )
    parser.add_argument("--campaign", choices=CAMPAIGNS, default="all", help="OBD campaign")
    parser.add_argument("--n-bootstrap", type=int, default=20, help="bootstrap resamples")
    parser.add_argument("--n-draws", type=int, default=100_000, help="Monte Carlo draws (bts)")
    parser.add_argument("--n-folds", type=int, default=5, help="cross-fitting folds")
    parser.add_argument("--seed", type=int, default=12345, help="seed")
    parser.add_argument(
        "--directions",
        nargs="+",
        default=["random→bts", "bts→random"],
        choices=["random→bts", "bts→random"],
        help="which logger's value to estimate from which log (default: both)",
    )
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    data_dir = Path(args.data_dir)
    priors = yaml.safe_load((data_dir / "obd" / "prior_bts.yaml").read_text())[args.campaign]
    tables = {b: read_obd_table(data_dir, b, args.campaign) for b in ("random", "bts")}
    K = tables["random"].item_features.shape[0]
    targets = {
        "random→bts": (
            "random",
            bts_action_distribution(priors["alpha"], priors["beta"], args.n_draws, args.seed)
            if "random→bts" in args.directions
            else None,
            "bts",
        ),
        "bts→random": ("bts", np.full((N_POSITIONS, K), 1.0 / K), "random"),
    }
    rng = np.random.default_rng(args.seed)
    results = {"campaign": args.campaign, "n_bootstrap": args.n_bootstrap, "directions": {}}
    for direction in args.directions:
        source, P, target = targets[direction]
        table = tables[source]
        truth = float(np.mean(tables[target].clicks))
        log = replace(obd_to_log(table), event_ids=None)  # bootstrap repeats rows
        full, fit = one_direction(
            table, log, P, truth, args.n_folds, args.seed, np.arange(log.n_rows)
        )
        try:
            check_stochastic_logger(fit)
            refusal = None
        except ValueError as exc:
            refusal = str(exc)
        boot = {key: [] for key in full}
        for b in range(args.n_bootstrap):
            rows = rng.integers(0, log.n_rows, size=log.n_rows)
            res, _ = one_direction(table, log, P, truth, args.n_folds, args.seed + b + 1, rows)
            for key, (value, covered, _) in res.items():
                boot[key].append((abs(value - truth) / truth, covered))
        rel = np.abs(fit.propensities / table.propensities - 1)
        rows_out = {}
        for (src, name), (value, _covered, ess) in full.items():
            errs = np.array([e for e, _ in boot[(src, name)]])
            cov = np.array([c for _, c in boot[(src, name)]], dtype=float)
            rows_out[f"{src}/{name}"] = {
                "estimate": value,
                "relative_error": abs(value - truth) / truth,
                "relative_error_bootstrap_mean": float(errs.mean()) if errs.size else None,
                "coverage_bootstrap": float(cov.mean()) if cov.size else None,
                "effective_sample_size": ess,
            }
        results["directions"][direction] = {
            "truth": truth,
            "n_rows": int(log.n_rows),
            "propensity_relative_error_median": float(np.median(rel)),
            "diagnostics": fit.diagnostics.lines(),
            "refused_as_deterministic": refusal,
            "estimators": rows_out,
        }
        print(
            f"\n{direction}: truth {truth:.5f} ({tables[target].n_rows} {target} rows), "
            f"{log.n_rows} {source} rows; estimated vs logged propensity: median |p̂/p − 1| "
            f"= {np.median(rel):.3f}"
        )
        for line in fit.diagnostics.lines():
            print(f"  {line}")
        print(
            f"  {'estimator':<16} {'estimate':>9} {'rel.err':>8} {'boot mean':>9} {'coverage':>8}"
        )
        for key, row in rows_out.items():
            print(
                f"  {key:<16} {row['estimate']:>9.5f} {row['relative_error']:>8.3f} "
                f"{row['relative_error_bootstrap_mean'] or float('nan'):>9.3f} "
                f"{row['coverage_bootstrap'] if row['coverage_bootstrap'] is not None else float('nan'):>8.2f}"
            )
        for name in ESTIMATORS:
            lo, es = rows_out[f"logged/{name}"], rows_out[f"estimated/{name}"]
            if lo["relative_error_bootstrap_mean"]:
                ratio = es["relative_error_bootstrap_mean"] / lo["relative_error_bootstrap_mean"]
                print(f"  {name}: estimated / logged bootstrap relative error = {ratio:.2f}")
    results["seconds"] = time.perf_counter() - start
    print(f"\n{results['seconds']:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
