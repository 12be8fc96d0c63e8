"""Reader for the Criteo test-bed's VW-style text (Lefortier et al. 2016, arXiv:1612.00367).

Format (what the test-bed's ``parser.py`` writes; one block per impression, blank lines between)::

    shared <impression id>| <shared tokens>
    0:<cost>:<propensity> | <tokens of the displayed (logged) candidate>
    | <tokens of another candidate>
    ...

A token is ``name`` or ``name:value`` (value 1 when omitted), e.g. ``1:300`` (numeric feature 1),
``3_0`` (categorical feature 3, value 0), ``16_2:2``. Exactly one candidate line per impression
carries the label; its cost is ``click_cost`` (0.001) for a click and ``no_click_cost`` (0.999)
otherwise, and its propensity is the logger's probability of that candidate.

Mapping to the candidate-set family: one row per impression; the candidates are the
impression's candidate lines in file order, with features ψ_{i,c} = the hashed candidate tokens
(:class:`sklearn.feature_extraction.FeatureHasher`, ``alternate_sign=False``, so files read
with the same ``n_features`` share one feature space); the action is the index of the labelled
line; the propensity is copied from the label; the loss is δ = −click with bounds [−1, 0]
(:meth:`LoggedBandit.from_rewards`); ``contexts`` holds the hashed shared tokens (row-level,
unused by a candidate-set policy) and the event ids are the impression ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.feature_extraction import FeatureHasher

from poem.data import CandidateSets, LoggedBandit

__all__ = ["CriteoFormatError", "parse_criteo_lines", "read_criteo"]


class CriteoFormatError(ValueError):
    """A line of a Criteo test-bed file is malformed; the message names the file and line number.

    Parameters
    ----------
    source : str
        File name (or ``"<lines>"``).
    line_number : int
        1-based line number.
    message : str
        What is wrong.
    """

    def __init__(self, source: str, line_number: int, message: str):
        self.source = source
        self.line_number = int(line_number)
        super().__init__(f"{source}, line {line_number}: {message}")


def _tokens(text: str, source: str, line_number: int) -> list[tuple[str, float]]:
    pairs = []
    for token in text.split():
        name, sep, value = token.partition(":")
        if not name:
            raise CriteoFormatError(source, line_number, f"empty feature name in token {token!r}")
        try:
            pairs.append((name, float(value) if sep else 1.0))
        except ValueError:
            raise CriteoFormatError(
                source, line_number, f"feature value of token {token!r} is not a number"
            ) from None
    return pairs


def _label(text: str, source: str, line_number: int, costs: dict[float, int]) -> tuple[int, float]:
    parts = text.split(":")
    if len(parts) != 3:
        raise CriteoFormatError(
            source, line_number, f"label {text!r} must be '<action>:<cost>:<propensity>'"
        )
    try:
        cost, propensity = float(parts[1]), float(parts[2])
    except ValueError:
        raise CriteoFormatError(
            source, line_number, f"label {text!r} has a non-numeric cost or propensity"
        ) from None
    if cost not in costs:
        raise CriteoFormatError(
            source,
            line_number,
            f"cost {parts[1]} is neither the click cost nor the no-click cost {sorted(costs)}",
        )
    if not (np.isfinite(propensity) and 0 < propensity <= 1):
        raise CriteoFormatError(source, line_number, f"propensity {parts[2]} is outside (0, 1]")
    return costs[cost], propensity


def parse_criteo_lines(
    lines: Iterable[str],
    *,
    source: str = "<lines>",
    click_cost: float = 0.001,
    no_click_cost: float = 0.999,
) -> list[dict[str, Any]]:
    """Parse test-bed lines into impressions (dicts of id, shared/candidate tokens, label).

    Parameters
    ----------
    lines : iterable of str
        The file's lines.
    source : str, default="<lines>"
        Name used in error messages.
    click_cost : float, default=0.001
        Cost written for a click.
    no_click_cost : float, default=0.999
        Cost written for no click.

    Returns
    -------
    list of dict
        Per impression: ``id`` (str), ``line`` (line number of its shared line), ``shared``
        and ``candidates`` (lists of (name, value) pairs), ``action``, ``click``, ``propensity``.

    Raises
    ------
    CriteoFormatError
        For a candidate line before any shared line, a line without ``|``, a malformed label or
        token, a cost that is neither ``click_cost`` nor ``no_click_cost``, a propensity outside
        (0, 1], or an impression with no candidate or not exactly one labelled candidate.
    """
    costs = {float(click_cost): 1, float(no_click_cost): 0}
    impressions: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None

    def close(block: dict[str, Any] | None) -> None:
        if block is None:
            return
        if not block["candidates"]:
            raise CriteoFormatError(
                source, block["line"], f"impression {block['id']} has no candidate lines"
            )
        if block["action"] is None:
            raise CriteoFormatError(
                source, block["line"], f"impression {block['id']} has no labelled candidate"
            )
        impressions.append(block)

    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        head, bar, body = line.partition("|")
        if not bar:
            raise CriteoFormatError(source, number, "no '|' separating the label from the features")
        head = head.strip()
        if head.startswith("shared"):
            close(current)
            impression_id = head[len("shared") :].strip()
            if not impression_id:
                raise CriteoFormatError(source, number, "shared line without an impression id")
            current = {
                "id": impression_id,
                "line": number,
                "shared": _tokens(body, source, number),
                "candidates": [],
                "action": None,
                "click": None,
                "propensity": None,
            }
            continue
        if current is None:
            raise CriteoFormatError(source, number, "candidate line before any 'shared' line")
        if head:
            if current["action"] is not None:
                raise CriteoFormatError(
                    source,
                    number,
                    f"second labelled candidate in impression {current['id']} (one is allowed)",
                )
            current["click"], current["propensity"] = _label(head, source, number, costs)
            current["action"] = len(current["candidates"])
        current["candidates"].append(_tokens(body, source, number))
    close(current)
    return impressions


def read_criteo(
    path: str | Path,
    *,
    n_features: int = 2**18,
    click_cost: float = 0.001,
    no_click_cost: float = 0.999,
) -> LoggedBandit:
    """Read a Criteo test-bed file into a candidate-set :class:`LoggedBandit`.

    Parameters
    ----------
    path : str or Path
        Test-bed text file.
    n_features : int, default=2**18
        Width of the hashed feature space (same value ⇒ same space across files).
    click_cost, no_click_cost : float, default=0.001, 0.999
        As in :func:`parse_criteo_lines`.

    Returns
    -------
    LoggedBandit
        ``family="candidates"``, losses −click with bounds [−1, 0], propensities as written.

    Raises
    ------
    CriteoFormatError
        For malformed lines (see :func:`parse_criteo_lines`), naming the line number.
    ValueError
        If the file holds no impression.
    """
    path = Path(path)
    with open(path, encoding="utf-8") as fh:
        impressions = parse_criteo_lines(
            fh, source=str(path), click_cost=click_cost, no_click_cost=no_click_cost
        )
    if not impressions:
        raise ValueError(f"{path} holds no impression")
    hasher = FeatureHasher(n_features=n_features, input_type="pairs", alternate_sign=False)
    candidate_tokens = [c for imp in impressions for c in imp["candidates"]]
    features = hasher.transform(candidate_tokens)
    shared = hasher.transform([imp["shared"] for imp in impressions])
    sizes = [len(imp["candidates"]) for imp in impressions]
    return LoggedBandit.from_rewards(
        rewards=np.array([imp["click"] for imp in impressions], dtype=np.float64),
        reward_bounds=(0.0, 1.0),
        contexts=shared,
        actions=np.array([imp["action"] for imp in impressions], dtype=np.int64),
        propensities=np.array([imp["propensity"] for imp in impressions], dtype=np.float64),
        family="candidates",
        candidates=CandidateSets.from_sizes(features, sizes),
        event_ids=np.array([imp["id"] for imp in impressions]),
        logging_model_version="criteo-testbed",
    )
