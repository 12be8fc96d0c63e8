"""POEM beside Vowpal Wabbit (--cb_adf, cb_type ips and dr) on the same candidate-set logs.

Two logs: digits → bandit (h0 = logistic regression on 5% of the training set, 4 replays; candidates
ψ_{i,a} = [x_i ⊗ e_a, e_a], 10 per row; test = 1 replay of the test set) and OBD `random`
(candidate vectors of poem.io.obd, time split 75/25). VW sees exactly the same candidate vectors as
action features (no shared namespace), one pass, costs = losses. POEM: candidate-set family, L-BFGS,
clip p90/p10 (digits) or none (OBD, uniform logger), λ = 0.1·λ*. Reported: training seconds
(learning
only, data formatting excluded) and the SNIPS risk with its 95% delta-method interval on the same
test
split — VW's greedy policy (argmin predicted cost), POEM's stochastic policy and its MAP policy.

Needs the optional extra `bench` (vowpalwabbit==9.11.9).

Usage:
    .venv/bin/python benchmarks/vw_compare.py --data-dir ../shared/data --campaign men \
        --json vw_compare.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from poem.data import CandidateSets, LoggedBandit
from poem.datasets import load_dataset
from poem.estimators import snips
from poem.estimators.dr import loss_model_features
from poem.io.obd import CAMPAIGNS, obd_to_log, read_obd_table
from poem.learners import POEM
from poem.simulate import fit_logging_policy, supervised_to_bandit


def as_candidate_log(log: LoggedBandit) -> LoggedBandit:
    """Discrete log → candidate-set log with ψ_{i,a} = [x_i ⊗ e_a, e_a]."""
    features, offsets = loss_model_features(log)
    return LoggedBandit(
        None,
        log.actions,
        log.losses,
        log.propensities,
        loss_bounds=log.loss_bounds,
        family="candidates",
        candidates=CandidateSets(features, offsets),
    )


def vw_examples(log: LoggedBandit, with_labels: bool) -> list[list[str]]:
    """One multi-line cb_adf example per row: candidate lines `[0:cost:prob] |a j:v ...`."""
    F = sp.csr_matrix(log.candidates.features)
    lines = [
        " ".join(
            f"{j}:{v:.7g}"
            for j, v in zip(
                F.indices[F.indptr[r] : F.indptr[r + 1]],
                F.data[F.indptr[r] : F.indptr[r + 1]],
                strict=True,
            )
        )
        for r in range(F.shape[0])
    ]
    out = []
    for i, (start, stop) in enumerate(
        zip(log.candidates.offsets[:-1], log.candidates.offsets[1:], strict=True)
    ):
        example = []
        for c in range(start, stop):
            label = ""
            if with_labels and c - start == log.actions[i]:
                label = f"0:{log.losses[i]:.7g}:{log.propensities[i]:.7g} "
            example.append(f"{label}|a {lines[c]}")
        out.append(example)
    return out


def run_vw(cb_type: str, train: LoggedBandit, test: LoggedBandit):
    import vowpalwabbit

    train_ex, test_ex = vw_examples(train, True), vw_examples(test, False)
    vw = vowpalwabbit.Workspace(f"--cb_adf --cb_type {cb_type} --quiet --random_seed 0")
    start = time.perf_counter()
    for example in train_ex:
        vw.learn(example)
    seconds = time.perf_counter() - start
    greedy = np.array([int(np.argmin(vw.predict(example))) for example in test_ex])
    vw.finish()
    weights = (greedy == np.asarray(test.actions)) / test.propensities
    return seconds, snips(test.losses, weights), greedy


def run_poem(train: LoggedBandit, test: LoggedBandit, clip):
    est = POEM(
        policy="candidates",
        solver="lbfgs",
        clip=clip,
        variance_penalty="calibrated",
        variance_scale=0.1,
        max_iter=200,
    )
    start = time.perf_counter()
    est.fit(train)
    seconds = time.perf_counter() - start
    stochastic = est.policy_.log_action_probability_on(test) / test.propensities
    greedy = est.predict(test.candidates)
    map_weights = (greedy == np.asarray(test.actions)) / test.propensities
    return seconds, snips(test.losses, stochastic), snips(test.losses, map_weights), est


def digits_logs(seed: int):
    ds = load_dataset("digits", random_state=seed)
    h0 = fit_logging_policy(
        ds.X_train, ds.Y_train, family="discrete", fraction=0.05, random_state=seed
    )
    train = supervised_to_bandit(ds.X_train, ds.Y_train, h0, n_replays=4, random_state=seed)
    test = supervised_to_bandit(ds.X_test, ds.Y_test, h0, n_replays=1, random_state=seed + 1)
    return as_candidate_log(train), as_candidate_log(test), ds


def obd_logs(data_dir: Path, campaign: str):
    log = obd_to_log(read_obd_table(data_dir, "random", campaign))
    order = np.argsort(log.timestamps, kind="stable")
    cut = 3 * log.n_rows // 4
    return log.take(np.sort(order[:cut])), log.take(np.sort(order[cut:]))


def compare(name, train, test, clip):
    row = {
        "n_train": train.n_rows,
        "n_test": test.n_rows,
        "n_candidates_per_row": float(train.candidates.sizes.mean()),
        "n_features": train.n_features,
    }
    for cb_type in ("ips", "dr"):
        seconds, est, _ = run_vw(cb_type, train, test)
        row[f"vw_{cb_type}"] = {
            "train_seconds": seconds,
            "snips_risk": est.value,
            "interval": [est.lower, est.upper],
        }
    seconds, stochastic, greedy, poem = run_poem(train, test, clip)
    row["poem"] = {
        "train_seconds": seconds,
        "snips_risk": stochastic.value,
        "interval": [stochastic.lower, stochastic.upper],
        "n_iter": poem.n_iter_,
    }
    row["poem_map"] = {
        "train_seconds": seconds,
        "snips_risk": greedy.value,
        "interval": [greedy.lower, greedy.upper],
    }
    row["logger_risk_on_test"] = float(np.mean(test.losses))
    print(
        f"\n{name}: train {train.n_rows} rows, test {test.n_rows} rows, "
        f"{row['n_candidates_per_row']:.0f} "
        f"candidates/row, {train.n_features} features; "
        "SNIPS risk (lower is better) with 95% interval"
    )
    print(f"  logger (test mean loss)   {row['logger_risk_on_test']:.4f}")
    for key in ("vw_ips", "vw_dr", "poem", "poem_map"):
        r = row[key]
        print(
            f"  {key:<10} train {r['train_seconds']:7.2f} s   SNIPS {r['snips_risk']:+.4f} "
            f"[{r['interval'][0]:+.4f}, {r['interval'][1]:+.4f}]"
        )
    fastest_vw = min(row["vw_ips"]["train_seconds"], row["vw_dr"]["train_seconds"])
    best_vw = min(row["vw_ips"]["snips_risk"], row["vw_dr"]["snips_risk"])
    row["poem_time_ratio_to_fastest_vw"] = row["poem"]["train_seconds"] / fastest_vw
    row["poem_value_at_least_best_vw"] = bool(
        min(row["poem"]["snips_risk"], row["poem_map"]["snips_risk"]) <= best_vw
    )
    print(
        f"  POEM time / fastest VW = {row['poem_time_ratio_to_fastest_vw']:.2f}; "
        f"POEM (stochastic or MAP) SNIPS ≤ best VW: {row['poem_value_at_least_best_vw']}"
    )
    return row, poem


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        default=str(Path(__file__).resolve().parents[2] / "shared" / "data"),
        help="folder holding obd/ (default: ../shared/data)",
    )
    parser.add_argument("--campaign", choices=CAMPAIGNS, default="men", help="OBD campaign")
    parser.add_argument("--seed", type=int, default=0, help="seed of the digits simulation")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)
    try:
        import vowpalwabbit  # noqa: F401
    except ImportError:
        print(
            "vowpalwabbit is not installed: "
            ".venv/bin/pip install 'vowpalwabbit==9.11.9' (extra 'bench')"
        )
        return 1
    out = {}
    train, test, ds = digits_logs(args.seed)
    out["digits"], poem = compare("digits → bandit", train, test, "p90/p10")
    P = poem.predict_proba(test.candidates).reshape(-1, 10)
    out["digits"]["poem_true_expected_01_loss_test"] = float(
        np.mean(1 - P[np.arange(P.shape[0]), ds.Y_test])
    )
    train, test = obd_logs(Path(args.data_dir), args.campaign)
    out[f"obd_{args.campaign}"], _ = compare(f"OBD random/{args.campaign}", train, test, None)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
