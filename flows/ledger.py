"""The gate's attempt ledger in the MLflow registry: tag I/O (DESIGN §5, §6).

The math (which attempt a decision is, the α it may spend, the α and q a window pinned) is
:mod:`poem.ledger`; this module reads and writes the entries. They live on one registered
model of their own, :data:`LEDGER_MODEL` (no versions; tags ``gate_ledger.0000``, ``.0001``,
… holding the JSON in pieces), so the ledger is keyed by the test window only: neither
``tracking.registered_model`` nor the champion's version string selects or resets it. Entries
an older gate wrote on the project's registered model (tag ``gate_ledger``) are read too.

An attempt is recorded *before* the decision, with the entropy its order and coin are drawn
from, so a run that crashes after the gate has still spent its α, and under the ledger's
lock (:func:`flows.registry_lock.registry_lock`), so concurrent retrains on one window get
attempts k and k + 1.
"""

from __future__ import annotations

from typing import Any

from mlflow.exceptions import MlflowException

from flows.config import GateConfig, TrackingConfig
from flows.registry import ensure_registered_model
from flows.registry_lock import registry_lock
from poem.ledger import (
    Attempt,
    LedgerEntry,
    TestWindow,
    entries_from_json,
    entries_to_json,
    next_attempt,
)

__all__ = ["LEDGER_MODEL", "LEDGER_TAG", "LOGGING_POLICY", "read_ledger", "record_attempt"]

LEDGER_MODEL = "poem-gate-ledger"
LEDGER_TAG = "gate_ledger"
LOGGING_POLICY = "logging-policy"  # the champion before any promotion
_PIECE = 90_000  # characters per tag (MLflow allows 100,000 per registered-model tag)


def _tags(client: Any, name: str) -> dict[str, str]:
    try:
        return dict(client.get_registered_model(name).tags)
    except MlflowException:
        return {}


def read_ledger(client: Any, tracking: TrackingConfig | None = None) -> list[LedgerEntry]:
    """Every recorded attempt (none when nothing was recorded yet).

    ``tracking``: also the entries an older gate kept on ``tracking.registered_model``.
    """
    tags = _tags(client, LEDGER_MODEL)
    pieces = sorted(k for k in tags if k.startswith(f"{LEDGER_TAG}."))
    entries = entries_from_json("".join(tags[k] for k in pieces))
    if tracking is not None:
        entries += entries_from_json(_tags(client, tracking.registered_model).get(LEDGER_TAG))
    return entries


def record_attempt(
    client: Any,
    tracking: TrackingConfig,
    champion_version: str | None,
    window: TestWindow,
    gate: GateConfig,
    run_id: str,
) -> Attempt:
    """Record the next attempt on ``window`` and return it (with its α and its entropy).

    Parameters
    ----------
    client : MlflowClient
    tracking : TrackingConfig
        The registry (``uri``); its ``registered_model`` is not part of the key.
    champion_version : str or None
        The champion gated against (None: the logging policy); recorded for audit only.
    window : TestWindow
        The test rows (:func:`poem.ledger.window_of`).
    gate : GateConfig
        ``confidence_level`` (1 − α of the window), ``retry_fraction`` and ``seed`` (None:
        fresh entropy; a given seed is recorded as given, a replay).
    run_id : str
        The MLflow run of this attempt (for audit).

    Returns
    -------
    Attempt

    Raises
    ------
    ValueError
        When the window's first attempt pinned another α or q (:func:`poem.ledger.next_attempt`).
    """
    with registry_lock(client, tracking.uri, LEDGER_MODEL):
        entries = read_ledger(client, tracking)
        attempt = next_attempt(
            entries,
            window,
            alpha=1.0 - gate.confidence_level,
            retry_fraction=gate.retry_fraction,
            order_seed=gate.seed,
        )
        own = read_ledger(client)  # this ledger's entries (not the legacy ones)
        own.append(attempt.entry(run_id, champion_version or LOGGING_POLICY))
        text = entries_to_json(own)
        ensure_registered_model(client, LEDGER_MODEL)
        for k, start in enumerate(range(0, len(text), _PIECE)):
            client.set_registered_model_tag(
                LEDGER_MODEL, f"{LEDGER_TAG}.{k:04d}", text[start : start + _PIECE]
            )
    return attempt
