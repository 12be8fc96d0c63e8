"""The POEM estimator: counterfactual risk minimization of a softmax policy (paper §5, STYLE §5).

:class:`POEM` minimises the CRM objective of :mod:`poem.learners.objective` by minibatch
AdaGrad on the variance majorizer (POEM(S), Alg. 1) or L-BFGS-B (POEM(B)); λ = 0 gives IPS.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import replace
from functools import partial
from numbers import Integral, Real
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import check_random_state, check_scalar

from poem.data import LoggedBandit
from poem.estimators.marginal import LOGGER_RTOL, propensity_mismatch
from poem.estimators.weights import suggested_clip
from poem.learners._adagrad import SolverResult, adagrad
from poem.learners._additive import fit_additive_loss_model
from poem.learners._lbfgs import lbfgs_statistics
from poem.learners._prediction import PolicyPredictionMixin, check_shared_params, store_params
from poem.learners.prepared import CRMPartition, PreparedTraining, prepare_log
from poem.policies._base import check_serving_params
from poem.policies.stochastic import StochasticPolicy

__all__ = [
    "POEM",
    "calibrated_variance_penalty",
    "initial_coef",
    "resolve_clip",
    "resolve_implicit_exploration",
]

POLICIES = ("discrete", "multilabel", "candidates")
SOLVERS = ("adagrad", "lbfgs")
CLIP_RULES = ("p90/p10", "max/min")
OBJECTIVES = ("ips", "dr", "auto", "marginal")
_ADDITIVE_FAMILIES = ("multilabel",)  # families whose loss model is additive over action parts


def resolve_clip(clip: Any, propensities: np.ndarray) -> float:
    r"""Resolve the clip M from a number or a calibration rule (paper §6, DESIGN §4.5).

    .. math:: M = p_{(90)} / p_{(10)} \quad\text{or}\quad M = \max_i p_i / \min_i p_i

    where p₍ₖ₎ is the k-th percentile of the training propensities pᵢ.

    Parameters
    ----------
    clip : {"p90/p10", "max/min"}, float or None
        Rule, fixed M > 0, or None for no clipping (M = ∞).
    propensities : ndarray of shape (n_samples,)
        Training propensities pᵢ.

    Returns
    -------
    float
        The clip M (``inf`` when not clipping).

    Raises
    ------
    ValueError
        For an unknown rule or a non-positive M.
    TypeError
        For a clip that is neither a string, a number nor None.
    """
    if clip is None:
        return float("inf")
    if isinstance(clip, str):
        if clip == "p90/p10":
            return suggested_clip(propensities)
        if clip == "max/min":
            return float(np.max(propensities) / np.min(propensities))
        raise ValueError(
            f"clip must be one of {list(CLIP_RULES)}, a number > 0 or None, got {clip!r}"
        )
    if isinstance(clip, bool) or not isinstance(clip, Real):
        raise TypeError(f"clip must be a str, a real number or None, got {type(clip).__name__}")
    if not clip > 0:  # also rejects NaN
        raise ValueError(f"clip must be > 0, got {clip!r}")
    return float(clip)


def resolve_implicit_exploration(gamma: Any, propensities: np.ndarray) -> float:
    r"""Resolve the implicit-exploration γ from a number or a percentile rule.

    .. math:: \gamma = p_{(k)} \quad\text{for the rule } \texttt{"p}k\texttt{"}

    where p₍ₖ₎ is the k-th percentile of the training propensities pᵢ (k an integer in
    1..99): a γ on the scale of the log's propensities, which differ by orders of magnitude
    between action spaces (measured: median joint propensity 0.002 on yeast's 14 labels,
    0.18 on emotions' 6).

    Parameters
    ----------
    gamma : float or str
        γ ≥ 0, or a rule ``"p1"`` … ``"p99"``.
    propensities : ndarray of shape (n_samples,)
        Training propensities pᵢ.

    Returns
    -------
    float
        γ.

    Raises
    ------
    ValueError
        For a negative γ or a malformed rule.
    TypeError
        For a γ that is neither a number nor a string.
    """
    if isinstance(gamma, str):
        k = gamma[1:]
        if not (gamma.startswith("p") and k.isdigit() and 1 <= int(k) <= 99):
            raise ValueError(
                "implicit_exploration must be a number >= 0 or a percentile rule 'p1'..'p99', "
                f"got {gamma!r}"
            )
        return float(np.percentile(propensities, int(k)))
    if isinstance(gamma, bool) or not isinstance(gamma, Real):
        raise TypeError(
            f"implicit_exploration must be a real number or a str, got {type(gamma).__name__}"
        )
    if not gamma >= 0:  # also rejects NaN
        raise ValueError(f"implicit_exploration must be >= 0, got {gamma!r}")
    return float(gamma)


def calibrated_variance_penalty(scaled_losses: np.ndarray) -> float:
    r"""λ* at which the logging policy's CRM objective is zero (paper §4.4, DESIGN §4.5).

    .. math:: \lambda^* = -\hat R(\pi_0) \big/ \sqrt{\hat V(\delta')/n}

    where R̂(π₀) = mean(δ') is the logger's IPS risk on scaled losses (all weights 1),
    V̂(δ') their sample variance and n the number of rows.

    Parameters
    ----------
    scaled_losses : ndarray of shape (n_samples,)
        Scaled losses δ'ᵢ ∈ [−1, 0].

    Returns
    -------
    float
        λ* ≥ 0 (0 when the losses are constant).
    """
    d = np.asarray(scaled_losses, dtype=np.float64)
    var = float(np.var(d, ddof=1)) if d.size > 1 else 0.0
    if var <= 0:
        return 0.0
    return float(-np.mean(d) / np.sqrt(var / d.size))


def initial_coef(warm_start: Any, family: Any) -> np.ndarray | None:
    """Raw-space starting coefficients w₀ of a ``warm_start`` value (None for ``"zeros"``).

    Parameters
    ----------
    warm_start : "zeros", array-like, StochasticPolicy or fitted estimator
        ``"zeros"``, raw-space coefficients of shape ``family.coef_shape``, or a policy (or a
        fitted estimator's ``policy_``) whose coefficients divided by its temperature are w₀
        (with a zero intercept when it has none).
    family : PolicyFamily
        The family being fitted.

    Returns
    -------
    ndarray of shape ``family.coef_shape`` or None
        w₀, or None for the paper's w₀ = 0.

    Raises
    ------
    ValueError
        If the starting policy's family, feature count or action count differs from the
        log's, or an array has the wrong shape or non-finite values.
    """
    if isinstance(warm_start, str) and warm_start == "zeros":
        return None
    policy = getattr(warm_start, "policy_", warm_start)
    if isinstance(policy, StochasticPolicy):
        other = policy.family
        theirs = (other.name, other.n_features, other.n_actions)
        ours = (family.name, family.n_features, family.n_actions)
        if theirs != ours:
            raise ValueError(
                "warm_start policy is incompatible with the log: (family, n_features, "
                f"n_actions) = {theirs}, the log has {ours}"
            )
        coef = np.asarray(policy.coef, dtype=np.float64) / policy.temperature
        if other.fit_intercept == family.fit_intercept:
            return coef
        if family.fit_intercept:  # start with a zero intercept
            return np.concatenate([coef, np.zeros((*coef.shape[:-1], 1))], axis=-1)
        raise ValueError(
            "warm_start policy has an intercept but fit_intercept=False; fit with "
            "fit_intercept=True or start from 'zeros'"
        )
    coef = np.asarray(warm_start, dtype=np.float64)
    if coef.shape != family.coef_shape:
        raise ValueError(
            f"warm_start array must have shape {family.coef_shape} (coef_), got {coef.shape}"
        )
    if not np.all(np.isfinite(coef)):
        raise ValueError("warm_start array contains non-finite values")
    return coef


class POEM(PolicyPredictionMixin, BaseEstimator):
    r"""Policy Optimizer for Exponential Models (Swaminathan & Joachims 2015).

    .. math::

        \hat w = \arg\min_w \frac{1}{n}\sum_i u_i
        + \lambda \sqrt{\hat V(u)/n} + \mu \lVert w \rVert^2
        + \kappa \frac{d}{n} \lVert w - w_0 \rVert^2, \quad
        u_i = \delta'_i \min(M, \pi_w(y_i|x_i)/p_i)

    where δ'ᵢ are scaled losses, pᵢ propensities, M the clip, λ the variance penalty, μ
    the L2 penalty (Eq. 10/12) and κ the anchor penalty: a Gaussian prior centred on the
    warm start w₀ (the champion, or 0), scaled by d/n, the coefficients per training row.

    Parameters
    ----------
    policy : {"discrete", "multilabel", "candidates"}, default="discrete"
        Policy family; must equal the log's family.
    solver : {"adagrad", "lbfgs"}, default="adagrad"
        Minibatch AdaGrad with iterated variance majorization (POEM(S), Alg. 1) or L-BFGS-B
        on the exact objective (POEM(B)).
    objective : {"ips", "dr", "auto", "marginal"}, default="ips"
        The risk estimate uᵢ: the clipped IPS term of Eq. 13, or the doubly robust term with
        a cross-fitted additive loss model (multilabel family only,
        :mod:`poem.learners.objective`). ``"auto"``: ``"dr"`` for multilabel, else ``"ips"``.
        ``"marginal"``: the doubly robust term with per-label weights π_w,l/π₀,l instead of the
        joint π_w/p (multilabel; needs ``logging_policy``; unbiased when the loss adds
        per-label terms, as the Hamming loss does, and the logger draws labels independently).
    clip : {"p90/p10", "max/min"}, float or None, default="p90/p10"
        Clip of the importance weights (a rule of :func:`resolve_clip`, a fixed value > 0 or
        None for no clip), i.e. M.
    variance_penalty : float or "calibrated", default=1.0
        λ ≥ 0, or ``"calibrated"`` for λ = variance_scale · λ* (DESIGN §4.5), i.e. λ.
    variance_scale : float, default=1.0
        Multiplier c of λ* when ``variance_penalty="calibrated"``, i.e. c.
    l2_penalty : float, default=0.0
        L2 penalty μ ≥ 0, i.e. μ.
    anchor_penalty : float, default=0.0
        κ ≥ 0, i.e. κ: the fit pays κ·(d/n)·‖w − w₀‖² for leaving its start ``warm_start``
        (d coefficients, n training rows; standardized units with ``standardize``; w₀ = 0
        with ``warm_start="zeros"``, an L2 penalty of κ·d/n). Where a log has many
        coefficients per row, a fit then moves only where the rows support it and elsewhere
        stays at its start, the champion (measured in the README: "The anchor penalty").
    max_iter : int, default=200
        Maximum iterations (lbfgs), and epochs (adagrad) unless ``max_epochs`` is set.
    tol : float, default=1e-6
        Convergence tolerance on the gradient norm and the relative objective change.
    learning_rate : float, default=1.0
        AdaGrad step size (adagrad only): η itself, or γ with ``learning_rate_unit="epoch"``.
    learning_rate_unit : {"step", "epoch"}, default="step"
        ``"step"``: ``learning_rate`` is the step size η of every minibatch step.
        ``"epoch"``: it is the step size γ of a whole epoch, η = γ·b/n (n training rows, b
        the batch size): an epoch of n/b steps then moves w by about γ∇J whatever n and b,
        so one γ serves logs of any size.
    batch_size : int, default=100
        Minibatch size b (adagrad only), i.e. b.
    fit_intercept : bool, default=True
        Append a constant feature to every context.
    temperature : float, default=1.0
        Serving temperature α of ``policy_`` (training uses α = 1), i.e. α.
    exploration_floor : float, default=0.0
        Serving exploration floor ε of ``policy_``, i.e. ε.
    random_state : int, RandomState or None, default=None
        Seed of the minibatch shuffles.
    majorize_every : int or None, default=None
        Re-majorize every this many minibatches in addition to every epoch (adagrad only).
    progressive : bool, default=False
        Majorize and stop on each epoch's progressive statistics instead of a full-batch pass
        (adagrad only; about half the cost per epoch, see ``poem.learners._adagrad.adagrad``).
    chunk_size : int or None, default=None
        Rows per chunk for full-batch statistics (bounded memory for large n; same result).
    max_epochs : int or None, default=None
        Maximum AdaGrad epochs (None: ``max_iter``); lets one configuration, e.g. a search
        over ``solver``, give each solver its own budget.
    standardize : bool, default=True
        Optimise over standardized features (:mod:`poem.learners._scaling`) and fold the
        transform back into raw-space ``coef_``, so one η fits every feature scale; μ then
        penalises the standardized coefficients. Not for candidate-set features.
    warm_start : "zeros", array-like, StochasticPolicy or fitted estimator, default="zeros"
        Starting point w₀ (:func:`initial_coef`): ``"zeros"`` is the paper's w₀ = 0 (the
        uniform policy); an array is raw-space coefficients; a policy (e.g. the logger h₀ or
        the champion) or a fitted learner starts at its served distribution without floor,
        i.e. w₀.
    implicit_exploration : float or str, default=0.0
        γ ≥ 0, or a percentile rule of :func:`resolve_implicit_exploration` (``"p10"``: the
        10th percentile of the training propensities), i.e. γ: the objective's importance
        weights are π_w(yᵢ|xᵢ)/(pᵢ + γ) instead of π_w(yᵢ|xᵢ)/pᵢ (implicit exploration, IX:
        Neu 2015; Gabbianelli, Neu & Papini 2024), then clipped at M. Each weight shrinks,
        most where pᵢ is small; with δ'ᵢ ≤ 0 the IPS risk estimate is then pessimistic (its
        expectation is ≥ the true scaled risk), a smooth alternative to the clip. With the
        doubly robust objective it shrinks the correction's weights (not pessimistic there).
        Not for ``objective="marginal"`` (per-label weights).
    logging_policy : StochasticPolicy, fitted estimator or None, default=None
        The logging policy π₀ of the training rows, for ``objective="marginal"`` (its
        per-label probabilities); it must reproduce every row's propensity pᵢ (relative
        error ≤ 1e-6 at its own temperature and floor), else the fit raises ValueError.

    Attributes
    ----------
    coef_, policy_, family_, n_features_in_, n_iter_, converged_, clip_, clipped_fraction_
        As every learner's (:class:`~poem.learners._prediction.PolicyPredictionMixin`).
    objective_ : float
        Training objective J(w) (scaled-loss units; up to a constant when both μ and κ
        are set).
    variance_penalty_ : float
        Resolved λ.

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015). Batch learning from logged bandit feedback through
    counterfactual risk minimization. JMLR 16, arXiv:1502.02362, §4–§6, Alg. 1.
    """

    def __init__(
        self,
        *,
        policy="discrete",
        solver="adagrad",
        objective="ips",
        clip="p90/p10",
        variance_penalty=1.0,
        variance_scale=1.0,
        l2_penalty=0.0,
        anchor_penalty=0.0,
        max_iter=200,
        tol=1e-6,
        learning_rate=1.0,
        learning_rate_unit="step",
        batch_size=100,
        fit_intercept=True,
        temperature=1.0,
        exploration_floor=0.0,
        random_state=None,
        majorize_every=None,
        progressive=False,
        chunk_size=None,
        max_epochs=None,
        standardize=True,
        warm_start="zeros",
        logging_policy=None,
        implicit_exploration=0.0,
    ):
        store_params(self, locals())

    # -- validation ------------------------------------------------------------------------------
    def _validate_params(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {list(POLICIES)}, got {self.policy!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {list(SOLVERS)}, got {self.solver!r}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {list(OBJECTIVES)}, got {self.objective!r}")
        if not (isinstance(self.clip, str) and self.clip in CLIP_RULES):  # without data
            resolve_clip(self.clip, np.ones(1))
        if isinstance(self.variance_penalty, str):
            if self.variance_penalty != "calibrated":
                raise ValueError(
                    "variance_penalty must be a number >= 0 or 'calibrated', "
                    f"got {self.variance_penalty!r}"
                )
        else:
            check_scalar(self.variance_penalty, "variance_penalty", Real, min_val=0.0)
        check_scalar(self.variance_scale, "variance_scale", Real, min_val=0.0)
        check_scalar(self.anchor_penalty, "anchor_penalty", Real, min_val=0.0)
        resolve_implicit_exploration(self.implicit_exploration, np.ones(1))  # without data
        if self.implicit_exploration != 0 and self.objective == "marginal":
            raise ValueError(
                "implicit_exploration shrinks the joint weights π/p; objective='marginal' uses "
                "per-label weights: use objective='dr' or implicit_exploration=0"
            )
        check_shared_params(self)
        check_scalar(
            self.learning_rate, "learning_rate", Real, min_val=0.0, include_boundaries="neither"
        )
        if self.learning_rate_unit not in ("step", "epoch"):
            raise ValueError(
                f"learning_rate_unit must be 'step' or 'epoch', got {self.learning_rate_unit!r}"
            )
        check_scalar(self.batch_size, "batch_size", Integral, min_val=1)
        for name in ("majorize_every", "chunk_size", "max_epochs"):  # each None or ≥ 1
            if getattr(self, name) is not None:
                check_scalar(getattr(self, name), name, Integral, min_val=1)
        if isinstance(self.warm_start, str) and self.warm_start != "zeros":
            raise ValueError(
                "warm_start must be 'zeros', an array, a StochasticPolicy or a fitted "
                f"estimator, got {self.warm_start!r}"
            )
        for name in ("fit_intercept", "progressive", "standardize"):
            if not isinstance(getattr(self, name), bool | np.bool_):
                raise TypeError(f"{name} must be a bool, got {type(getattr(self, name)).__name__}")

    def _step_size(self, n_rows: int) -> float:
        """AdaGrad's η: ``learning_rate``, or γ·b/n when it is given per epoch."""
        eta = float(self.learning_rate)
        if self.learning_rate_unit == "epoch":
            eta *= min(int(self.batch_size), n_rows) / n_rows
        return eta

    # -- fitting ---------------------------------------------------------------------------------
    def fit(self, log, actions=None, *, propensities=None, losses=None, loss_bounds=(0.0, 1.0)):
        """Learn w from a logged bandit (or, for the discrete family, plain arrays).

        Parameters
        ----------
        log : LoggedBandit or array-like of shape (n_samples, n_features)
            The training log, or the contexts xᵢ when the plain-array form is used.
        actions : array-like of shape (n_samples,) or None, default=None
            Logged actions yᵢ (plain-array form only).
        propensities : array-like of shape (n_samples,) or None, default=None
            Logging propensities pᵢ (plain-array form only).
        losses : array-like of shape (n_samples,) or None, default=None
            Losses δᵢ (plain-array form only).
        loss_bounds : tuple of float, default=(0.0, 1.0)
            Loss bounds [δ_min, δ_max] (plain-array form only).

        Returns
        -------
        self : POEM
            The fitted estimator.

        Raises
        ------
        InvalidLogError
            When the log has fewer than 2 rows or 2 distinct actions, or breaks an invariant.
        ValueError
            For invalid hyperparameters or a log whose family differs from ``policy``.
        """
        self._validate_params()
        if not isinstance(log, LoggedBandit):
            if self.policy != "discrete":
                raise ValueError(
                    "the plain-array form fit(X, actions, ...) needs policy='discrete'"
                )
            log = LoggedBandit(log, actions, losses, propensities, loss_bounds=loss_bounds)
        if log.family != self.policy:
            raise ValueError(
                f"policy={self.policy!r} but the log's family is {log.family!r}; "
                f"set policy={log.family!r}"
            )
        prepared = prepare_log(
            log, fit_intercept=bool(self.fit_intercept), standardize_features=self.standardize
        )
        self.fit_prepared(prepared)
        if "loss_model_seconds" in prepared.cache:  # for benchmarks (the DR model's fit)
            log.__dict__["_loss_model_seconds"] = prepared.cache["loss_model_seconds"]
        return self

    def fits_partitions(self, family: str) -> bool:
        """Whether :meth:`fit_prepared` takes training rows in several partitions.

        The IPS objective is additive over rows; the doubly robust one (``objective``
        ``"dr"``, or ``"auto"`` on a multilabel log) cross-fits its loss model on the whole
        training log, so it needs the rows as one partition.
        """
        return self.objective == "ips" or (
            self.objective == "auto" and family not in _ADDITIVE_FAMILIES
        )

    def _logger_coef(self, prepared: PreparedTraining) -> tuple[np.ndarray, float]:
        """``logging_policy``'s coefficients in the prepared (standardized) space, and its ε."""
        policy = getattr(self.logging_policy, "policy_", self.logging_policy)
        if not isinstance(policy, StochasticPolicy):
            raise ValueError(
                "objective='marginal' needs logging_policy: the policy that logged the training "
                f"rows (a StochasticPolicy or fitted learner), got {self.logging_policy!r}"
            )
        coef = initial_coef(policy, prepared.family)  # w/α: its temperature applied
        if prepared.scaling is not None:
            coef = prepared.scaling.from_raw(coef)
        return coef, policy.exploration_floor

    def _with_loss_model(self, prepared: PreparedTraining) -> PreparedTraining:
        """``prepared`` with the doubly robust loss model on its rows (once per preparation)."""
        family = prepared.family.name
        if self.fits_partitions(family):
            return prepared
        if family not in _ADDITIVE_FAMILIES:
            raise ValueError(
                f"objective={self.objective!r} needs a family with an additive loss model "
                f"{list(_ADDITIVE_FAMILIES)}, "
                f"the log's family is {family!r}; use objective='ips' or 'auto'"
            )
        if len(prepared.partitions) != 1:
            raise ValueError(
                f"objective={self.objective!r} cross-fits its loss model on the whole training "
                f"log: the rows must be one partition, they are in {len(prepared.partitions)}"
            )
        if "dr" not in prepared.cache:
            start = time.perf_counter()
            parts = prepared.partitions.map(_attach_loss_model)
            prepared.cache["loss_model_seconds"] = time.perf_counter() - start
            prepared.cache["dr"] = replace(prepared, partitions=parts, cache={})
        data = prepared.cache["dr"]
        if self.objective != "marginal":
            return data
        coef, floor = self._logger_coef(prepared)
        parts = data.partitions.map(_attach_logger, family=prepared.family, coef=coef, floor=floor)
        return replace(data, partitions=parts, cache={})

    def fit_prepared(self, prepared: PreparedTraining) -> POEM:
        """Learn w from prepared training rows, in memory or in partitions (the one fit).

        :meth:`fit` is this on :func:`~poem.learners.prepared.prepare_log` of the log.

        Parameters
        ----------
        prepared : PreparedTraining
            The training rows (``fit_intercept`` and ``standardize`` as this estimator's).

        Returns
        -------
        self : POEM
            The fitted estimator.

        Raises
        ------
        ValueError
            For invalid hyperparameters, a family other than ``policy``, settings that differ
            from the preparation's, or a doubly robust objective on several partitions.
        """
        self._validate_params()
        family = prepared.family
        if family.name != self.policy:
            raise ValueError(
                f"policy={self.policy!r} but the log's family is {family.name!r}; "
                f"set policy={family.name!r}"
            )
        wanted = (bool(self.fit_intercept), bool(self.standardize) and family.name != "candidates")
        if wanted != (prepared.fit_intercept, prepared.standardize):
            raise ValueError(
                f"fit_intercept={self.fit_intercept}, standardize={self.standardize} but the "
                f"rows were prepared with {prepared.fit_intercept}, {prepared.standardize}"
            )
        check_serving_params(self.temperature, self.exploration_floor, family.max_exploration_floor)
        coef0 = initial_coef(self.warm_start, family)
        if coef0 is not None and prepared.scaling is not None:
            coef0 = prepared.scaling.from_raw(coef0)
        clip = resolve_clip(self.clip, prepared.propensities)
        lam = self._resolved_variance_penalty(prepared.scaled_losses)
        gamma = resolve_implicit_exploration(self.implicit_exploration, prepared.propensities)
        data = _implicit_exploration(self._with_loss_model(prepared), gamma)
        start = np.zeros(family.coef_shape) if coef0 is None else np.asarray(coef0, np.float64)
        mu, center = float(self.l2_penalty), None
        if self.anchor_penalty:  # μ‖w‖² + a‖w − w₀‖² = (μ + a)‖w − c‖² + const
            a = float(self.anchor_penalty) * start.size / prepared.n_rows
            mu, center = mu + a, None if coef0 is None else a / (mu + a) * start
        common = dict(variance_penalty=lam, l2_penalty=mu, l2_center=center, tol=float(self.tol))
        if self.solver == "adagrad":
            seed = check_random_state(self.random_state).randint(2**31 - 1)
            epochs = self.max_iter if self.max_epochs is None else self.max_epochs
            result: SolverResult = adagrad(
                data,
                clip=clip,
                learning_rate=self._step_size(prepared.n_rows),
                batch_size=int(self.batch_size),
                majorize_every=self.majorize_every,
                progressive=bool(self.progressive),
                random_state=np.random.default_rng(seed),
                max_iter=int(epochs),
                chunk_size=self.chunk_size,
                coef0=coef0,
                initial_statistics=data.start_statistics(start, clip, self.chunk_size),
                **common,
            )
        else:
            statistics = partial(data.statistics, clip=clip, chunk_size=self.chunk_size)
            result = lbfgs_statistics(statistics, start, max_iter=int(self.max_iter), **common)
        return self._store_fit(result, prepared, clip, lam, coef0)

    def _resolved_variance_penalty(self, scaled_losses: np.ndarray) -> float:
        """λ: the given number, or ``variance_scale``·λ* for ``"calibrated"``."""
        if self.variance_penalty == "calibrated":
            return float(self.variance_scale) * calibrated_variance_penalty(scaled_losses)
        return float(self.variance_penalty)

    def _store_fit(self, result, prepared, clip, lam, coef0) -> POEM:
        """Set the fitted attributes from a solver result."""
        family, scaling, log = prepared.family, prepared.scaling, prepared
        if not result.converged:
            remedy = (
                f"increase {'max_iter' if self.max_epochs is None else 'max_epochs'}, raise tol "
                "or lower learning_rate"
                if self.solver == "adagrad"
                else "increase max_iter, raise tol or add l2_penalty"
            )
            warnings.warn(
                f"POEM(solver={self.solver!r}) did not converge in {result.n_iter} "
                f"{'epochs' if self.solver == 'adagrad' else 'iterations'} (gradient norm "
                f"{result.gradient_norm:.3g}, tol={self.tol:g}); {remedy}.",
                ConvergenceWarning,
                stacklevel=3,
            )
        coef = result.coef if scaling is None else scaling.to_raw(result.coef)
        return self._store_fitted(
            family,
            coef,
            log,
            n_iter=result.n_iter,
            objective=result.objective,
            converged=result.converged,
            clip=clip,
            clipped_fraction=result.n_clipped / log.n_rows,
            variance_penalty=lam,
            metadata={
                "solver": self.solver,
                "clip": clip if np.isfinite(clip) else None,
                "variance_penalty": lam,
                "l2_penalty": float(self.l2_penalty),
                "anchor_penalty": float(self.anchor_penalty),
                "warm_start": "zeros" if coef0 is None else "given",
                "feature_names": log.feature_names,
            },
        )


def _attach_logger(
    part: CRMPartition | None, *, family: Any, coef: np.ndarray, floor: float
) -> CRMPartition | None:
    """The partition with the logger's per-label marginals after its loss model (checked).

    The logger must reproduce every row's propensity (:data:`LOGGER_RTOL`): the marginal
    objective is unbiased only for rows it logged.
    """
    if part is None:
        return None
    marginals = family.predict_proba(coef, part.inputs, exploration_floor=floor)
    joint = family.action_probability(coef, part.inputs, part.actions, exploration_floor=floor)
    bad, largest = propensity_mismatch(joint, part.propensities)
    if bad:
        raise ValueError(
            f"objective='marginal': logging_policy does not reproduce the propensity of {bad} "
            f"of {part.n_rows} training rows (largest relative error {largest:.3g}"
            f" > {LOGGER_RTOL:g}): they were not logged by it; use objective='dr' or give the "
            "policy that logged them"
        )
    model = np.concatenate([part.loss_model, marginals], axis=1)
    model.flags.writeable = False
    return replace(part, loss_model=model)


def _implicit_exploration(prepared: PreparedTraining, gamma: float) -> PreparedTraining:
    """``prepared`` with every propensity pᵢ + γ (IX weights π/(p + γ); cached per γ)."""
    if not gamma:
        return prepared
    key = ("implicit_exploration", float(gamma))
    if key not in prepared.cache:
        parts = prepared.partitions.map(_shift_propensities, gamma=float(gamma))
        prepared.cache[key] = replace(prepared, partitions=parts, cache={})
    return prepared.cache[key]


def _shift_propensities(part: CRMPartition | None, *, gamma: float) -> CRMPartition | None:
    """The partition with propensities pᵢ + γ."""
    if part is None:
        return None
    shifted = np.asarray(part.propensities, dtype=np.float64) + gamma
    shifted.flags.writeable = False
    return replace(part, propensities=shifted)


def _attach_loss_model(part: CRMPartition | None) -> CRMPartition | None:
    """The partition with its cross-fitted additive loss model (:mod:`poem.learners._additive`)."""
    if part is None:
        return None
    model = fit_additive_loss_model(part.inputs, part.actions, part.scaled_losses)
    model.flags.writeable = False
    return replace(part, loss_model=model)
