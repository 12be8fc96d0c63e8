"""POEM(S) fit time against the supervised skyline's, on the paper benchmark's logs.

Usage (from the repo root)::

    nice -n 10 .venv/bin/python benchmarks/fit_time.py [--datasets yeast tmc2007 emotions medical]
        [--runs 3] [--seed 0] [--source CHECKOUT] [--save FILE.npz] [--compare FILE.npz]

For each data set and run r (seed ``--seed`` + r), the log is the one of
``benchmarks/paper_multilabel.py`` (h₀ on 5 % of the training set, 4 replays, 25 % of the
contexts held out for validation) and the script times, in one process and one after the other:

- the skyline fit (:func:`paper_multilabel.fit_skyline`, the benchmark's own);
- the POEM(S) row of the flow's search: one :func:`poem.learners.search.run_trial` per grid
  point of ``search.grid`` with ``solver: adagrad`` (warm start × variance scale, 10 fits with
  the shipped config), on a fresh copy of the training log, so the first trial pays for the
  doubly robust loss model as the flow's search does. ``Trial.seconds`` is the fit's wall time
  (the validation scoring is not in it), as in ``paper_multilabel.py``.

Both run under one BLAS thread (the benchmark's ``--threads 1``). It prints, per run, the mean
POEM(S) fit seconds (wall and this process's CPU), the loss model's seconds, the skyline's
seconds and the ratio, then the median over the runs, the 1-minute load average at each line,
and each fit's test expected Hamming loss (the policy at the temperature the trial serves,
without the serving floor: ``paper_multilabel.learned_loss``). ``--save`` writes every fit's
coefficients and test loss; ``--compare`` reads such a file and prints the largest test-loss
and coefficient differences to it (run the old code with ``--source`` and ``--save``, the new
one with ``--compare``: what the fits learn, before and after a solver change).

``--source CHECKOUT`` imports ``poem`` and the benchmark helpers from another checkout (e.g.
``git archive main | tar -x -C /tmp/old``) for a before/after comparison.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--datasets", nargs="+", default=["yeast", "tmc2007", "emotions", "medical"])
    p.add_argument("--runs", type=int, default=3, help="runs (seeds seed .. seed + runs - 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-dir", type=Path, default=ROOT.parent / "shared" / "data")
    p.add_argument("--source", type=Path, help="checkout to import poem and the helpers from")
    p.add_argument("--save", type=Path, help="write the fits' coefficients and test losses here")
    p.add_argument("--compare", type=Path, help="compare the fits with a --save file")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    source = (args.source or ROOT).resolve()
    sys.path[:0] = [str(source), str(source / "benchmarks")]
    import numpy as np
    import paper_multilabel as pm
    from threadpoolctl import threadpool_limits

    import poem
    from poem.learners.search import ess_floor, expand_grid, run_trial

    print(f"poem from {Path(poem.__file__).parent}", flush=True)
    bench = pm.parse_args(["--datasets", *args.datasets, "--data-dir", str(args.data_dir)])
    defaults = pm.flow_defaults(ROOT / bench.config.name, [])  # this checkout's config
    saved = dict(np.load(args.compare)) if args.compare else None
    out, summary = {}, []
    for name in args.datasets:
        ds = pm.load_dataset(name, bench.data_dir)
        ratios, cpu_ratios = [], []
        for run in range(args.runs):
            seed = args.seed + run
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                h0 = pm.fit_logging_policy(
                    ds.X_train,
                    ds.Y_train,
                    family="multilabel",
                    fraction=bench.fraction,
                    fit_intercept=True,
                    random_state=seed,
                )
            log = pm.supervised_to_bandit(
                ds.X_train, ds.Y_train, h0, n_replays=bench.replays, random_state=seed
            )
            perm, n_val = pm.validation_rows(ds.X_train.shape[0], bench, seed)
            train, valid = log.take(perm[n_val:]), log.take(perm[:n_val])
            template, grid = pm.learner_setup(defaults, "adagrad", True, seed, bench, h0)
            min_ess = ess_floor(valid.n_rows, defaults["min_ess_fraction"], defaults["min_ess"])
            with threadpool_limits(limits=1):
                cpu = time.process_time()
                _, sky_wall = pm.fit_skyline(ds, True)
                sky_cpu = time.process_time() - cpu
                trials, cpu_s = [], []
                for params in expand_grid(grid):
                    cpu = time.process_time()
                    trials.append(
                        run_trial(
                            template,
                            params,
                            train,
                            valid,
                            temperatures=defaults["temperatures"],
                            scoring=defaults["scoring"],
                            min_effective_sample_size=min_ess,
                            keep_estimator=True,
                        )
                    )
                    cpu_s.append(time.process_time() - cpu)  # includes validation scoring
            wall = float(np.mean([t.seconds for t in trials]))
            model_s = float(train.__dict__.get("_loss_model_seconds", 0.0))
            ratios.append(wall / sky_wall)
            cpu_ratios.append(float(np.mean(cpu_s)) / sky_cpu)
            losses = np.array([pm.learned_loss(t.estimator.policy_, ds) for t in trials])
            coefs = np.stack([t.estimator.coef_ for t in trials])
            out[f"{name}/{run}/loss"], out[f"{name}/{run}/coef"] = losses, coefs
            line = (
                f"[{name} run {run}] load {os.getloadavg()[0]:.2f}: POEM(S) fit {wall:.3f} s "
                f"(loss model {model_s:.3f} s in the first; epochs "
                f"{sorted({t.n_iter for t in trials})}) / skyline {sky_wall:.3f} s = "
                f"{ratios[-1]:.3f}; CPU incl. scoring {np.mean(cpu_s):.3f} / {sky_cpu:.3f} = "
                f"{cpu_ratios[-1]:.3f}; test loss mean {losses.mean():.4f}"
            )
            if saved is not None:
                key = f"{name}/{run}"
                dl = np.max(np.abs(losses - saved[f"{key}/loss"]))
                dc = np.max(np.abs(coefs - saved[f"{key}/coef"]))
                line += f"; vs saved: max |Δ test loss| {dl:.2e}, max |Δ coef| {dc:.2e}"
            print(line, flush=True)
        summary.append(
            f"{name}: median POEM(S)/skyline wall {np.median(ratios):.3f} "
            f"(runs {', '.join(f'{r:.3f}' for r in ratios)}), CPU {np.median(cpu_ratios):.3f}"
        )
    print("\n".join(summary), flush=True)
    if args.save:
        np.savez(args.save, **out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
