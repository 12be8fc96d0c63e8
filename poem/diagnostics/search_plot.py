"""Plot of validation risk against the variance penalty λ, one line per clip M (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

__all__ = ["plot_search"]


def plot_search(
    rows: Sequence[Mapping[str, Any]],
    path: str | Path,
    *,
    x: str = "variance_penalty",
    y: str = "ips_risk",
    group: str = "clip",
) -> Path:
    """Save a PNG of ``y`` (with its interval when ``{y}_lower``/``{y}_upper`` exist) against ``x``.

    Parameters
    ----------
    rows : sequence of mapping
        One mapping per trial (the search table), holding ``x``, ``y`` and ``group``.
    path : str or Path
        Target PNG file.
    x : str, default="variance_penalty"
        Column on the horizontal axis (symlog scale), e.g. the resolved λ.
    y : str, default="ips_risk"
        Column on the vertical axis.
    group : str, default="clip"
        One line per value of this column, e.g. the resolved clip M.

    Returns
    -------
    Path
        The written file.
    """
    path = Path(path)
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        value = row.get(group, "")
        label = f"{value:.4g}" if isinstance(value, int | float) else str(value)
        groups.setdefault(label, []).append(row)
    for name, members in sorted(groups.items()):
        members = sorted(members, key=lambda r: float(r[x]))
        xs = [float(r[x]) for r in members]
        ys = [float(r[y]) for r in members]
        if all(f"{y}_lower" in r and f"{y}_upper" in r for r in members):
            lo = [float(r[y]) - float(r[f"{y}_lower"]) for r in members]
            hi = [float(r[f"{y}_upper"]) - float(r[y]) for r in members]
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=f"{group}={name}")
        else:
            ax.plot(xs, ys, marker="o", label=f"{group}={name}")
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_xlabel(x)
    ax.set_ylabel(f"validation {y}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path
