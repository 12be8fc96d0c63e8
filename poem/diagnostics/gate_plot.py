"""Plot of the gate's intervals: both risks and their paired difference (DESIGN §5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

__all__ = ["plot_gate"]


def plot_gate(comparison: Any, path: str | Path) -> Path:
    """Save a PNG of the champion and challenger risk intervals and of their difference.

    Parameters
    ----------
    comparison : PolicyComparison
        Output of :func:`poem.estimators.compare.compare_policies`.
    path : str or Path
        Target PNG file.

    Returns
    -------
    Path
        The written file.
    """
    path = Path(path)
    fig = Figure(figsize=(9, 3.2))
    ax_risk, ax_diff = fig.subplots(1, 2)
    rows = [("champion", comparison.champion), ("challenger", comparison.challenger)]
    for y, (name, est) in enumerate(rows):
        _interval_bar(ax_risk, est, y, color="C0" if name == "champion" else "C1")
    ax_risk.set_yticks(range(len(rows)), [name for name, _ in rows])
    ax_risk.set_xlabel(
        f"{comparison.challenger.estimator} risk ({comparison.challenger.confidence_level:.0%} CI)"
    )
    ax_risk.set_ylim(-0.6, len(rows) - 0.4)
    _interval_bar(ax_diff, comparison.difference, 0, color="C2", label="difference (two-sided CI)")
    ax_diff.axvline(comparison.upper_bound, color="C3", ls="--", label="one-sided upper bound")
    ax_diff.axvline(0.0, color="k", lw=0.8)
    ax_diff.set_yticks([])
    ax_diff.set_xlabel("risk(challenger) − risk(champion)")
    ax_diff.legend(loc="upper right", fontsize=7)
    fig.suptitle(f"counterfactual A/B gate: {'promote' if comparison.promote else 'reject'}")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def _interval_bar(ax: Any, est: Any, y: float, **style: Any) -> None:
    """An estimate's value at height ``y`` with its interval as error bars."""
    xerr = [[est.value - est.lower], [est.upper - est.value]]
    ax.errorbar(est.value, y, xerr=xerr, fmt="o", capsize=4, **style)
