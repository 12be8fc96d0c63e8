"""Calibration of the counterfactual A/B gate: false promotion, power and interval coverage.

Three simulated settings, each a fixed population of 2,000 contexts with K = 5 actions,
known expected losses μ(x, a) (Bernoulli losses) and a known logging policy π₀, so every
true risk R(π) = mean_x Σ_a π(a|x) μ(x, a) is exact:

- ``near-uniform``: π₀ close to uniform (propensities ≈ 0.1–0.4);
- ``heavy-tailed``: a peaked π₀ and targets far from it (Kong ESS ≤ 5 % of n);
- ``rare-loss``: near-uniform π₀, losses non-zero on ≈ 1 % of rows;

and two that no option was tuned on, run with ``--settings no-floor,very-rare``:

- ``no-floor``: π₀ without an exploration floor (propensities down to ≈ 2e-4, weights in the
  thousands) and targets far from it;
- ``very-rare``: as ``rare-loss`` with losses on ≈ 0.2 % of rows.

Champion = the logging policy or another policy H. Challengers are mixtures of two policies
that differ from the champion, with true risk equal to the champion's, 2 % above it, or 5 %
below it. Each replicate draws a fresh test log and is one gate attempt as the flow makes
it: its entropy is drawn fresh (:func:`poem.estimators.improvement.draw_entropy`, what
:func:`poem.ledger.next_attempt` calls), the rows' order and the coin are drawn from it inside
:func:`poem.estimators.improvement.improvement_lower_bound` (the function
:func:`poem.estimators.compare.compare_policies` calls), a log with a row below the declared
floor is blocked (:func:`poem.gate.floor_violations`, the gate's precondition), with
``min_ess`` = 100, the declared weight bound B = 1 / the declared floor (the logger's
smallest propensity unless a setting declares a wrong one) and the α₁ = α·(1 − q) of a first
attempt (q = ``gate.retry_fraction`` = 0.2), vectorised over the replicates. The cells
``equal/s0`` pin every attempt's seed to 0 (``--pinned-seed``; ``gate.seed: 0``): a replay of
one draw, which shows what a fixed seed does to the level. Production settings (issue 20,
``--production``; equal-risk challengers, rows in time order): drift of the losses inside the
test window, policy champions with mass on a rarely logged action, a challenger on a rarely
logged bad action (:func:`make_production_settings`). The repeated-attempts table
(``--attempts``) gives the cumulative false promotion of k = 1, 2, 5, 20 different equal-risk
challengers on one window, with the ledger's αₖ and without. The second table gives the coverage of
every interval the library reports (the library's own functions, one log at a time) for
the 5 %-better challenger against the policy champion, with the fraction of replicates
whose interval carries a reliability flag and the coverage of the unflagged ones.

A third table (``--limit-reps``, 5 %-better challenger) gives what *any* valid test can
reach on the terms of three families — untranslated δ(r^h − r^c), translated (the ``ips``
terms) and doubly robust with the true μ as reward model — when all that is known is that
the terms are bounded below by L (see :func:`_limits`): n·KL_inf, the largest expected
log-capital of any e-value (betting) test; the power of the oracle bet λ*; and the NP bound.

Why rare losses have little power (measured, ``--limit-reps 1000``, n = 20,000, logger /
policy champion): the improvement is 5.0e-4 / 3.0e-4 in risk, the untranslated terms have
s.d. 0.034 / 0.021 (z = 2.1 / 1.95: a t test on them would have 62–68 % power but is not
valid), and a row with a loss where the challenger's weight exceeds the champion's by the
most (by 4.9 / 3.1) puts L at −4.9 / −3.1.
Every valid bet is then ≤ 1/|L| = 0.20 / 0.32 per unit of term (else one such row can make
the capital negative) while the growth-optimal bet μ/σ² ≈ 0.44 / 0.64 is above it: n·KL_inf
= 1.44 / 1.41 (1.47 / 1.43 even with a perfect reward model; 0.02 / 0.01 for the translated
terms), below log(1/α) = 3.0, so no test that is valid at every n by a capital argument —
whatever its bets — reaches 1/α on average, and the oracle bet promotes 8–10 % / 5–7 %
(randomized Ville: 31–34 %). A test valid only at one fixed n for every distribution
bounded below by L could at most reach 44–56 % / 43–52 % (NP bound against the least
favourable null, which puts mass ≈ μ/|L| = 1e-4 on L — about 2 rows in 20,000, so a log
without such a row cannot tell the null from the alternative): 25 % is not excluded for
such a test, but it needs a fixed-n calibration (unknown for this nonparametric class) or a
randomized decision. The ``snips`` option bet at 0.99/|L|, the oracle's bet, and promoted
18.4 / 11.4 % (it now bets on the ``ips`` capitals: its own terms need every action logged,
issue 34). The ``+coin`` columns are each option with ``gate.randomized: true``: the
same bound with the randomized Ville threshold (also promote when Kₙ ≥ U/α; Ramdas & Manole
2023), valid over U ~ U(0, 1]; U is :func:`poem.estimators.improvement.decision_coin` of
the attempt's fresh entropy, as in the flow (every draw is an attempt on the ledger).

Against a policy champion the gate is given the policies' total variation at each row's
context (``total_variation``, as :func:`poem.gate.gate_rows` computes it for discrete-action
policies); ``--no-tv`` withholds it (the previous gate: declared B or bound-free terms),
``--no-floor`` declares no minimum propensity, and ``--diagnose SETTINGS`` prints, per family
of terms against a policy champion, the s.d., the lower bound, the largest valid bet, the
plug-in bet and the power (why the declared-B terms had 0 % power).

Usage: ``python benchmarks/gate_calibration.py [--reps 500] [--coverage-reps 200]
[--limit-reps 1000] [--n 500,2000,20000] [--settings near-uniform,heavy-tailed,rare-loss]
[--no-floor] [--no-tv] [--diagnose near-uniform] [--json out.json]``
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import stdtrit

from poem.estimators import clipped_ips, ips, snips
from poem.estimators.betting import betting_lower_bound
from poem.estimators.compare import compare_policies
from poem.estimators.gate_options import bound_free_terms, paired_terms, total_variation_terms
from poem.estimators.improvement import (
    GATE_ESTIMATORS,
    decision_coin,
    draw_entropy,
    improvement_lower_bound,
    shuffle_rows,
)
from poem.estimators.weights import suggested_clip
from poem.gate import floor_violations
from poem.ledger import attempt_alpha, next_attempt, test_window

K, D, N_CONTEXTS = 5, 5, 2_000
ALPHA = 0.05
MIN_ESS = 100.0
CHUNK = 2_000_000  # replicate rows per vectorised chunk
PEAK, FAR = 2.0, 1.5  # heavy-tailed: logger peakedness, targets' distance from it
RARE_CONTRAST, SPREAD = 1.0, 0.1  # rare-loss: loss contrast, challengers' noise
RETRY_FRACTION = 0.2  # gate.retry_fraction: attempt k gets α·(1 − q)·q^(k−1)
FIRST_ALPHA = ALPHA * (1 - RETRY_FRACTION)  # what a first attempt on a window spends
ATTEMPTS = (1, 2, 5, 20)
RANDOMIZED = tuple(f"{e}+coin" for e in GATE_ESTIMATORS)  # gate.randomized: true
INPUTS = {"floor": True, "tv": True}  # --no-floor, --no-tv: what the gate is given
OLD_RULE = "t (old rule)"  # one-sided t on (δ_max − δᵢ)(r^c_i − r^h_i): not valid, for reference


def _softmax(z: np.ndarray) -> np.ndarray:
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


@dataclass
class Setting:
    """A population: expected losses, logging policy, policy champion, challenger bases."""

    name: str
    mu: np.ndarray  # (contexts, K) expected losses
    logger: np.ndarray  # (contexts, K)
    champion: np.ndarray  # the policy champion H
    bases: dict  # champion name -> (good, bad): challengers are t·good + (1 − t)·bad

    def risk(self, policy: np.ndarray) -> float:
        """True risk (averaged over the window's two halves under drift)."""
        mu = self.mu if self.later_mu is None else 0.5 * (self.mu + self.later_mu)
        return float(np.mean(np.sum(policy * mu, axis=1)))

    def ess_fraction(self, policy: np.ndarray) -> float:
        return float(1.0 / np.mean(np.sum(policy**2 / self.logger, axis=1)))

    def challenger(self, target: float, champion: str) -> np.ndarray:
        """The mixture of the bases with true risk ``target`` (risk is linear in t)."""
        good, bad = self.bases[champion]
        rg, rb = self.risk(good), self.risk(bad)
        t = (rb - target) / (rb - rg)
        if not 0.0 <= t <= 1.0:
            raise ValueError(f"{self.name}: target risk {target:.5f} outside [{rg:.5f}, {rb:.5f}]")
        return t * good + (1.0 - t) * bad

    later_mu: np.ndarray | None = None  # drift: the expected losses of the window's 2nd half
    declared: float | None = None  # a declared floor other than the true one (wrong floors)

    @property
    def floor(self) -> float:
        """The declared min_propensity: the logger's smallest positive propensity, or ``declared``."""
        return (
            self.declared
            if self.declared is not None
            else float(self.logger[self.logger > 0].min())
        )

    @property
    def max_weight(self) -> float:
        """The declared weight bound B = 1 / the declared floor."""
        return float(1.0 / self.floor)

    def draw(self, rng: np.random.Generator, reps: int, n: int):
        """``reps`` logs of n rows in time order: context ids, actions, losses, propensities."""
        ctx = rng.integers(0, N_CONTEXTS, size=(reps, n))
        cdf = np.cumsum(self.logger, axis=1)[ctx]
        actions = np.minimum((cdf < rng.random((reps, n, 1))).sum(axis=2), K - 1)
        mu = self.mu[ctx, actions]
        if self.later_mu is not None:  # drift inside the window: the 2nd half has other μ
            mu[:, n // 2 :] = self.later_mu[ctx[:, n // 2 :], actions[:, n // 2 :]]
        losses = (rng.random((reps, n)) < mu).astype(np.float64)
        return ctx, actions, losses, self.logger[ctx, actions]


def make_settings(seed: int) -> dict[str, Setting]:
    """The three populations (fixed by ``seed``)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_CONTEXTS, D))
    score = X @ rng.normal(size=(K, D)).T  # low score = low loss
    noise = [X @ rng.normal(size=(K, D)).T for _ in range(6)]
    mu = 1.0 / (1.0 + np.exp(-score))

    def around(logits: np.ndarray, step: float, spread: float) -> tuple:
        """Two policies on either side of ``logits`` (a retrained policy is near its parent)."""
        return (
            _softmax(logits - step * score + spread * noise[2]),
            _softmax(logits + step * score + spread * noise[3]),
        )

    # near-uniform logger; champion H a trained-like policy; challengers near each champion
    log_uniform = 0.25 * noise[0]
    log_h = -0.6 * score + 0.5 * noise[1]
    near = {"logger": around(log_uniform, 0.4, 0.3), "policy": around(log_h, 0.4, 0.3)}
    rare = {"logger": around(log_uniform, 0.4, SPREAD), "policy": around(log_h, 0.4, SPREAD)}
    uniform = _softmax(log_uniform)
    # peaked logger with an exploration floor of 2 % per action (weights ≤ 50); H and the
    # challengers far from it
    peaked = 0.9 * _softmax(PEAK * noise[0] + score) + 0.1 / K
    log_far = log_h - FAR * noise[0]  # H moved away from the actions π₀ prefers
    far = {
        "logger": (
            _softmax(-FAR * noise[0] - score + 0.3 * noise[4]),
            _softmax(-FAR * noise[0] + score + 0.3 * noise[5]),
        ),
        "policy": around(log_far, 0.4, 0.3),
    }
    contrast = 1.0 / (1.0 + np.exp(-RARE_CONTRAST * score))
    rare_mu = 0.01 * contrast / np.mean(np.sum(uniform * contrast, axis=1))
    # two checks the options were not tuned on (not in the default --settings): no exploration
    # floor (propensities down to ~1e-4, weights in the thousands, the log rarely shows the
    # largest), and losses on 0.2 % of rows (about 40 in 20,000)
    log_wide = 0.5 * noise[0]
    h_wide = -log_wide - 0.3 * score + 0.3 * noise[1]

    def away(logits: np.ndarray) -> tuple:
        return (
            _softmax(logits - 0.3 * score + 0.3 * noise[4]),
            _softmax(logits + 0.3 * score + 0.3 * noise[5]),
        )

    wide = {"logger": away(-log_wide), "policy": away(h_wide)}
    very_rare_mu = 0.2 * rare_mu
    return {
        "near-uniform": Setting("near-uniform", mu, uniform, _softmax(log_h), near),
        "heavy-tailed": Setting("heavy-tailed", mu, peaked, _softmax(log_far), far),
        "rare-loss": Setting("rare-loss", rare_mu, uniform, _softmax(log_h), rare),
        "no-floor": Setting("no-floor", mu, _softmax(log_wide), _softmax(h_wide), wide),
        "very-rare": Setting("very-rare", very_rare_mu, uniform, _softmax(log_h), rare),
    }


def _term_atoms(setting, challenger, champion, family):
    """Every value X of one row's improvement terms and its probability (exact population).

    ``family``: ``"untranslated"`` X = δ(r^h − r^c); ``"translated"`` X = (1 − δ)(r^c − r^h)
    (the ``ips`` terms); ``"oracle DR"`` X = Σₐ(π_h − π_c)μ + (δ − μ(x, a))(r^h − r^c) with
    the true expected losses μ as reward model (no reward model can do better).
    """
    p0 = setting.logger
    rc, rh = challenger / p0, champion / p0
    g = setting.mu if family == "oracle DR" else np.zeros_like(p0)
    direct = np.sum((champion - challenger) * g, axis=1, keepdims=True)
    baseline = 1.0 if family == "translated" else 0.0
    values, probs = [], []
    for loss, chance in ((0.0, 1.0 - setting.mu), (1.0, setting.mu)):
        if family == "translated":
            values.append(((baseline - loss) * (rc - rh)).ravel())
        else:
            values.append((direct + (loss - g) * (rh - rc)).ravel())
        probs.append((p0 * chance / N_CONTEXTS).ravel())
    return np.concatenate(values), np.concatenate(probs)


def _limits(setting, rng, reps, sizes, challenger, champion):
    r"""What any valid test can reach on terms bounded below by L, per term family and n.

    For the class of all distributions of X with X ≥ L (L = the smallest term the population
    can produce) and mean ≤ 0:

    - KL_inf = max_{0 ≤ λ < 1/|L|} E_P log(1 + λX) (Honda & Takemura 2010) is the largest
      expected log-capital per row of *any* e-value / betting test valid for the class (the
      numeraire e-variable Π(1 + λ*Xᵢ); Larsson, Ramdas & Ruf 2024), so n·KL_inf below
      log(1/α) = 3.0 means even the best such test's capital does not reach 1/α on average;
    - ``oracle bet``: power of the capital Πᵢ(1 + λ*Xᵢ) with λ* known in advance (maximum
      over t ≥ 1/α), a betting bound no predictable strategy beats on average, and the same
      with the randomized Ville threshold (also promote with chance α·Kₙ; valid, Ramdas &
      Manole 2023, not used: the decision would depend on a coin);
    - ``NP bound``: power of the most powerful level-α test of P against the least favourable
      null Q* = P/(1 + λ*X) (mean 0, same support, in the class), i.e. an upper bound on the
      power of *every* test (fixed n or not) valid for the class.
    """
    out = {}
    for family in ("untranslated", "translated", "oracle DR"):
        x, p = _term_atoms(setting, challenger, champion, family)
        low = float(x.min())
        found = minimize_scalar(
            lambda lam, x=x, p=p: -float(np.sum(p * np.log1p(lam * x))),
            bounds=(0.0, (1.0 - 1e-12) / -low),
            method="bounded",
        )
        lam, kl_inf = float(found.x), -float(found.fun)
        q = p / (1.0 + lam * x)
        interior = abs(q.sum() - 1.0) < 1e-3  # else Q* needs an atom at L: no NP figure
        q /= q.sum()
        step = np.log1p(lam * x)
        rows = []
        for n in sizes:
            per = max(1, CHUNK // n)
            under_p, under_q, best = [], [], []
            for start in range(0, reps, per):
                m = min(per, reps - start)
                path = np.cumsum(step[_sample(rng, p, (m, n))], axis=1)
                under_p.append(path[:, -1])
                best.append(path.max(axis=1))
                under_q.append(step[_sample(rng, q, (m, n))].sum(axis=1))
            under_p, best, under_q = map(np.concatenate, (under_p, best, under_q))
            threshold = np.quantile(under_q, 1 - ALPHA)
            rows.append(
                {
                    "n": n,
                    "n_kl_inf": n * kl_inf,
                    "oracle_bet_power": float(np.mean(best >= np.log(1 / ALPHA))),
                    # randomized Ville: also promote with chance α·Kₙ (Ramdas & Manole 2023)
                    "randomized_power": float(
                        np.mean(np.where(best >= np.log(1 / ALPHA), 1.0, ALPHA * np.exp(under_p)))
                    ),
                    "np_bound": float(np.mean(under_p > threshold)) if interior else None,
                }
            )
        out[family] = {"lower": low, "lambda_times_range": lam * -low, "cells": rows}
    return out


def _sample(rng, p, shape):
    """Indices drawn from the probabilities ``p``."""
    cdf = np.cumsum(p)
    return np.minimum(np.searchsorted(cdf, rng.random(shape) * cdf[-1]), p.size - 1)


def _decisions(
    setting, rng, reps, n, challenger, champion, clip, alpha=FIRST_ALPHA, draw=None, pinned=None
):
    """Promotion indicator per replicate and gate option (vectorised in chunks of logs).

    The gate as :func:`poem.gate.gate_decision` runs it in the flow: every simulated log is
    one attempt, whose entropy is drawn fresh by :func:`~poem.estimators.improvement.draw_entropy`
    (what :func:`poem.ledger.next_attempt` calls); the rows' order is
    :func:`~poem.estimators.improvement.shuffle_rows` of that entropy and the ``+coin``
    options' U is :func:`~poem.estimators.improvement.decision_coin` of it, both inside
    :func:`poem.estimators.improvement.improvement_lower_bound` (what
    :func:`~poem.estimators.compare.compare_policies` calls); a log with a row below the
    declared floor is blocked (:func:`poem.gate.floor_violations`, the gate's precondition);
    the declared weight bound B of the setting, level 1 − ``alpha`` (a first attempt's α₁
    by default). ``pinned``: every log gets this seed instead (``gate.seed`` pinned: a
    replay, the cell that shows what a fixed seed does). ``draw``: the logs (context,
    action, loss, propensity), else drawn here.
    """
    out = {e: [] for e in (*GATE_ESTIMATORS, *RANDOMIZED, OLD_RULE)}
    per_chunk = max(1, CHUNK // n) if draw is None else reps  # given logs: one chunk
    for start in range(0, reps, per_chunk):
        m = min(per_chunk, reps - start)
        ctx, actions, losses, p = setting.draw(rng, m, n) if draw is None else draw
        wc = challenger[ctx, actions] / p
        wh = np.ones_like(wc) if champion is None else champion[ctx, actions] / p
        # the policies' total variation at each row's context (poem.gate.policy_total_variation)
        tv = (
            0.5 * np.abs(challenger - champion).sum(axis=1)[ctx]
            if champion is not None and INPUTS["tv"]
            else None
        )
        ess = wc.sum(1) ** 2 / (wc**2).sum(1)
        entropy = [draw_entropy() if pinned is None else pinned for _ in range(m)]
        coin = decision_coin(entropy)  # U in (0, 1], one per log, from its attempt's entropy
        # the gate's precondition: no test row below the declared floor
        clear = floor_violations(p, setting.floor if INPUTS["floor"] else None) == 0
        keep = np.flatnonzero(clear)  # blocked logs are not decided (never promoted)
        seeds = [entropy[i] for i in keep]
        for randomized, estimator in itertools.product((False, True), GATE_ESTIMATORS):
            promoted = np.zeros(m, dtype=bool)
            if keep.size:
                lcb = improvement_lower_bound(
                    losses[keep],
                    wc[keep],
                    wh[keep],
                    estimator=estimator,
                    loss_bounds=(0.0, 1.0),
                    max_weight=setting.max_weight if INPUTS["floor"] else None,
                    clip=clip if estimator == "clipped_ips" else None,
                    total_variation=None if tv is None else tv[keep],
                    confidence_level=1 - alpha,
                    randomization=coin[keep] if randomized else None,
                    order_seed=seeds,
                )
                promoted[keep] = (lcb > 0) & (ess[keep] >= MIN_ESS)
            key = f"{estimator}+coin" if randomized else estimator
            out[key].append(promoted)
        x = (1.0 - losses) * (wc - wh)
        t_lcb = x.mean(1) - stdtrit(n - 1, 1 - ALPHA) * x.std(1, ddof=1) / np.sqrt(n)
        out[OLD_RULE].append((t_lcb > 0) & (ess >= MIN_ESS))
    return {e: np.concatenate(v) for e, v in out.items()}


def make_production_settings() -> dict[str, tuple]:
    """Settings a production log breaks the i.i.d. gate with (issue 20), each with K = 5.

    Returns ``{name: (setting, champion or None, equal-risk challenger)}``:

    - ``drift`` / ``mild-drift``: uniform logger; action 1's loss rate 0.3 → 0.7
      (0.4 → 0.6) from the first to the second half of the window, every other action 0.5;
      the challenger favours action 1 (0.6), its risk averaged over the window equals the
      champion's (the logger, or a policy favouring action 2);
    - ``rare-action``: the logger takes action 4 with propensity 1/50 (declared floor), whose
      loss is 0; the policy champion puts 0.3 on it, the equal challenger 0.15;
    - ``very-rare-action``: as ``rare-action`` with propensity 1e-5 and champion mass 0.1;
    - ``rare-bad-action``: logger champion, the challenger moves 17 % of its mass onto the
      rarely logged (propensity 1e-3) action 4 whose loss is 1.
    """
    ones = np.ones((N_CONTEXTS, 1))

    def setting(name, mu, logger, later=None):
        rows = lambda v: ones * np.asarray(v, dtype=np.float64)  # noqa: E731
        return Setting(
            name, rows(mu), rows(logger), rows(logger), {}, None if later is None else rows(later)
        )

    uniform = np.full(K, 1.0 / K)
    out = {}
    for name, (early, late) in (("drift", (0.3, 0.7)), ("mild-drift", (0.4, 0.6))):
        s = setting(name, [0.5, early, 0.5, 0.5, 0.5], uniform, [0.5, late, 0.5, 0.5, 0.5])
        favour_1 = ones * np.array([0.1, 0.6, 0.1, 0.1, 0.1])
        favour_2 = ones * np.array([0.1, 0.1, 0.6, 0.1, 0.1])
        out[f"{name}/logger"] = (s, None, favour_1)
        out[f"{name}/policy"] = (s, favour_2, favour_1)
    mu = [0.6, 0.5, 0.4, 0.5, 0.0]
    rare = setting("rare-action", mu, [0.245, 0.245, 0.245, 0.245, 0.02])
    out["rare-action/policy"] = (
        rare,
        ones * np.array([0.175, 0.175, 0.175, 0.175, 0.3]),  # risk 0.35
        ones * np.array([0.0, 0.05, 0.75, 0.05, 0.15]),  # risk 0.35
    )
    tiny = 1e-5
    very = setting("very-rare-action", mu, [(1 - tiny) / 4] * 4 + [tiny])
    out["very-rare-action/policy"] = (
        very,
        ones * np.array([0.225, 0.225, 0.225, 0.225, 0.1]),  # risk 0.45
        ones * np.array([0.0, 0.5, 0.5, 0.0, 0.0]),  # risk 0.45
    )
    floor = 1e-3
    bad = setting("rare-bad-action", [0.6, 0.5, 0.4, 0.5, 1.0], [(1 - floor) / 4] * 4 + [floor])
    x = (1 - bad.risk(bad.logger)) / 0.6  # 0.4 x + (1 − x) = the logger's risk
    out["rare-bad-action/logger"] = (bad, None, ones * np.array([0.0, 0.0, x, 0.0, 1 - x]))
    # wrong declared floors (issue 34): the logger takes action 4 with 1e-3, the log declares
    # min_propensity 0.01; and actions the logger never takes (declared floor 0.01)
    rare_mu = [0.6, 0.5, 0.4, 0.5, 0.0]
    champ_4 = ones * np.array([0.175, 0.175, 0.175, 0.175, 0.3])  # risk 0.35
    equal_4 = ones * np.array([0.0, 0.05, 0.75, 0.05, 0.15])  # risk 0.35
    wrong = setting("wrong-floor", rare_mu, [(1 - floor) / 4] * 4 + [floor])
    wrong.declared = 0.01
    out["wrong-floor/policy"] = (wrong, champ_4, equal_4)
    wrong_bad = setting("wrong-floor", [0.6, 0.5, 0.4, 0.5, 1.0], [(1 - floor) / 4] * 4 + [floor])
    wrong_bad.declared = 0.01
    out["wrong-floor/logger"] = (wrong_bad, None, out["rare-bad-action/logger"][2])
    unlogged = setting("unlogged", rare_mu, [0.25] * 4 + [0.0])
    unlogged.declared = 0.01
    out["unlogged/policy"] = (unlogged, champ_4, equal_4)
    unlogged_bad = setting("unlogged", [0.6, 0.5, 0.4, 0.5, 1.0], [0.25] * 4 + [0.0])
    unlogged_bad.declared = 0.01
    y = (1 - unlogged_bad.risk(unlogged_bad.logger)) / 0.6
    out["unlogged/logger"] = (unlogged_bad, None, ones * np.array([0.0, 0.0, y, 0.0, 1 - y]))
    return out


def _attempt_challengers(setting, rng, count, champion_name):
    """``count`` different challengers with the champion's true risk (refits of other grids)."""
    score = np.log(setting.mu / (1.0 - setting.mu))
    base = np.log(setting.logger if champion_name == "logger" else setting.champion)
    target = setting.risk(setting.logger if champion_name == "logger" else setting.champion)
    out = []
    for _ in range(count):
        noise = rng.normal(size=(2,) + setting.mu.shape)
        good = _softmax(base - 0.4 * score + 0.3 * noise[0])
        bad = _softmax(base + 0.4 * score + 0.3 * noise[1])
        rg, rb = setting.risk(good), setting.risk(bad)
        t = (rb - target) / (rb - rg)
        out.append(t * good + (1.0 - t) * bad)
    return out


def _reset_alphas(count: int, n: int) -> list[float]:
    """The αⱼ :func:`poem.ledger.next_attempt` gives attempts that each try to reset the ledger.

    Attempt j's window is the same n rows read in another order, with one row dropped, with
    a test fraction of 0.24 instead of 0.25 (96 % of the rows), or the same rows, in turn,
    each against a new champion version string (the ledger's windows are
    :func:`poem.ledger.test_window` of the rows' keys; stand-in event ids here).
    """
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 2**63, size=n, dtype=np.int64).astype(np.uint64)
    entries, alphas = [], []
    for j in range(count):
        kind = j % 4
        rows = (
            keys[rng.permutation(n)]
            if kind == 0
            else np.delete(keys, j % n)
            if kind == 1
            else keys[: int(0.96 * n)]
            if kind == 2
            else keys
        )
        attempt = next_attempt(
            entries, test_window(rows), alpha=ALPHA, retry_fraction=RETRY_FRACTION
        )
        entries.append(attempt.entry(f"run{j}", champion=f"v{j}"))
        alphas.append(attempt.alpha)
    return alphas


def _attempts(setting, rng, reps, n, champion, champion_name, clip):
    """Cumulative promotion rate of k = 1, 2, 5, 20 equal-risk challengers on one window.

    Each log is tested by ``max(ATTEMPTS)`` different equal-risk challengers (and a fresh U
    each, for ``+coin``); attempt j gets the ledger's αⱼ (``ledger``), the α the ledger
    gives when every attempt tries to reset it (``resets``, :func:`_reset_alphas`), or the
    full α (``no ledger``). Returns ``{label: {k: {option: rate}}}``.
    """
    challengers = _attempt_challengers(setting, rng, max(ATTEMPTS), champion_name)
    draw = setting.draw(rng, reps, n)
    out = {}
    for label, alphas in (
        ("ledger", [attempt_alpha(j + 1, ALPHA, RETRY_FRACTION) for j in range(len(challengers))]),
        ("resets", _reset_alphas(len(challengers), n)),
        ("no ledger", [ALPHA] * len(challengers)),
    ):
        promoted = None
        rates = {}
        for j, (challenger, alpha) in enumerate(zip(challengers, alphas, strict=True)):
            d = _decisions(setting, rng, reps, n, challenger, champion, clip, alpha, draw)
            d = {e: v for e, v in d.items() if e != OLD_RULE}
            promoted = d if promoted is None else {e: promoted[e] | d[e] for e in d}
            if j + 1 in ATTEMPTS:
                rates[j + 1] = {e: float(v.mean()) for e, v in promoted.items()}
        out[label] = rates
    return out


def _coverage(setting, rng, reps, n, challenger, champion, clip):
    """Coverage of every reported interval (library functions), flags and unflagged coverage."""
    true_c, true_h = setting.risk(challenger), setting.risk(champion)
    ctx, actions, losses, p = setting.draw(rng, reps, n)
    rows: dict[str, list[tuple[bool, bool]]] = {}

    def add(name, estimate, truth):
        covered = estimate.lower <= truth <= estimate.upper
        rows.setdefault(name, []).append((covered, bool(estimate.flags)))

    for r in range(reps):
        wc = challenger[ctx[r], actions[r]] / p[r]
        wh = champion[ctx[r], actions[r]] / p[r]
        d = losses[r]
        add("ips t, translated (evaluate_policy default)", ips(d - 1.0, wc), true_c - 1.0)
        add("ips t, untranslated", ips(d, wc), true_c)
        add("ips normal, translated", ips(d - 1.0, wc, interval="normal"), true_c - 1.0)
        add("snips delta t", snips(d, wc), true_c)
        add("clipped_ips t (vs the risk)", clipped_ips(d - 1.0, wc, clip), true_c - 1.0)
        if n <= 2000 and r < reps // 2:
            add(
                "ips bootstrap, translated",
                ips(d - 1.0, wc, interval="bootstrap", random_state=r),
                true_c - 1.0,
            )
        for estimator in ("ips", "snips"):
            cmp = compare_policies(
                d, wc, wh, estimator=estimator, loss_baseline=1.0, loss_bounds=(0.0, 1.0), min_ess=0
            )
            add(f"difference, {estimator} t", cmp.difference, true_c - true_h)
    table = {}
    for name, pairs in rows.items():
        arr = np.array(pairs)
        unflagged = arr[~arr[:, 1], 0]
        table[name] = {
            "coverage": float(arr[:, 0].mean()),
            "flagged": float(arr[:, 1].mean()),
            "unflagged_coverage": float(unflagged.mean()) if unflagged.size else float("nan"),
            "reps": int(arr.shape[0]),
        }
    return table


def _diagnose(args, settings, rng, results) -> None:
    """Why a 5 %-better challenger was not promoted against a policy champion: per term family.

    For each family of terms the gate can bet on against a policy champion — the paired terms
    with L = −B (declared floor), the bound-free terms (no floor), the total-variation terms —
    the terms' s.d., their lower bound L, the largest bet κ/|L| and the median plug-in bet at
    m = 0, and the bound's power (no ESS rule) at α₁ = 4 % and α = 5 %, rows in a random order
    and in the order drawn.
    """
    for name in filter(None, args.diagnose.split(",")):
        s = settings[name]
        champion = s.champion
        challenger = s.challenger(0.95 * s.risk(champion), "policy")
        n, reps = int(args.n.split(",")[-1]), args.reps
        ctx, actions, losses, p = s.draw(rng, reps, n)
        rc, rh = challenger[ctx, actions] / p, champion[ctx, actions] / p
        tv = 0.5 * np.abs(challenger - champion).sum(axis=1)[ctx]
        families = {
            "paired, declared B": (
                paired_terms(losses, rc, rh, (0.0, 1.0), s.max_weight, False),
                0.99,
            ),
            "bound-free": (bound_free_terms(losses, rc, rh, (0.0, 1.0)), 0.5),
            "total variation": (total_variation_terms(losses, rc, rh, (0.0, 1.0), tv), 0.5),
        }
        improvement = s.risk(champion) - s.risk(challenger)
        print(
            f"\n== diagnosis, {name}, policy champion, 5%-better challenger (improvement "
            f"{improvement:.4f}), n = {n:,}, {reps} logs, B = {s.max_weight:.3g}"
        )
        print(
            f"{'terms':20s} {'s.d.':>7s} {'L':>8s} {'κ/|L|':>7s} {'plug-in':>8s}  "
            "power α₁=4% (5%, logged order)"
        )
        for label, ((terms, lower), kappa) in families.items():
            low = float(np.min(lower))
            sd = float(np.mean(np.std(terms, axis=1)))
            plug = float(np.sqrt(2 * np.log(1 / FIRST_ALPHA) / (n * sd**2)))
            power = []
            fresh = [draw_entropy() for _ in range(reps)]
            for alpha, order in ((FIRST_ALPHA, fresh), (ALPHA, fresh), (FIRST_ALPHA, None)):
                x, bound = shuffle_rows(order, terms, np.broadcast_to(lower, terms.shape))
                lcb = betting_lower_bound(x, bound, 1 - alpha, scale=1.0, max_bet_fraction=kappa)
                power.append(float(np.mean(lcb > 0)))
            print(
                f"{label:20s} {sd:7.3f} {low:8.3g} {kappa / -low:7.3f} {plug:8.3f}  "
                f"{power[0]:.3f} ({power[1]:.3f}, {power[2]:.3f})",
                flush=True,
            )
            results["diagnosis"].append(
                {
                    "setting": name,
                    "n": n,
                    "terms": label,
                    "sd": sd,
                    "lower": low,
                    "max_bet": kappa / -low,
                    "plug_in_bet": plug,
                    "power_alpha1": power[0],
                    "power_alpha": power[1],
                    "power_logged_order": power[2],
                }
            )


def _columns() -> str:
    return "  ".join(f"{e:>12s}" for e in (*GATE_ESTIMATORS, *RANDOMIZED))


def _production(args, rng, results) -> None:
    """False promotion of equal-risk challengers in the production settings, rows as read."""
    production = make_production_settings()
    names = [k for k in production if k.split("/")[0] in filter(None, args.production.split(","))]
    if not names:
        return
    print(f"\n== production settings (equal risk over the window; α₁ = {FIRST_ALPHA:g})")
    print(f"{'setting':26s} {'n':>6s} {'B':>8s}  " + _columns())
    for key in names:
        s, champion, challenger = production[key]
        assert abs(s.risk(challenger) - s.risk(s.logger if champion is None else champion)) < 1e-9
        for n in (int(v) for v in args.production_n.split(",")):
            promoted = _decisions(s, rng, args.reps, n, challenger, champion, clip=5.0)
            rates = {e: float(v.mean()) for e, v in promoted.items()}
            print(
                f"{key:26s} {n:6d} {s.max_weight:8.3g}  "
                + "  ".join(f"{rates[e]:12.3f}" for e in (*GATE_ESTIMATORS, *RANDOMIZED)),
                flush=True,
            )
            results["production"].append(
                {"setting": key, "n": n, "max_weight": s.max_weight, "promotion_rate": rates}
            )


def _attempts_table(args, settings, rng, results) -> None:
    """Cumulative false promotion over k attempts on one window, with and without the ledger."""
    for name in filter(None, args.attempts.split(",")):
        s = settings[name]
        clip = 5.0 * suggested_clip(s.logger.ravel())
        print(
            f"\n== repeated attempts, {name}, logger champion, n = {args.attempts_n:,}: cumulative "
            f"promotion ({args.attempts_reps} logs) "
            f"of k equal-risk challengers (ledger: αₖ = α·{1 - RETRY_FRACTION:g}·"
            f"{RETRY_FRACTION:g}^(k−1))"
        )
        print(f"{'':10s} {'k':>3s}  " + _columns())
        table = _attempts(s, rng, args.attempts_reps, args.attempts_n, None, "logger", clip)
        for label, rows in table.items():
            for k, rates in rows.items():
                print(
                    f"{label:10s} {k:3d}  "
                    + "  ".join(f"{rates[e]:12.3f}" for e in (*GATE_ESTIMATORS, *RANDOMIZED)),
                    flush=True,
                )
                results["attempts"].append(
                    {
                        "setting": name,
                        "n": args.attempts_n,
                        "reps": args.attempts_reps,
                        "ledger": label,
                        "k": k,
                        "promotion_rate": rates,
                    }
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=500)
    parser.add_argument("--coverage-reps", type=int, default=200)
    parser.add_argument("--n", default="500,2000,20000")
    parser.add_argument("--settings", default="near-uniform,heavy-tailed,rare-loss")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    parser.add_argument("--limit-reps", type=int, default=1000, help="0: skip the limits table")
    parser.add_argument("--skip-gate", action="store_true", help="interval coverage only")
    parser.add_argument(
        "--production",
        default="drift,mild-drift,rare-action,very-rare-action,rare-bad-action,wrong-floor,unlogged",
        help="production settings (issue 20; '' to skip): equal-risk challengers only",
    )
    parser.add_argument("--production-n", default="200,2000,20000")
    parser.add_argument(
        "--challengers",
        default="equal,+2% worse,-5% better",
        help="challengers of the main table (a subset of the default)",
    )
    parser.add_argument(
        "--attempts",
        default="near-uniform,rare-loss",
        help="settings of the repeated-attempts table ('' to skip)",
    )
    parser.add_argument("--attempts-n", type=int, default=500)
    parser.add_argument(
        "--pinned-seed",
        type=int,
        default=0,
        help="also run the equal challengers with gate.seed pinned to this (a replay; -1: skip)",
    )
    parser.add_argument("--attempts-reps", type=int, default=500)
    parser.add_argument(
        "--no-floor", action="store_true", help="declare no min_propensity (no weight bound B)"
    )
    parser.add_argument(
        "--no-tv",
        action="store_true",
        help="do not give the gate the policies' total variation per row (logged actions only)",
    )
    parser.add_argument(
        "--diagnose",
        default="",
        help="settings of the per-term-family diagnosis vs a policy champion (largest --n)",
    )
    args = parser.parse_args()
    args.pinned_seed = None if args.pinned_seed < 0 else args.pinned_seed
    INPUTS.update(floor=not args.no_floor, tv=not args.no_tv)
    settings = make_settings(args.seed)
    rng = np.random.default_rng(args.seed + 1)
    sizes = [int(v) for v in args.n.split(",")]
    results: dict = {
        "inputs": dict(INPUTS),
        "alpha": ALPHA,
        "reps": args.reps,
        "cells": [],
        "coverage": [],
        "limits": [],
        "production": [],
        "attempts": [],
        "diagnosis": [],
    }
    start = time.perf_counter()
    print(
        f"declared floor: {'yes' if INPUTS['floor'] else 'none'}; policies' total variation "
        f"per row: {'yes' if INPUTS['tv'] else 'no'}"
    )
    _diagnose(args, settings, rng, results)
    _production(args, rng, results)
    _attempts_table(args, settings, rng, results)
    for name in filter(None, args.settings.split(",")):
        s = settings[name]
        clip = 5.0 * suggested_clip(s.logger.ravel())  # 5 × p90/p10 of the propensities
        r_logger, r_champion = s.risk(s.logger), s.risk(s.champion)
        print(
            f"\n== {name}: risk logger {r_logger:.4f}, policy champion {r_champion:.4f}; "
            f"ESS/n champion {s.ess_fraction(s.champion):.3f}; clip M = {clip:.3g}"
        )
        print(
            f"{'champion':9s} {'challenger':10s} {'n':>6s} {'ESS/n':>6s}  "
            + "  ".join(f"{e:>12s}" for e in (*GATE_ESTIMATORS, *RANDOMIZED, OLD_RULE))
        )
        for champ_name, champion, base in (
            ()
            if args.skip_gate
            else (
                ("logger", None, r_logger),
                ("policy", s.champion, r_champion),
            )
        ):
            cells = [("equal", 1.0, None), ("+2% worse", 1.02, None), ("-5% better", 0.95, None)]
            if args.pinned_seed is not None:  # gate.seed pinned: every attempt replays one draw
                cells.insert(1, (f"equal/s{args.pinned_seed}", 1.0, args.pinned_seed))
            for label, factor, pinned in cells:
                if label.split("/")[0] not in args.challengers.split(","):
                    continue
                challenger = s.challenger(factor * base, champ_name)
                for n in sizes:
                    promoted = _decisions(
                        s, rng, args.reps, n, challenger, champion, clip, pinned=pinned
                    )
                    rates = {e: float(v.mean()) for e, v in promoted.items()}
                    print(
                        f"{champ_name:9s} {label:10s} {n:6d} {s.ess_fraction(challenger):6.3f}  "
                        + "  ".join(
                            f"{rates[e]:12.3f}" for e in (*GATE_ESTIMATORS, *RANDOMIZED, OLD_RULE)
                        ),
                        flush=True,
                    )
                    results["cells"].append(
                        {
                            "setting": name,
                            "champion": champ_name,
                            "challenger": label,
                            "pinned_seed": pinned,
                            "n": n,
                            "true_challenger_risk": s.risk(challenger),
                            "true_champion_risk": base,
                            "challenger_ess_fraction": s.ess_fraction(challenger),
                            "promotion_rate": rates,
                        }
                    )
        for champ_name, champion in (("logger", s.logger), ("policy", s.champion)):
            if not args.limit_reps:
                break
            base = s.risk(champion)
            challenger = s.challenger(0.95 * base, champ_name)
            limits = _limits(s, rng, args.limit_reps, sizes, challenger, champion)
            print(
                f"-- limits, {name}, champion = {champ_name}, 5%-better challenger "
                f"({args.limit_reps} logs): n·KL_inf (needs ≥ {np.log(1 / ALPHA):.2f} on "
                "average) / power of the oracle bet (randomized) / NP bound on any valid test"
            )
            for family, row in limits.items():
                print(
                    f"   {family:13s} L = {row['lower']:8.3g}  λ*|L| = "
                    f"{row['lambda_times_range']:.2f}  "
                    + "  ".join(
                        f"n={c['n']}: {c['n_kl_inf']:.2f} / {c['oracle_bet_power']:.3f} "
                        f"({c['randomized_power']:.3f}) / "
                        + ("n/a" if c["np_bound"] is None else f"{c['np_bound']:.3f}")
                        for c in row["cells"]
                    ),
                    flush=True,
                )
                results["limits"].append(
                    {"setting": name, "champion": champ_name, "family": family, **row}
                )
        if args.coverage_reps:
            challenger = s.challenger(0.95 * r_champion, "policy")
            for n in sizes:
                table = _coverage(s, rng, args.coverage_reps, n, challenger, s.champion, clip)
                print(f"-- interval coverage, {name}, n = {n} (5%-better challenger vs policy)")
                for kind, row in table.items():
                    print(
                        f"   {kind:45s} coverage {row['coverage']:.3f}  flagged {row['flagged']:.3f}"
                        f"  unflagged coverage {row['unflagged_coverage']:.3f}  ({row['reps']} logs)"
                    )
                    results["coverage"].append({"setting": name, "n": n, "interval": kind, **row})
    limit = ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / args.reps)
    print(
        f"\nfalse-promotion limit 5% + 2 s.e. = {limit:.3f}; total {time.perf_counter() - start:.0f}s"
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
