"""Plot of validation risk against the variance penalty λ, one line per clip M (DESIGN §2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

__all__ = ["plot_search", "search_figure"]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINES = ("-", "--", "-.", ":")
_DODGE = 0.04  # relative horizontal offset between series, so equal series stay visible


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
    fig = search_figure(rows, x=x, y=y, group=group)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def search_figure(
    rows: Sequence[Mapping[str, Any]],
    *,
    x: str = "variance_penalty",
    y: str = "ips_risk",
    group: str = "clip",
) -> Figure:
    """The figure of :func:`plot_search`: one series per ``group`` value, none hidden.

    Each series gets its own marker and line style and a small horizontal offset, and a
    series identical to an earlier one says so in the legend (``= clip=…``), so equal
    curves (e.g. two clips that bind nowhere) are all visible.
    """
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        value = row.get(group, "")
        label = f"{value:.4g}" if isinstance(value, int | float) else str(value)
        groups.setdefault(label, []).append(row)
    seen: dict[tuple, str] = {}
    for i, (name, members) in enumerate(sorted(groups.items())):
        members = sorted(members, key=lambda r: float(r[x]))
        shift = 1.0 + _DODGE * (i - (len(groups) - 1) / 2)
        xs = [float(r[x]) * shift for r in members]
        ys = [float(r[y]) for r in members]
        label = f"{group}={name}"
        key = (tuple(float(r[x]) for r in members), tuple(ys))
        if key in seen:
            label += f" (= {seen[key]})"
        seen.setdefault(key, f"{group}={name}")
        style = dict(marker=_MARKERS[i % len(_MARKERS)], linestyle=_LINES[i % len(_LINES)])
        if all(f"{y}_lower" in r and f"{y}_upper" in r for r in members):
            lo = [float(r[y]) - float(r[f"{y}_lower"]) for r in members]
            hi = [float(r[f"{y}_upper"]) - float(r[y]) for r in members]
            ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, label=label, **style)
        else:
            ax.plot(xs, ys, label=label, **style)
    ax.set_xscale("symlog", linthresh=1e-3)
    ax.set_xlabel(x)
    ax.set_ylabel(f"validation {y}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
