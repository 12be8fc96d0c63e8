"""Closed-loop simulation: deploy, collect, retrain, iterate (Joachims' talk; DESIGN §7).

Round 0 registers the logging policy h₀ (fitted on a small fraction of the supervised training
set) as version 1 and ``champion``. Every round then

1. loads ``models:/<name>@champion`` through the serving pyfunc (:mod:`deploy.pyfunc`);
2. serves it on the training contexts (``n_replays`` requests per context, one per batch), each
   decision with its propensity under the served distribution;
3. observes each decision's loss from the hidden labels
   (:class:`poem.closed_loop.SupervisedEnvironment`) and writes decisions and feedback into a
   new ``date=`` partition (:class:`poem.io.decisions.DecisionLog`; one simulated day per round);
4. runs the ``retrain`` flow on that partition; the gate decides whether ``champion`` moves.

Every policy's true expected loss on the supervised test set is computed in closed form
(:func:`poem.simulate.true_expected_loss`), beside h₀ and the supervised skyline. Everything
(MLflow store, registry, logs) lives in ``workdir``, never the production registry.
"""

from __future__ import annotations

import datetime as _dt
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import mlflow
import yaml
from mlflow import MlflowClient

from deploy.pyfunc import feature_names_of
from flows.config import load_config
from flows.registry import load_version_policy, log_policy_model, promote, register_version
from flows.retrain import retrain
from flows.tracking import ensure_experiment, tracking_uri_scope
from poem.closed_loop import SupervisedEnvironment
from poem.datasets import load_dataset
from poem.io.decisions import DecisionLog, served_min_propensity

__all__ = ["ClosedLoopResult", "RoundReport", "run_closed_loop"]


@dataclass(frozen=True)
class RoundReport:
    """One round of the loop (round 0: h₀ registered as champion, nothing retrained)."""

    round: int
    served_version: str
    served_true_loss: float
    n_logged: int
    logged_mean_loss: float
    n_default_loss: int
    challenger_version: str | None
    challenger_true_loss: float | None
    decision: str
    difference: float | None
    difference_lower: float | None
    difference_upper: float | None
    champion_version: str
    champion_true_loss: float
    seconds: float
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClosedLoopResult:
    """Every round, with h₀ and the supervised skyline for reference."""

    dataset: str
    family: str
    logging_true_loss: float
    skyline_true_loss: float
    rounds: tuple[RoundReport, ...]
    workdir: str
    registered_model: str

    def champion_losses(self) -> list[float]:
        """Return the true expected loss of the champion after each round (round 0 = h₀)."""
        return [r.champion_true_loss for r in self.rounds]

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form."""
        return {
            **{k: v for k, v in asdict(self).items() if k != "rounds"},
            "rounds": [asdict(r) for r in self.rounds],
        }

    def to_markdown(self) -> str:
        """Per-round table: served and challenger true loss, gate decision and its interval."""
        loss = "expected Hamming loss" if self.family == "multilabel" else "expected 0/1 loss"
        lines = [
            f"Closed loop on {self.dataset} ({self.family}); "
            f"true {loss} on the supervised test set.",
            f"h₀ (logging policy): {self.logging_true_loss:.4f}; "
            f"supervised skyline: {self.skyline_true_loss:.4f}",
            "",
            "| round | served (version: true loss) | logged rows | mean logged loss "
            "| challenger (version: true loss) "
            "| gate | Δ̂ risk [95% interval] | champion after (true loss) |",
            "|---:|---|---:|---:|---|---|---|---|",
        ]
        for r in self.rounds:
            ch = (
                "—"
                if r.challenger_version is None
                else f"v{r.challenger_version}: {r.challenger_true_loss:.4f}"
            )
            diff = (
                "—"
                if r.difference is None
                else (f"{r.difference:+.4f} [{r.difference_lower:+.4f}, {r.difference_upper:+.4f}]")
            )
            lines.append(
                f"| {r.round} | v{r.served_version}: {r.served_true_loss:.4f} | {r.n_logged} | "
                f"{r.logged_mean_loss:.4f} | {ch} | {r.decision} | {diff} | "
                f"v{r.champion_version}: {r.champion_true_loss:.4f} |"
            )
        lines.append("")
        lines += [
            f"- round {r.round} gate: " + "; ".join(r.reasons) for r in self.rounds if r.reasons
        ]
        return "\n".join(lines)


def _simulation_config(
    base_config: str | Path, workdir: Path, family: str, overrides: dict | None
) -> Path:
    """Write the base ``mlflow.yml`` re-pointed at ``workdir`` (store, artifacts, logs, family)."""
    raw = yaml.safe_load(load_config(base_config).to_yaml())
    raw["tracking"].update(
        uri=f"sqlite:///{workdir / 'mlflow.db'}",
        artifact_location=(workdir / "mlartifacts").as_uri(),
    )
    unset = ("loss_bounds", "reward_bounds", "n_actions", "window_start", "window_end")
    raw["data"].update(path=str(workdir / "logs"), family=family, **dict.fromkeys(unset))
    raw["training"]["params"]["policy"] = family
    for section, values in (overrides or {}).items():
        raw[section] = {**raw.get(section, {}), **values}
    path = workdir / "simulate.yml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    load_config(path)  # fail early, naming the key, if an override is invalid
    return path


def _predict(model: Any) -> Any:
    """The environment's ``predict(request, seed)`` through the loaded pyfunc ``model``."""
    return lambda request, seed: model.predict(request, params={"seed": seed})


def run_closed_loop(
    base_config: str | Path,
    workdir: str | Path,
    *,
    dataset: str = "digits",
    data_dir: str | Path | None = None,
    rounds: int = 3,
    n_replays: int = 1,
    fraction: float = 0.05,
    seed: int = 0,
    config_overrides: dict[str, dict[str, Any]] | None = None,
    progress: Any = None,
) -> ClosedLoopResult:
    """Run round 0 (h₀ as champion) and ``rounds`` deploy → collect → retrain → gate rounds.

    Parameters
    ----------
    base_config : str or Path
        ``mlflow.yml`` whose training, search, checks and gate settings are used.
    workdir : str or Path
        Folder for the simulation's MLflow store, registry, artifacts and logs.
    dataset : {"digits", "yeast"}, default="digits"
        Supervised data set (``yeast`` needs ``data_dir``).
    data_dir : str or Path or None
        The shared data folder.
    rounds : int, default=3
        Retraining rounds after round 0.
    n_replays : int, default=1
        Passes over the training contexts per round.
    fraction : float, default=0.05
        Fraction of the training labels h₀ is fitted on (paper: 5%).
    seed : int, default=0
        Seeds h₀'s subsample and the served draws.
    config_overrides : dict or None
        ``{section: {key: value}}`` applied to the simulation config (e.g. a smaller grid).
    progress : callable or None
        Called with each :class:`RoundReport` as it completes.

    Returns
    -------
    ClosedLoopResult
    """
    if dataset not in ("digits", "yeast"):
        raise ValueError(f"dataset must be 'digits' or 'yeast', got {dataset!r}")
    if rounds < 1 or n_replays < 1:
        raise ValueError(f"rounds and n_replays must be >= 1, got {rounds} and {n_replays}")
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    ds = load_dataset(dataset, data_dir)
    env = SupervisedEnvironment(ds, n_replays)
    config = _simulation_config(base_config, workdir, ds.family, config_overrides)
    h0 = env.logging_policy(fraction, seed)
    skyline = env.skyline(seed)
    true_loss = env.true_loss

    with tracking_uri_scope(f"sqlite:///{workdir / 'mlflow.db'}"):
        cfg = load_config(config)
        tracking = cfg.tracking
        client = MlflowClient(tracking.uri, tracking.uri)
        started = time.monotonic()
        experiment_id = ensure_experiment(client, tracking)
        run_id = client.create_run(experiment_id, run_name="closed-loop-round-0").info.run_id
        logged = log_policy_model(client, tracking, experiment_id, run_id, h0)
        v0 = register_version(
            client, tracking, logged, run_id, {"role": "logging-policy h0", "dataset": dataset}
        )
        promote(client, tracking, v0)
        client.set_terminated(run_id, "FINISHED")
        losses = {v0: true_loss(h0)}
        reports = [
            RoundReport(
                0,
                v0,
                losses[v0],
                0,
                float("nan"),
                0,
                None,
                None,
                "registered as champion",
                None,
                None,
                None,
                v0,
                losses[v0],
                time.monotonic() - started,
            )
        ]
        if progress:
            progress(reports[-1])
        log = DecisionLog(
            workdir / "logs",
            ds.family,
            ds.feature_names,
            env.loss_bounds,
            n_actions=ds.n_labels,
            feedback_timeout=_dt.timedelta(hours=1),
        )
        for round_ in range(1, rounds + 1):
            started = time.monotonic()
            model = mlflow.pyfunc.load_model(
                f"models:/{tracking.registered_model}@{tracking.champion_alias}"
            )
            served = model.unwrap_python_model()
            # the files this round writes declare the served floor: the gate's weight bound
            log.min_propensity = served_min_propensity(
                ds.family, served.policy.exploration_floor, ds.n_labels
            )
            served_names = feature_names_of(served.policy)
            if served_names != list(ds.feature_names):
                raise ValueError(
                    f"the champion expects features {served_names[:3]}…, "
                    f"the log has {list(ds.feature_names)[:3]}…"
                )
            round_log = env.serve_round(_predict(model), round_, seed, log)
            partition = workdir / "logs" / env.partition(round_)
            result = retrain(cfg, logs=partition)  # settings loaded once, above
            challenger = load_version_policy(client, tracking, result.challenger_version)
            losses[result.challenger_version] = true_loss(challenger)
            champion = result.champion_version or served.model_version
            m = result.metrics  # the gate's difference and interval (PolicyComparison.metrics)
            diff, lower, upper = (
                [m.get(f"risk_difference{end}") for end in ("", "_lower", "_upper")]
                if "risk_difference" in m
                else [None, None, None]
            )
            reports.append(
                RoundReport(
                    round_,
                    served.model_version,
                    losses[served.model_version],
                    round_log.n_logged,
                    round_log.mean_loss,
                    round_log.n_default_loss,
                    result.challenger_version,
                    losses[result.challenger_version],
                    result.decision,
                    diff,
                    lower,
                    upper,
                    champion,
                    losses[champion],
                    time.monotonic() - started,
                    tuple(result.reasons),
                )
            )
            if progress:
                progress(reports[-1])
    return ClosedLoopResult(
        dataset,
        ds.family,
        losses[v0],
        true_loss(skyline),
        tuple(reports),
        str(workdir),
        tracking.registered_model,
    )
