"""POEM (the flow's default search) beside Vowpal Wabbit (--cb_adf, tuned as its docs advise).

Discrete supervised → bandit conversions (DESIGN §9): h₀ = logistic regression on 5 % of the
training set, 4 replays of the training set through h₀, 0/1 loss; 25 % of the training
*contexts* are held out for validation with all their replays (the paper benchmark's
``--split contexts``: no validation context is in any learner's training rows), and every
learner learns on the same training rows, is chosen on the same validation rows and is
scored on the same test rows; the test set is replayed once for an off-policy
estimate, and its labels give every policy's TRUE expected loss 1 − π(y*|x) (no estimate).

Data (no network): scikit-learn's bundled ``digits`` (1,797 × 64, 10 classes),
``breast_cancer`` (569 × 30, 2), ``wine`` (178 × 13, 3), and ``synthetic``: scikit-learn's
``make_classification`` with a fixed seed (4,000 × 20, 6 classes, 2 clusters per class, 2 %
label noise). Features are standardized on the training set (digits: pixels / 16).

Vowpal Wabbit 9.11.9, as its documentation advises for logged bandit data: ``--cb_adf`` with
its default ``cb_type`` (mtr, the FAQ's default for action-dependent features); context in a
``shared`` namespace ``s``, the action as an identity feature in namespace ``a`` and ``-q sa``
(without the interaction the scores are additive and every context ranks the actions alike);
cost = loss − 1 (VW minimizes cost = −reward; an unlogged action is never cheaper than a
logged one); several passes in a fresh seeded order each pass. The learning rate
``-l`` ∈ {0.03, 0.1, 0.3, 0.5 (its default), 1, 3} and the pass count ∈ {1, 2, 4, 8} are chosen on the
validation split by the lowest upper 95 % bound of the SNIPS estimate of VW's greedy policy
(the flow's own rule), then VW is refit with them on the rows the flow's served POEM learns
from (``training.refit_on``: the training split by default; the "other refit_on" rows refit
both learners on train + validation) and scored once on test. Its greedy policy is deterministic; "VW served" adds the floor ε the flow serves POEM with
(``exploration_floor``: the greedy action keeps 1 − (K − 1)ε).

POEM: :func:`poem.learners.search.search_hyperparameters` with exactly the flow's default
``training.params`` and ``search`` section of ``mlflow.yml`` (grid, scoring, ESS guard,
serving temperatures); the challenger is the selected trial's fit with ``training.refit_on:
train`` (the default) or its configuration refit on train + validation with
``train+validation``, as the flow serves it; the rows "other refit_on" show the other setting.
Two rows: ``first run`` is the flow before any promotion (the champion is the logging policy,
whose coefficients the flow does not know: ``warm_start: champion`` starts at zeros);
``h0 champion`` is a later round whose champion is h₀ itself: fits start at h₀ and the search
also scores h₀ re-tempered at every serving temperature, no refit
(:mod:`poem.learners.champion_candidates`, as the flow does when a champion exists).
"POEM served" carries the flow's ``exploration_floor``; "POEM ε = 0" is the same w without it.
The POEM rows are the flow's default search: POEM's grid and ``search.candidates`` (the
IPW-weighted classifier, :mod:`poem.learners.ipw_classifier`) selected together by
:func:`poem.learners.selection.select_challenger`; "POEM grid alone" is the same without the
candidates (``search.candidates: {}``). The peer "IPW-weighted classifier" is that classifier's
grid alone, selected by the same rule (no champion). Every comparison is a paired two-sided
t-test over seeds on the same train / validation / test rows.

Needs the optional extra ``bench`` (vowpalwabbit==9.11.9).

Usage:
    .venv/bin/python benchmarks/vw_compare.py --seeds 0 1 2 3 4 --json vw_compare.json
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
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_digits, load_wine, make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

from flows.config import load_config
from poem.data import LoggedBandit
from poem.estimators import snips
from poem.learners import POEM, search_hyperparameters, select_trial
from poem.learners.champion_candidates import (
    challenger_kind,
    champion_trials,
    selected_champion_policy,
)
from poem.learners.ipw_classifier import IPWClassifier
from poem.learners.search import ess_floor
from poem.learners.selection import RULES, select_challenger
from poem.simulate import fit_logging_policy, fit_rows, supervised_to_bandit

REPO_ROOT = Path(__file__).resolve().parents[1]
DATASETS = ("digits", "breast_cancer", "wine", "synthetic")
LEARNING_RATES = (0.03, 0.1, 0.3, 0.5, 1.0, 3.0)
PASSES = (1, 2, 4, 8)
IPW_C = (0.01, 0.1, 1.0, 10.0)  # the IPW-weighted classifier's L2 grid (standardized features)


def load_discrete(name: str, seed: int):
    """``(X_train, y_train, X_test, y_test)``: stratified 2/3 split seeded by ``seed``."""
    if name == "digits":
        X, y = load_digits(return_X_y=True)
        X = X / 16.0
    elif name == "breast_cancer":
        X, y = load_breast_cancer(return_X_y=True)
    elif name == "wine":
        X, y = load_wine(return_X_y=True)
    elif name == "synthetic":
        X, y = make_classification(
            n_samples=4000,
            n_features=20,
            n_informative=10,
            n_redundant=4,
            n_classes=6,
            n_clusters_per_class=2,
            flip_y=0.02,
            random_state=20261125,
        )
    else:
        raise ValueError(f"unknown data set {name!r}; choose from {DATASETS}")
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=1 / 3, stratify=y, random_state=seed)
    if name != "digits":
        mean, scale = X_tr.mean(axis=0), X_tr.std(axis=0)
        scale[scale == 0] = 1.0
        X_tr, X_te = (X_tr - mean) / scale, (X_te - mean) / scale
    return X_tr, y_tr.astype(int), X_te, y_te.astype(int)


def simulate(name: str, seed: int, replays: int):
    """h₀, the log, train / validation / test logs, the supervised test set, validation contexts.

    The last item also holds the cross-fitted evidence's training contexts and the training
    rows it never evaluates on (h₀'s own contexts, as ``paper_multilabel.py``).
    """
    X_tr, y_tr, X_te, y_te = load_discrete(name, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # absent classes in h0's 5 %: smoothed
        h0 = fit_logging_policy(X_tr, y_tr, family="discrete", fraction=0.05, random_state=seed)
    log = supervised_to_bandit(X_tr, y_tr, h0, n_replays=replays, random_state=seed)
    test = supervised_to_bandit(X_te, y_te, h0, n_replays=1, random_state=seed + 1)
    # contexts held out with all their replays (row r·n + i is replay r of context i), the
    # paper benchmark's --split contexts: no validation context is in the training rows
    n = X_tr.shape[0]
    contexts = np.random.default_rng(seed).permutation(n)
    n_val = int(round(0.25 * n))
    replay = n * np.arange(replays)[:, None]
    valid_rows = np.sort((contexts[None, :n_val] + replay).ravel())
    train_rows = np.sort((contexts[None, n_val:] + replay).ravel())
    train, valid = log.take(train_rows), log.take(valid_rows)
    groups = valid_rows % n  # each validation row's context: its replays are one cluster
    crossfit = {
        "train_groups": train_rows % n,
        "crossfit_exclude": np.flatnonzero(np.isin(train_rows % n, fit_rows(n, 0.05, seed))),
    }
    return h0, log, train, valid, test, X_te, y_te, (groups, crossfit)


# -- Vowpal Wabbit ---------------------------------------------------------------------------
def vw_examples(log: LoggedBandit, with_labels: bool) -> list[list[str]]:
    """One multi-line cb_adf example per row: ``shared |s j:x_j ...`` then ``|a a<k>`` lines."""
    X = np.asarray(log.contexts)
    out = []
    for i in range(log.n_rows):
        shared = "shared |s " + " ".join(f"f{j}:{v:.6g}" for j, v in enumerate(X[i]) if v != 0)
        lines = [shared]
        for k in range(log.n_actions):
            label = ""
            if with_labels and k == log.actions[i]:  # cost = loss − 1 (VW: cost = −reward)
                label = f"0:{log.losses[i] - 1.0:.7g}:{log.propensities[i]:.7g} "
            lines.append(f"{label}|a a{k}")
        out.append(lines)
    return out


def vw_greedy(vw, examples: list[list[str]]) -> np.ndarray:
    """VW's greedy actions (argmin of the predicted costs)."""
    return np.array([int(np.argmin(vw.predict(ex))) for ex in examples])


def vw_train(args: str, examples: list[list[str]], passes: int, seed: int, on_pass=None):
    """Train a fresh workspace for ``passes`` passes (seeded order); ``on_pass(vw, p)`` after each."""
    import vowpalwabbit

    vw = vowpalwabbit.Workspace(f"--cb_adf -q sa --quiet --random_seed {seed} {args}")
    rng = np.random.default_rng(seed)
    for p in range(1, passes + 1):
        for i in rng.permutation(len(examples)):
            vw.learn(examples[i])
        if on_pass is not None:
            on_pass(vw, p)
    return vw


def greedy_weights(actions: np.ndarray, log: LoggedBandit) -> np.ndarray:
    return (actions == np.asarray(log.actions)) / log.propensities


def tuned_vw(
    train: LoggedBandit,
    valid: LoggedBandit,
    test: LoggedBandit,
    seed: int,
    refit_on: str,
    min_ess: float = 0.0,
) -> dict:
    """Choose ``-l`` and passes on validation (SNIPS upper bound, ESS guard), refit as POEM is.

    The flow's rule (:func:`~poem.learners._trials.select_trial`): a setting whose validation
    ESS is below ``min_ess`` ranks after every setting that reaches it.

    ``refit_on`` is the flow's ``training.refit_on``: ``train`` keeps the fit on the training
    rows (as the flow's served POEM), ``train+validation`` refits on both; ``greedy_other`` is
    the other setting's greedy actions (the same rows as POEM's "other refit_on" row).
    """
    train_ex, valid_ex = vw_examples(train, True), vw_examples(valid, False)
    scores = []
    start = time.perf_counter()
    for lr in LEARNING_RATES:

        def score(vw, p, lr=lr):
            if p in PASSES:
                est = snips(valid.losses, greedy_weights(vw_greedy(vw, valid_ex), valid))
                thin = est.effective_sample_size < min_ess  # the flow's ESS guard ranks it last
                upper = est.upper if np.isfinite(est.upper) else np.inf
                key = -est.effective_sample_size if thin else upper
                scores.append((thin, key, est.upper, lr, p))

        vw_train(f"-l {lr}", train_ex, max(PASSES), seed, score).finish()
    _, _, upper, lr, passes = min(scores)
    test_ex, greedy = vw_examples(test, False), {}
    for rows in ("train", "train+validation"):
        examples = train_ex if rows == "train" else train_ex + vw_examples(valid, True)
        vw = vw_train(f"-l {lr}", examples, passes, seed)
        greedy[rows] = vw_greedy(vw, test_ex)
        vw.finish()
    other = "train" if refit_on == "train+validation" else "train+validation"
    return {
        "greedy": greedy[refit_on],
        "greedy_other": greedy[other],
        "learning_rate": lr,
        "passes": passes,
        "validation_snips_ucb": upper,
        "seconds": time.perf_counter() - start,
    }


def untuned_vw(train: LoggedBandit, valid: LoggedBandit, test: LoggedBandit, seed: int):
    """VW ``--cb_adf -q sa`` with every default (mtr, -l 0.5, one pass), cost = loss − 1.

    On the training rows, as every other learner (nothing is chosen on validation).
    """
    examples = vw_examples(train, True)
    vw = vw_train("", examples, 1, seed)
    greedy = vw_greedy(vw, vw_examples(test, False))
    vw.finish()
    return greedy


# -- POEM ------------------------------------------------------------------------------------
def flow_defaults(config: Path) -> dict:
    """The flow's default ``training.params`` and ``search`` section (read once, as the flow)."""
    cfg = load_config(config)
    return {
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
        "refit_on": cfg.training.refit_on,
        "candidates": {  # search.candidates: other learners of the same search
            name: {"params": dict(spec.params), "grid": {k: list(v) for k, v in spec.grid.items()}}
            for name, spec in cfg.search.candidates.items()
        },
    }


def poem_trials(defaults: dict, train, valid, seed: int, champion=None) -> list:
    """The flow's search: its grid, scoring, ESS guard and temperatures (estimators kept).

    ``champion`` None is the flow's first run (``warm_start: champion`` = zeros); a policy
    is a champion the fits start from.
    """
    params = {**defaults["params"], "policy": "discrete", "random_state": seed}
    start_at = "zeros" if champion is None else champion
    if params.get("warm_start") == "champion":
        params["warm_start"] = start_at
    grid = dict(defaults["grid"])
    if "warm_start" in grid:
        starts = [start_at if w == "champion" else w for w in grid["warm_start"]]
        unique: list = []
        for w in starts:  # before any promotion both starts are zeros: one trial each
            if not any(w is s or (isinstance(w, str) and w == s) for s in unique):
                unique.append(w)
        grid["warm_start"] = unique
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        result = search_hyperparameters(
            POEM(**params),
            train,
            valid,
            grid,
            scoring=defaults["scoring"],
            min_effective_sample_size=_min_ess(defaults, valid),
            keep_estimators=True,
            temperatures=defaults["temperatures"],
            confidence_level=defaults["confidence_level"],
        )
    return list(result.trials)


def ipw_spec(defaults: dict) -> tuple[dict, dict]:
    """The IPW-weighted classifier's fixed params and grid: the flow's ``search.candidates``.

    Without it there (``search.candidates: {}``) the peer is fitted at C ∈ ``IPW_C``, no clip.
    """
    from flows.learners import candidate_params

    spec = defaults.get("candidates", {}).get("ipw_classifier", {"grid": {"C": list(IPW_C)}})
    fixed = candidate_params("ipw_classifier", spec.get("params", {}), defaults["params"])
    return fixed, {k: list(v) for k, v in spec["grid"].items()}


def ipw_trials(defaults: dict, train, valid) -> list:
    """The IPW-weighted classifier over its grid (:func:`ipw_spec`), each at its temperature."""
    fixed, grid = ipw_spec(defaults)
    return list(
        search_hyperparameters(
            IPWClassifier(**fixed),
            train,
            valid,
            grid,
            scoring=defaults["scoring"],
            min_effective_sample_size=_min_ess(defaults, valid),
            keep_estimators=True,
            temperatures=defaults["temperatures"],
            confidence_level=defaults["confidence_level"],
        ).trials
    )


def _min_ess(defaults: dict, valid) -> float:
    return ess_floor(valid.n_rows, defaults["min_ess_fraction"], defaults["min_ess"])


def flow_search(defaults: dict, trials, valid, train, champion=None, refit_log=None, groups=None):
    """What the flow serves from ``trials``: :func:`poem.learners.selection.select_challenger`.

    With a ``champion`` it is re-tempered beside the fits and a fit is served only when shown
    better at the multiplicity-corrected level (``groups``: each validation row's context, and
    the cross-fitted evidence's ``train_groups`` / ``crossfit_exclude``: :func:`simulate`).
    Returns the served policy, what was selected, and the selected configuration refit on
    ``refit_log`` (``training.refit_on: train+validation``; None without it).
    """
    floor = defaults["params"].get("exploration_floor", 0.0)
    chosen = select_challenger(
        trials,
        champion,
        valid,
        scoring=defaults["scoring"],
        min_effective_sample_size=_min_ess(defaults, valid),
        temperatures=defaults["temperatures"],
        exploration_floor=floor,
        confidence_level=defaults["confidence_level"],
        learning_confidence_level=defaults["learning_confidence_level"],
        evidence_logs=(valid, train),
        groups=None if groups is None else groups[0],
        crossfit_folds=defaults.get("crossfit_folds", 0) if groups is not None else 0,
        **({} if groups is None else groups[1]),
        multiplicity=defaults.get("multiplicity", True),
        rule=defaults["selection_rule"] if defaults.get("multiplicity", True) else "uncorrected",
    )
    policy, evidence, refit = chosen.policy, chosen.evidence, None
    if chosen.kind == "learned":
        policy = policy.with_serving(exploration_floor=floor)  # an IPW classifier fit has ε = 0
    if refit_log is not None:
        if chosen.kind == "learned":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                refit = clone(chosen.estimator).fit(refit_log).policy_
            refit = refit.with_serving(exploration_floor=floor)
        else:
            refit = policy
    reason = chosen.reason
    chosen = chosen.selected_trial
    picked = {
        k: v if isinstance(v, str | int | float) else "champion" for k, v in chosen.params.items()
    }
    info = {
        "kind": challenger_kind(chosen.params),
        "params": picked,
        "converged": bool(chosen.converged),
        "n_iter": int(chosen.n_iter),
        "validation_ess": float(chosen.effective_sample_size),
        "learning_evidence": None if evidence is None else evidence.to_dict(),
        "reason": reason,
    }
    return policy, info, refit


# -- figures ---------------------------------------------------------------------------------
def true_loss(probability_of_label: np.ndarray) -> float:
    return float(np.mean(1.0 - probability_of_label))


def floored_greedy_loss(greedy: np.ndarray, y: np.ndarray, n_actions: int, floor: float) -> float:
    """True loss of the greedy policy served with floor ε: the greedy action keeps 1 − (K − 1)ε."""
    p_label = np.where(greedy == y, 1.0 - (n_actions - 1) * floor, floor)
    return true_loss(p_label)


def policy_figures(policy, test: LoggedBandit, X_te, y_te) -> dict:
    """True test loss and test SNIPS of a policy served as is, without its floor, and its MAP."""
    bare = policy.with_serving(exploration_floor=0.0)
    greedy = policy.predict(X_te)
    test_map = policy.predict(np.asarray(test.contexts))
    return {
        "served": {
            "true_loss": true_loss(policy.action_probability(X_te, y_te)),
            "test_snips": snips(
                test.losses, policy.log_action_probability_on(test) / test.propensities
            ).value,
        },
        "no_floor": {
            "true_loss": true_loss(bare.action_probability(X_te, y_te)),
            "test_snips": snips(
                test.losses, bare.log_action_probability_on(test) / test.propensities
            ).value,
        },
        "map": {
            "true_loss": float(np.mean(greedy != y_te)),
            "test_snips": snips(test.losses, greedy_weights(test_map, test)).value,
        },
    }


def greedy_figures(greedy_test, greedy_bandit, test, y_te, n_actions, floor) -> dict:
    """True loss and test SNIPS of a greedy policy, bare and served with the floor ε."""
    served_p = np.where(
        greedy_bandit == np.asarray(test.actions), 1.0 - (n_actions - 1) * floor, floor
    )
    return {
        "no_floor": {
            "true_loss": float(np.mean(greedy_test != y_te)),
            "test_snips": snips(test.losses, greedy_weights(greedy_bandit, test)).value,
        },
        "served": {
            "true_loss": floored_greedy_loss(greedy_test, y_te, n_actions, floor),
            "test_snips": snips(test.losses, served_p / test.propensities).value,
        },
    }


def one_run(name: str, seed: int, args, defaults: dict) -> dict:
    h0, log, train, valid, test, X_te, y_te, groups = simulate(name, seed, args.replays)
    K, floor = train.n_actions, float(defaults["params"].get("exploration_floor", 0.0))
    out = {"n_train": train.n_rows, "n_validation": valid.n_rows, "n_test": test.n_rows}
    out["logger"] = {
        "true_loss": true_loss(h0.action_probability(X_te, y_te)),
        "test_snips": float(np.mean(test.losses)),
    }
    # the supervised test set is the bandit test log's contexts (one replay, same order)
    start = time.perf_counter()
    greedy = untuned_vw(train, valid, test, seed)
    min_ess = ess_floor(valid.n_rows, defaults["min_ess_fraction"], defaults["min_ess"])
    out["vw_default"] = {
        **greedy_figures(greedy, greedy, test, y_te, K, floor),
        "seconds": time.perf_counter() - start,
    }
    vw = tuned_vw(train, valid, test, seed, defaults["refit_on"], min_ess)
    out["vw_tuned"] = {
        **greedy_figures(vw["greedy"], vw["greedy"], test, y_te, K, floor),
        **{k: v for k, v in vw.items() if not k.startswith("greedy")},
    }
    out["vw_tuned_refit"] = greedy_figures(
        vw["greedy_other"], vw["greedy_other"], test, y_te, K, floor
    )
    candidates = champion_trials(
        h0, valid, defaults["temperatures"], confidence_level=defaults["confidence_level"]
    )
    sharpened = candidates[
        select_trial(candidates, defaults["scoring"], min_effective_sample_size=min_ess)
    ]
    out["h0_sharpened"] = {
        **policy_figures(selected_champion_policy(sharpened.params, h0), test, X_te, y_te),
        "temperature": sharpened.params["temperature"],
    }
    start = time.perf_counter()
    ipw = ipw_trials(defaults, train, valid)  # the peer: selected by the flow's rule alone
    policy, chosen, refit = flow_search(defaults, ipw, valid, train, None, log, groups)
    out["ipw_classifier"] = {
        **policy_figures(policy, test, X_te, y_te),
        "seconds": time.perf_counter() - start,
        **chosen,
    }
    for row, champion in (("poem_first_run", None), ("poem_h0_champion", h0)):
        start = time.perf_counter()
        trials = poem_trials(defaults, train, valid, seed, champion)
        seconds = time.perf_counter() - start
        extra = ipw if "ipw_classifier" in defaults.get("candidates", {}) else []
        if set(defaults.get("candidates", {})) - {"ipw_classifier"}:
            raise SystemExit("vw_compare searches the ipw_classifier candidate only")
        # the flow's default search (POEM's grid + search.candidates) and POEM's grid alone
        for suffix, pool in (("", trials + extra), ("_no_candidates", trials)):
            policy, chosen, refit = flow_search(defaults, pool, valid, train, champion, log, groups)
            if defaults["refit_on"] == "train+validation":  # the flow serves the refit
                policy, refit = refit, policy  # the "_refit" row is then the other setting
            out[row + suffix] = {
                **policy_figures(policy, test, X_te, y_te),
                "seconds": seconds,
                **chosen,
            }
            out[f"{row}{suffix}_refit"] = {**policy_figures(refit, test, X_te, y_te), **chosen}
    return out


ROWS = (
    ("logger", None, "logger h0"),
    ("h0_sharpened", "no_floor", "h0 sharpened (α on validation)"),
    ("vw_default", "no_floor", "VW --cb_adf defaults, greedy"),
    ("vw_tuned", "no_floor", "VW tuned, greedy"),
    ("vw_tuned", "served", "VW tuned, greedy + floor ε"),
    ("vw_tuned_refit", "served", "VW tuned, other refit_on, greedy + floor ε"),
    ("ipw_classifier", "no_floor", "IPW-weighted classifier, ε = 0"),
    ("ipw_classifier", "served", "IPW-weighted classifier, served (ε)"),
    ("poem_first_run", "no_floor", "POEM first run, ε = 0"),
    ("poem_first_run", "served", "POEM first run, served (ε)"),
    ("poem_first_run", "map", "POEM first run, MAP"),
    ("poem_first_run_refit", "served", "POEM first run, other refit_on, served"),
    ("poem_h0_champion", "no_floor", "POEM h0 champion, ε = 0"),
    ("poem_h0_champion", "served", "POEM h0 champion, served (ε)"),
    ("poem_h0_champion", "map", "POEM h0 champion, MAP"),
    ("poem_h0_champion_refit", "served", "POEM h0 champion, other refit_on, served"),
    ("poem_first_run_no_candidates", "served", "POEM grid alone, first run, served (ε)"),
    ("poem_h0_champion_no_candidates", "served", "POEM grid alone, h0 champion, served (ε)"),
)
PEERS = {"vw_tuned": "VW tuned", "ipw_classifier": "IPW-weighted classifier"}


def _figure(run: dict, key: str, variant: str | None) -> dict:
    return run[key] if variant is None else run[key][variant]


def summarise(name: str, runs: list[dict]) -> dict:
    """Means over seeds; paired t-tests of POEM against tuned VW at the same floor."""
    table = {}
    for key, variant, label in ROWS:
        figures = [_figure(r, key, variant) for r in runs]
        table[label] = {
            "true_loss": float(np.mean([f["true_loss"] for f in figures])),
            "test_snips": float(np.mean([f["test_snips"] for f in figures])),
        }
    verdicts = {}
    for key in (
        "poem_first_run",
        "poem_h0_champion",
        "poem_first_run_no_candidates",
        "poem_h0_champion_no_candidates",
    ):
        for peer in PEERS:
            for variant in ("served", "no_floor"):
                poem_loss = np.array([r[key][variant]["true_loss"] for r in runs])
                peer_loss = np.array([r[peer][variant]["true_loss"] for r in runs])
                diff = poem_loss - peer_loss  # the same train / validation / test rows
                p = float("nan")
                if len(runs) > 1 and np.std(diff) > 0:
                    p = float(stats.ttest_1samp(diff, 0.0).pvalue)  # two-sided
                verdict = "tied"
                if p < 0.05:
                    verdict = "behind" if diff.mean() > 0 else "ahead"
                verdicts[f"{key} vs {peer}/{variant}"] = {
                    "poem_minus_peer": float(diff.mean()),
                    "p_two_sided": p,
                    "verdict": verdict,
                    "kinds": [r[key]["kind"] for r in runs],
                    "solver": [_learner(r[key]["params"]) for r in runs],
                }
    return {"name": name, "runs": len(runs), "table": table, "poem_vs_peers": verdicts}


def _learner(params: dict) -> str:
    """The served trial's learner: a POEM solver, the IPW classifier, or the champion."""
    if "solver" in params:
        return str(params["solver"])
    return "ipw_classifier" if "C" in params else f"champion α={params.get('temperature')}"


def print_summary(res: dict, runs: list[dict]) -> None:
    r0 = runs[0]
    print(
        f"\n{res['name']}: {res['runs']} seeds, train {r0['n_train']} / validation "
        f"{r0['n_validation']} / test {r0['n_test']} rows; means over seeds"
    )
    print(f"  {'method':<44} {'true test loss':>14} {'test SNIPS':>11}")
    for label, row in res["table"].items():
        print(f"  {label:<44} {row['true_loss']:14.4f} {row['test_snips']:11.4f}")
    for key, v in res["poem_vs_peers"].items():
        print(
            f"  {key}: {v['poem_minus_peer']:+.4f} (two-sided p {v['p_two_sided']:.3g}) → "
            f"{v['verdict']}; selected: {v['kinds']}, {v['solver']}"
        )
    vw = [(r["vw_tuned"]["learning_rate"], r["vw_tuned"]["passes"]) for r in runs]
    print(f"  VW selected (-l, passes): {vw}")
    print(f"  h0 sharpened α: {[r['h0_sharpened']['temperature'] for r in runs]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", choices=DATASETS, default=list(DATASETS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    parser.add_argument("--replays", type=int, default=4, help="replays of the training set")
    parser.add_argument("--config", type=Path, default=REPO_ROOT / "mlflow.yml")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=YAML",
        help="override a training.params value of the config (experiments), e.g. max_iter=300",
    )
    parser.add_argument(
        "--no-multiplicity",
        dest="multiplicity",
        action="store_false",
        help="the uncorrected selection of earlier releases (poem.learners.selection)",
    )
    parser.add_argument(
        "--rule",
        choices=RULES,
        default=None,
        help="the challenger selection rule (default: the config's search.selection_rule)",
    )
    args = parser.parse_args(argv)
    try:
        import vowpalwabbit  # noqa: F401
    except ImportError:
        print("vowpalwabbit is not installed: .venv/bin/pip install -e '.[bench]'")
        return 1
    defaults = flow_defaults(args.config)
    defaults["multiplicity"] = args.multiplicity
    if args.rule is not None:
        defaults["selection_rule"] = args.rule
    for item in args.param:
        key, _, value = item.partition("=")
        defaults["params"][key] = yaml.safe_load(value)
    print(f"flow defaults ({args.config}): {json.dumps(defaults)}", file=sys.stderr)
    out = {}
    for name in args.datasets:
        runs = []
        for seed in args.seeds:
            runs.append(one_run(name, seed, args, defaults))
            print(f"  {name} seed {seed} done", file=sys.stderr, flush=True)
        res = summarise(name, runs)
        print_summary(res, runs)
        out[name] = {**res, "per_seed": runs}
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
