"""Reproduce the multilabel experiments of Swaminathan & Joachims (2015, §6, Tables 3–5).

Protocol (DESIGN §9): h₀ = per-label logistic regression on 5% of the supervised training set;
4 replays y ~ h₀ with Hamming-loss feedback; 25% of the contexts held out for validation with
all their replays (``--split rows``: 25% of the log's rows, the paper's, which leaves each
validation context's other replays in the training rows and so rewards fits that memorize
training contexts; the test set, like production, has contexts no fit saw);
IPS(S)/POEM(S) (minibatch AdaGrad, Alg. 1) and IPS(B)/POEM(B) (L-BFGS) with λ = c·λ*, c chosen
by a validation estimate (SNIPS by default, see Selection below); test-set expected Hamming loss
(closed form), MAP loss, the supervised skyline (scikit-learn ``LogisticRegression`` per label on the full training set),
gap closed, one-tailed paired t-tests POEM < IPS, and seconds per validation run beside the
skyline's fit seconds measured in the same process.

Usage (from the repo root)::

    python benchmarks/paper_multilabel.py --datasets yeast tmc2007 emotions medical --runs 10
    python benchmarks/paper_multilabel.py --datasets yeast --paper-regime
    python benchmarks/paper_multilabel.py --train a.svm --test b.svm        # any LibSVM pair
    python benchmarks/paper_multilabel.py --train a.arff --test b.arff --n-labels 22

One source of truth: the POEM rows use exactly the flow's default training and search settings,
read from the repo-root ``mlflow.yml`` by :func:`flow_defaults` (``training.params`` with the
log's family and each solver; ``search.grid``, ``search.scoring``, ``search.min_ess_fraction``, ``search.min_ess``,
``search.temperatures``);
the IPS rows are the same learners with λ = 0 (the grid without ``variance_scale``). There is no
benchmark-only learning setting and no per-data-set value: the AdaGrad step size works on
standardized features inside the learner. ``training.params.warm_start: champion`` starts from
h₀'s coefficients (before any promotion the champion is the logging policy);
``--paper-regime`` keeps w₀ = 0 and drops the intercept. ``--set training.params.KEY=VALUE`` /
``--set search.KEY=VALUE`` (YAML values) exist for experiments; the published tables use none.
Test losses never select anything: what each POEM row serves is
:func:`poem.learners.selection.select_challenger`, the flow's own selection (one function): as
the flow does when a champion exists (here h₀: the fits start from it), h₀ re-tempered at each
serving temperature joins every selection as a "no learning" candidate, a first-ranked fit is
served only when the paired doubly robust evidence on the validation rows (clustered by
context) shows it better than the best candidate at the level ``search.selection_rule``
gives (default ``simultaneous``: the max-t level of the K distinct fits' paired differences;
``bonferroni``: 1 − (1 − ``search.learning_confidence_level``)/K), and a re-tempering only
when shown better than h₀ as served. Beside the default row ``POEM``: ``POEM uncorrected``
(no correction), ``POEM bonferroni`` (the previous default, K = distinct fits),
``POEM strict`` (Bonferroni, K = fits × temperatures), ``POEM max-t``
(``simultaneous``), ``POEM holdout`` (select on half the validation contexts, confirm the
winner on the other half, uncorrected) and ``POEM fits only`` (no champion candidates;
``--no-champion-candidates`` drops them everywhere). ``--set search.selection_rule=bonferroni``
makes ``POEM`` the earlier release's rule. The summary gives, run by run, the worst POEM − h₀ and every run where POEM is
worse than the sharpened h₀.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import yaml
from scipy import stats
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from poem.datasets import DATASETS, SupervisedDataset, load_dataset, load_files  # noqa: E402
from poem.estimators.marginal import known_logger  # noqa: E402
from poem.learners import POEM, search_hyperparameters, select_trial  # noqa: E402
from poem.learners.champion_candidates import (  # noqa: E402
    RETEMPERED,  # noqa: E402
    champion_trials,
    retempered_champion,
)
from poem.learners.search import Trial, ess_floor, policy_scores  # noqa: E402
from poem.learners.selection import select_challenger  # noqa: E402
from poem.simulate import (  # noqa: E402
    fit_logging_policy,
    fit_rows,
    map_loss,
    supervised_to_bandit,
    true_expected_loss,
)

MULTILABEL_SETS = tuple(d for d in DATASETS if d != "digits")
METHODS = (
    "h0",
    "h0 sharpened",
    "h0 MAP",
    "IPS(S)",
    "POEM(S)",
    "IPS(B)",
    "POEM(B)",
    "IPS",
    "POEM fits only",
    "POEM uncorrected",
    "POEM strict",
    "POEM bonferroni",
    "POEM holdout",
    "POEM max-t",
    "POEM no candidates",
    "POEM",
    "skyline",
)
SHARPENED = "h0 sharpened"  # h₀ at the α the flow's rule picks on validation: no learning
# the flow's search: one selection over the trials of every solver in search.grid.solver
COMBINED = {
    "IPS": ("IPS(S)", "IPS(B)"),
    "POEM fits only": ("POEM(S)", "POEM(B)"),  # the same search without the champion candidates
    "POEM uncorrected": ("POEM(S)", "POEM(B)"),  # the earlier rule: no multiplicity correction
    "POEM strict": ("POEM(S)", "POEM(B)"),  # K = fits × temperatures (the strict union bound)
    "POEM bonferroni": ("POEM(S)", "POEM(B)"),  # the previous default: 1 − γ/K, K fits
    "POEM holdout": ("POEM(S)", "POEM(B)"),  # select on half the contexts, confirm on the rest
    "POEM max-t": ("POEM(S)", "POEM(B)"),  # simultaneous (max-t) bound over the K fits
    "POEM": ("POEM(S)", "POEM(B)"),
    "POEM no candidates": ("POEM(S)", "POEM(B)"),  # without search.candidates (the s9 default)
}
NO_CANDIDATES = ("IPS", "POEM no candidates")  # COMBINED rows whose pool has no candidates
LEARNERS = {
    "IPS(S)": ("adagrad", False),
    "POEM(S)": ("adagrad", True),
    "IPS(B)": ("lbfgs", False),
    "POEM(B)": ("lbfgs", True),
}
SEARCH_ONLY = ("variance_scale", "variance_penalty")  # grid keys that make POEM differ from IPS
# Swaminathan & Joachims (2015), Table 3 (expected loss), Table 5 (MAP), Table 4 (seconds).
PAPER = {
    "yeast": {
        "h0": 5.547,
        "IPS(B)": 4.635,
        "POEM(B)": 4.480,
        "IPS(S)": 4.614,
        "POEM(S)": 4.517,
        "skyline": 2.822,
        "POEM(S)_map": 4.065,
        "seconds": {
            "IPS(B)": 47.61,
            "IPS(S)": 2.86,
            "POEM(B)": 94.16,
            "POEM(S)": 5.02,
            "skyline": 3.28,
        },
    },
    "tmc2007": {
        "h0": 3.445,
        "IPS(B)": 2.808,
        "POEM(B)": 2.197,
        "IPS(S)": 3.023,
        "POEM(S)": 2.522,
        "skyline": 1.189,
        "POEM(S)_map": 2.299,
        "seconds": {
            "IPS(B)": 136.34,
            "IPS(S)": 49.12,
            "POEM(B)": 949.95,
            "POEM(S)": 276.13,
            "skyline": 99.18,
        },
    },
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    p.add_argument(
        "--data-dir",
        type=Path,
        default=REPO_ROOT.parent / "shared" / "data",
        help="folder holding yeast/, tmc2007/ and mulan/",
    )
    p.add_argument(
        "--datasets",
        nargs="+",
        default=["yeast", "tmc2007", "emotions", "medical"],
        choices=list(MULTILABEL_SETS),
        help="data sets from --data-dir (ignored with --train/--test)",
    )
    p.add_argument(
        "--train", type=Path, help="LibSVM-multilabel (.svm) or MULAN ARFF (.arff) training file"
    )
    p.add_argument("--test", type=Path, help="matching test file")
    p.add_argument("--n-labels", type=int, help="number of labels (required for ARFF files)")
    p.add_argument(
        "--runs", type=int, default=10, help="repetitions (new h0 subsample and bandit log each)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of run 0 (run r uses seed + r)")
    p.add_argument(
        "--json",
        type=Path,
        help="write results here (one file per data set: '-<name>' is "
        "appended to the stem when several data sets run)",
    )
    p.add_argument(
        "--paper-regime",
        action="store_true",
        help="phi = x (x) y exactly: no intercept for h0 and the learners, w0 = 0",
    )
    p.add_argument(
        "--fraction", type=float, default=0.05, help="fraction of the training set for h0"
    )
    p.add_argument("--replays", type=int, default=4, help="replay passes through the training set")
    p.add_argument(
        "--validation-fraction", type=float, default=0.25, help="share of the log held out"
    )
    p.add_argument(
        "--split",
        choices=["rows", "contexts"],
        default=None,
        help="hold out log rows at random (the paper's protocol; a context's other replays stay "
        "in training) or whole contexts with all their replays (validation on unseen contexts, "
        "as the test set and production are); default: contexts, rows with --paper-regime",
    )
    p.add_argument(
        "--config", type=Path, default=REPO_ROOT / "mlflow.yml", help="the flow's config file"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="experiments only: override a flow default, e.g. --set training.params.max_iter=3",
    )
    p.add_argument(
        "--no-champion-candidates",
        dest="champion_candidates",
        action="store_false",
        help="do not score h0 re-tempered beside the fits (the flow does when a champion exists)",
    )
    p.add_argument(
        "--no-multiplicity",
        dest="multiplicity",
        action="store_false",
        help="the uncorrected selection of earlier releases (poem.learners.selection: no "
        "Bonferroni correction over the candidates, any re-tempering served)",
    )
    p.add_argument(
        "--joint-weights",
        dest="marginal",
        action="store_false",
        help="score and compare with the joint weights pi/p only (the flow scores with per-label "
        "weights when the champion logged the rows, as h0 logged these: "
        "poem.estimators.marginal.known_logger)",
    )
    p.add_argument(
        "--threads", type=int, default=1, help="BLAS threads for every fit (skyline included)"
    )
    args = p.parse_args(argv)
    if (args.train is None) != (args.test is None):
        p.error("--train and --test go together")
    if args.split is None:
        args.split = "rows" if args.paper_regime else "contexts"
    return args


def flow_defaults(config: Path, overrides: list[str] = ()) -> dict:
    """The flow's default training and search settings (the one place that reads them).

    Returns ``{"params", "grid", "scoring", "min_ess_fraction", "min_ess", "temperatures",
    "confidence_level", "learning_confidence_level"}`` from ``config`` (the repo-root
    ``mlflow.yml``) through :func:`flows.config.load_config`; ``overrides`` are
    ``section.key[.key]=yaml`` strings for experiments.
    """
    from flows.config import load_config

    cfg = load_config(config)
    out = {
        "params": dict(cfg.training.params),
        "grid": {k: list(v) for k, v in cfg.search.grid.items()},
        "scoring": cfg.search.scoring,
        "min_ess_fraction": cfg.search.min_ess_fraction,
        "min_ess": cfg.search.min_ess,
        "temperatures": cfg.search.temperatures,
        "confidence_level": cfg.search.confidence_level,
        "learning_confidence_level": cfg.search.learning_confidence_level,
        "selection_rule": cfg.search.selection_rule,
        "crossfit_folds": cfg.search.crossfit_folds,
        "per_label_weights": cfg.search.per_label_weights,
        "candidates": {  # search.candidates: other learners of the same search
            name: {"params": dict(spec.params), "grid": {k: list(v) for k, v in spec.grid.items()}}
            for name, spec in cfg.search.candidates.items()
        },
    }
    # search.candidates as the flow resolves it for a multilabel log (auto: none)
    as_multilabel = {"data.family": "multilabel", "training.params.policy": "multilabel"}
    out["candidates"] = {
        name: {"params": dict(spec.params), "grid": {k: list(v) for k, v in spec.grid.items()}}
        for name, spec in load_config(config, as_multilabel).search.candidates.items()
    }
    for item in overrides:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        target = {"training": out["params"], "search": out}[section]
        if name.startswith("params."):
            name = name[len("params.") :]
        if name.startswith("grid."):
            target, name = out["grid"], name[len("grid.") :]
        target[name] = yaml.safe_load(value)
    if cfg.training.learner != "poem":
        raise SystemExit(f"{config}: training.learner is {cfg.training.learner!r}, not 'poem'")
    return out


def fit_skyline(ds: SupervisedDataset, intercept: bool) -> tuple[object, float]:
    """The supervised skyline: h₀'s model on the full training set, and its fit seconds."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.filterwarnings("ignore", message="h0: .* constant")  # reported with h0
        model = fit_logging_policy(ds, fraction=1.0, fit_intercept=intercept, random_state=0)
    return model, time.perf_counter() - start


def learner_setup(defaults: dict, solver: str, penalised: bool, seed: int, args, h0) -> tuple:
    """Template estimator and grid of one row: the flow's defaults with this row's solver."""
    params = dict(defaults["params"])
    params.update(policy="multilabel", solver=solver, random_state=seed)
    warm = params.get("warm_start", "zeros")
    if args.paper_regime:
        params.update(fit_intercept=False, warm_start="zeros")
    elif warm == "champion":  # before any promotion the champion is the logging policy
        params["warm_start"] = h0
    grid = dict(defaults["grid"])
    grid.pop("solver", None)  # one row per solver; the combined rows select across them
    if "warm_start" in grid:  # the champion before any promotion is the logging policy
        starts = ["zeros"] if args.paper_regime else grid["warm_start"]
        grid["warm_start"] = [h0 if w == "champion" else w for w in starts]
    if not penalised:
        for key in SEARCH_ONLY:
            grid.pop(key, None)
        grid["variance_penalty"] = [0.0]
    return POEM(**params), grid


def learned_loss(policy, ds: SupervisedDataset) -> float:
    """Test expected loss of the learned policy without the serving floor ε (as h₀, skyline).

    The flow serves every challenger with ``exploration_floor`` ε per label (q labels), which
    turns each marginal σ into (1 − 2ε)σ + ε, so the served loss is exactly
    (1 − 2ε)·loss + q·ε (``served_loss`` records it): a serving cost, not a learning one.
    """
    return true_expected_loss(policy.with_serving(exploration_floor=0.0), ds.X_test, ds.Y_test)


def sharpened(h0, valid, defaults: dict, min_ess: float, logger=None) -> tuple[object, float]:
    """h₀ served at the α of ``search.temperatures`` that the search's own rule selects.

    The same validation log, scoring and ESS guard as the learners' trials
    (:func:`poem.learners.select_trial`), no fit, served as the flow serves a re-tempered
    champion (:func:`~poem.learners.champion_candidates.retempered_champion`, with the flow's
    exploration floor): the baseline a learner must beat to have learned anything beyond
    sharpening the logger. ``logger``: scored with per-label weights, as the flow's candidates.
    """
    temperatures = defaults["temperatures"] or [1.0]
    floor = float(defaults["params"].get("exploration_floor", 0.0))
    policies = [retempered_champion(h0, t, floor) for t in temperatures]
    trials = []
    scores = policy_scores(policies, valid, 0.95, logger)
    for t, (ips, snips) in zip(temperatures, scores, strict=True):
        trials.append(
            Trial({"temperature": t}, ips, snips, ips.effective_sample_size, 0, 0, 0, True, 0)
        )
    best = select_trial(trials, scoring=defaults["scoring"], min_effective_sample_size=min_ess)
    return policies[best], float(temperatures[best])


def printable(params: dict) -> dict:
    """Trial params for JSON: a warm-start policy (h₀, the champion) is written "champion"."""
    return {
        k: v if isinstance(v, str | int | float | None) else "champion" for k, v in params.items()
    }


def validation_rows(n_contexts: int, args, seed: int) -> tuple[np.ndarray, int]:
    """A permutation of the log's rows whose first ``n_val`` rows are the validation split.

    ``--split rows``: rows at random. ``--split contexts``: a ``--validation-fraction`` share of
    the contexts with all their replays (row r·n + i is replay r of context i), so no
    validation context is in the training rows.
    """
    rng = np.random.default_rng(seed)
    n_rows = n_contexts * args.replays
    if args.split == "rows":
        return rng.permutation(n_rows), int(round(args.validation_fraction * n_rows))
    contexts = rng.permutation(n_contexts)
    rows = contexts[None, :] + n_contexts * np.arange(args.replays)[:, None]
    n_val = int(round(args.validation_fraction * n_contexts))
    order = np.concatenate([rows[:, :n_val].ravel(), rows[:, n_val:].ravel()])
    return order, n_val * args.replays


def one_run(ds: SupervisedDataset, run: int, args, defaults: dict) -> dict:
    """Every method on one simulated log; losses on the supervised test set."""
    seed = args.seed + run
    intercept = not args.paper_regime
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        h0 = fit_logging_policy(
            ds.X_train,
            ds.Y_train,
            family="multilabel",
            fraction=args.fraction,
            fit_intercept=intercept,
            random_state=seed,
        )
    log = supervised_to_bandit(
        ds.X_train, ds.Y_train, h0, n_replays=args.replays, random_state=seed
    )
    perm, n_val = validation_rows(ds.X_train.shape[0], args, seed)
    contexts = perm[:n_val] % ds.X_train.shape[0]  # a validation row's context: its cluster
    train, valid = log.take(perm[n_val:]), log.take(perm[:n_val])
    # the default row's cross-fitted evidence: folds by context, never evaluated on the
    # contexts h₀ was fitted on (a flow's champion saw earlier logs, not these)
    train_contexts = perm[n_val:] % ds.X_train.shape[0]
    crossfit = {
        "train_groups": train_contexts,
        "crossfit_exclude": np.flatnonzero(
            np.isin(train_contexts, fit_rows(ds.X_train.shape[0], args.fraction, seed))
        ),
    }
    out = {
        "h0": {
            "loss": true_expected_loss(h0, ds.X_test, ds.Y_test),
            "map_loss": map_loss(h0, ds.X_test, ds.Y_test),
            "seconds": 0.0,
            "constant_labels": len(h0.metadata["constant_labels"]),
        },
        "warnings": sorted({str(w.message).split(":")[0] for w in caught}),
    }
    min_ess = ess_floor(valid.n_rows, defaults["min_ess_fraction"], defaults["min_ess"])
    out["n_validation"] = valid.n_rows
    # the flow's rule: per-label weights when the champion (h0 here) logged every row
    marginal = args.marginal and defaults["per_label_weights"] and not args.paper_regime
    logger = known_logger(h0, train, valid) if marginal else None
    out["per_label_weights"] = logger is not None
    sharp, alpha = sharpened(h0, valid, defaults, min_ess, logger)
    out[SHARPENED] = {
        "loss": learned_loss(sharp, ds),
        "map_loss": out["h0"]["map_loss"],
        "seconds": 0.0,
        "selected": {"temperature": alpha},
    }
    out["h0 MAP"] = {
        "loss": out["h0"]["map_loss"],
        "map_loss": out["h0"]["map_loss"],
        "seconds": 0.0,
    }
    floor = float(defaults["params"].get("exploration_floor", 0.0))
    # the flow scores the champion at each serving temperature beside the fits (no refit);
    # before any promotion the benchmark's champion is h₀ (the fits start from it)
    candidates = (
        champion_trials(h0, valid, defaults["temperatures"], exploration_floor=floor, logger=logger)
        if args.champion_candidates and not args.paper_regime
        else []
    )
    out["candidates"] = [
        {
            "temperature": t.params["temperature"],
            "test_loss": learned_loss(retempered_champion(h0, t.params["temperature"], floor), ds),
            "ips": t.ips.value,
            "snips": t.snips.value,
            "ips_upper": t.ips.upper,
            "snips_upper": t.snips.upper,
            "ess": t.effective_sample_size,
        }
        for t in candidates
    ]
    searched = {}
    for name, (solver, penalised) in LEARNERS.items():
        template, grid = learner_setup(defaults, solver, penalised, seed, args, h0)
        result = search_hyperparameters(
            template,
            train,
            valid,
            grid,
            scoring=defaults["scoring"],
            min_effective_sample_size=min_ess,
            keep_estimators=True,
            temperatures=defaults["temperatures"],
            logger=logger,
        )
        searched[name] = result.trials
        out[name] = served_choice(
            [(solver, t) for t in result.trials],
            candidates,
            h0,
            floor,
            defaults,
            min_ess,
            ds,
            (valid, train),
            contexts,
            args,
            logger,
        )
        out[name]["seconds"] = float(np.mean([t.seconds for t in result.trials]))
        # every trial, for the selection-rule sensitivity table (test losses never select)
        out[name]["trials"] = [
            {
                "params": printable(
                    {k: v for k, v in t.params.items() if k in grid or k == "temperature"}
                ),
                "test_loss": learned_loss(t.estimator.policy_, ds),
                "ips": t.ips.value,
                "snips": t.snips.value,
                "ips_upper": t.ips.upper,
                "snips_upper": t.snips.upper,
                "ess": t.effective_sample_size,
                "seconds": t.seconds,
                "n_iter": t.n_iter,
                "converged": t.converged,
                "objective": t.objective,
            }
            for t in result.trials
        ]
    extra = candidate_trials(defaults, train, valid, min_ess, h0, logger)  # search.candidates
    out["candidate_fits"] = [
        {
            "learner": name,
            "params": printable(dict(t.params)),
            "test_loss": learned_loss(t.estimator.policy_, ds),
            "snips_upper": t.snips.upper,
            "seconds": t.seconds,
        }
        for name, t in extra
    ]
    out["loss_model_seconds"] = float(train.__dict__.get("_loss_model_seconds", 0.0))
    solvers = defaults["grid"].get("solver", [defaults["params"].get("solver", "adagrad")])
    for name, rows in COMBINED.items():  # what the flow's search selects
        pool = [
            (LEARNERS[row][0], t)
            for row in rows
            if LEARNERS[row][0] in solvers
            for t in searched[row]
        ]
        if name not in NO_CANDIDATES:
            pool += extra
        champions = [] if name == "POEM fits only" else candidates
        rule = argparse.Namespace(
            multiplicity=args.multiplicity and name != "POEM uncorrected",
            per_temperature=name == "POEM strict",
            rule=(
                "holdout"
                if name == "POEM holdout"
                else "bonferroni"
                if name in ("POEM strict", "POEM bonferroni")
                else "simultaneous"
                if name == "POEM max-t"
                else "uncorrected"
                if name == "POEM uncorrected" or not args.multiplicity
                else defaults["selection_rule"]
            ),
        )
        out[name] = served_choice(
            pool, champions, h0, floor, defaults, min_ess, ds, (valid, train), contexts, rule,
            logger, crossfit if name == "POEM" else None,
        )  # fmt: skip
        out[name]["seconds"] = float(np.mean([t.seconds for _, t in pool]))
    sky, seconds = fit_skyline(ds, intercept)
    out["skyline"] = {
        "loss": map_loss(sky, ds.X_test, ds.Y_test),
        "expected_loss": true_expected_loss(sky, ds.X_test, ds.Y_test),
        "map_loss": map_loss(sky, ds.X_test, ds.Y_test),
        "seconds": seconds,
    }
    return out


def candidate_trials(
    defaults: dict, train, valid, min_ess: float, champion=None, logger=None
) -> list:
    """``(learner, trial)`` of every ``search.candidates`` fit, as the flow searches them.

    Each learner with its fixed params (ε: ``training.params``', as
    :func:`flows.learners.candidate_params`) over its own grid, each fit at its validation
    temperature, estimators kept (the selection compares every fit); ``champion`` (h₀, the
    logger here) resolves ``warm_start`` / ``logging_policy: champion`` as in the flow.
    """
    from flows.learners import build_learner, candidate_params

    out = []
    for name, spec in defaults.get("candidates", {}).items():
        fixed = candidate_params(name, spec.get("params", {}), defaults["params"])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = search_hyperparameters(
                build_learner(name, fixed, champion=champion, log=train),
                train,
                valid,
                {k: list(v) for k, v in spec["grid"].items()},
                scoring=defaults["scoring"],
                min_effective_sample_size=min_ess,
                keep_estimators=True,
                temperatures=defaults["temperatures"],
                confidence_level=defaults["confidence_level"],
                logger=logger,
            )
        out += [(name, t) for t in result.trials]
    return out


def served_choice(
    fits,
    candidates,
    h0,
    floor,
    defaults,
    min_ess,
    ds,
    logs,
    groups,
    args,
    logger=None,
    crossfit=None,
) -> dict:
    """The flow's selection over fitted trials and champion candidates, and its test losses.

    ``fits`` are ``(solver, trial)`` pairs (trials keep their estimators); with ``candidates``
    (h₀ is the champion) the selection is :func:`poem.learners.selection.select_challenger`
    with h₀ as the champion, exactly the flow's (``logs`` = (validation, training) logs of the
    paired comparison; ``groups`` = each validation row's context, whose replays are one
    cluster); without, h₀ is the logging policy (no candidates, no confirmation). ``crossfit``
    (``train_groups``, ``crossfit_exclude``): with ``search.crossfit_folds`` the cross-fitted
    evidence on the training rows (the default ``POEM`` row only; None: off).
    """
    chosen = select_challenger(
        [t for _, t in fits],
        h0 if candidates else None,
        logs[0],
        scoring=defaults["scoring"],
        min_effective_sample_size=min_ess,
        temperatures=defaults["temperatures"],
        exploration_floor=floor,
        learning_confidence_level=defaults["learning_confidence_level"],
        evidence_logs=logs,
        groups=groups,
        multiplicity=args.multiplicity,
        per_temperature=getattr(args, "per_temperature", False),
        rule=getattr(args, "rule", None)
        or (defaults["selection_rule"] if args.multiplicity else "uncorrected"),
        logger=logger,
        crossfit_folds=defaults.get("crossfit_folds", 0) if crossfit else 0,
        **(crossfit or {}),
    )
    trial = chosen.selected_trial
    retempered = chosen.kind == RETEMPERED
    selected = (
        dict(trial.params)
        if retempered
        else printable({"solver": fits[chosen.selected][0], **trial.params})
    )
    return {
        "loss": learned_loss(chosen.policy, ds),
        "served_loss": true_expected_loss(chosen.policy, ds.X_test, ds.Y_test),
        "map_loss": map_loss(chosen.policy, ds.X_test, ds.Y_test),
        "retempered_h0": retempered,
        "learning_evidence": None if chosen.evidence is None else chosen.evidence.to_dict(),
        "crossfit_evidence": (
            None if chosen.crossfit_evidence is None else chosen.crossfit_evidence.to_dict()
        ),
        "reason": chosen.reason,
        "selected": selected,
        "n_iter": trial.n_iter,
        "converged": bool(trial.converged),
    }


RULES = {  # post-hoc selection rules over the recorded trials: (recorded score, ESS guard)
    f"{key}{'+ess1%' if ess else ''}": (field, ess)
    for key, field in (
        ("ips", "ips"),
        ("snips", "snips"),
        ("ips_ucb", "ips_upper"),
        ("snips_ucb", "snips_upper"),
    )
    for ess in (0.0, 0.01)
}


def sensitivity(runs: list[dict]) -> dict:
    """Mean test loss and POEM-vs-IPS p-values had each validation rule selected the trial."""
    out = {}
    for rule, (key, ess_fraction) in RULES.items():
        per = {}
        for name in LEARNERS:
            chosen = []
            for r in runs:
                trials = r[name]["trials"]
                ranks = []
                for i, t in enumerate(trials):  # select_trial's order: thin trials by ESS
                    thin = t["ess"] < ess_fraction * r["n_validation"]
                    score = t[key] if np.isfinite(t[key]) else np.inf
                    ranks.append((thin, -t["ess"] if thin else score, i))
                chosen.append(trials[min(ranks)[-1]]["test_loss"])
            per[name] = chosen
        out[rule] = {
            "loss": {k: float(np.mean(v)) for k, v in per.items()},
            "p_value": {
                kind: one_tailed(per[f"POEM({kind})"], per[f"IPS({kind})"]) for kind in ("S", "B")
            },
        }
    return out


def one_tailed(a, b) -> float:
    """p-value of the paired one-tailed t-test mean(a) < mean(b) (NaN for one run or a = b)."""
    if len(a) < 2 or np.allclose(a, b):
        return float("nan")
    return float(stats.ttest_rel(a, b, alternative="less").pvalue)


def summarise(ds_name: str, runs: list[dict], args, wall: float, defaults: dict) -> dict:
    """Means over runs, gap closed, paired one-tailed t-tests and the speed ratio."""
    methods = {}
    sky = float(np.mean([r["skyline"]["loss"] for r in runs]))
    h0 = float(np.mean([r["h0"]["loss"] for r in runs]))
    for name in METHODS:
        losses = np.array([r[name]["loss"] for r in runs])
        entry = {
            "loss": float(losses.mean()),
            "loss_std": float(losses.std(ddof=1)) if len(runs) > 1 else 0.0,
            "map_loss": float(np.mean([r[name]["map_loss"] for r in runs])),
            "served_loss": float(
                np.mean([r[name].get("served_loss", r[name]["loss"]) for r in runs])
            ),
            "seconds": float(np.mean([r[name]["seconds"] for r in runs])),
            "gap_closed": (h0 - float(losses.mean())) / (h0 - sky) if h0 != sky else float("nan"),
            "per_run": [float(x) for x in losses],
        }
        if name == "skyline":
            entry["expected_loss"] = float(np.mean([r[name]["expected_loss"] for r in runs]))
        if name in LEARNERS or name in COMBINED:
            entry["selected"] = [r[name]["selected"] for r in runs]
            entry["converged"] = [bool(r[name]["converged"]) for r in runs]
            entry["retempered_h0"] = [bool(r[name].get("retempered_h0", False)) for r in runs]
        methods[name] = entry
    sharp = methods[SHARPENED]["loss"]
    for entry in methods.values():  # (sharpened − method) / (sharpened − skyline MAP)
        entry["gap_beyond_sharpening"] = (
            (sharp - entry["loss"]) / (sharp - sky) if sharp != sky else float("nan")
        )
    methods[SHARPENED]["selected"] = [r[SHARPENED]["selected"] for r in runs]
    p_value, p_h0, p_sharp = {}, {}, {}
    for kind, (poem_row, ips_row) in {
        "S": ("POEM(S)", "IPS(S)"),
        "B": ("POEM(B)", "IPS(B)"),
        "default": ("POEM", "IPS"),
        "fits only": ("POEM fits only", "IPS"),
        "holdout": ("POEM holdout", "IPS"),
        "max-t": ("POEM max-t", "IPS"),
        "bonferroni": ("POEM bonferroni", "IPS"),
        "no candidates": ("POEM no candidates", "IPS"),
    }.items():
        a = methods[poem_row]["per_run"]
        p_value[kind] = one_tailed(a, methods[ips_row]["per_run"])
        p_h0[kind] = one_tailed(a, methods["h0"]["per_run"])
        p_sharp[kind] = one_tailed(a, methods[SHARPENED]["per_run"])
    worst = {}  # run by run: the served policy against h₀ and the sharpened h₀
    for name in ("POEM", *(n for n in COMBINED if n.startswith("POEM ") and n != "POEM fits only")):
        served = np.array(methods[name]["per_run"])
        worse = served - np.array(methods[SHARPENED]["per_run"])
        worst[name] = {
            "worst_minus_h0": float(np.max(served - np.array(methods["h0"]["per_run"]))),
            "runs_worse_than_sharpened": [
                {"run": int(i), "loss": float(served[i]), "minus_sharpened": float(worse[i])}
                for i in np.flatnonzero(worse > 1e-9)
            ],
        }
    ratio = methods["POEM(S)"]["seconds"] / methods["skyline"]["seconds"]
    loss_model = float(np.mean([r.get("loss_model_seconds", 0.0) for r in runs]))
    return {
        "dataset": ds_name,
        "regime": "paper" if args.paper_regime else "default",
        "runs": len(runs),
        "seeds": [args.seed, args.seed + len(runs) - 1],
        "methods": methods,
        "p_value": p_value,
        "p_value_vs_h0": p_h0,
        "p_value_vs_h0_sharpened": p_sharp,
        "run_by_run": worst,
        "retempered_h0_selected": {
            name: int(sum(methods[name]["retempered_h0"])) for name in (*LEARNERS, *COMBINED)
        },
        "speed": {
            "poem_s_seconds_per_validation_run": methods["POEM(S)"]["seconds"],
            "skyline_fit_seconds": methods["skyline"]["seconds"],
            "ratio": ratio,
            # the doubly robust objective's loss model: one fit per training log, shared by
            # every trial of the search (also inside the first trial's seconds)
            "loss_model_seconds": loss_model,
        },
        "paper": PAPER.get(ds_name),
        "wall_seconds": wall,
        "constant_labels_in_h0_sample": [r["h0"]["constant_labels"] for r in runs],
        "selection_sensitivity": sensitivity(runs),
        "trials": {name: [r[name]["trials"] for r in runs] for name in LEARNERS},
        "champion_candidates": [r["candidates"] for r in runs],
        "n_validation": [r["n_validation"] for r in runs],
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "flow_defaults": {k: v for k, v in defaults.items()},
    }


def markdown(res: dict) -> str:
    """The results table, with the paper's Table 3/4/5 figures beside ours."""
    paper = res["paper"] or {}
    rows = [
        f"### {res['dataset']} ({res['regime']} regime, {res['runs']} runs, "
        f"seeds {res['seeds'][0]}–{res['seeds'][1]}, flow defaults)",
        "",
        "| method | expected loss (± sd) | MAP loss | gap closed | gap beyond sharpening "
        "| s / validation run | paper loss | paper s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in METHODS:
        m = res["methods"][name]
        loss = f"{m['loss']:.3f} ± {m['loss_std']:.3f}"
        if name == "skyline":
            loss = f"{m['loss']:.3f} (MAP; expected {m['expected_loss']:.3f})"
        secs = (
            ""
            if name.startswith("h0")
            else f"{m['seconds']:.3f}" + (" (fit)" if name == "skyline" else "")
        )
        ps = paper.get("seconds", {}).get(name, "")
        rows.append(
            f"| {name} | {loss} | {m['map_loss']:.3f} | {m['gap_closed']:.1%} | "
            f"{m['gap_beyond_sharpening']:.1%} | {secs} | "
            f"{paper.get(name, '')} | {ps} |"
        )
    sp = res["speed"]
    rows += [
        "",
        "p (one-tailed paired t), POEM < IPS: "
        + ", ".join(f"{k} {v:.3g}" for k, v in res["p_value"].items())
        + "; POEM < h0: "
        + ", ".join(f"{k} {v:.3g}" for k, v in res["p_value_vs_h0"].items())
        + "; POEM < h0 sharpened: "
        + ", ".join(f"{k} {v:.3g}" for k, v in res["p_value_vs_h0_sharpened"].items()),
        "runs whose selection is h0 re-tempered (no fit shown better on validation): "
        + ", ".join(f"{k} {v}" for k, v in res["retempered_h0_selected"].items()),
        f"speed: POEM(S) {sp['poem_s_seconds_per_validation_run']:.3f} s per validation run "
        "vs skyline fit "
        f"{sp['skyline_fit_seconds']:.3f} s (ratio {sp['ratio']:.2f}; paper 1.53 on Yeast)",
        "",
        "selection-rule sensitivity (mean test loss of the trial each validation rule picks):",
        "",
        "| rule | " + " | ".join(LEARNERS) + " | p S | p B |",
        "|---" * (len(LEARNERS) + 3) + "|",
    ]
    for rule, v in res["selection_sensitivity"].items():
        rows.append(
            f"| {rule} | "
            + " | ".join(f"{v['loss'][m]:.3f}" for m in LEARNERS)
            + f" | {v['p_value']['S']:.3g} | {v['p_value']['B']:.3g} |"
        )
    return "\n".join(rows)


def summary_table(results: list[dict]) -> str:
    """One row per data set: losses, gap closed by the flow's POEM, p-values, speed."""
    rows = [
        "### Summary: POEM and IPS = the flow's default search (no per-data-set value)",
        "",
        "| data set | runs | "
        + " | ".join(k if k != "skyline" else "skyline (MAP)" for k in METHODS)
        + " | gap closed POEM | gap beyond sharpening POEM | p POEM<h0 | p POEM<h0 sharpened "
        "| p POEM<IPS | POEM(S) s / skyline s | worst run POEM − h0 | runs POEM > h0 sharpened |",
        "|---" * (len(METHODS) + 10) + "|",
    ]
    gaps, beyond = [], []
    for res in results:
        m = res["methods"]
        gap = m["POEM"]["gap_closed"]
        gaps.append(gap)
        beyond.append(m["POEM"]["gap_beyond_sharpening"])
        sp_ = res["speed"]
        rows.append(
            f"| {res['dataset']} | {res['runs']} | "
            + " | ".join(f"{m[k]['loss']:.3f}" for k in METHODS)
            + f" | {gap:.1%} | {beyond[-1]:.1%} | {res['p_value_vs_h0']['default']:.2g} | "
            f"{res['p_value_vs_h0_sharpened']['default']:.2g} | "
            f"{res['p_value']['default']:.2g} | "
            f"{sp_['poem_s_seconds_per_validation_run']:.3f} / "
            f"{sp_['skyline_fit_seconds']:.3f} = {sp_['ratio']:.2f} | "
            f"{res['run_by_run']['POEM']['worst_minus_h0']:+.3f} | "
            + (
                ", ".join(
                    f"run {w['run']} {w['minus_sharpened']:+.3f}"
                    for w in res["run_by_run"]["POEM"]["runs_worse_than_sharpened"]
                )
                or "none"
            )
            + " |"
        )
    rows += [
        "",
        f"mean gap closed by POEM: {np.mean(gaps):.1%}; mean gap beyond sharpening: "
        f"{np.mean(beyond):.1%}",
    ]
    return "\n".join(rows)


def main(argv=None) -> int:
    args = parse_args(argv)
    defaults = flow_defaults(args.config, args.set)
    print(f"flow defaults ({args.config}): {json.dumps(defaults)}", file=sys.stderr)
    if args.train is not None:
        sets = [("custom", lambda: load_files(args.train, args.test, n_labels=args.n_labels))]
    else:
        sets = [
            (name, lambda name=name: load_dataset(name, args.data_dir)) for name in args.datasets
        ]
    results = []
    for _, loader in sets:
        ds = loader()
        start = time.perf_counter()
        runs = []
        path = None
        if args.json is not None:
            path = (
                args.json
                if len(sets) == 1
                else args.json.with_name(f"{args.json.stem}-{ds.name}{args.json.suffix}")
            )
            path.parent.mkdir(parents=True, exist_ok=True)
        with threadpool_limits(limits=args.threads):
            for run in range(args.runs):
                runs.append(one_run(ds, run, args, defaults))
                r = runs[-1]
                print(
                    f"[{ds.name} run {run}] "
                    + ", ".join(f"{m} {r[m]['loss']:.3f}" for m in METHODS)
                    + (f" ({'; '.join(r['warnings'])})" if r["warnings"] else ""),
                    file=sys.stderr,
                    flush=True,
                )
                if path is not None:  # partial results after every run
                    partial = summarise(ds.name, runs, args, time.perf_counter() - start, defaults)
                    path.write_text(json.dumps(partial, indent=2))
        res = summarise(ds.name, runs, args, time.perf_counter() - start, defaults)
        results.append(res)
        print(markdown(res) + "\n", flush=True)
        if path is not None:
            path.write_text(json.dumps(res, indent=2))
    print(summary_table(results), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
