"""Reader for MULAN multilabel ARFF files, sparse or dense (e.g. TMC2007-500, paper §6).

MULAN stores a multilabel data set as one ARFF relation whose **last q attributes** are the
binary labels. ``scipy.io.arff`` cannot read sparse ARFF (rows such as ``{3 1,17 0.5,501 1}``),
so this module has its own small parser for the subset of ARFF these files use:

- header lines ``@relation``, ``@attribute <name> <type>`` and ``@data`` (keywords in any case;
  names may be quoted); ``%`` starts a comment line;
- attribute types ``numeric``, ``real``, ``integer`` and nominal ``{v1, v2, ...}``; a nominal
  value is stored as its position in the declaration (Weka's internal encoding), so ``{0,1}``
  labels read as 0 and 1 and an omitted sparse value is the first declared value;
- dense rows ``v1,v2,...`` and sparse rows ``{index value, ...}`` (0-based indices, omitted
  entries are 0).

Missing values (``?``), string/date/relational attributes and instance weights are rejected
with the line number: nothing is imputed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

__all__ = ["load_mulan_arff"]

_MAX_SHOWN = 5
_ATTRIBUTE = re.compile(
    r"""@attribute\s+('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s{]+)\s*(.*)$""", re.I
)
_NUMERIC_TYPES = ("numeric", "real", "integer")


@dataclass(frozen=True)
class _Attribute:
    name: str
    nominal: dict[str, int] | None  # value -> position, None for numeric attributes


class _ArffError(ValueError):
    """Internal: a problem on one line, re-raised with the path."""


def load_mulan_arff(
    path: str | Path, *, n_labels: int, return_feature_names: bool = False
) -> tuple[sp.csr_matrix, np.ndarray] | tuple[sp.csr_matrix, np.ndarray, tuple[str, ...]]:
    r"""Load a MULAN ARFF file: all attributes but the last q are features, the last q labels.

    .. math:: X_{ij} = v_{ij} \; (j < d), \qquad Y_{il} = v_{i,d+l} \in \{0, 1\}

    where v_{ij} is the value of attribute j on data row i, d the number of features and q
    the number of labels (omitted sparse values are 0).

    Parameters
    ----------
    path : str or Path
        The ARFF file.
    n_labels : int
        Number of labels q, the trailing attributes of the relation.
    return_feature_names : bool, default=False
        Also return the names of the d feature attributes.

    Returns
    -------
    X : scipy.sparse.csr_matrix of shape (n_samples, n_features), dtype float64
        Contexts xᵢ.
    Y : ndarray of shape (n_samples, n_labels), dtype int64
        True label vectors y*ᵢ ∈ {0, 1}^q.
    feature_names : tuple of str
        Only when ``return_feature_names`` is True.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If the header or a data row is malformed, a value is missing (``?``) or not of its
        attribute's type, a label is not 0/1, or ``n_labels`` is not smaller than the number of
        attributes. The message names the line number (and the attribute when known).

    References
    ----------
    Tsoumakas, G. et al. (2011). MULAN: A Java library for multi-label learning. JMLR 12,
    2411-2414 (data format). Swaminathan, A. & Joachims, T. (2015), arXiv:1502.02362, §6.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"ARFF file not found: {path}")
    if not isinstance(n_labels, int | np.integer) or n_labels < 1:
        raise ValueError(f"n_labels must be a positive integer, got {n_labels!r}")
    try:
        X, Y, names = _parse(path, int(n_labels))
    except _ArffError as err:
        raise ValueError(f"{path}, {err}") from None
    if return_feature_names:
        return X, Y, names
    return X, Y


def _parse(path: Path, n_labels: int) -> tuple[sp.csr_matrix, np.ndarray, tuple[str, ...]]:
    attributes: list[_Attribute] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        data_start = None
        for number, raw in enumerate(fh, start=1):
            line = raw.strip()
            if not line or line.startswith("%"):
                continue
            keyword = line.split(None, 1)[0].lower()
            if keyword == "@relation":
                continue
            if keyword == "@attribute":
                attributes.append(_parse_attribute(line, number))
            elif keyword == "@data":
                data_start = number
                break
            else:
                raise _ArffError(
                    f"line {number}: expected @relation, @attribute or @data, got {line[:60]!r}"
                )
        if data_start is None:
            raise _ArffError("end of file reached without an @data section")
        n_attributes = len(attributes)
        if n_labels >= n_attributes:
            raise _ArffError(
                f"line {data_start}: n_labels={n_labels} but the relation has only {n_attributes} "
                "attributes; at least one feature is needed"
            )
        rows: list[int] = []
        cols: list[int] = []
        vals: list[float] = []
        line_numbers: list[int] = []
        for number, raw in enumerate(fh, start=data_start + 1):
            line = raw.strip()
            if not line or line.startswith("%"):
                continue
            row = len(line_numbers)
            entries = _sparse_entries if line.startswith("{") else _dense_entries
            for index, value in entries(line, number, attributes):
                if value != 0.0:
                    rows.append(row)
                    cols.append(index)
                    vals.append(value)
            line_numbers.append(number)
    n = len(line_numbers)
    if n == 0:
        raise _ArffError(f"line {data_start}: the @data section holds no rows")
    n_features = n_attributes - n_labels
    full = sp.csr_matrix(
        (
            np.asarray(vals, dtype=np.float64),
            (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)),
        ),
        shape=(n, n_attributes),
    )
    X = sp.csr_matrix(full[:, :n_features], dtype=np.float64)
    X.sort_indices()
    label_values = full[:, n_features:].toarray()
    _check_labels(label_values, attributes[n_features:], line_numbers)
    names = tuple(a.name for a in attributes[:n_features])
    return X, label_values.astype(np.int64), names


def _unquote(token: str) -> str:
    token = token.strip()
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", token[1:-1])
    return token


def _parse_attribute(line: str, number: int) -> _Attribute:
    match = _ATTRIBUTE.match(line)
    if match is None or not match.group(2):
        raise _ArffError(f"line {number}: malformed @attribute declaration {line[:60]!r}")
    name, kind = _unquote(match.group(1)), match.group(2).strip()
    if kind.startswith("{"):
        if not kind.endswith("}"):
            raise _ArffError(f"line {number}: nominal attribute {name!r} lacks its closing brace")
        values = [_unquote(v) for v in _split_values(kind[1:-1])]
        return _Attribute(name, {v: k for k, v in enumerate(values)})
    if kind.lower() in _NUMERIC_TYPES:
        return _Attribute(name, None)
    raise _ArffError(
        f"line {number}: attribute {name!r} has unsupported type {kind[:30]!r}; "
        f"only {', '.join(_NUMERIC_TYPES)} and nominal {{...}} are read"
    )


def _split_values(text: str) -> list[str]:
    """Split on commas outside single or double quotes (quotes are kept, see _unquote)."""
    if "'" not in text and '"' not in text:
        return [t.strip() for t in text.split(",")]
    tokens, current, quote, escaped = [], [], "", False
    for char in text:
        if escaped:
            escaped = False
        elif char == "\\" and quote:
            escaped = True
        elif quote and char == quote:
            quote = ""
        elif not quote and char in "'\"":
            quote = char
        elif not quote and char == ",":
            tokens.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    tokens.append("".join(current).strip())
    return tokens


def _convert(token: str, attribute: _Attribute, number: int) -> float:
    value = _unquote(token)
    if value == "?":
        raise _ArffError(
            f"line {number}: attribute {attribute.name!r} is missing ('?'); "
            "missing values are not imputed"
        )
    if attribute.nominal is None:
        try:
            return float(value)
        except ValueError:
            raise _ArffError(
                f"line {number}: attribute {attribute.name!r} value {value!r} is not a number"
            ) from None
    try:
        return float(attribute.nominal[value])
    except KeyError:
        raise _ArffError(
            f"line {number}: attribute {attribute.name!r} value {value!r} is not one of its "
            f"declared values {sorted(attribute.nominal)[:10]}"
        ) from None


def _sparse_entries(
    line: str, number: int, attributes: list[_Attribute]
) -> list[tuple[int, float]]:
    if not line.endswith("}") or line.find("}") != len(line) - 1:
        raise _ArffError(
            f"line {number}: sparse row must end with '}}' (instance weights are not supported): "
            f"{line[:60]!r}"
        )
    body = line[1:-1].strip()
    if not body:
        return []
    entries: list[tuple[int, float]] = []
    seen: set[int] = set()
    for item in _split_values(body):
        parts = item.split(None, 1)
        if len(parts) != 2:
            raise _ArffError(
                f"line {number}: sparse entry {item.strip()!r} is not of the form 'index value'"
            )
        try:
            index = int(parts[0])
        except ValueError:
            raise _ArffError(
                f"line {number}: sparse index {parts[0]!r} is not an integer"
            ) from None
        if not 0 <= index < len(attributes):
            raise _ArffError(
                f"line {number}: sparse index {index} is outside 0..{len(attributes) - 1}"
            )
        if index in seen:
            raise _ArffError(f"line {number}: sparse index {index} appears twice")
        seen.add(index)
        entries.append((index, _convert(parts[1], attributes[index], number)))
    return entries


def _dense_entries(line: str, number: int, attributes: list[_Attribute]) -> list[tuple[int, float]]:
    tokens = _split_values(line)
    if len(tokens) != len(attributes):
        raise _ArffError(
            f"line {number}: dense row has {len(tokens)} values, "
            f"expected {len(attributes)} attributes"
        )
    return [(j, _convert(token, attributes[j], number)) for j, token in enumerate(tokens)]


def _check_labels(values: np.ndarray, labels: list[_Attribute], line_numbers: list[int]) -> None:
    bad = (values != 0.0) & (values != 1.0)
    if not bad.any():
        return
    bad_rows = np.flatnonzero(bad.any(axis=1))
    bad_labels = [labels[j].name for j in np.flatnonzero(bad.any(axis=0))][:_MAX_SHOWN]
    lines = [line_numbers[i] for i in bad_rows[:_MAX_SHOWN]]
    raise _ArffError(
        f"lines {lines}: {bad_rows.size} of {values.shape[0]} rows have label values other than "
        f"0/1 (labels {bad_labels}); the last n_labels={len(labels)} attributes must be the "
        "binary labels"
    )
