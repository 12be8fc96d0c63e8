"""The counterfactual A/B gate on the test split (DESIGN §5) and its report."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from data_checks.estimation import ESTIMATED, LOGGED  # the metadata's propensity_source
from flows.config import ChecksConfig, DataConfig, GateConfig, TrackingConfig
from flows.ledger import record_attempt
from flows.registry import alias_version, load_version_policy
from flows.tasks import IO_RETRIES, stage_done
from flows.tracking import TrackedRun, client_for, log_artifact, log_json, log_metrics, log_text
from poem.diagnostics.gate_plot import plot_gate
from poem.gate import GateRows, gate_decision
from poem.gate_estimated import EstimatedGateRows, estimated_gate_decision, estimated_gate_rows
from poem.io.declared import declared_min_propensity, gate_min_propensity


@task(name="load-champion", cache_policy=NO_CACHE, **IO_RETRIES)
def load_champion(tracking: TrackingConfig) -> tuple[str | None, Any]:
    """Load the ``champion`` version and its policy, or ``(None, None)`` (the logging policy)."""
    client = client_for(tracking)
    version = alias_version(client, tracking, tracking.champion_alias)
    return version, None if version is None else load_version_policy(client, tracking, version)


@task(name="declared-min-propensity", cache_policy=NO_CACHE, **IO_RETRIES)
def declared_floor(data: DataConfig, checks: ChecksConfig) -> float | None:
    """The logger's floor the gate may assume: log metadata ``min_propensity`` or the config's."""
    return gate_min_propensity(declared_min_propensity(data.path), checks.min_propensity)


@task(name="open-gate-attempt", cache_policy=NO_CACHE, **IO_RETRIES)
def open_attempt(
    tracking: TrackingConfig, champion_version: Any, rows: GateRows, gate: Any, run: TrackedRun
) -> Any:
    """Record this attempt, with its fresh entropy, on the window's ledger (:mod:`flows.ledger`)."""
    return record_attempt(
        client_for(tracking), tracking, champion_version, rows.window, gate, run.run_id
    )


@task(name="estimated-gate-inputs", cache_policy=NO_CACHE, on_completion=[stage_done])
def estimated_gate_inputs(challenger: Any, champion: Any, split: Any) -> EstimatedGateRows:
    """The gate's inputs on estimated propensities (``poem.gate_estimated.estimated_gate_rows``).

    The propensity and loss models are fitted on the validation rows (never the test rows)
    and score the test rows; for a log whose metadata says ``propensity_source: estimated``.
    """
    return estimated_gate_rows(challenger, champion, split.log("validation"), split.log("test"))


@task(name="gate-candidate", cache_policy=NO_CACHE, on_completion=[stage_done])
def gate_candidate(
    rows: GateRows | EstimatedGateRows,
    gate: GateConfig,
    failed_checks: list[str],
    min_propensity: float | None = None,
    attempt: Any = None,
    propensity_source: str = LOGGED,
) -> Any:
    """Compare challenger and champion on the test rows (:func:`poem.gate.gate_decision`).

    ``rows``: the test rows' vectors (:func:`~flows.tasks.split.gate_inputs`), or, when the
    prepared log's metadata says ``propensity_source: estimated``, the
    :func:`estimated_gate_inputs` (then :func:`poem.gate_estimated.estimated_gate_decision`
    decides, labelled as resting on estimated propensities); ``min_propensity``: the declared
    floor (:func:`declared_floor`); ``attempt``: this attempt on the window
    (:func:`open_attempt`), whose α the decision spends and whose entropy draws the rows'
    order (and the coin, with ``gate.randomized``). Estimated propensities with the logged
    rows' vectors are refused: a failed precondition, one line, never a promotion.
    """
    if propensity_source not in (LOGGED, ESTIMATED):
        raise ValueError(
            f"propensity_source must be {LOGGED!r} or {ESTIMATED!r}, got {propensity_source!r}"
        )
    common = dict(
        attempt=attempt,
        confidence_level=gate.confidence_level,
        min_improvement=gate.min_improvement,
        min_ess=gate.min_ess,
        randomized=gate.randomized,
    )
    if isinstance(rows, EstimatedGateRows):
        return estimated_gate_decision(
            rows, estimator=gate.estimator, failed_checks=failed_checks, **common
        )
    if propensity_source == ESTIMATED:
        failed_checks = [
            *failed_checks,
            f"precondition: the test rows' propensities are estimated; gate.estimator "
            f"{gate.estimator!r} needs known propensities (use the gate's inputs on estimated "
            "propensities, flows.tasks.gate.estimated_gate_inputs)",
        ]
    comparison = gate_decision(
        rows,
        estimator=gate.estimator,
        clip=gate.clip,
        interval=gate.interval,
        failed_checks=failed_checks,
        min_propensity=min_propensity,
        **common,
    )
    if propensity_source == ESTIMATED:
        comparison = replace(comparison, propensity_source=ESTIMATED)
    return comparison


def gate_metrics(comparison: Any) -> dict[str, float]:
    """The gate's MLflow metrics (``PolicyComparison.metrics``: one spelling of the keys)."""
    return comparison.metrics()


@task(name="report-gate", cache_policy=NO_CACHE, **IO_RETRIES)
def report_gate(comparison: Any, champion_version: str | None, run: TrackedRun) -> None:
    """Log the gate report (markdown, JSON, interval plot, metrics) and ``gate-decision``."""
    client = run.client()
    markdown = (
        comparison.to_markdown() + f"\nChampion: {champion_version or 'the logging policy'}.\n"
    )
    log_text(client, run.run_id, markdown, "gate/report.md")
    report = {**comparison.to_dict(), "champion_version": champion_version}
    log_json(client, run.run_id, report, "gate/report.json")
    log_metrics(client, run.run_id, gate_metrics(comparison))
    with tempfile.TemporaryDirectory(prefix="poem-gate-") as tmp:
        log_artifact(
            client, run.run_id, plot_gate(comparison, Path(tmp) / "gate_intervals.png"), "gate"
        )
    create_markdown_artifact(
        key="gate-decision", markdown=markdown, description=comparison.decision
    )
