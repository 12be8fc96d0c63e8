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

``--logger misspecified`` replaces h0 by a logger the default propensity model cannot
represent: h0's scores plus ``--strength`` · s_k · z(x) (before the temperature), with
z(x) = sign(x_a − m_a) · sign(x_b − m_b) the XOR of two features split at their medians (the
two with the most balanced split) and s_k = ±1 alternating over the actions (labels). The log's
contexts stay x (z is not in them): a multinomial logistic model on x has no term for the XOR,
so its estimates are biased whatever n (``median_abs_log_ratio`` and ``corr_log`` compare them
with the hidden true propensities); POEM learns on x too.

Usage:
    .venv/bin/python benchmarks/propensity_learning.py --data ../shared/data --runs 10 \
        --each-solver --json propensity_learning.json
    .venv/bin/python benchmarks/propensity_learning.py --runs 10 --each-solver \
        --logger misspecified
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from dataclasses import replace
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
from poem.policies import StochasticPolicy, make_family  # noqa: E402
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
    p.add_argument(
        "--logger",
        default="h0",
        choices=("h0", "misspecified"),
        help="h0: the log-linear logger (the propensity model is well specified); "
        "misspecified: h0 plus an XOR of two features the model lacks",
    )
    p.add_argument("--strength", type=float, default=2.0, help="misspecified: the XOR's score")
    p.add_argument(
        "--each-solver",
        action="store_true",
        help="train one POEM per solver of the grid (same log and estimate), reported apart",
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


def xor_feature(X_train: np.ndarray):
    """z(x) = sign(x_a − m_a)·sign(x_b − m_b) for the two most balanced median splits."""
    X = np.asarray(X_train, dtype=np.float64)
    med = np.median(X, axis=0)
    balance = np.abs((X > med).mean(axis=0) - 0.5)
    a, b = np.argsort(balance, kind="stable")[:2]

    def z(Z):
        Z = np.asarray(Z, dtype=np.float64)
        return np.where(Z[:, a] > med[a], 1.0, -1.0) * np.where(Z[:, b] > med[b], 1.0, -1.0)

    return z


def misspecified_logger(h0, X_train, strength: float):
    """h0 on [x, z(x)]: its scores plus strength·s_k·z(x) (``--logger misspecified``)."""
    z = xor_feature(X_train)
    d = np.asarray(X_train).shape[1]
    coef = np.asarray(h0.coef)  # (K, d + 1): the intercept last
    signs = np.where(np.arange(coef.shape[0]) % 2 == 0, 1.0, -1.0)
    extra = strength * h0.temperature * signs[:, None]
    family = make_family(h0.family.name, d + 1, h0.family.n_actions, True)
    aug = StochasticPolicy(
        family, np.hstack([coef[:, :d], extra, coef[:, d:]]), temperature=h0.temperature
    )
    return aug, lambda X: np.hstack([np.asarray(X, dtype=np.float64), z(X)[:, None]])


def one_run(ds, family: str, run: int, args, searches: dict) -> dict:
    """One log, one estimate; POEM trained per search (``--each-solver``: one per solver)."""
    seed = args.seed + run
    h0 = fit_logging_policy(ds.X_train, ds.Y_train, family=family, fraction=0.05, random_state=seed)
    X_test = ds.X_test
    if args.logger == "misspecified":
        h0, augment = misspecified_logger(h0, ds.X_train, args.strength)
        log = supervised_to_bandit(
            augment(ds.X_train), ds.Y_train, h0, n_replays=args.replays, random_state=seed
        )
        log = replace(log, contexts=np.asarray(log.contexts)[:, :-1])  # z is not logged
        X_test = augment(ds.X_test)
    else:
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
    sky = fit_logging_policy(ds.X_train, ds.Y_train, family=family, fraction=1.0, random_state=0)
    h0_loss = true_expected_loss(h0, X_test, ds.Y_test)
    sky_loss = map_loss(sky, ds.X_test, ds.Y_test)  # its deterministic predictions
    p, q = est.propensities, log.propensities
    model = {
        "log_loss": est.diagnostics.log_loss,
        "marginal_log_loss": est.diagnostics.marginal_log_loss,
        "median_abs_log_ratio": float(np.median(np.abs(np.log(p) - np.log(q)))),
        "corr_log": float(np.corrcoef(np.log(p), np.log(q))[0, 1]),
    }
    out = {}
    for label, search in searches.items():
        losses, cpu = {"h0": h0_loss, "skyline": sky_loss}, {"estimate": est_cpu}
        for source, lg in (("logged", log), ("estimated", est_log)):
            t0 = time.process_time()
            policy = train_poem(lg.take(rows["train"]), lg.take(rows["valid"]), search)
            cpu[source] = time.process_time() - t0
            losses[source] = true_expected_loss(policy, ds.X_test, ds.Y_test)
        gap = losses["h0"] - losses["skyline"]
        closed = {s: (losses["h0"] - losses[s]) / gap for s in ("logged", "estimated")}
        gain_logged = losses["h0"] - losses["logged"]
        ratio = (losses["h0"] - losses["estimated"]) / gain_logged if gain_logged > 0 else None
        out[label] = {
            "seed": seed,
            "n_rows": log.n_rows,
            "loss": losses,
            "gap_closed": closed,
            "estimated_over_logged": ratio,
            "propensity_model": model,
            "cpu_seconds": cpu,
        }
    return out


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
        searches = {"grid": search}
        if args.each_solver:
            searches = {
                solver: flow_search(args.config, family, [solver])
                for solver in search["grid"]["solver"]
            }
        print(
            f"{name} ({family}): {args.runs} runs, logger {args.logger}"
            + (f" (strength {args.strength:g})" if args.logger == "misspecified" else "")
            + f", {args.replays} replays, grid {search['grid']}"
            + (" (one POEM per solver)" if args.each_solver else ""),
            flush=True,
        )
        runs = {label: [] for label in searches}
        for run in range(args.runs):
            for label, r in one_run(ds, family, run, args, searches).items():
                runs[label].append(r)
                ratio = r["estimated_over_logged"]
                print(
                    f"  seed {r['seed']} [{label}]: loss h0 {r['loss']['h0']:.4f}, POEM logged "
                    f"{r['loss']['logged']:.4f}, estimated {r['loss']['estimated']:.4f}, skyline "
                    f"{r['loss']['skyline']:.4f}; gap closed {r['gap_closed']['logged']:.1%} vs "
                    f"{r['gap_closed']['estimated']:.1%}; estimated/logged "
                    + ("n/a" if ratio is None else f"{ratio:.1%}")
                    + f"; propensity model log loss {r['propensity_model']['log_loss']:.3f} vs "
                    f"{r['propensity_model']['marginal_log_loss']:.3f} marginal, median "
                    f"|log p̂/p| {r['propensity_model']['median_abs_log_ratio']:.3f}; cpu "
                    f"{sum(r['cpu_seconds'].values()):.0f}s",
                    flush=True,
                )
        for label, rs in runs.items():
            res = {**summarise(name, rs), "solver": label, "logger": args.logger}
            m = res["median"]
            print(
                f"{name} [{label}] median over {len(rs)} runs: h0 {m['h0']:.4f}, POEM logged "
                f"{m['logged']:.4f}, estimated {m['estimated']:.4f}, skyline {m['skyline']:.4f}; "
                f"gap closed {m['gap_closed_logged']:.1%} (logged) vs "
                f"{m['gap_closed_estimated']:.1%} (estimated); estimated/logged "
                + (
                    "n/a (POEM on logged propensities did not beat h0 in any run)"
                    if m["estimated_over_logged"] is None
                    else f"{m['estimated_over_logged']:.1%}"
                )
                + f" (target >= 80%; {res['runs_at_least_80pct']} of "
                f"{res['runs_with_a_logged_gain']} runs)",
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
