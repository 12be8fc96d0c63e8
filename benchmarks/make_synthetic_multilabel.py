"""Write a synthetic multilabel train/test pair (LibSVM multilabel format) for paper_multilabel.py.

scikit-learn's ``make_multilabel_classification`` (bag-of-words features, q labels); a small
training part gives the small logs on which a learner must not do harm (issue 21)::

    python benchmarks/make_synthetic_multilabel.py /tmp/synth --train-rows 300
    python benchmarks/paper_multilabel.py --train /tmp/synth/train.svm --test /tmp/synth/test.svm

``--labels-per-row 1 --labels 19`` makes a sparse-label set (many rows with no label).
``--dense`` draws dense Gaussian features instead and each label from a sparse logistic model
with a low base rate (``--prevalence``): the shape of MULAN birds (260 dense features, 19
labels, about half the rows with none), on which h₀ fitted on 5 % is confidently wrong and a
small validation log lets many fits look good (issue 35)::

    python benchmarks/make_synthetic_multilabel.py /tmp/birdlike --dense --train-rows 320 \
        --features 260 --labels 19
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from sklearn.datasets import dump_svmlight_file, make_multilabel_classification


def dense_multilabel(n: int, d: int, q: int, prevalence: float, signal: float, seed: int):
    """Gaussian features; label l = 1[x·w_l + b_l + logistic noise > 0], w_l on 10 features.

    w_l's nonzero entries are N(0, ``signal``²).

    b_l is set so label l's rate is about ``prevalence`` (from 0.3× to 2× it across labels).
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    W = np.zeros((d, q))
    for label in range(q):
        W[rng.choice(d, size=min(10, d), replace=False), label] = rng.normal(0, signal, min(10, d))
    scores = X @ W + rng.logistic(size=(n, q))
    rates = prevalence * np.exp(rng.uniform(np.log(0.3), np.log(2.0), q))
    cut = [np.quantile(scores[:, j], 1 - min(max(r, 0.005), 0.5)) for j, r in enumerate(rates)]
    return X, (scores > np.array(cut)).astype(int)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="folder for train.svm and test.svm")
    p.add_argument("--train-rows", type=int, default=300)
    p.add_argument("--test-rows", type=int, default=2000)
    p.add_argument("--features", type=int, default=30)
    p.add_argument("--labels", type=int, default=8)
    p.add_argument(
        "--labels-per-row",
        type=int,
        default=2,
        help="mean labels per row (Poisson); 1 gives many rows with no label, as MULAN birds",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dense", action="store_true", help="dense Gaussian features (birds' shape)")
    p.add_argument("--prevalence", type=float, default=0.05, help="--dense: mean label rate")
    p.add_argument("--signal", type=float, default=1.5, help="--dense: weight scale")
    args = p.parse_args(argv)
    if args.dense:
        X, Y = dense_multilabel(
            args.train_rows + args.test_rows,
            args.features,
            args.labels,
            args.prevalence,
            args.signal,
            args.seed,
        )
    else:
        X, Y = make_multilabel_classification(
            n_samples=args.train_rows + args.test_rows,
            n_features=args.features,
            n_classes=args.labels,
            n_labels=args.labels_per_row,
            random_state=args.seed,
        )
    args.out.mkdir(parents=True, exist_ok=True)
    n = args.train_rows
    dump_svmlight_file(X[:n], Y[:n], str(args.out / "train.svm"), multilabel=True, zero_based=False)
    dump_svmlight_file(X[n:], Y[n:], str(args.out / "test.svm"), multilabel=True, zero_based=False)
    print(f"{args.out}: {n} training and {args.test_rows} test rows, {args.labels} labels")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
