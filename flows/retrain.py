"""The ``retrain`` flow (DESIGN §2).

load → validate → propensity checks → split → search → train → gate → register → promote.

The flow only orchestrates: it loads ``mlflow.yml`` once, hands each task its config section,
and records everything under one parent MLflow run (nested runs for the trials). Bad logs
raise :class:`poem.InvalidLogError` before any training, after the check report has been
logged; no model version is created. A rejected challenger is a normal outcome: it is
registered (tagged ``gate_decision=rejected``) and ``champion`` does not move. Promotion is
the last step, so a failure anywhere before it leaves production untouched.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.futures import wait
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from flows.config import load_config
from flows.dask_runner import data_client, use_partitions
from flows.registry import version_tags
from flows.store_faults import discard_unfinished_models
from flows.tasks.gate import (
    declared_floor,
    gate_candidate,
    gate_coin,
    gate_metrics,
    load_champion,
    open_attempt,
    report_gate,
)
from flows.tasks.load import build_log, fingerprint_logs, load_logs
from flows.tasks.partitioned import (
    gate_inputs,
    prepare_partitions,
    record_propensities,
    search_trial_partitioned,
    split_partitions,
    train_policy_partitioned,
    validate_partitions,
)
from flows.tasks.propensity import diagnose_propensities
from flows.tasks.register import check_champion, promote_policy, register_policy
from flows.tasks.search import (
    champion_candidates,
    champion_candidates_partitioned,
    code_fingerprint,
    record_search,
    retempered_policy,
    search_trial,
    select_best,
    serving_choice,
)
from flows.tasks.split import split_logs
from flows.tasks.track import finish_tracking, start_tracking
from flows.tasks.train import train_policy
from flows.tasks.validate import enforce_checks, quarantine_rows, record_check_report, validate_logs
from poem.learners.champion_candidates import KIND_KEY, LEARNED, RETEMPERED, challenger_kind
from poem.learners.search import expand_grid

__all__ = ["RetrainInterrupted", "RetrainResult", "retrain"]


class RetrainInterrupted(KeyboardInterrupt):
    """Ctrl-C after the run's MLflow run started; that run is marked KILLED, nothing promoted."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


@dataclass(frozen=True)
class RetrainResult:
    """Outcome of one ``retrain`` run.

    Attributes
    ----------
    decision : {"promoted", "rejected"}
        The gate's decision.
    challenger_version : str
        Registered version of the newly trained policy.
    champion_version : str or None
        The champion after the run (None: still the logging policy).
    previous_champion_version : str or None
        The champion the gate compared against (None: the logging policy).
    reasons : tuple of str
        The gate's reasons.
    metrics : dict
        Gate metrics (``challenger_risk``, ``risk_difference_ucb``, ...).
    best_params : dict
        Selected hyperparameters.
    mlflow_run_id, experiment_id, flow_run_id, data_fingerprint : str
        Where to find the run, and what data it used.
    n_rows : int
        Rows of the validated log.
    estimator : str
        The gate's estimator option (``ips``, ``snips``, ``clipped_ips``).
    challenger_kind : {"learned", "champion_retempered"}
        Whether the challenger is a fit of the learner or the champion re-tempered at
        ``best_params["temperature"]`` with no refit (no fit beat it on validation).
    """

    decision: str
    challenger_version: str
    champion_version: str | None
    previous_champion_version: str | None
    reasons: tuple[str, ...]
    metrics: dict[str, float] = field(default_factory=dict)
    best_params: dict[str, Any] = field(default_factory=dict)
    mlflow_run_id: str = ""
    experiment_id: str = ""
    flow_run_id: str = ""
    data_fingerprint: str = ""
    n_rows: int = 0
    estimator: str = ""
    challenger_kind: str = LEARNED

    def summary_line(self) -> str:
        """``decision=<promoted|rejected> champion=<version>`` (the CLI's last line)."""
        return f"decision={self.decision} champion={self.champion_version or 'logging-policy'}"

    def headline(self) -> list[str]:
        """Three lines: both risks; the difference, its interval and bound; the challenger's origin.

        The third line says whether the challenger was learned or is only the champion
        re-tempered (:meth:`challenger_origin`).
        """
        m = self.metrics  # keys spelled once, in PolicyComparison.metrics
        challenger, champion = m.get("challenger_risk"), m.get("champion_risk")
        difference, bound = m.get("risk_difference"), m.get("risk_difference_ucb")
        lower, upper = m.get("risk_difference_lower"), m.get("risk_difference_upper")
        against = (
            f"champion v{self.previous_champion_version}"
            if self.previous_champion_version
            else "champion (the logging policy)"
        )
        after = f"v{self.champion_version}" if self.champion_version else "the logging policy"
        moved = "is now" if self.decision == "promoted" else "stays"  # a rejection moves nothing

        def num(value: float | None, sign: str = "") -> str:
            return "n/a" if value is None else f"{value:{sign}.4f}"

        risk = f"{self.estimator.upper()} risk" if self.estimator else "risk"
        coin = m.get("gate_randomization")  # gate.randomized: the bound used the coin U
        kind = "upper bound" if coin is None else f"randomized upper bound (U = {coin:.3f})"
        return [
            f"{self.decision.upper()}: challenger v{self.challenger_version} {risk} "
            f"{num(challenger)} vs {against} {num(champion)}",
            f"  difference {num(difference, '+')}, interval [{num(lower, '+')}, "
            f"{num(upper, '+')}], {kind} {num(bound, '+')}; champion {moved} {after}",
            "  " + self.challenger_origin(),
        ]

    def challenger_origin(self) -> str:
        """One sentence: was the challenger learned, or is it only the champion re-tempered."""
        if self.challenger_kind == RETEMPERED:
            alpha = self.best_params.get("temperature")
            return (
                f"challenger = champion v{self.previous_champion_version} re-tempered "
                f"(temperature × {alpha}), no learning: no fit beat it on validation"
            )
        if self.previous_champion_version is None:
            return "challenger learned (no champion coefficients to re-temper: the logging policy)"
        return (
            f"challenger learned: it beat champion v{self.previous_champion_version} "
            "re-tempered at every serving temperature on validation"
        )


def _search(parts: Any, cfg: Any, data_key: str, champion: Any, champion_key: Any) -> list[Any]:
    """Submit every grid point, at most ``search.max_workers`` at a time."""
    trial = search_trial.with_options(
        cache_expiration=timedelta(hours=cfg.search.cache_expiration_hours)
    )
    grid, trials = expand_grid(cfg.search.grid), []
    for start in range(0, len(grid), cfg.search.max_workers):
        futures = [
            trial.submit(
                parts.train,
                parts.validation,
                cfg.training.learner,
                dict(cfg.training.params),
                params,
                cfg.search.confidence_level,
                data_key,
                code_fingerprint(),
                champion,
                champion_key,
                serving_choice(cfg.search, parts.validation.n_rows),
            )
            for params in grid[start : start + cfg.search.max_workers]
        ]
        wait(futures)
        trials += [f.result() for f in futures]
    return trials


def _stages(cfg: Any, run: Any, fingerprint: str) -> tuple:
    """Validate → ... → gate with the log in this process (trials on the flow's task runner)."""
    loaded = load_logs(cfg.data)  # the stages of data_checks.stages, as `check` runs them
    report = validate_logs(loaded, cfg.data, cfg.checks)
    log, report = build_log(quarantine_rows(loaded, report, run), report)
    record_check_report(report, run)  # logged before enforcing: a failed run keeps its report
    enforce_checks(report, cfg.checks)
    check_champion(log, cfg.tracking)  # an incompatible champion fails before training
    propensity = diagnose_propensities(log, cfg.checks, run)
    parts = split_logs(log, cfg.data.split, run)
    # trial cache key: same files, same reading/check settings => same train/validation logs
    data_key = f"{fingerprint}:{cfg.data.model_dump_json()}:{cfg.checks.model_dump_json()}"
    champion_version, champion = load_champion(cfg.tracking)  # also warm_start: champion
    trials = _search(parts, cfg, data_key, champion, champion_version)
    serving = serving_choice(cfg.search, parts.validation.n_rows)
    serve_floor = cfg.training.params.get("exploration_floor")  # challengers' ε, candidates too
    trials += champion_candidates(
        champion, parts.validation, serving, cfg.search.confidence_level, serve_floor
    )  # the champion re-tempered, no refit (none before a promotion)
    best = select_best(trials, cfg.search)
    record_search(trials, best, run)
    if challenger_kind(trials[best].params) == RETEMPERED:
        policy = retempered_policy(trials[best].params, champion, serve_floor, run)
    else:
        policy = train_policy(parts, cfg.training, trials[best].params, run, champion)
    blocking = [c.name for c in propensity.warnings] if cfg.checks.block_on_warnings else []
    coin = gate_coin(policy, cfg.gate)
    floor = declared_floor(cfg.data, cfg.checks)
    attempt = open_attempt(cfg.tracking, champion_version, parts.test, cfg.gate, run)
    comparison = gate_candidate(
        policy, champion, parts.test, cfg.gate, blocking, coin, floor, attempt
    )
    report_gate(comparison, champion_version, run)
    return comparison, trials, best, policy, log.n_rows, champion_version


def _partitioned_stages(cfg: Any, run: Any, _fingerprint: str) -> tuple:
    """The same stages with the log as partitions in a Dask cluster's memory (DESIGN §8)."""
    cluster = contextlib.ExitStack()  # Dask's log lines go to the run's logs/dask.log
    client = cluster.enter_context(data_client(cfg.dask, run))
    try:
        own = cfg.dask.scheduler_address is None  # a LocalCluster started for this run
        report, propensity_report, kept, header = validate_partitions(
            cfg.data, cfg.checks, client, run, restart=own
        )
        record_check_report(report, run)
        enforce_checks(report, cfg.checks)
        check_champion(header, cfg.tracking)
        propensity = record_propensities(propensity_report, run)
        parts = split_partitions(kept, cfg.data.split, run)
        del kept  # the split holds the partitions (and releases the training rows below)
        champion_version, champion = load_champion(cfg.tracking)
        prepared, parts = prepare_partitions(parts, cfg.training)
        grid, trials = expand_grid(cfg.search.grid), []
        serving = serving_choice(cfg.search, parts.n_rows("validation"))
        for start in range(0, len(grid), cfg.search.max_workers):
            futures = [
                search_trial_partitioned.submit(
                    prepared,
                    parts,
                    header,
                    cfg.training.learner,
                    dict(cfg.training.params),
                    params,
                    cfg.search.confidence_level,
                    champion,
                    serving,
                )
                for params in grid[start : start + cfg.search.max_workers]
            ]
            wait(futures)
            trials += [f.result() for f in futures]
        serve_floor = cfg.training.params.get("exploration_floor")  # as in memory
        trials += champion_candidates_partitioned(
            champion, parts, header, serving, cfg.search.confidence_level, serve_floor
        )
        best = select_best(trials, cfg.search)
        record_search(trials, best, run)
        if challenger_kind(trials[best].params) == RETEMPERED:
            policy = retempered_policy(trials[best].params, champion, serve_floor, run)
        else:
            policy = train_policy_partitioned(
                prepared, parts, header, cfg.training, trials[best].params, run, champion
            )
        blocking = [c.name for c in propensity.warnings] if cfg.checks.block_on_warnings else []
        challenger_rows, champion_rows, test_rows = gate_inputs(policy, champion, parts)
        coin = gate_coin(policy, cfg.gate)
        floor = declared_floor(cfg.data, cfg.checks)
        attempt = open_attempt(cfg.tracking, champion_version, test_rows, cfg.gate, run)
        comparison = gate_candidate(
            challenger_rows, champion_rows, test_rows, cfg.gate, blocking, coin, floor, attempt
        )
        report_gate(comparison, champion_version, run)
    finally:
        cluster.__exit__(*sys.exc_info())  # closes the client; keeps the log (also on errors)
    return comparison, trials, best, policy, header.n_rows, champion_version


def _close_failed_run(run: Any, data_path: str, exc: BaseException) -> None:
    """Discard half-written models (frees a full disk first), then mark the run FAILED.

    The run's id is attached to ``exc`` (``mlflow_run_id``) for the CLI's message; when even
    marking it FAILED fails (a full disk), a note says so and the next run closes it.
    """
    exc.mlflow_run_id = run.run_id  # type: ignore[attr-defined]
    discard_unfinished_models(run.client(), run.experiment_id, run.run_id)
    try:
        finish_tracking(run, "FAILED", None, data_path)
    except Exception as finish_error:  # noqa: BLE001 - the run's own error is the one to report
        exc.add_note(
            f"MLflow run {run.run_id} could not be marked FAILED ({finish_error}); the next "
            "run on this host closes it"
        )


@flow(name="retrain", task_runner=ThreadPoolTaskRunner(max_workers=8), validate_parameters=False)
def retrain(
    config_path: str | Path,
    logs: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> RetrainResult:
    """Validate new logs, learn a policy, gate it against the champion, register and promote.

    Parameters
    ----------
    config_path : str or Path
        ``mlflow.yml``.
    logs : str or Path or None, default=None
        Log file or folder overriding ``data.path``.
    overrides : dict or None, default=None
        Dotted config keys → values applied on top of the file (``retrain --set``).

    Returns
    -------
    RetrainResult
        Decision, versions and metrics.

    Raises
    ------
    poem.InvalidLogError
        When the logs fail the data or propensity checks (nothing is trained or registered).
    RetrainInterrupted
        On Ctrl-C after the MLflow run started (the run is marked KILLED).
    flows.config.ConfigError
        When ``mlflow.yml`` is invalid.
    """
    cfg = load_config(config_path, overrides)
    if logs is not None:
        cfg = cfg.with_data_path(logs)
    flow_run_id = str(flow_run.get_id() or "local")
    fingerprint = fingerprint_logs(cfg.data)
    run = start_tracking(cfg, fingerprint, flow_run_id)
    try:
        stages = _partitioned_stages if use_partitions(cfg.dask, cfg.data.path) else _stages
        comparison, trials, best, policy, n_rows, champion_version = stages(cfg, run, fingerprint)
        kind = challenger_kind(trials[best].params)
        tags = version_tags(
            comparison,
            data_fingerprint=fingerprint,
            flow_run_id=flow_run_id,
            n_rows=n_rows,
            champion_version=champion_version,
        )
        tags[KIND_KEY] = kind  # learned, or the champion re-tempered (no learning)
        version = register_policy(policy, run, tags)
        if comparison.promote:
            promote_policy(version, run)  # the last step: champion moves only here
    except KeyboardInterrupt as exc:
        finish_tracking.fn(run, "KILLED")  # directly: the task machinery may be shutting down
        raise RetrainInterrupted(run.run_id) from exc
    except BaseException as exc:
        _close_failed_run(run, cfg.data.path, exc)
        raise
    champion_after = version if comparison.promote else champion_version
    outcome = {
        "decision": comparison.decision,
        "challenger": version,
        "champion": champion_after or "logging-policy",
        "summary": "; ".join([comparison.decision, *comparison.reasons, f"{KIND_KEY}={kind}"]),
    }
    finish_tracking(run, "FINISHED", outcome, cfg.data.path)
    return RetrainResult(
        decision=comparison.decision,
        challenger_version=version,
        champion_version=version if comparison.promote else champion_version,
        previous_champion_version=champion_version,
        reasons=tuple(comparison.reasons),
        metrics=gate_metrics(comparison),
        best_params=dict(trials[best].params),
        mlflow_run_id=run.run_id,
        experiment_id=run.experiment_id,
        flow_run_id=flow_run_id,
        data_fingerprint=fingerprint,
        n_rows=n_rows,
        estimator=comparison.estimator,
        challenger_kind=kind,
    )
