"""A supervised data set as the environment of a closed-loop simulation (DESIGN §7).

The labels are hidden from the learner and known to the environment: it replays the training
contexts as served requests, observes each served decision's loss from the labels
(:func:`poem.simulate.supervised_loss`) and scores every policy by its true expected loss on
the test set (:func:`poem.simulate.true_expected_loss`). The orchestration is the
``flows.closed_loop`` flow; serving is whatever ``predict`` callable it passes.

References
----------
Swaminathan, A. & Joachims, T. (2015). Counterfactual Risk Minimization: Learning from Logged
Bandit Feedback. arXiv:1502.02362, §6 (supervised → bandit conversion).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from poem.datasets import SupervisedDataset
from poem.io.decisions import DecisionLog
from poem.policies import StochasticPolicy
from poem.simulate import fit_logging_policy, supervised_loss, true_expected_loss

__all__ = ["BATCH", "FIRST_DAY", "ServedRound", "SupervisedEnvironment"]

FIRST_DAY = _dt.date(2026, 1, 1)  # round r's decisions are stamped FIRST_DAY + r days
BATCH = 1000  # contexts per served request

Predict = Callable[[pd.DataFrame, int], pd.DataFrame]


@dataclass(frozen=True)
class ServedRound:
    """What one round of serving logged: rows written, their mean loss, rows given the default."""

    n_logged: int
    mean_loss: float
    n_default_loss: int


@dataclass(frozen=True, eq=False)
class SupervisedEnvironment:
    """The replayed contexts and hidden labels of one data set.

    Parameters
    ----------
    dataset : SupervisedDataset
        The data set (its training contexts are served, its test set scores policies).
    n_replays : int, default=1
        Passes over the training contexts per round (each context's replays adjacent in time,
        so a time split separates contexts).
    """

    dataset: SupervisedDataset
    n_replays: int = 1

    @property
    def family(self) -> str:
        """Policy family of the simulated bandit problem."""
        return self.dataset.family

    @property
    def loss_bounds(self) -> tuple[float, float]:
        """Declared loss bounds: [0, 1] for 0/1 loss, [0, q] for Hamming loss over q labels."""
        return (0.0, 1.0 if self.family == "discrete" else float(self.dataset.n_labels))

    def _train(self) -> tuple[np.ndarray, np.ndarray]:
        X = self.dataset.X_train
        X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
        return X, np.asarray(self.dataset.Y_train)

    def logging_policy(self, fraction: float, random_state: int) -> StochasticPolicy:
        """h₀: fitted on ``fraction`` of the training labels, named with the data set's features."""
        h0 = fit_logging_policy(
            *self._train(), family=self.family, fraction=fraction, random_state=random_state
        )
        return replace(
            h0, metadata={**h0.metadata, "feature_names": list(self.dataset.feature_names)}
        )

    def skyline(self, random_state: int) -> StochasticPolicy:
        """The same model family trained on every training label (the supervised skyline)."""
        X, Y = self._train()
        return fit_logging_policy(X, Y, family=self.family, fraction=1.0, random_state=random_state)

    def true_loss(self, policy: StochasticPolicy) -> float:
        """Expected loss of ``policy`` on the test set, in closed form."""
        return true_expected_loss(policy, self.dataset.X_test, self.dataset.Y_test)

    @staticmethod
    def partition(round_: int) -> str:
        """The ``date=`` partition round ``round_`` writes."""
        return f"date={FIRST_DAY + _dt.timedelta(days=round_)}"

    def serve_round(
        self, predict: Predict, round_: int, seed: int, log: DecisionLog
    ) -> ServedRound:
        """Serve every replayed context, observe the losses, write the round's partition.

        Parameters
        ----------
        predict : callable
            ``predict(request, seed) -> decisions``: one request of up to :data:`BATCH` rows
            (``event_id`` and the feature columns) to a frame with ``event_id``, ``action`` and
            ``propensity`` (the serving pyfunc's output).
        round_ : int
            Round number (the day of the partition).
        seed : int
            Seeds the served draws (request ``b`` of round ``r``: ``seed·1000 + r·100 + b``).
        log : DecisionLog
            Receives decisions and feedback; flushed into one partition.

        Returns
        -------
        ServedRound
        """
        X, Y = self._train()
        rows_all = np.repeat(np.arange(X.shape[0]), self.n_replays)
        names = list(log.feature_names)
        day = np.datetime64(FIRST_DAY, "ns") + np.timedelta64(round_, "D")
        losses_all = []
        for start in range(0, rows_all.size, BATCH):
            rows = np.arange(start, min(start + BATCH, rows_all.size))
            request = pd.DataFrame(X[rows_all[rows]], columns=names)
            request.insert(0, "event_id", [f"r{round_}-{i}" for i in rows])
            decisions = predict(request, seed * 1000 + round_ * 100 + start // BATCH)
            log.add_decisions(request, decisions, timestamps=day + rows.astype("timedelta64[s]"))
            losses = supervised_loss(
                np.array(decisions["action"].tolist()), Y[rows_all[rows]], self.family
            )
            log.add_feedback(decisions["event_id"], losses)
            losses_all.append(losses)
        report = log.flush(force=True)
        return ServedRound(
            report.n_written, float(np.mean(np.concatenate(losses_all))), report.n_default_loss
        )
