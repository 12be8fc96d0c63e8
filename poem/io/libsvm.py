"""Reader for multilabel LibSVM / SVMlight files (e.g. Yeast, paper §6).

Each non-empty line is ``<labels> <index>:<value> ...`` where ``<labels>`` is a comma-separated
list of non-negative integer label ids (possibly empty) and feature indices are 1-based and
increasing (the LibSVM convention). Text after ``#`` is a comment. Parsing is done by
:func:`sklearn.datasets.load_svmlight_file`; when it rejects a file, the file is scanned again
line by line so that the error names the first offending line.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

__all__ = ["load_libsvm_multilabel"]

_MAX_SHOWN = 5


def load_libsvm_multilabel(
    path: str | Path,
    *,
    n_features: int | None = None,
    n_labels: int | None = None,
    zero_based: bool = False,
) -> tuple[sp.csr_matrix, np.ndarray]:
    r"""Load a multilabel LibSVM file into a sparse feature matrix and a 0/1 label matrix.

    .. math:: Y_{il} = [\, l \in L_i \,], \quad X_{ij} = v_{ij}

    where Lᵢ is the set of label ids on line i and v_{ij} the value given for feature j
    (0 when absent).

    Parameters
    ----------
    path : str or Path
        The LibSVM file.
    n_features : int or None, default=None
        Number of feature columns d; inferred from the largest index when None. Pass it for a
        test file so that train and test matrices have the same width.
    n_labels : int or None, default=None
        Number of labels q; inferred as the largest label id + 1 when None.
    zero_based : bool, default=False
        Whether feature indices start at 0 (LibSVM files start at 1).

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features), dtype float64
        Contexts xᵢ.
    Y : ndarray of shape (n_samples, n_labels), dtype int64
        True label vectors y*ᵢ ∈ {0, 1}^q.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If a line is malformed (the message gives the line number and the text), a label id
        is not a non-negative integer or is ≥ ``n_labels``, a feature value is not finite, a
        feature index exceeds ``n_features``, or the file holds no rows.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). Batch learning from logged bandit feedback through
    counterfactual risk minimization. JMLR 16. arXiv:1502.02362, §6 (data sets).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LibSVM file not found: {path}")
    for name, value in (("n_features", n_features), ("n_labels", n_labels)):
        if value is not None and (not isinstance(value, int | np.integer) or value < 1):
            raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    try:
        X, y = load_svmlight_file(
            str(path),
            n_features=n_features,
            multilabel=True,
            zero_based=zero_based,
            dtype=np.float64,
        )
    except ValueError as err:
        located = _first_malformed_line(path, n_features=n_features, zero_based=zero_based)
        if located is None:
            raise ValueError(f"{path}: not a valid LibSVM file ({err})") from err
        raise ValueError(located) from err
    n = X.shape[0]
    if n == 0:
        raise ValueError(f"{path}: the file holds no data rows")
    X = sp.csr_matrix(X, dtype=np.float64)
    Y = _label_matrix(path, y, n_labels)
    bad_rows = _nonfinite_rows(X)
    if bad_rows.size:
        raise ValueError(
            f"{path}: {bad_rows.size} of {n} rows have non-finite feature values (NaN or inf); "
            f"first lines: {_line_numbers(path, bad_rows)}"
        )
    return X, Y


def _label_matrix(path: Path, y: Any, n_labels: int | None) -> np.ndarray:
    """Turn sklearn's tuple-of-floats labels into a 0/1 matrix, checking every id."""
    n = len(y)
    invalid = [i for i, labels in enumerate(y) if any(not _is_label_id(v) for v in labels)]
    if invalid:
        raise ValueError(
            f"{path}: label ids must be non-negative integers; {len(invalid)} of {n} rows are not; "
            f"first lines: {_line_numbers(path, np.asarray(invalid))}"
        )
    max_id = max((int(v) for labels in y for v in labels), default=-1)
    q = max_id + 1 if n_labels is None else int(n_labels)
    if q < 1:
        raise ValueError(
            f"{path}: no row carries a label; pass n_labels to declare the label count"
        )
    too_large = [i for i, labels in enumerate(y) if any(int(v) >= q for v in labels)]
    if too_large:
        raise ValueError(
            f"{path}: {len(too_large)} of {n} rows have label ids >= n_labels={q}; "
            f"first lines: {_line_numbers(path, np.asarray(too_large))}"
        )
    Y = np.zeros((n, q), dtype=np.int64)
    for i, labels in enumerate(y):
        Y[i, [int(v) for v in labels]] = 1
    return Y


def _is_label_id(value: float) -> bool:
    return math.isfinite(value) and value >= 0 and value == int(value)


def _nonfinite_rows(X: sp.csr_matrix) -> np.ndarray:
    bad = ~np.isfinite(X.data)
    if not bad.any():
        return np.empty(0, dtype=np.int64)
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[bad]
    return np.unique(rows)


def _data_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, content without comment) of every line holding a row."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, raw in enumerate(fh, start=1):
            content = raw.split("#", 1)[0].strip()
            if content:
                yield number, content


def _line_numbers(path: Path, rows: np.ndarray) -> list[int]:
    """File line numbers of the first few data rows in ``rows`` (sorted row positions)."""
    wanted = set(np.sort(rows)[:_MAX_SHOWN].tolist())
    return [number for row, (number, _) in enumerate(_data_lines(path)) if row in wanted]


def _first_malformed_line(path: Path, *, n_features: int | None, zero_based: bool) -> str | None:
    """Describe the first line the LibSVM grammar rejects, or None if every line parses."""
    for number, content in _data_lines(path):
        reason = _line_problem(content, n_features=n_features, zero_based=zero_based)
        if reason is not None:
            shown = content if len(content) <= 80 else content[:77] + "..."
            return f"{path}, line {number}: {reason} in {shown!r}"
    return None


def _line_problem(content: str, *, n_features: int | None, zero_based: bool) -> str | None:
    tokens = content.split()
    if ":" not in tokens[0]:
        label_token, tokens = tokens[0], tokens[1:]
        for label in label_token.split(","):
            try:
                float(label)
            except ValueError:
                return f"label {label!r} is not a number"
    previous = -1
    for token in tokens:
        index_text, sep, value_text = token.partition(":")
        if not sep:
            return f"feature {token!r} is not of the form index:value"
        if index_text == "qid":
            continue
        try:
            index = int(index_text)
        except ValueError:
            return f"feature index {index_text!r} is not an integer"
        try:
            float(value_text)
        except ValueError:
            return f"feature value {value_text!r} of index {index} is not a number"
        lowest = 0 if zero_based else 1
        if index < lowest:
            return f"feature index {index} is below {lowest}"
        if index <= previous:
            return f"feature index {index} is not larger than the previous index {previous}"
        if n_features is not None and index - lowest >= n_features:
            return f"feature index {index} exceeds n_features={n_features}"
        previous = index
    return None
