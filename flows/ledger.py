"""The gate's attempt ledger on the registered model: MLflow tag I/O (DESIGN §5, §6).

The math (which attempt a decision is, the α it may spend) is :mod:`poem.ledger`; this module
reads and writes the registered model's tag ``gate_ledger`` (the attempts against the current
champion; a promotion starts a new ledger). An attempt is recorded *before* the decision, so a
run that crashes after the gate has still spent its α, and under the promotion lock
(:func:`flows.registry_lock.registry_lock`), so concurrent retrains on one window get attempts
k and k + 1.
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

__all__ = ["LEDGER_TAG", "LOGGING_POLICY", "read_ledger", "record_attempt"]

LEDGER_TAG = "gate_ledger"
LOGGING_POLICY = "logging-policy"  # the champion before any promotion


def read_ledger(client: Any, tracking: TrackingConfig) -> list[LedgerEntry]:
    """The recorded attempts (none when the registered model does not exist yet)."""
    try:
        model = client.get_registered_model(tracking.registered_model)
    except MlflowException:
        return []
    return entries_from_json(model.tags.get(LEDGER_TAG))


def record_attempt(
    client: Any,
    tracking: TrackingConfig,
    champion_version: str | None,
    window: TestWindow,
    gate: GateConfig,
    run_id: str,
) -> Attempt:
    """Record the next attempt on ``window`` against the champion and return it (with its α).

    Parameters
    ----------
    client : MlflowClient
    tracking : TrackingConfig
    champion_version : str or None
        The champion gated against (None: the logging policy).
    window : TestWindow
        The test rows (:func:`poem.ledger.window_of`).
    gate : GateConfig
        ``confidence_level`` (1 − α of the window) and ``retry_fraction``.
    run_id : str
        The MLflow run of this attempt (for audit).

    Returns
    -------
    Attempt
    """
    champion = champion_version or LOGGING_POLICY
    with registry_lock(client, tracking.uri, tracking.registered_model):
        entries = [e for e in read_ledger(client, tracking) if e.champion == champion]
        attempt = next_attempt(
            entries,
            champion,
            window,
            alpha=1.0 - gate.confidence_level,
            retry_fraction=gate.retry_fraction,
        )
        entries.append(LedgerEntry(champion, window, attempt.number, attempt.alpha, run_id))
        ensure_registered_model(client, tracking.registered_model)
        client.set_registered_model_tag(
            tracking.registered_model, LEDGER_TAG, entries_to_json(entries)
        )
    return attempt
