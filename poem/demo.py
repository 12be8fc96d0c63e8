"""The digits demo behind ``poem-pipeline demo``: simulate logs, learn with POEM, evaluate.

scikit-learn's bundled digits become a 10-action discrete bandit problem (paper §6 protocol,
DESIGN §9): h₀ is a multinomial logistic regression on 5% of the training part; replaying the
training part through h₀ gives the training log, one pass over the test part gives a held-out
log. POEM is fitted on the training log, and both policies are scored twice on the test part:
exactly (closed-form expected 0/1 loss, which needs the true labels) and counterfactually
(IPS and SNIPS with intervals on the held-out log, which needs only the bandit feedback).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

from sklearn.utils import check_random_state

from poem.datasets import load_dataset
from poem.estimators import Estimate, evaluate_policy
from poem.learners import POEM
from poem.simulate import fit_logging_policy, map_loss, supervised_to_bandit, true_expected_loss

__all__ = ["DemoPolicy", "DemoResult", "run_digits_demo"]

DEMO_ESTIMATORS = ("ips", "snips")


@dataclass(frozen=True)
class DemoPolicy:
    """One policy's scores on the digits test part.

    Attributes
    ----------
    name : str
        ``"h0"`` (logging policy) or ``"POEM"``.
    expected_loss : float
        Closed-form expected 0/1 loss on the test part, R(h) = 1/n Σᵢ (1 − h(y*ᵢ|xᵢ)).
    map_loss : float
        0/1 loss of the policy's MAP predictions on the test part.
    estimates : tuple of Estimate
        Counterfactual estimates of R(h) on the held-out bandit log (``DEMO_ESTIMATORS``).
    """

    name: str
    expected_loss: float
    map_loss: float
    estimates: tuple[Estimate, ...]


@dataclass(frozen=True)
class DemoResult:
    """Outcome of :func:`run_digits_demo`.

    Attributes
    ----------
    n_train_log, n_test_log : int
        Rows of the training and held-out bandit logs.
    n_actions : int
        Number of actions K (digit classes).
    logging_fraction, n_replays, solver, variance_scale, confidence_level
        The ``fraction``, ``n_replays``, ``solver``, ``variance_scale`` and
        ``confidence_level`` arguments of :func:`run_digits_demo`.
    clip : float
        Resolved clip M.
    variance_penalty : float
        Resolved λ.
    n_iter : int
        POEM iterations/epochs.
    converged : bool
        Whether POEM converged.
    fit_seconds : float
        Wall time of ``POEM.fit``.
    policies : tuple of DemoPolicy
        h₀ first, then POEM.
    """

    n_train_log: int
    n_test_log: int
    n_actions: int
    logging_fraction: float
    n_replays: int
    solver: str
    variance_scale: float
    clip: float
    variance_penalty: float
    n_iter: int
    converged: bool
    fit_seconds: float
    confidence_level: float
    policies: tuple[DemoPolicy, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable dict (estimates via :meth:`Estimate.to_dict`)."""
        policies = [
            {**asdict(p), "estimates": [e.to_dict() for e in p.estimates]} for p in self.policies
        ]
        return {**asdict(self), "policies": policies}


def run_digits_demo(
    *,
    fraction: float = 0.05,
    n_replays: int = 4,
    temperature: float = 1.0,
    solver: str = "lbfgs",
    variance_scale: float = 0.1,
    confidence_level: float = 0.95,
    random_state: int = 0,
) -> DemoResult:
    r"""Run the digits demo: h₀ → bandit logs → POEM → exact and counterfactual test losses.

    .. math:: R(h) = \frac{1}{n} \sum_i \big(1 - h(y^*_i|x_i)\big), \qquad
              \hat R_{IPS}(h) = \frac{1}{n} \sum_i \delta_i \frac{h(y_i|x_i)}{p_i}

    where y*ᵢ is the true digit, (yᵢ, δᵢ, pᵢ) the held-out log's action, 0/1 loss and
    propensity (paper Eq. 1 for the IPS estimate).

    Parameters
    ----------
    fraction : float, default=0.05
        Fraction f of the training part used to fit h₀.
    n_replays : int, default=4
        Replays R of the training part through h₀.
    temperature : float, default=1.0
        Serving temperature τ of h₀.
    solver : {"lbfgs", "adagrad"}, default="lbfgs"
        POEM solver.
    variance_scale : float, default=0.1
        Multiplier c of the calibrated variance penalty, λ = c·λ*, from the paper's grid
        c ∈ {10⁻⁶, …, 1} (c = 1 over-regularises on digits; the full protocol selects c:
        :func:`poem.learners.search_hyperparameters`).
    confidence_level : float, default=0.95
        Coverage of the estimate intervals, 1 − γ.
    random_state : int, default=0
        Seed of the split, h₀'s subsample, the simulated logs and POEM.

    Returns
    -------
    DemoResult
        Losses and estimates of h₀ and POEM.

    Raises
    ------
    ValueError
        For out-of-range arguments (raised by the functions called).

    References
    ----------
    Swaminathan, A. & Joachims, T. (2015), arXiv:1502.02362, §6 and Eq. (1).
    """
    rs = check_random_state(random_state)
    data = load_dataset("digits", random_state=random_state)
    h0 = fit_logging_policy(data, fraction=fraction, temperature=temperature, random_state=rs)
    kwargs = {"random_state": rs, "feature_names": data.feature_names}
    train_log = supervised_to_bandit(
        data.X_train, data.Y_train, h0, n_replays=n_replays, event_id_prefix="train-", **kwargs
    )
    test_log = supervised_to_bandit(
        data.X_test, data.Y_test, h0, n_replays=1, event_id_prefix="test-", **kwargs
    )
    model = POEM(
        policy="discrete",
        solver=solver,
        clip="p90/p10",
        variance_penalty="calibrated",
        variance_scale=variance_scale,
        fit_intercept=True,
        random_state=random_state,
    )
    started = time.perf_counter()
    model.fit(train_log)
    fit_seconds = time.perf_counter() - started
    policies = tuple(
        DemoPolicy(
            name,
            true_expected_loss(policy, data.X_test, data.Y_test),
            map_loss(policy, data.X_test, data.Y_test),
            tuple(
                evaluate_policy(policy, test_log, estimator=e, confidence_level=confidence_level)
                for e in DEMO_ESTIMATORS
            ),
        )
        for name, policy in (("h0", h0), ("POEM", model.policy_))
    )
    return DemoResult(
        n_train_log=train_log.n_rows,
        n_test_log=test_log.n_rows,
        n_actions=data.n_labels,
        logging_fraction=float(fraction),
        n_replays=int(n_replays),
        solver=solver,
        variance_scale=float(variance_scale),
        clip=float(model.clip_),
        variance_penalty=float(model.variance_penalty_),
        n_iter=int(model.n_iter_),
        converged=bool(model.converged_),
        fit_seconds=fit_seconds,
        confidence_level=float(confidence_level),
        policies=policies,
    )
