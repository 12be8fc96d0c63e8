"""POEM on estimated vs logged propensities: how much of the h0→skyline gap each closes.

Supervised-to-bandit logs (digits: discrete, K = 10; yeast: multilabel, q = 14, from
``--data``), a stochastic logger h0 that depends on x (h0 fitted on 5 % of the training set,
as ``make-logs``), 4 replays of the training set. The log's propensities are hidden and
estimated by :func:`poem.logging_policy.estimate_log_propensities` (cross-fitted, the function
the pipeline's ``estimate-propensities`` stage calls, with its defaults: logistic, 5 folds) on
the whole log, as the stage does before the split. POEM is then trained twice on the same
train/validation rows, once per propensity source, by the flow's own search and selection:
:func:`poem.learners.search_hyperparameters` over ``search.grid`` of ``mlflow.yml`` (the
``champion`` warm start is zeros before any promotion) at the serving temperatures, then
:func:`poem.learners.selection.select_challenger` with the logging policy as the champion (no
candidates, as the flow's first round). Reported per run and as the median over runs: the
test expected loss of h0, of POEM(logged), of POEM(estimated) (served without the floor ε),
the skyline (h0's model on the whole training set, its MAP predictions' loss, as the paper's
skyline), the fraction of the gap h0 − skyline closed by each, and the ratio
(h0 − POEM(estimated)) / (h0 − POEM(logged)) — the issue's target is ≥ 80 %.

Usage:
    .venv/bin/python benchmarks/propensity_learning.py --data ../shared/data --runs 10 \
        --json propensity_learning.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from flows.config import load_config  # noqa: E402
from poem.datasets import load_dataset  # noqa: E402
from poem.learners import POEM, search_hyperparameters  # noqa: E402
from poem.learners.search import ess_floor  # noqa: E402
from poem.learners.selection import select_challenger  # noqa: E402
from poem.logging_policy import estimate_log_propensities  # noqa: E402
from poem.simulate import (  # noqa: E402
    fit_logging_policy,
    map_loss,
    supervised_to_bandit,
    true_expected_loss,
)

FAMILIES = {"digits": "discrete", "yeast": "multilabel"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--data",
        type=Path,
        default=REPO_ROOT.parent / "shared" / "data",
        help="folder holding yeast/ (yeast is skipped when absent)",
    )
    p.add_argument("--datasets", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    p.add_argument("--runs", type=int, default=10, help="runs (seeds seed..seed+runs-1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replays", type=int, default=4)
    p.add_argument("--folds", type=int, default=5, help="cross-fitting folds of the estimate")
    p.add_argument("--model", default="logistic", choices=("logistic", "boosting"))
    p.add_argument(
        "--solvers",
        nargs="+",
        default=None,
        help="restrict search.grid.solver (default: the config's)",
    )
    p.add_argument("--config", type=Path, default=REPO_ROOT / "mlflow.yml")
    p.add_argument("--json", type=Path, default=None)
    return p.parse_args(argv)


def flow_search(config: Path, family: str, solvers) -> dict:
    """The flow's training params, grid and selection settings (first round: no champion)."""
    cfg = load_config(config)
    params = dict(cfg.training.params)
    params.update(policy=family, warm_start="zeros")  # "champion" is zeros before a promotion
    grid = {k: list(v) for k, v in cfg.search.grid.items()}
    grid.pop("warm_start", None)
    if solvers:
        grid["solver"] = list(solvers)
    return {
        "params": params,
        "grid": grid,
        "scoring": cfg.search.scoring,
        "min_ess_fraction": cfg.search.min_ess_fraction,
        "min_ess": cfg.search.min_ess,
        "temperatures": list(cfg.search.temperatures),
        "confidence_level": cfg.search.confidence_level,
    }


def train_poem(train, valid, search: dict) -> object:
    """The flow's search and selection on these rows; the served policy (floor ε kept off)."""
    min_ess = ess_floor(valid.n_rows, search["min_ess_fraction"], search["min_ess"])
    result = search_hyperparameters(
        POEM(**search["params"]),
        train,
        valid,
        search["grid"],
        scoring=search["scoring"],
        confidence_level=search["confidence_level"],
        min_effective_sample_size=min_ess,
        keep_estimators=True,
        temperatures=search["temperatures"],
    )
    chosen = select_challenger(
        result.trials,
        None,
        valid,
        scoring=search["scoring"],
        min_effective_sample_size=min_ess,
        temperatures=search["temperatures"],
        exploration_floor=search["params"].get("exploration_floor"),
        confidence_level=search["confidence_level"],
    )
    return chosen.policy.with_serving(exploration_floor=0.0)  # the floor is a serving cost


def one_run(ds, family: str, run: int, args, search: dict) -> dict:
    seed = args.seed + run
    h0 = fit_logging_policy(ds.X_train, ds.Y_train, family=family, fraction=0.05, random_state=seed)
    log = supervised_to_bandit(
        ds.X_train, ds.Y_train, h0, n_replays=args.replays, random_state=seed
    )
    t0 = time.process_time()
    est_log, est = estimate_log_propensities(
        log, model=args.model, n_folds=args.folds, random_state=seed
    )
    est_cpu = time.process_time() - t0
    perm = np.random.default_rng(seed).permutation(log.n_rows)
    n_val = log.n_rows // 4
    rows = {"valid": perm[:n_val], "train": perm[n_val:]}
    losses = {"h0": true_expected_loss(h0, ds.X_test, ds.Y_test)}
    cpu = {}
    for source, lg in (("logged", log), ("estimated", est_log)):
        t0 = time.process_time()
        policy = train_poem(lg.take(rows["train"]), lg.take(rows["valid"]), search)
        cpu[source] = time.process_time() - t0
        losses[source] = true_expected_loss(policy, ds.X_test, ds.Y_test)
    sky = fit_logging_policy(ds.X_train, ds.Y_train, family=family, fraction=1.0, random_state=0)
    losses["skyline"] = map_loss(sky, ds.X_test, ds.Y_test)  # its deterministic predictions
    gap = losses["h0"] - losses["skyline"]
    closed = {s: (losses["h0"] - losses[s]) / gap for s in ("logged", "estimated")}
    gain_logged = losses["h0"] - losses["logged"]
    ratio = (losses["h0"] - losses["estimated"]) / gain_logged if gain_logged > 0 else None
    p, q = est.propensities, log.propensities
    return {
        "seed": seed,
        "n_rows": log.n_rows,
        "loss": losses,
        "gap_closed": closed,
        "estimated_over_logged": ratio,
        "propensity_model": {
            "log_loss": est.diagnostics.log_loss,
            "marginal_log_loss": est.diagnostics.marginal_log_loss,
            "median_abs_log_ratio": float(np.median(np.abs(np.log(p) - np.log(q)))),
            "corr_log": float(np.corrcoef(np.log(p), np.log(q))[0, 1]),
        },
        "cpu_seconds": {"estimate": est_cpu, **cpu},
    }


def summarise(name: str, runs: list[dict]) -> dict:
    ratios = [r["estimated_over_logged"] for r in runs if r["estimated_over_logged"] is not None]
    return {
        "dataset": name,
        "runs": runs,
        "median": {
            "h0": float(np.median([r["loss"]["h0"] for r in runs])),
            "logged": float(np.median([r["loss"]["logged"] for r in runs])),
            "estimated": float(np.median([r["loss"]["estimated"] for r in runs])),
            "skyline": float(np.median([r["loss"]["skyline"] for r in runs])),
            "gap_closed_logged": float(np.median([r["gap_closed"]["logged"] for r in runs])),
            "gap_closed_estimated": float(np.median([r["gap_closed"]["estimated"] for r in runs])),
            "estimated_over_logged": float(np.median(ratios)) if ratios else None,
        },
        "runs_at_least_80pct": int(sum(r >= 0.8 for r in ratios)),
        "runs_with_a_logged_gain": len(ratios),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    warnings.filterwarnings("ignore", message=r"\w+(\(.*\))? did not converge")
    warnings.filterwarnings("ignore", message="h0: .* constant")
    results = []
    for name in args.datasets:
        family = FAMILIES[name]
        if name != "digits" and not (args.data / name).exists():
            print(f"{name}: skipped, {args.data / name} is absent (give --data)")
            continue
        ds = load_dataset(name) if name == "digits" else load_dataset(name, data_dir=args.data)
        search = flow_search(args.config, family, args.solvers)
        print(f"{name} ({family}): {args.runs} runs, grid {search['grid']}", flush=True)
        runs = []
        for run in range(args.runs):
            r = one_run(ds, family, run, args, search)
            runs.append(r)
            ratio = r["estimated_over_logged"]
            print(
                f"  seed {r['seed']}: loss h0 {r['loss']['h0']:.4f}, POEM logged "
                f"{r['loss']['logged']:.4f}, estimated {r['loss']['estimated']:.4f}, skyline "
                f"{r['loss']['skyline']:.4f}; gap closed {r['gap_closed']['logged']:.1%} vs "
                f"{r['gap_closed']['estimated']:.1%}; estimated/logged "
                + ("n/a" if ratio is None else f"{ratio:.1%}")
                + f"; propensity model log loss {r['propensity_model']['log_loss']:.3f} vs "
                f"{r['propensity_model']['marginal_log_loss']:.3f} marginal; cpu "
                f"{sum(r['cpu_seconds'].values()):.0f}s",
                flush=True,
            )
        res = summarise(name, runs)
        m = res["median"]
        print(
            f"{name} median over {len(runs)} runs: h0 {m['h0']:.4f}, POEM logged {m['logged']:.4f}, "
            f"estimated {m['estimated']:.4f}, skyline {m['skyline']:.4f}; gap closed "
            f"{m['gap_closed_logged']:.1%} (logged) vs {m['gap_closed_estimated']:.1%} "
            f"(estimated); estimated/logged {m['estimated_over_logged']:.1%} (target >= 80%; "
            f"{res['runs_at_least_80pct']} of {res['runs_with_a_logged_gain']} runs)",
            flush=True,
        )
        results.append(res)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {"args": {k: str(v) for k, v in vars(args).items()}, "results": results}, indent=2
            )
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
