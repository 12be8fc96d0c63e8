"""Why the CRM minimizer is worse than the sharpened logger (issue 21): one cause at a time.

Same protocol as ``paper_multilabel.py`` (h₀ on 5 %, 4 replays, 25 % validation). Every fit
starts from h₀ (L-BFGS) and changes ONE thing from the flow's POEM(B) trial (clip p90/p10,
λ = 0.001·λ*, 50 iterations, IPS objective): no clip, no variance penalty, 300 iterations,
or the doubly robust objective. Printed: the test expected loss of each fit served at the
temperature the search's rule (snips_ucb, ESS ≥ 1 %) picks on validation, beside h₀ served the
same way (sharpened, no fit) and the fit at α = 1; the last columns count iterations.

    python benchmarks/objective_diagnosis.py --datasets yeast emotions --runs 3
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from poem.datasets import load_dataset  # noqa: E402
from poem.learners import POEM  # noqa: E402
from poem.learners.search import Trial, select_trial, validation_scores  # noqa: E402
from poem.simulate import fit_logging_policy, supervised_to_bandit, true_expected_loss  # noqa: E402

TEMPERATURES = (1.0, 0.5, 0.25, 0.125, 0.0625)
BASE = dict(clip="p90/p10", variance_penalty="calibrated", variance_scale=0.001, max_iter=50)
VARIANTS = {
    "IPS objective (flow trial)": {},
    "no clip": {"clip": None},
    "no variance penalty": {"variance_scale": 0.0},
    "300 iterations": {"max_iter": 300},
    "doubly robust objective": {"objective": "dr"},
}


def served(policy, valid, min_ess):
    """The policy at the temperature snips_ucb picks on validation (as the search does)."""
    trials = []
    for t in TEMPERATURES:
        ips, snips = validation_scores(policy.with_serving(temperature=t), valid)
        trials.append(Trial({}, ips, snips, ips.effective_sample_size, 0, 0, 0, True, 0))
    best = select_trial(trials, "snips_ucb", min_effective_sample_size=min_ess)
    return policy.with_serving(temperature=TEMPERATURES[best])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", type=Path, default=REPO_ROOT.parent / "shared" / "data")
    p.add_argument("--datasets", nargs="+", default=["yeast", "emotions"])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    warnings.simplefilter("ignore", ConvergenceWarning)
    warnings.filterwarnings("ignore", message="h0: ")
    for name in args.datasets:
        ds = load_dataset(name, args.data_dir)
        rows = {k: [] for k in ("h0", "h0 sharpened", *VARIANTS)}
        for run in range(args.runs):
            seed = args.seed + run
            h0 = fit_logging_policy(
                ds.X_train, ds.Y_train, family="multilabel", fraction=0.05, random_state=seed
            )
            log = supervised_to_bandit(ds.X_train, ds.Y_train, h0, n_replays=4, random_state=seed)
            perm = np.random.default_rng(seed).permutation(log.n_rows)
            n_val = int(round(0.25 * log.n_rows))
            train, valid = log.take(perm[n_val:]), log.take(perm[:n_val])
            min_ess = 0.01 * valid.n_rows

            def loss(policy, ds=ds):
                return true_expected_loss(policy, ds.X_test, ds.Y_test)

            rows["h0"].append((loss(h0), loss(h0), 0))
            rows["h0 sharpened"].append((loss(served(h0, valid, min_ess)), loss(h0), 0))
            for label, change in VARIANTS.items():
                model = POEM(
                    policy="multilabel", solver="lbfgs", warm_start=h0, **{**BASE, **change}
                ).fit(train)
                rows[label].append(
                    (
                        loss(served(model.policy_, valid, min_ess)),
                        loss(model.policy_),
                        model.n_iter_,
                    )
                )
        print(f"\n### {name} ({args.runs} runs, seeds {args.seed}–{args.seed + args.runs - 1})\n")
        print("| fit from h0 (L-BFGS) | loss, α on validation | loss at α = 1 | iterations |")
        print("|---|---|---|---|")
        for label, values in rows.items():
            v = np.array(values, dtype=float)
            print(
                f"| {label} | {v[:, 0].mean():.3f} | {v[:, 1].mean():.3f} | {v[:, 2].mean():.0f} |"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
