"""Write a synthetic multilabel train/test pair (LibSVM multilabel format) for paper_multilabel.py.

scikit-learn's ``make_multilabel_classification`` (bag-of-words features, q labels); a small
training part gives the small logs on which a learner must not do harm (issue 21)::

    python benchmarks/make_synthetic_multilabel.py /tmp/synth --train-rows 300
    python benchmarks/paper_multilabel.py --train /tmp/synth/train.svm --test /tmp/synth/test.svm

``--labels-per-row 1 --labels 19`` makes a sparse-label set (many rows with no label).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sklearn.datasets import dump_svmlight_file, make_multilabel_classification


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
    args = p.parse_args(argv)
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
