"""Diagnostic plots of a log (propensities, importance weights, action counts) saved as PNG.

matplotlib's Agg canvas renders them; no display is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from poem.data import LoggedBandit
from poem.diagnostics.propensity import reference_probabilities
from poem.estimators.weights import importance_weights, suggested_clip

__all__ = [
    "plot_action_counts",
    "plot_propensity_histogram",
    "plot_reliability",
    "plot_weight_distribution",
    "save_diagnostic_plots",
]


def _figure() -> tuple[Any, Any]:
    from matplotlib.figure import Figure  # no pyplot: savefig renders with the Agg canvas

    fig = Figure(figsize=(6.4, 4.0))
    fig.subplots_adjust(left=0.12, right=0.97, top=0.91, bottom=0.13)
    return fig, fig.add_subplot()


def _log_bins(values: np.ndarray, n_bins: int = 50) -> np.ndarray:
    positive = values[values > 0]
    lo = positive.min() if positive.size else 1e-3
    hi = max(values.max(), lo * 1.0001)
    return np.logspace(np.log10(lo), np.log10(hi) + 1e-9, n_bins + 1)


def plot_propensity_histogram(propensities: Any, path: str | Path) -> Path:
    """Histogram of the propensities pᵢ on a log-scaled x axis; returns the PNG path."""
    p = np.asarray(propensities, dtype=np.float64)
    fig, ax = _figure()
    ax.hist(p, bins=_log_bins(p), color="tab:blue")
    ax.set_xscale("log")
    ax.set_xlabel("propensity p = π₀(y|x)")
    ax.set_ylabel("rows")
    ax.set_title(f"Propensities ({p.size:,} rows; min {p.min():.3g}, median {np.median(p):.3g})")
    fig.savefig(path, dpi=100)
    return Path(path)


def plot_weight_distribution(
    weights: Any, path: str | Path, *, clip: float | None = None, label: str = "target policy"
) -> Path:
    """Histogram of importance weights rᵢ (log-scaled), with the clip M as a vertical line."""
    w = np.asarray(weights, dtype=np.float64)
    fig, ax = _figure()
    ax.hist(w[w > 0], bins=_log_bins(w), color="tab:orange")
    ax.set_xscale("log")
    ax.set_yscale("log")
    if clip is not None:
        ax.axvline(clip, color="black", linestyle="--", label=f"clip M = {clip:.3g}")
        ax.legend()
    ax.set_xlabel(f"importance weight r = π(y|x)/p ({label})")
    ax.set_ylabel("rows")
    ax.set_title(
        f"Importance weights: mean {w.mean():.3g}, max {w.max():.3g}, {np.mean(w == 0):.1%} zero"
    )
    fig.savefig(path, dpi=100)
    return Path(path)


def plot_action_counts(log: LoggedBandit, path: str | Path) -> Path:
    """Draw a bar chart of logged counts per action, label or candidate position.

    Discrete: rows per action; multilabel: rows with each label on; candidates: rows per
    position of the logged candidate in its list.
    """
    fig, ax = _figure()
    if log.family == "discrete":
        counts, xlabel = np.bincount(log.actions, minlength=int(log.n_actions)), "action"
    elif log.family == "multilabel":
        counts, xlabel = log.actions.sum(axis=0), "label (rows with the label on)"
    else:
        counts, xlabel = np.bincount(log.actions), "position of the logged candidate"
    ax.bar(np.arange(counts.size), counts, color="tab:green")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("rows")
    ax.set_title(f"Logged counts ({int(np.sum(counts == 0))} of {counts.size} never logged)")
    fig.savefig(path, dpi=100)
    return Path(path)


def plot_reliability(diagnostics: Any, path: str | Path) -> Path:
    """Reliability diagram of an estimated logging policy (held-out, cross-fitted).

    One point per bin of equal counts of predicted probabilities π̂₀(a|x) over the (row,
    action) pairs: mean predicted probability against the observed frequency of the action
    (:attr:`poem.logging_policy.LoggerDiagnostics.reliability`); a calibrated model lies on
    the diagonal.
    """
    rows = np.asarray(diagnostics.reliability, dtype=np.float64).reshape(-1, 3)
    fig, ax = _figure()
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", label="calibrated")
    ax.plot(rows[:, 0], rows[:, 1], marker="o", color="tab:purple", label="held-out bins")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("predicted π̂₀(a|x) (bin mean)")
    ax.set_ylabel("observed frequency of a")
    ax.legend(loc="upper left")
    d = diagnostics
    ax.set_title(
        f"Estimated logger: log loss {d.log_loss:.3f} vs {d.marginal_log_loss:.3f} marginal; "
        f"Brier {d.brier:.3f} vs {d.marginal_brier:.3f}",
        fontsize=9,
    )
    fig.savefig(path, dpi=100)
    return Path(path)


def save_diagnostic_plots(
    log: LoggedBandit,
    out_dir: str | Path,
    *,
    target_policy: Any = None,
    estimated: Any = None,
) -> dict[str, Path]:
    """Write ``propensity_histogram.png``, ``weight_distribution.png`` and ``action_counts.png``.

    The weights are those of ``target_policy`` when given, else of the uniform reference
    policy; the clip line is the suggested M = p₉₀/p₁₀. With ``estimated`` (the
    :class:`~poem.logging_policy.LoggerDiagnostics` of estimated propensities) also
    ``propensity_reliability.png`` (:func:`plot_reliability`).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if target_policy is not None:
        probs, label = target_policy.log_action_probability_on(log), "target policy"
    else:
        probs, label = reference_probabilities(log), "uniform reference policy"
    p = log.propensities
    weights, clip = importance_weights(probs, p), suggested_clip(p)
    plots = {
        "propensity_histogram": plot_propensity_histogram(p, out / "propensity_histogram.png"),
        "weight_distribution": plot_weight_distribution(
            weights, out / "weight_distribution.png", clip=clip, label=label
        ),
        "action_counts": plot_action_counts(log, out / "action_counts.png"),
    }
    if estimated is not None:
        plots["propensity_reliability"] = plot_reliability(
            estimated, out / "propensity_reliability.png"
        )
    return plots
