"""The ``retrain`` flow (DESIGN §2).

load → validate → propensity checks → split → search → train → gate → register → promote, as
one stage sequence (:func:`_stages`) on the log's partitions, in this process or on a Dask
cluster (:mod:`flows.cluster`). Everything is recorded under one parent MLflow run. Bad logs
raise :class:`poem.InvalidLogError` after the check report is logged, before any training; a
rejected challenger is registered (``gate_decision=rejected``) without moving ``champion``.
Promotion is the last step, so a failure anywhere before it leaves production untouched.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from prefect import flow
from prefect.futures import wait
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner

from data_checks.estimation import ESTIMATED, LOGGED, PROPENSITY_SOURCE_KEY
from flows.cluster import data_client, flow_task_runner, use_partitions
from flows.config import ConfigError, PipelineConfig, load_config
from flows.learners import same_fits
from flows.registry import version_tags
from flows.store_faults import discard_unfinished_models
from flows.tasks import current_progress, reset_progress, set_progress
from flows.tasks.gate import (
    declared_floor,
    estimated_gate_inputs,
    gate_candidate,
    gate_metrics,
    load_champion,
    open_attempt,
    report_gate,
)
from flows.tasks.load import check_logs, fingerprint_logs
from flows.tasks.propensity import estimate_logging_policy, record_propensities
from flows.tasks.register import (
    check_champion,
    promote_policy,
    register_policy,
    with_action_ids,
)
from flows.tasks.search import (
    candidate_grid,
    candidate_rows,
    choose_challenger,
    code_fingerprint,
    evidence_logs,
    record_search,
    recorded,
    retempered_policy,
    search_trial,
    selection_logger,
    serving_choice,
)
from flows.tasks.split import gate_inputs, split_logs
from flows.tasks.track import close_run, finish_tracking, start_tracking
from flows.tasks.train import prepare_rows, train_policy
from flows.tasks.validate import enforce_checks, record_check_report
from poem.learners.champion_candidates import KIND_KEY, LEARNED, RETEMPERED, challenger_kind
from poem.learners.search import expand_grid

__all__ = [
    "RetrainInterrupted",
    "RetrainProgress",
    "RetrainResult",
    "retrain",
    "retrain_progress",
    "run_retrain",
    "run_settings",
]


class RetrainInterrupted(KeyboardInterrupt):
    """Ctrl-C after the run's MLflow run started; that run is marked KILLED, nothing promoted."""

    def __init__(self, run_id: str) -> None:
        super().__init__(run_id)
        self.run_id = run_id


VALIDATION_ROWS = "validation"  # RetrainResult.learning_shown_on
TRAINING_FOLDS = "the training folds, its configuration refitted"


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
    rewards : bool
        The log gave rewards (``data.reward_bounds``, or ``reward_bounds`` declared in the
        log's own metadata: the check's ``DataCheckReport.rewards``): the headline shows
        rewards (e.g. the click-through rate), −risk, and the gain's lower bound, not losses.
    propensity_source : {"logged", "estimated"}
        Where the propensities the learner and the gate used came from
        (``data.propensity``); ``estimated`` is said in the headline's first line.
    learning_shown_on : str
        Where a learned challenger was shown better than the champion re-tempered:
        ``validation`` rows, or ``the training folds`` (its configuration refitted,
        ``search.crossfit_folds``).
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
    rewards: bool = False
    propensity_source: str = LOGGED
    learning_shown_on: str = VALIDATION_ROWS

    def summary_line(self) -> str:
        """``decision=<promoted|rejected> champion=<version>`` (the CLI's last line)."""
        return f"decision={self.decision} champion={self.champion_version or 'logging-policy'}"

    def headline(self) -> list[str]:
        """Three lines: both risks; the difference, its interval and bound; the origin."""
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
        if self.rewards:  # DESIGN §3: reward = −loss, so the gain's lower bound is −(ucb)
            neg = [None if v is None else -v for v in (challenger, champion, difference)]
            challenger, champion, difference = neg
            lower, upper = (None if upper is None else -upper), (None if lower is None else -lower)
            bound = None if bound is None else -bound
            risk = risk.replace("risk", "reward (e.g. click-through rate)")
            kind = kind.replace("upper", "lower")
            return [
                f"{self.decision.upper()}: challenger v{self.challenger_version} {risk} "
                f"{num(challenger)} vs {against} {num(champion)}{self.propensity_label()}",
                f"  gain {num(difference, '+')}, interval [{num(lower, '+')}, "
                f"{num(upper, '+')}], {kind} {num(bound, '+')}; champion {moved} {after}",
                "  " + self.challenger_origin(),
            ]
        return [
            f"{self.decision.upper()}: challenger v{self.challenger_version} {risk} "
            f"{num(challenger)} vs {against} {num(champion)}{self.propensity_label()}",
            f"  difference {num(difference, '+')}, interval [{num(lower, '+')}, "
            f"{num(upper, '+')}], {kind} {num(bound, '+')}; champion {moved} {after}",
            "  " + self.challenger_origin(),
        ]

    def propensity_label(self) -> str:
        """`` [on ESTIMATED propensities]`` for a run on estimated propensities, else empty."""
        return " [on ESTIMATED propensities]" if self.propensity_source == ESTIMATED else ""

    def challenger_origin(self) -> str:
        """One sentence: was the challenger learned, or is it only the champion re-tempered."""
        if self.challenger_kind == RETEMPERED:
            alpha = self.best_params.get("temperature")
            return (
                f"challenger = champion v{self.previous_champion_version} re-tempered "
                f"(temperature × {alpha}), no learning: no fit was shown better on validation"
            )
        if self.previous_champion_version is None:
            return "challenger learned (no champion coefficients to re-temper: the logging policy)"
        return (
            f"challenger learned: shown better than champion v{self.previous_champion_version} "
            f"re-tempered on {self.learning_shown_on} (paired DR and model bounds)"
        )


@dataclass
class RetrainProgress:
    """How far a ``retrain`` got: what the registry may hold when the run ends in an error.

    Filled in by the flow as it goes (:func:`retrain_progress`), read by the command when the
    flow raises, also when Prefect failed after the flow's body returned.

    Attributes
    ----------
    tracking : TrackingConfig or None
        The run's tracking section (None: the config was not loaded yet).
    run_id : str or None
        The parent MLflow run (None: none was started).
    champion_before : str or None
        The champion the gate compared against (None: the logging policy, or not read yet).
    version : str or None
        The registered challenger (None: nothing was registered).
    planned : RetrainResult or None
        The outcome the gate decided, once the challenger is registered.
    promoting : bool
        ``promote-policy`` was called: the champion may have moved.
    started : set of str
        Tasks whose body started (``register-policy``, ``promote-policy``): with
        ``register-policy`` in it and ``promote-policy`` not, Prefect failed before the
        promotion's body ran and the champion did not move.
    result : RetrainResult or None
        Set when the outcome is complete in the registry (registered, and promoted if the
        gate said so); only closing the run is left.
    """

    tracking: Any = None
    run_id: str | None = None
    champion_before: str | None = None
    version: str | None = None
    planned: RetrainResult | None = None
    promoting: bool = False
    result: RetrainResult | None = None
    started: set[str] = field(default_factory=set)

    @property
    def champion_may_have_moved(self) -> bool:
        """``promote-policy`` was called and its body started (or that cannot be told)."""
        if not self.promoting:
            return False
        seen = "register-policy" in self.started  # task bodies do record themselves
        return "promote-policy" in self.started or not seen


@contextlib.contextmanager
def retrain_progress() -> Iterator[RetrainProgress]:
    """A :class:`RetrainProgress` that the ``retrain`` flows started in the block fill in."""
    progress = RetrainProgress()
    token = set_progress(progress)  # flows.tasks.body_started records into it
    try:
        yield progress
    finally:
        reset_progress(token)


REWARDS_KEY = "rewards"  # the log metadata's key: the log gave rewards (δ = −reward)

ESTIMATE_IN_MEMORY = (
    "data.propensity: estimate fits the logging policy on the whole log in memory, not on a "
    "cluster's partitions; set dask.partitioned: false (or dask.mode: never)"
)


def estimated_reason(metadata: dict[str, Any]) -> tuple[str, ...]:
    """The decision's reason saying it rests on estimated propensities (empty when logged)."""
    if metadata.get(PROPENSITY_SOURCE_KEY) != ESTIMATED:
        return ()
    return (
        f"propensities estimated, not logged ({metadata.get('model')}, "
        f"{metadata.get('folds')} folds cross-fitted): the learner and the gate rest on the "
        "propensity model; log the served policy's propensities to gate on logged ones",
    )


def _reason(exc: BaseException) -> str:
    """One line for the run's ``poem.end_reason`` tag: the error's type and first line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}"[:500]


def _search(
    training: Any,
    parts: Any,
    header: Any,
    cfg: Any,
    keys: tuple,
    champion: Any,
    candidate_training: Any = None,
    per_label: bool = False,
):
    """Submit every distinct fit of the grid and of ``search.candidates``, ``max_workers`` at once.

    A grid point that is the same fit as an earlier one (:func:`flows.learners.same_fits`) is
    recorded with its own params and the earlier trial's scores. The candidates' trials
    (:func:`~flows.tasks.search.candidate_grid`) fit on ``candidate_training``
    (:func:`~flows.tasks.search.candidate_rows`) and follow the grid's. ``per_label``: the
    champion logged the rows; every trial is scored with per-label weights where they vary
    less (:func:`poem.learners.search.policy_scores`).
    """
    trial = search_trial.with_options(
        cache_expiration=timedelta(hours=cfg.search.cache_expiration_hours)
    )
    data_key, champion_key = keys
    serving = serving_choice(cfg.search, parts.n_rows("validation"))
    every = expand_grid(cfg.search.grid)
    same = same_fits(every, cfg.training.params, champion, header)
    distinct = [i for i, first in enumerate(same) if first == i]
    jobs = [(training, cfg.training.learner, dict(cfg.training.params), every[i]) for i in distinct]
    extra = candidate_grid(cfg, champion, header, candidate_training)
    jobs += [(candidate_training, *job) for job in extra]
    trials = []
    for start in range(0, len(jobs), cfg.search.max_workers):
        futures = [
            trial.submit(
                rows,
                parts,
                header,
                learner,
                fixed,
                params,
                cfg.search.confidence_level,
                data_key,
                code_fingerprint(),
                champion,
                champion_key,
                serving,
                per_label,
            )
            for rows, learner, fixed, params in jobs[start : start + cfg.search.max_workers]
        ]
        wait(futures)
        trials += [f.result() for f in futures]
    fitted = dict(zip(distinct, trials, strict=False))
    grid_trials = [recorded(fitted[same[i]], params) for i, params in enumerate(every)]
    return grid_trials + trials[len(distinct) :]


def _checked_log(cfg: Any, run: Any, client: Any) -> tuple:
    """Load and check the log: ``(partition set, header, propensity report, log metadata)``.

    The prepared log's metadata: ``{"propensity_source": "logged"}``, or with
    ``data.propensity: estimate`` ``"estimated"`` and the estimate's provenance (model,
    folds, seed), the propensities having been estimated (:func:`estimate_logging_policy`);
    and ``rewards``: the log gave rewards, by its checked metadata (``data.reward_bounds`` or
    the log's own declared ``reward_bounds``).
    """
    own = cfg.dask.scheduler_address is None  # a LocalCluster started for this run
    report, propensity, source, header = check_logs(cfg.data, cfg.checks, run, client, own)
    metadata = {PROPENSITY_SOURCE_KEY: LOGGED}
    if cfg.data.propensity == "estimate" and report.passed:
        report, propensity, source, metadata = estimate_logging_policy(
            report, source, cfg.data, cfg.checks, run
        )
    metadata = {**metadata, REWARDS_KEY: report.rewards}  # configured or declared by the log
    record_check_report(report, run)  # logged before enforcing: a failed run keeps its report
    enforce_checks(report, cfg.checks)
    check_champion(header, cfg.tracking)  # an incompatible champion fails before training
    log = source.items[0] if client is None else None  # in memory: one partition, plotted
    return source, header, record_propensities(propensity, run, log), metadata


def _stages(cfg: Any, run: Any, fingerprint: str, client: Any = None) -> tuple:
    """Check → split → search → train → gate, on the log's partitions wherever they live."""
    source, header, propensity, log_metadata = _checked_log(cfg, run, client)
    parts = split_logs(source, cfg.data.split, run)
    del source  # the split holds the partitions (and releases the training rows below)
    # trial cache key: same files, same reading/check settings => same train/validation rows
    data_key = f"{fingerprint}:{cfg.data.model_dump_json()}:{cfg.checks.model_dump_json()}"
    champion_version, champion = load_champion(cfg.tracking)  # also warm_start: champion
    # rows of the learning evidence (a champion to compare fits with), before any release
    evidence = None if champion is None else evidence_logs(parts)
    # a multilabel log the champion served (every row's propensity its own): the search and
    # the selection may score with per-label weights (poem.estimators.marginal)
    logger = selection_logger(cfg.search, champion, evidence)
    # the search.candidates learners fit in memory: their rows before any release
    extra = candidate_rows(parts) if cfg.search.candidates else None
    training, parts = prepare_rows(parts, cfg.training)
    keys = (data_key, champion_version)
    trials = _search(training, parts, header, cfg, keys, champion, extra, logger is not None)
    serve_floor = cfg.training.params.get("exploration_floor")  # challengers' ε, candidates too
    selection = choose_challenger(
        trials, training, parts, evidence, header, cfg, champion, run, logger
    )
    trials, best = list(selection.trials), selection.selected  # with the champion candidates
    record_search(trials, best, run, cfg.training.learner)
    if selection.kind == RETEMPERED:
        policy = retempered_policy(trials[best].params, champion, serve_floor, run)
    else:
        policy = train_policy(
            training,
            header,
            cfg.training,
            trials[best].params,
            run,
            champion,
            selection.estimator,
            cfg.search,
        )
    blocking = [c.name for c in propensity.warnings] if cfg.checks.block_on_warnings else []
    source_of_p = log_metadata[PROPENSITY_SOURCE_KEY]
    if source_of_p == ESTIMATED:  # DR + translated terms with the model's error margin
        test_rows = estimated_gate_inputs(policy, champion, parts)
    else:
        test_rows = gate_inputs(policy, champion, parts)
    floor = declared_floor(cfg.data, cfg.checks)
    attempt = open_attempt(cfg.tracking, champion_version, test_rows, cfg.gate, run)
    comparison = gate_candidate(test_rows, cfg.gate, blocking, floor, attempt, source_of_p)
    report_gate(comparison, champion_version, run)
    shown_on = TRAINING_FOLDS if selection.shown_on_training_folds else VALIDATION_ROWS
    return (
        comparison, trials, best, policy, header.n_rows, champion_version, log_metadata, shown_on
    )  # fmt: skip


def _close_failed_run(run: Any, data_path: str, exc: BaseException) -> None:
    """Discard half-written models, mark the run FAILED, attach its id to ``exc``.

    Closed without Prefect (whose API may be what failed), retried through a tracking server's
    outage (:func:`flows.tasks.track.close_run`), with the error as the tag ``poem.end_reason``.
    When marking it FAILED fails (a full disk, a server still down), a note on ``exc`` says so.
    """
    exc.mlflow_run_id = run.run_id  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):  # best effort: a server that is down answers nothing
        discard_unfinished_models(run.client(), run.experiment_id, run.run_id)
    finish_error = close_run(run, "FAILED", None, data_path, _reason(exc))
    if finish_error is not None:
        exc.add_note(
            f"MLflow run {run.run_id} could not be marked FAILED ({_reason(finish_error)}); "
            "the next run on this host closes it"
        )


@flow(name="retrain", task_runner=ThreadPoolTaskRunner(max_workers=8), validate_parameters=False)
def retrain(
    config: PipelineConfig | str | Path,
    logs: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> RetrainResult:
    """Validate new logs, learn a policy, gate it against the champion, register and promote.

    Parameters
    ----------
    config : PipelineConfig or str or Path
        The run's settings, loaded once by the caller (``poem-pipeline retrain``, the
        scheduled flow), or the path of ``mlflow.yml`` to load them from (once, here).
    logs : str or Path or None, default=None
        Log file or folder overriding ``data.path``.
    overrides : dict or None, default=None
        Dotted config keys → values applied on top of the file (``retrain --set``); only with
        a path (a loaded config already holds its overrides).

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
    TypeError
        When ``overrides`` come with a loaded config.
    """
    progress = current_progress() or RetrainProgress()
    cfg = run_settings(config, logs, overrides)
    progress.tracking = cfg.tracking
    flow_run_id = str(flow_run.get_id() or "local")
    fingerprint = fingerprint_logs(cfg.data)
    run = start_tracking(cfg, fingerprint, flow_run_id)
    progress.run_id = run.run_id
    try:
        if use_partitions(cfg.dask, cfg.data.path):  # the log's partitions on a Dask cluster
            if cfg.data.propensity == "estimate":
                raise ConfigError(ESTIMATE_IN_MEMORY)
            with data_client(cfg.dask, run) as client:  # its log lines: the run's logs/dask.log
                outcome = _stages(cfg, run, fingerprint, client)
        else:
            outcome = _stages(cfg, run, fingerprint)
        comparison, trials, best, policy, n_rows, champion_version, log_metadata, shown_on = outcome
        source_of_p, rewards = log_metadata[PROPENSITY_SOURCE_KEY], log_metadata[REWARDS_KEY]
        policy = with_action_ids(policy, cfg.data.action_ids)  # served with the log's own ids
        progress.champion_before = champion_version
        kind = challenger_kind(trials[best].params)
        tags = version_tags(
            comparison,
            data_fingerprint=fingerprint,
            flow_run_id=flow_run_id,
            n_rows=n_rows,
            champion_version=champion_version,
            rewards=rewards,
        )
        tags[KIND_KEY] = kind  # learned, or the champion re-tempered (no learning)
        tags[PROPENSITY_SOURCE_KEY] = source_of_p  # logged, or estimated by a model
        reasons = tuple(comparison.reasons) + estimated_reason(log_metadata)
        tags["gate_reasons"] = " | ".join(reasons)
        version = register_policy(policy, run, tags)
        progress.version = version
        champion_after = version if comparison.promote else champion_version
        result = RetrainResult(
            decision=comparison.decision,
            challenger_version=version,
            champion_version=champion_after,
            previous_champion_version=champion_version,
            reasons=reasons,
            metrics=gate_metrics(comparison),
            best_params=dict(trials[best].params),
            mlflow_run_id=run.run_id,
            experiment_id=run.experiment_id,
            flow_run_id=flow_run_id,
            data_fingerprint=fingerprint,
            n_rows=n_rows,
            estimator=comparison.estimator,
            challenger_kind=kind,
            rewards=rewards,
            propensity_source=source_of_p,
            learning_shown_on=shown_on,
        )
        progress.planned = result
        if comparison.promote:
            progress.promoting = True  # from here the champion may have moved
            promote_policy(version, run)  # the last step: champion moves only here
    except KeyboardInterrupt as exc:
        # directly, one attempt: the task machinery may be shutting down
        close_run(run, "KILLED", None, cfg.data.path, _reason(exc) or "interrupted", ())
        raise RetrainInterrupted(run.run_id) from exc
    except BaseException as exc:
        _close_failed_run(run, cfg.data.path, exc)
        raise
    progress.result = result  # the registry holds the outcome; only closing the run is left
    outcome = {
        "decision": comparison.decision,
        "challenger": version,
        "champion": champion_after or "logging-policy",
        "summary": "; ".join(
            [
                comparison.decision,
                *result.reasons,
                f"{KIND_KEY}={kind}",
                f"{PROPENSITY_SOURCE_KEY}={source_of_p}",
            ]
        ),
    }
    try:
        finish_tracking(run, "FINISHED", outcome, cfg.data.path)
    except Exception as exc:  # Prefect's API (or the tracking server) failed: close directly
        if close_run(run, "FINISHED", outcome, cfg.data.path) is None:
            return result
        exc.mlflow_run_id = run.run_id  # type: ignore[attr-defined]
        exc.add_note(
            f"MLflow run {run.run_id} could not be marked FINISHED; the next run on this host "
            "closes it"
        )
        raise
    return result


def run_settings(
    config: PipelineConfig | str | Path,
    logs: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> PipelineConfig:
    """The settings of one run: ``config`` itself, or the file loaded once; ``logs`` applied.

    Parameters
    ----------
    config : PipelineConfig or str or Path
        The validated settings, or the path of ``mlflow.yml``.
    logs : str or Path or None, default=None
        Log file or folder overriding ``data.path``.
    overrides : dict or None, default=None
        Dotted keys → values for :func:`flows.config.load_config` (only with a path).

    Returns
    -------
    PipelineConfig
        The run's one settings object.

    Raises
    ------
    flows.config.ConfigError
        When the file is invalid.
    TypeError
        When ``overrides`` come with a loaded config (apply them when loading it:
        ``load_config(path, overrides)``).
    """
    if isinstance(config, PipelineConfig):
        if overrides:
            raise TypeError(
                f"overrides {sorted(overrides)} given with a loaded config: pass them to "
                "load_config(path, overrides), or pass the path"
            )
        cfg = config
    else:
        cfg = load_config(config, overrides)
    return cfg if logs is None else cfg.with_data_path(logs)


def run_retrain(
    config: PipelineConfig | str | Path,
    logs: str | Path | None = None,
    overrides: dict[str, Any] | None = None,
) -> RetrainResult:
    """Run :func:`retrain` on the task runner of :func:`flows.cluster.flow_task_runner`.

    The settings are loaded here once (when ``config`` is a path) and passed to the flow.
    """
    cfg = run_settings(config, logs, overrides)
    runner = flow_task_runner(cfg.dask, cfg.data.path)
    flow_ = retrain if runner is None else retrain.with_options(task_runner=runner)
    return flow_(cfg)
