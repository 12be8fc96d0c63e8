"""What MLflow and the terminal say about a run: descriptions of versions and of the model.

MLflow's model pages show a description above the tags; this module writes them from what the
flow already recorded (the version's tags, the gate's ledger), so the first screen of a version
says what the gate decided, both risks, the bound and which champion it replaced, and the first
screen of the registered model says who is champion and what the ledger holds (the JSON of the
``gate_ledger`` tag stays the machine-readable record). :func:`decision_line` is the one line a
scheduled run prints for the worker's console.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from flows.config import TrackingConfig
from flows.ledger import LEDGER_MODEL, LEDGER_TAG, read_ledger
from flows.registry import FEEDBACK_TAG, REWARD

__all__ = [
    "decision_line",
    "describe_registry",
    "model_description",
    "version_description",
]

LOGGING_POLICY = "logging-policy"
logger = logging.getLogger(__name__)
_ESTIMATE = re.compile(r"^\s*(\S+)\s*\[\s*(\S+),\s*(\S+)\s*\]\s*\((.+)\)\s*$")


def _champion_name(version: str | None) -> str:
    """``champion v3``, or ``the logging policy`` (the champion before any promotion)."""
    if not version or version == LOGGING_POLICY:
        return "the logging policy"
    return f"champion v{version}"


def _number(text: str) -> str:
    """A tag's number with 4 decimals (``0.162434`` → ``0.1624``); the text if it is none."""
    try:
        return f"{float(text):.4f}"
    except ValueError:
        return text


def _estimate(tag: str | None) -> tuple[str, str, str]:
    """``(value, interval, estimator)`` of a ``<value> [<lower>, <upper>] (<estimator>)`` tag."""
    if not tag:
        return "n/a", "", ""
    match = _ESTIMATE.match(tag)
    if match is None:
        return tag, "", ""
    value, lower, upper, estimator = match.groups()
    return _number(value), f"[{_number(lower)}, {_number(upper)}]", estimator


def _as_reward(estimate: tuple[str, str, str]) -> tuple[str, str, str]:
    """A loss estimate ``(value, [lo, hi], estimator)`` as a reward: ``(−value, [−hi, −lo], …)``.

    DESIGN §3: a reward log is learned as losses δ = −reward, so its risks are negative
    rewards; the description shows the reward the user logged.
    """
    value, interval, estimator = estimate
    match = re.match(r"^\[(\S+), (\S+)\]$", interval)
    try:
        value = f"{-float(value):.4f}"
    except ValueError:
        return estimate
    if match is not None:
        lower, upper = (-float(v) for v in match.groups())
        interval = f"[{upper:.4f}, {lower:.4f}]"
    return value, interval, estimator


def _outcome(tags: Mapping[str, str]) -> str:
    """What the version did to the champion, from its tags."""
    decision = tags.get("gate_decision", "")
    gated = tags.get("gated_against")
    promotion = tags.get("promotion")
    if decision != "promoted":
        return f"{_champion_name(gated)} stays champion"
    if promotion == "done":
        return f"replaced {_champion_name(tags.get('replaced_champion') or gated)} as champion"
    if promotion == "superseded":
        return f"not promoted: the champion moved after it was gated against {gated}"
    if promotion == "interrupted":
        return "not promoted: its run ended before the promotion"
    return f"to replace {_champion_name(gated)} (promotion pending)"


def version_description(tags: Mapping[str, str]) -> str:
    """Markdown description of a model version, from the tags the flow gave it.

    The first line (plain text: the versions table shows it unrendered) is the decision, both
    risks, the gate's bound and the champion replaced; then a table of the estimates, the
    rows trained on and the gate's reasons.
    """
    decision = tags.get("gate_decision", "not gated")
    gated = tags.get("gated_against")
    challenger, champion, difference = (
        _estimate(tags.get(f"{role}_risk")) for role in ("challenger", "champion", "difference")
    )
    estimator = (challenger[2] or "").upper()
    measure, change, bound_kind = "risk", "difference", "upper confidence bound of the difference"
    bound = _number(tags.get("gate_upper_bound", "n/a"))
    if tags.get(FEEDBACK_TAG) == REWARD:  # the log gave rewards: show them, not −reward
        challenger, champion, difference = map(_as_reward, (challenger, champion, difference))
        measure, change, bound_kind = "reward", "gain", "lower confidence bound of the gain"
        bound = _as_reward((bound, "", ""))[0]
    risk = f"{estimator} {measure}" if estimator else measure
    lines = [
        f"{decision.upper()}: {risk} {challenger[0]} vs {champion[0]} of {_champion_name(gated)}; "
        f"gate bound {bound}; {_outcome(tags)}",
        "",
        f"| | {measure} | interval |",
        "|---|---|---|",
        f"| challenger (this version) | {challenger[0]} | {challenger[1]} |",
        f"| {_champion_name(gated)} | {champion[0]} | {champion[1]} |",
        f"| {change} | {difference[0]} | {difference[1]} |",
        "",
        f"Gate bound ({bound_kind}): {bound}.",
    ]
    if "n_rows" in tags:
        kind = tags.get("challenger_kind", "")
        lines.append(
            f"Trained on {int(tags['n_rows']):,} rows"
            + (
                f" (data fingerprint `{tags['data_fingerprint'][:12]}`)"
                if tags.get("data_fingerprint")
                else ""
            )
            + (f"; challenger {kind.replace('_', ' ')}" if kind else "")
            + "."
        )
    reasons = [r.strip() for r in tags.get("gate_reasons", "").split(" | ") if r.strip()]
    if reasons:
        lines += ["", "Gate reasons:", *(f"- {r}" for r in reasons)]
    return "\n".join(lines)


def _field(entry: Any, *names: str) -> Any:
    for name in names:
        if hasattr(entry, name):
            return getattr(entry, name)
    return None


def _seconds(timestamp: str | None) -> str:
    """An ISO timestamp to the second (``…T00:29:57.000000000`` → ``…T00:29:57``)."""
    return "?" if not timestamp else re.sub(r"\.\d+$", "", timestamp)


def _window(window: Any) -> str:
    start, end, rows = (getattr(window, k, None) for k in ("start", "end", "rows"))
    if start or end:
        return f"test rows {_seconds(start)} to {_seconds(end)}"
    return f"test rows `{rows}`" if rows else "test rows (unrecorded)"


def model_description(
    tracking: TrackingConfig, champion: str | None, entries: Sequence[Any]
) -> str:
    """Markdown description of the registered model: the champion and the gate's ledger.

    ``entries`` are the :class:`poem.ledger.LedgerEntry` that :func:`flows.ledger.read_ledger`
    returns (their JSON is the record the gate reads; this is its readable copy).
    """
    alias = tracking.champion_alias
    lines = [
        f"Policies learned by poem-pipeline's `retrain` flow; `@{alias}` is served "
        f"(at the last retrain: {_champion_name(champion)}). Each version's description says "
        "what the gate decided.",
        "",
    ]
    if not entries:
        lines.append("Gate ledger: no attempt recorded yet.")
        return "\n".join(lines)
    lines.append(
        f"Gate ledger ({len(entries)} attempt{'s' if len(entries) != 1 else ''}; the JSON is in "
        f"the tags `{LEDGER_TAG}.*` of the registered model `{LEDGER_MODEL}`):"
    )
    for entry in entries:
        number = _field(entry, "attempt", "number")
        alpha = _field(entry, "alpha")
        run_id = str(_field(entry, "run_id") or "")
        alpha_text = f"α = {alpha:.4g}" if isinstance(alpha, int | float) else "α = ?"
        lines.append(
            f"- attempt {number} against {_champion_name(str(_field(entry, 'champion')))} on "
            f"{_window(_field(entry, 'window'))}: {alpha_text}"
            + (f" (run `{run_id[:8]}`)" if run_id else "")
        )
    return "\n".join(lines)


def describe_registry(client: MlflowClient, tracking: TrackingConfig, version: str) -> None:
    """Write the descriptions of ``version`` and of the registered model from what is recorded.

    Called after a version is registered and again after it is promoted. A failure is not the
    run's failure (one warning): the descriptions are a view of the tags, which stay the record.
    """
    name = tracking.registered_model
    try:
        tags = dict(client.get_model_version(name, version).tags)
        client.update_model_version(name, version, description=version_description(tags))
        try:
            champion = str(client.get_model_version_by_alias(name, tracking.champion_alias).version)
        except MlflowException:
            champion = None
        text = model_description(tracking, champion, read_ledger(client, tracking))
        client.update_registered_model(name, description=text)
    except Exception as exc:  # noqa: BLE001 - never fail (and retry) a registration for a view
        logger.warning("could not write the descriptions of version %s: %s", version, exc)


def decision_line(result: Any, partitions: Sequence[str]) -> str:
    """The one line a scheduled run prints: partitions, decision, both risks, bound, champion.

    ``result`` is a :class:`flows.retrain.RetrainResult`.
    """
    m = result.metrics

    def num(key: str, sign: str = "") -> str:
        value = m.get(key)
        return "n/a" if value is None else f"{value:{sign}.4f}"

    risk = f"{result.estimator.upper()} risk" if result.estimator else "risk"
    moved = "is now" if result.decision == "promoted" else "stays"
    after = f"v{result.champion_version}" if result.champion_version else "the logging policy"
    return (
        f"retrain on {', '.join(partitions)}: {result.decision.upper()} challenger "
        f"v{result.challenger_version} ({risk} {num('challenger_risk')} vs "
        f"{num('champion_risk')} of {_champion_name(result.previous_champion_version)}, bound "
        f"{num('risk_difference_ucb', '+')}); champion {moved} {after}"
    )
