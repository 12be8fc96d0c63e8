"""Would a fitted control-variate coefficient shrink the selection's paired standard errors?

The learning evidence (:func:`poem.learners.learning_evidence.paired_terms`) compares a fit
π_f with the champion candidate π_c by the doubly robust paired terms

    tᵢ(β) = wᵢ δᵢ − β (wᵢ δ̂ᵢ − gᵢ),   wᵢ = r^f_i − r^c_i,   gᵢ = v̂ᵢ(π_f) − v̂ᵢ(π_c),

at β = 1. The term in brackets has mean zero under the logger for any loss model, so every
fixed β is unbiased, and β* = Cov(wδ, wδ̂ − g) / Var(wδ̂ − g) minimises the variance
(Farajtabar, Chow & Ghavamzadeh 2018, "More robust doubly robust off-policy evaluation", ICML;
the regression-coefficient control variate). This script runs ``paper_multilabel.py`` with its
own arguments, unchanged (the library's terms select, so its tables are the default's), and at
every paired comparison it is asked for, with both weightings (joint and per-label), records
the cluster-robust standard error at β = 1, at β* estimated on the same rows, and at β*
cross-fitted over two seeded halves of the validation clusters (each half's β from the other).
It prints, per data set, the ratio se(β) / se(1): median, 10 % quantile, minimum, maximum.

Usage (from the repo root)::

    python benchmarks/control_variate_se.py --datasets yeast emotions --runs 3 --seed 0

Measured 2026-12-02: docs/results.md, "Implicit exploration and a control-variate coefficient".
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import paper_multilabel  # noqa: E402

import poem.learners.learning_evidence as evidence  # noqa: E402

RATIOS: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
CURRENT = {"data set": "?"}


def coefficient(wd: np.ndarray, cv: np.ndarray, clusters) -> float:
    """β* = Cov/Var of the per-cluster sums of ``wd`` and the control variate ``cv``."""
    if clusters is not None:
        wd, cv = np.bincount(clusters, weights=wd), np.bincount(clusters, weights=cv)
    wd, cv = wd - wd.mean(), cv - cv.mean()
    var = float(cv @ cv)
    return 1.0 if var <= 0.0 else float(wd @ cv) / var


def cross_fitted(wd: np.ndarray, cv: np.ndarray, clusters, seed: int = 0) -> np.ndarray:
    """Each row's β* from the other half of the clusters (two seeded halves)."""
    codes = np.arange(wd.size) if clusters is None else clusters
    half = (np.random.default_rng(seed).permutation(int(codes.max()) + 1) % 2)[codes]
    beta = np.empty(wd.size)
    for h in (0, 1):
        out = half != h
        sub = None if clusters is None else evidence.cluster_codes(codes[out])
        beta[~out] = coefficient(wd[out], cv[out], sub)
    return beta


def recorded(library_terms):
    """``paired_terms`` that also records the β* standard errors (it returns the library's)."""

    def paired_terms(fit, candidate, validation_log, model):
        losses = np.asarray(validation_log.losses, dtype=np.float64)
        gain, joint, per_label = evidence.paired_parts(fit, candidate, validation_log, model)
        weightings = [joint] if per_label is None else [joint, per_label]
        ses = {"DR (β = 1)": [], "β* in-sample": [], "β* cross-fitted": []}
        for w in weightings:
            wd, cv = w * losses, w * model.logged - gain
            for name, beta in (
                ("DR (β = 1)", 1.0),
                ("β* in-sample", coefficient(wd, cv, model.clusters)),
                ("β* cross-fitted", cross_fitted(wd, cv, model.clusters)),
            ):
                ses[name].append(evidence._mean_and_se(wd - beta * cv, model.clusters)[1])
        base = min(ses["DR (β = 1)"])  # the library keeps the weighting with the smaller se
        if base > 0.0:
            for name in ("β* in-sample", "β* cross-fitted"):
                RATIOS[CURRENT["data set"]][name].append(min(ses[name]) / base)
        return library_terms(fit, candidate, validation_log, model)

    return paired_terms


def main(argv=None) -> int:
    evidence.paired_terms = recorded(evidence.paired_terms)
    one_run = paper_multilabel.one_run

    def labelled(ds, run, args, defaults):
        CURRENT["data set"] = ds.name
        return one_run(ds, run, args, defaults)

    paper_multilabel.one_run = labelled
    code = paper_multilabel.main(argv)
    print("\nse(β) / se(β = 1) over every paired comparison of the selection")
    print("| data set | coefficient | comparisons | median | 10 % | min | max |")
    print("|---|---|---|---|---|---|---|")
    for name, by in RATIOS.items():
        for kind, r in by.items():
            r = np.asarray(r)
            print(
                f"| {name} | {kind} | {r.size} | {np.median(r):.4f} | "
                f"{np.quantile(r, 0.1):.4f} | {r.min():.4f} | {r.max():.4f} |"
            )
    return code


if __name__ == "__main__":
    sys.exit(main())
