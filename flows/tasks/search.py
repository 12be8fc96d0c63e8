"""Hyperparameter search on the validation split: one cached task per trial, then the record.

Only :func:`search_trial` is cached (STYLE §8): its key is the data fingerprint, the split
settings, the learner, the trial's params, the task source and :func:`code_fingerprint` (an
upgraded ``poem`` never serves an old trial), never the logs themselves. What is served is
:func:`choose_challenger`: :func:`poem.learners.selection.select_challenger` (the champion
re-tempered beside the fits, multiplicity-corrected confirmation), the benchmarks' function too.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import INPUTS, NO_CACHE, TASK_SOURCE

import poem
from flows import learners
from flows.config import SearchConfig
from flows.learners import (
    CHAMPION,
    LEARNER_KEY,
    LOGGER,
    build_learner,
    candidate_params,
    champion_fits,
    resolve_warm_start,
)
from flows.tasks import IO_RETRIES, stage_done, task_logger
from flows.tasks.train import fit_learner
from flows.tracking import (
    TrackedRun,
    create_nested_run,
    log_artifact,
    log_json,
    log_metrics,
    log_params,
)
from poem.diagnostics.search_plot import plot_search
from poem.estimators.marginal import known_logger, logged_by
from poem.learners.champion_candidates import (
    KIND_KEY,
    RETEMPERED,
    challenger_kind,
    champion_trials,
    selected_champion_policy,
)
from poem.learners.search import Trial, ess_floor, expand_grid, run_trial, select_trial
from poem.learners.selection import ChallengerSelection, select_challenger
from poem.learners.training_rows import TrainingRows
from poem.log_rows import sample_log

TRIAL_CACHE = (INPUTS - "training" - "split" - "header" - "champion") + TASK_SOURCE


@cache
def code_fingerprint() -> str:
    """SHA-256 of every ``poem/**/*.py`` file and ``flows/learners.py``, in path order."""
    root = Path(poem.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")) + [Path(learners.__file__)]:
        digest.update(str(path.relative_to(root.parent)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@task(
    name="search-trial", cache_policy=TRIAL_CACHE, persist_result=True, on_completion=[stage_done]
)
def search_trial(
    training: Any,
    split: Any,
    header: Any,
    learner: str,
    fixed_params: dict,
    params: dict,
    confidence_level: float,
    data_key: str,
    code_key: str,
    champion: Any = None,
    champion_key: str | None = None,
    serving: dict | None = None,
    per_label: bool = False,
) -> Trial:
    """Fit one configuration on the training rows, score it on validation (``run_trial``).

    ``learner`` with ``fixed_params`` and the grid point ``params``: ``training.learner``'s,
    or a ``search.candidates`` learner's (``params`` then names it under ``learner``, which is
    recorded, not passed to the estimator).

    ``serving`` is :func:`serving_choice`; ``per_label``: the champion logged the validation
    rows, which are then scored with per-label weights (``run_trial(logger=champion)``).
    ``data_key``, ``code_key`` and ``champion_key`` are
    unused in the body: they stand in the cache key for the rows, the learning code
    (:func:`code_fingerprint`) and the champion policy, which are excluded from it.
    """
    estimator = build_learner(learner, fixed_params, champion=champion, log=header)
    grid_point = {k: v for k, v in params.items() if k != LEARNER_KEY}
    resolved = resolve_warm_start(grid_point, champion, header)  # a grid of warm starts
    trial = run_trial(
        estimator,
        resolved,
        training,
        validation_rows(split),
        confidence_level=confidence_level,
        keep_estimator=True,  # the selection compares every fit (search.selection_rule)
        logger=champion if per_label else None,
        **(serving or {}),
    )
    return recorded(trial, params)


CANDIDATE_ROWS = 200_000  # training rows, at most, a search.candidates learner fits on


def candidate_rows(split: Any, part: str = "train", max_rows: int = CANDIDATE_ROWS) -> Any:
    """The training rows of the ``search.candidates`` learners: ≤ ``max_rows`` in one log.

    Taken before POEM's preparation releases the raw rows (:func:`~flows.tasks.train.
    prepare_rows`); every row when the part has no more (:func:`poem.log_rows.sample_log`),
    else a seeded uniform sample (these learners fit in memory).
    """
    return TrainingRows(split, part, _log=sample_log(split, part, max_rows))


def candidate_grid(
    cfg: Any, champion: Any = None, header: Any = None, rows: Any = None
) -> list[tuple[str, dict, dict]]:
    """``(learner, fixed params, grid point)`` of every ``search.candidates`` trial.

    Each grid point names its learner under ``learner`` (the trial's recorded params). A
    learner whose ``logging_policy`` is ``champion`` (``poem_marginal``) is left out unless the
    champion fits ``header`` and logged every one of ``rows``' training rows
    (:func:`poem.estimators.marginal.logged_by`): none before a promotion, and none on a log that
    holds rows of an older champion or of another logger.
    """
    out = []
    logged = None
    for name, spec in cfg.search.candidates.items():
        fixed = candidate_params(name, spec.params, cfg.training.params)
        if fixed.get(LOGGER) == CHAMPION:
            if logged is None:
                logged = (
                    rows is not None
                    and champion_fits(champion, header)
                    and logged_by(champion, rows.log())
                )
            if not logged:
                continue
        out += [(name, fixed, {LEARNER_KEY: name, **point}) for point in expand_grid(spec.grid)]
    return out


def selection_logger(search: Any, champion: Any, logs: tuple | None) -> Any:
    """The champion when it logged every row of the (multilabel) evidence ``logs``, else None.

    The search then scores with per-label weights where they vary less
    (:func:`poem.estimators.marginal.known_logger`); ``search.per_label_weights: false``
    (a loss that is not additive over labels) keeps the joint weights.
    """
    if logs is None or not search.per_label_weights:
        return None
    return known_logger(champion, *logs)


def validation_rows(split: Any) -> tuple:
    """``(partition set, rows)`` of the split's validation part (``run_trial``'s validation)."""
    return split.source, split.rows_for("validation")


def serving_choice(search: SearchConfig, n_validation: int) -> dict:
    """``run_trial``'s serving-temperature arguments (empty without ``search.temperatures``).

    Each fit's temperature is chosen by the trials' rule (``search.scoring``, the ESS guard).
    """
    if search.temperatures is None:
        return {}
    floor = ess_floor(n_validation, search.min_ess_fraction, search.min_ess)
    return {
        "temperatures": list(search.temperatures),
        "scoring": search.scoring,
        "min_effective_sample_size": floor,
    }


def recorded(trial: Trial, params: dict) -> Trial:
    """The trial as recorded: its grid params ("champion", not the policy) and its temperature."""
    chosen = {"temperature": trial.params["temperature"]} if "temperature" in trial.params else {}
    return replace(trial, params={**params, **chosen})


@task(name="champion-candidates", cache_policy=NO_CACHE, on_completion=[stage_done])
def champion_candidates(
    champion: Any, split: Any, serving: dict, confidence_level: float, floor: Any = None
) -> list[Trial]:
    """The champion at each of ``serving``'s temperatures, scored on validation (no fit).

    No champion gives no candidates; ``floor`` is the challengers' ε.
    """
    return champion_trials(
        champion,
        validation_rows(split),
        serving.get("temperatures"),
        confidence_level=confidence_level,
        exploration_floor=floor,
    )


@task(name="retemper-champion", cache_policy=NO_CACHE, on_completion=[stage_done])
def retempered_policy(params: dict, champion: Any, floor: Any, run: TrackedRun) -> Any:
    """The selected champion candidate's policy, served in place of a refit; log its params."""
    policy = selected_champion_policy(params, champion, floor)
    log_params(run.client(), run.run_id, {"selected": params})
    return policy


@task(name="select-trial", cache_policy=NO_CACHE, on_completion=[stage_done])
def select_best(trials: list[Trial], search: SearchConfig) -> int:
    """Index of the best trial (:func:`poem.learners.search.select_trial`, with the ESS guard)."""
    return select_trial(
        trials, scoring=search.scoring, min_effective_sample_size=_ess_guard(trials, search)
    )


def _ess_guard(trials: list[Trial], search: SearchConfig) -> float:
    n_validation = trials[0].ips.n if trials else 0
    return ess_floor(n_validation, search.min_ess_fraction, search.min_ess)


EVIDENCE_ROWS = 200_000  # validation and training rows each, at most, of the learning evidence


def evidence_logs(split: Any, max_rows: int = EVIDENCE_ROWS) -> tuple[Any, Any]:
    """``(validation, training)`` rows of the learning evidence, each one log of ≤ ``max_rows``.

    Taken before the training rows are released (:func:`~flows.tasks.train.prepare_rows`); a
    log of up to ``max_rows`` rows per part gives every row (:func:`poem.log_rows.sample_log`).
    """
    return sample_log(split, "validation", max_rows), sample_log(split, "train", max_rows)


@task(name="select-challenger", cache_policy=NO_CACHE, on_completion=[stage_done])
def choose_challenger(
    trials: list[Trial],
    rows: TrainingRows,
    split: Any,
    logs: tuple[Any, Any] | None,
    header: Any,
    cfg: Any,
    champion: Any,
    run: TrackedRun,
    logger: Any = None,
) -> ChallengerSelection:
    """The served challenger: :func:`poem.learners.selection.select_challenger`, logged.

    The champion re-tempered joins ``trials``; a first-ranked fit is served only when the
    paired doubly robust evidence on ``logs`` (:func:`evidence_logs`) shows it better than the
    best candidate at the multiplicity-corrected level, a re-tempering only when shown better
    than the champion as served, by ``search.selection_rule``. Logs the metrics ``learning_*`` /
    ``retemper_*`` / ``crossfit_*`` (the configuration refitted on ``search.crossfit_folds``
    folds of the evidence training rows, when the validation rows did not show the fit better)
    and the tags ``learning_evidence`` (``shown`` / ``shown (cross-fitted)`` / ``not shown`` /
    ``none``),
    ``selection_reason`` (why the served trial is served: when the evidence is weak, that the
    champion was kept), ``selection_rule`` and ``selection_weights`` (``per-label`` when
    ``logger``, the champion, logged the rows: :func:`poem.estimators.marginal.known_logger`;
    else ``joint``).
    """
    serve_floor = cfg.training.params.get("exploration_floor")
    serving = serving_choice(cfg.search, split.n_rows("validation"))
    selection = select_challenger(
        trials,
        champion,
        validation_rows(split),
        scoring=cfg.search.scoring,
        min_effective_sample_size=_ess_guard(trials, cfg.search) if trials else 0.0,
        temperatures=serving.get("temperatures"),
        exploration_floor=serve_floor,
        confidence_level=cfg.search.confidence_level,
        learning_confidence_level=cfg.search.learning_confidence_level,
        evidence_logs=logs,
        fit=lambda params: fit_learner(rows, header, cfg.training, params, champion, cfg.search),
        rule=cfg.search.selection_rule,
        logger=logger,
        crossfit_folds=cfg.search.crossfit_folds,
        refit=lambda params, log: fit_learner(
            log, header, cfg.training, params, champion, cfg.search
        ),
    )
    client = run.client()
    log_metrics(client, run.run_id, selection.metrics())
    client.set_tag(run.run_id, WEIGHTS_TAG, "joint" if logger is None else "per-label")
    for key, value in selection.tags().items():
        client.set_tag(run.run_id, key, value)
    evidence = selection.evidence
    if evidence is not None:
        task_logger().info(
            "fit vs champion re-tempered: R difference %.4g, %.4g%% upper bound %.4g "
            "(+ %.4g for the weights' unseen mass; model term %.4g, bound %.4g; rule %s over "
            "%d fits) on %d validation rows",
            evidence.difference,
            100 * evidence.confidence_level,
            evidence.upper,
            evidence.coverage_penalty,
            evidence.model_difference,
            evidence.model_upper,
            selection.rule,
            selection.n_compared,
            evidence.n_validation,
        )
    cv = selection.crossfit_evidence
    if cv is not None:
        task_logger().info(
            "its configuration refitted on %d training folds: R difference %.4g, %.4g%% upper "
            "bound %.4g (+ %.4g; model term %.4g, bound %.4g) on %d training rows",
            cfg.search.crossfit_folds,
            cv.difference,
            100 * cv.confidence_level,
            cv.upper,
            cv.coverage_penalty,
            cv.model_difference,
            cv.model_upper,
            cv.n_validation,
        )
    task_logger().info("selection: %s", selection.reason)
    return selection


WEIGHTS_TAG = "selection_weights"  # per-label (the champion logged the rows) or joint
LEARNER_TAG = "challenger_learner"  # the served trial's learner, or "champion" (re-tempered)


def trial_learner_name(params: dict, learner: str) -> str:
    """The learner that fitted a trial (``learner``: ``training.learner``), or ``champion``."""
    if challenger_kind(params) == RETEMPERED:
        return "champion"
    return str(params.get(LEARNER_KEY, learner))


@task(name="record-search", cache_policy=NO_CACHE, **IO_RETRIES)
def record_search(
    trials: list[Trial], best: int, run: TrackedRun, learner: str = "poem"
) -> list[dict]:
    """Log one nested MLflow run per trial, the search table and the IPS-vs-λ plot of the fits.

    Each nested run's params name its ``learner`` (``training.learner``, a
    ``search.candidates`` learner, or ``champion`` for a re-tempered champion); the parent run
    gets the selected trial's ``challenger_kind`` and :data:`LEARNER_TAG` as tags.
    """
    client, rows = run.client(), []
    for i, trial in enumerate(trials):
        params = {
            **trial.params,
            LEARNER_KEY: trial_learner_name(trial.params, learner),
            KIND_KEY: challenger_kind(trial.params),
        }
        create_nested_run(
            client, run.experiment_id, run.run_id, f"trial-{i:03d}", params, trial.to_dict()
        )
        rows.append({"trial": i, "selected": i == best, **params, **trial.to_dict()})
    client.set_tag(run.run_id, KIND_KEY, challenger_kind(trials[best].params))
    client.set_tag(run.run_id, LEARNER_TAG, trial_learner_name(trials[best].params, learner))
    log_json(client, run.run_id, rows, "search/results.json")
    log_metrics(
        client, run.run_id, {f"validation_{k}": v for k, v in trials[best].to_dict().items()}
    )
    with tempfile.TemporaryDirectory(prefix="poem-search-") as tmp:
        plot = plot_search(
            [r for r in rows if "resolved_variance_penalty" in r and r[LEARNER_KEY] == learner],
            Path(tmp) / "validation_ips_vs_variance_penalty.png",
            x="resolved_variance_penalty",
            group="resolved_clip",
        )
        log_artifact(client, run.run_id, plot, "search")
    create_table_artifact(
        key="search-results", table=rows, description="validation scores per trial"
    )
    return rows
