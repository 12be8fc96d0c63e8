"""Criteo test-bed sample: policy metrics and the clipping sweep (hybrid paper Figs. 3-5).

Reads the three 23-impression sample files (criteo_testbed_sample/test_{train,val,test}), learns on
test_train and reports the test-bed metric IPS×10⁴ with denominator n⁺ + 10n⁻ and its
2.58·√n·std/(n⁺ + 10n⁻) half-width on test_test for: the logger (weights 1), the uniform policy,
the hybrid learner's four weightings, POEM and BanditNet. Then the clipping sweep: for each M, the
fraction of training inverse propensities ≥ M and the IPS of the learner trained with
min(M, 1/p₀) weighting (plotted). With 23 impressions per file and one or two clicks the numbers
only exercise the pipeline; they say nothing about the methods.

Usage:
    .venv/bin/python benchmarks/criteo_sample.py --data-dir ../shared/data \
        --out-dir /tmp/criteo_sample
"""

from __future__ import annotations

import argparse
import json
import tempfile
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning

from poem.estimators import clipping_sweep, criteo_ips
from poem.io.criteo import read_criteo
from poem.learners import POEM, BanditNet, HybridLearner

CLIPS = [
    1,
    2,
    5,
    10,
    15,
    20,
    30,
    50,
    100,
    150,
    200,
    250,
    300,
    350,
    400,
    450,
    500,
    550,
]  # the paper's M values


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data-dir",
        default=str(Path(__file__).resolve().parents[2] / "shared" / "data"),
        help="folder holding criteo_testbed_sample/ (default: ../shared/data)",
    )
    parser.add_argument(
        "--out-dir",
        default=str(Path(tempfile.gettempdir()) / "criteo_sample"),
        help="folder for the JSON report and the plot (default: <tmp>/criteo_sample)",
    )
    args = parser.parse_args(argv)
    folder = Path(args.data_dir) / "criteo_testbed_sample"
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train, val, test = (
        read_criteo(folder / name, n_features=2**16)
        for name in ("test_train", "test_val", "test_test")
    )
    clicks = -test.losses
    print(
        f"Criteo sample: train/val/test impressions {train.n_rows}/{val.n_rows}/{test.n_rows}, "
        f"clicks {int(-train.losses.sum())}/{int(-val.losses.sum())}/{int(clicks.sum())}, "
        f"candidates per impression {train.candidates.sizes.min()}-{train.candidates.sizes.max()}"
    )

    policies = {
        "logger": np.ones(test.n_rows),
        "uniform": 1.0 / (test.candidates.sizes * test.propensities),
    }
    learners = {
        "supervised (weight 1)": HybridLearner(weighting="none", l2_penalty=1e-3),
        "inverse propensity": HybridLearner(weighting="inverse_propensity", l2_penalty=1e-3),
        "clipped IPW (M=30)": HybridLearner(
            weighting="clipped_inverse_propensity", clip=30.0, l2_penalty=1e-3
        ),
        "hybrid (M=100)": HybridLearner(weighting="hybrid", clip=100.0, l2_penalty=1e-3),
        "POEM": POEM(
            policy="candidates",
            solver="lbfgs",
            clip="p90/p10",
            variance_penalty="calibrated",
            variance_scale=0.1,
            l2_penalty=1e-3,
        ),
        "BanditNet": BanditNet(policy="candidates", loss_translations=[-0.5], l2_penalty=1e-3),
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        for name, est in learners.items():
            policies[name] = (
                est.fit(train).policy_.log_action_probability_on(test) / test.propensities
            )
        metrics = {name: criteo_ips(clicks, w) for name, w in policies.items()}
        sweep_probs = {
            float(m): HybridLearner(
                weighting="clipped_inverse_propensity", clip=float(m), l2_penalty=1e-3
            )
            .fit(train)
            .policy_.log_action_probability_on(test)
            for m in CLIPS
        }
    sweep = clipping_sweep(
        clicks, test.propensities, sweep_probs, train_propensities=train.propensities
    )

    print("\npolicy                    IPS×10⁴   IPS std×10⁴ (2.58·√n·std/(n⁺+10n⁻))")
    for name, est in metrics.items():
        print(f"{name:<25} {est.value:8.2f}   {est.upper - est.value:8.2f}")
    print("\nclipping sweep (learner: min(M, 1/p₀)-weighted cross entropy; IPS on test_test)")
    print(sweep.to_markdown())

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sweep.to_dict()["rows"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    axes[0].plot(CLIPS, [r["clipped_fraction"] for r in rows], marker="o")
    axes[0].set(
        xlabel="M",
        ylabel="fraction of 1/p₀ ≥ M",
        title="clipped inverse propensities",
        xscale="log",
    )
    axes[1].plot(CLIPS, [r["ips"] for r in rows], marker="o")
    axes[1].set(xlabel="M", ylabel="IPS×10⁴", title="IPS vs M", xscale="log")
    axes[2].plot(CLIPS, [r["ips_std"] for r in rows], marker="o")
    axes[2].set(xlabel="M", ylabel="IPS std×10⁴", title="IPS std vs M", xscale="log")
    fig.suptitle("Criteo test-bed sample (23 impressions): clipping sweep")
    fig.tight_layout()
    plot = out_dir / "clipping_sweep.png"
    fig.savefig(plot, dpi=100)
    report = {
        "metrics": {k: v.to_dict() for k, v in metrics.items()},
        "clipping_sweep": sweep.to_dict(),
        "plot": str(plot),
    }
    (out_dir / "criteo_sample.json").write_text(json.dumps(report, indent=2, default=float))
    print(f"\nplot: {plot}; report: {out_dir / 'criteo_sample.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
