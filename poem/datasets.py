"""Supervised data sets used to simulate bandit feedback (paper §6, DESIGN §9).

``load_dataset`` returns a :class:`SupervisedDataset` with a fixed train/test split:

``"digits"``
    scikit-learn's bundled 8×8 digits (no network): discrete family, 10 classes, 64 pixel
    features scaled to [0, 1], stratified seeded split with 2/3 of the rows for training.
``"yeast"``
    ``<data_dir>/yeast/yeast_{train,test}.svm`` (LibSVM): multilabel, 103 dense features,
    14 labels, 1500 / 917 rows (the paper's Table 2 figures).
``"tmc2007"``
    ``<data_dir>/tmc2007/tmc2007-500-{train,test}.arff`` (MULAN sparse ARFF): multilabel,
    500 binary word features (the paper used 30438), 22 labels, 21519 / 7077 rows.
``"emotions"``
    ``<data_dir>/mulan/emotions-{train,test}.arff`` (MULAN ARFF): multilabel, 72 dense audio
    features, 6 labels, 391 / 202 rows.
``"medical"``
    ``<data_dir>/mulan/medical-{train,test}.arff`` (MULAN sparse ARFF): multilabel, 1449
    binary word features, 45 labels (several rare), 333 / 645 rows.

The real data sets are never downloaded or guessed: ``data_dir`` must be given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from poem.io.arff import load_mulan_arff
from poem.io.libsvm import load_libsvm_multilabel

__all__ = ["DATASETS", "SupervisedDataset", "load_dataset", "load_files"]

DATASETS = ("digits", "yeast", "tmc2007", "emotions", "medical")
_DIGITS_TEST_SIZE = 1.0 / 3.0
_YEAST = {"n_features": 103, "n_labels": 14}
_TMC2007_LABELS = 22
_MULAN_LABELS = {"emotions": 6, "medical": 45}  # label counts of the MULAN sets


@dataclass(frozen=True, eq=False)
class SupervisedDataset:
    """A supervised data set with a fixed train/test split.

    Parameters
    ----------
    name : str
        Data set name, e.g. ``"yeast"``.
    family : {"discrete", "multilabel"}
        Policy family of the simulated bandit problem.
    X_train : ndarray or scipy.sparse.csr_matrix of shape (n_train, n_features)
        Training contexts xᵢ.
    Y_train : ndarray of shape (n_train,) or (n_train, n_labels)
        Training labels y*ᵢ: class indices (discrete) or 0/1 label vectors (multilabel).
    X_test : ndarray or scipy.sparse.csr_matrix of shape (n_test, n_features)
        Test contexts.
    Y_test : ndarray of shape (n_test,) or (n_test, n_labels)
        Test labels.
    feature_names : tuple of str
        Names of the features.
    n_labels : int or None, default=None
        Number of classes K (discrete) or labels q (multilabel); inferred from the labels
        when None (width of Y, or the largest class index + 1).

    Raises
    ------
    ValueError
        If the family is unknown or the parts disagree in rows, features or labels.
    """

    name: str
    family: str
    X_train: Any
    Y_train: np.ndarray
    X_test: Any
    Y_test: np.ndarray
    feature_names: tuple[str, ...]
    n_labels: int | None = None

    def __post_init__(self) -> None:
        if self.family not in ("discrete", "multilabel"):
            raise ValueError(f"family must be 'discrete' or 'multilabel', got {self.family!r}")
        for part in ("train", "test"):
            X, Y = getattr(self, f"X_{part}"), np.asarray(getattr(self, f"Y_{part}"))
            if X.shape[0] != Y.shape[0]:
                raise ValueError(f"X_{part} has {X.shape[0]} rows but Y_{part} has {Y.shape[0]}")
        if self.X_train.shape[1] != self.X_test.shape[1]:
            raise ValueError(
                f"X_train has {self.X_train.shape[1]} features "
                f"but X_test has {self.X_test.shape[1]}"
            )
        if self.n_labels is None:
            if self.family == "multilabel":
                n_labels = np.asarray(self.Y_train).shape[1]
            else:
                n_labels = int(max(np.max(self.Y_train), np.max(self.Y_test))) + 1
            object.__setattr__(self, "n_labels", int(n_labels))
        object.__setattr__(self, "feature_names", tuple(str(f) for f in self.feature_names))

    @property
    def n_features(self) -> int:
        """Number of features d."""
        return int(self.X_train.shape[1])


def load_dataset(
    name: str, data_dir: str | Path | None = None, *, random_state: int = 0
) -> SupervisedDataset:
    """Load one of the supervised data sets behind the simulated bandit benchmarks.

    Parameters
    ----------
    name : {"digits", "yeast", "tmc2007", "emotions", "medical"}
        Which data set.
    data_dir : str or Path or None, default=None
        Folder holding ``yeast/``, ``tmc2007/`` and ``mulan/`` (the shared data folder).
        Required for every set but ``"digits"``, which ships with scikit-learn.
    random_state : int, default=0
        Seed of the stratified digits train/test split (the other data sets come split).

    Returns
    -------
    SupervisedDataset
        The train and test parts.

    Raises
    ------
    ValueError
        If ``name`` is unknown or a file does not have the expected shape.
    FileNotFoundError
        If ``data_dir`` is missing for a real data set, or a file is absent.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {DATASETS}, got {name!r}")
    if name == "digits":
        bunch = load_digits()
        X = np.asarray(bunch.data, dtype=np.float64) / 16.0  # pixel intensities 0..16 -> [0, 1]
        y = np.asarray(bunch.target, dtype=np.int64)
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=_DIGITS_TEST_SIZE, stratify=y, random_state=random_state
        )
        names = tuple(str(f) for f in bunch.feature_names)
        n_classes = int(bunch.target_names.size)
        return SupervisedDataset(
            "digits", "discrete", X_train, y_train, X_test, y_test, names, n_classes
        )
    if data_dir is None:
        raise FileNotFoundError(
            f"the {name} data set is read from files: pass data_dir (on the command line "
            f"--data-dir), the folder that holds {name}/ (e.g. ../shared/data)"
        )
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise FileNotFoundError(f"data_dir {data_dir} is not a folder (pass --data-dir)")
    if name == "yeast":
        parts = []
        for split in ("train", "test"):
            X, Y = load_libsvm_multilabel(data_dir / "yeast" / f"yeast_{split}.svm", **_YEAST)
            parts.extend([X.toarray(), Y])  # 103 dense features: dense arrays are faster
        names = tuple(f"f{j + 1}" for j in range(_YEAST["n_features"]))
        return SupervisedDataset("yeast", "multilabel", *parts, names, _YEAST["n_labels"])
    if name in _MULAN_LABELS:
        train, test = (data_dir / "mulan" / f"{name}-{part}.arff" for part in ("train", "test"))
        return load_files(train, test, n_labels=_MULAN_LABELS[name], name=name)
    return _load_tmc2007(data_dir / "tmc2007")


def _load_tmc2007(folder: Path) -> SupervisedDataset:
    X_train, Y_train, names = load_mulan_arff(
        folder / "tmc2007-500-train.arff", n_labels=_TMC2007_LABELS, return_feature_names=True
    )
    X_test, Y_test, test_names = load_mulan_arff(
        folder / "tmc2007-500-test.arff", n_labels=_TMC2007_LABELS, return_feature_names=True
    )
    if test_names != names:
        raise ValueError(
            f"tmc2007: train and test files declare different features "
            f"({len(names)} vs {len(test_names)} attributes)"
        )
    return SupervisedDataset(
        "tmc2007", "multilabel", X_train, Y_train, X_test, Y_test, names, _TMC2007_LABELS
    )


def load_files(
    train: str | Path,
    test: str | Path,
    *,
    n_labels: int | None = None,
    name: str | None = None,
) -> SupervisedDataset:
    """Load a multilabel train/test pair of LibSVM or MULAN ARFF files (chosen by suffix).

    Files ending in ``.arff`` are read by :func:`poem.io.arff.load_mulan_arff` (``n_labels``
    required: the last q attributes are the labels); any other file by
    :func:`poem.io.libsvm.load_libsvm_multilabel`, padding both parts to the larger feature
    and label count.

    Parameters
    ----------
    train, test : str or Path
        The training and test files.
    n_labels : int or None, default=None
        Number of labels q; required for ARFF, inferred for LibSVM when None.
    name : str or None, default=None
        Data set name; the training file's stem when None.

    Returns
    -------
    SupervisedDataset
        Multilabel family, sparse CSR contexts.

    Raises
    ------
    FileNotFoundError
        If a file is absent.
    ValueError
        If the two files have different formats, ARFF is given without ``n_labels``, or the
        files are malformed (see the loaders).
    """
    train, test = Path(train), Path(test)
    is_arff = [p.suffix.lower() == ".arff" for p in (train, test)]
    if is_arff[0] != is_arff[1]:
        raise ValueError(
            f"train and test files must have the same format, got {train.name} and {test.name}"
        )
    name = train.stem if name is None else name
    if is_arff[0]:
        if n_labels is None:
            raise ValueError(
                "n_labels is required for ARFF files (the last n_labels attributes are labels)"
            )
        X_train, Y_train, names = load_mulan_arff(
            train, n_labels=n_labels, return_feature_names=True
        )
        X_test, Y_test = load_mulan_arff(test, n_labels=n_labels)
        return SupervisedDataset(
            name, "multilabel", X_train, Y_train, X_test, Y_test, names, n_labels
        )
    X_train, Y_train = load_libsvm_multilabel(train, n_labels=n_labels)
    X_test, Y_test = load_libsvm_multilabel(test, n_labels=n_labels)
    d = max(X_train.shape[1], X_test.shape[1])
    q = max(Y_train.shape[1], Y_test.shape[1])
    X_train, X_test = (
        sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], d))
        for X in (X_train, X_test)
    )
    Y_train, Y_test = (np.pad(Y, ((0, 0), (0, q - Y.shape[1]))) for Y in (Y_train, Y_test))
    names = tuple(f"f{j + 1}" for j in range(d))
    return SupervisedDataset(name, "multilabel", X_train, Y_train, X_test, Y_test, names, q)
