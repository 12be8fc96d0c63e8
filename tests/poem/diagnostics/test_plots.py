"""Diagnostic plots are written as PNG files for every family."""

from __future__ import annotations

import numpy as np
import pytest

from poem.data import CandidateSets, LoggedBandit
from poem.diagnostics.plots import plot_weight_distribution, save_diagnostic_plots
from poem.policies.stochastic import StochasticPolicy, family_from_log

PNG = b"\x89PNG\r\n\x1a\n"


def _logs(rng):
    n = 30
    sizes = rng.integers(1, 4, n)
    return {
        "multilabel": LoggedBandit(
            rng.normal(size=(n, 2)),
            rng.integers(0, 2, (n, 3)),
            np.zeros(n),
            rng.uniform(0.05, 0.5, n),
            (0, 3),
            family="multilabel",
        ),
        "candidates": LoggedBandit(
            None,
            np.zeros(n, int),
            np.zeros(n),
            1 / sizes,
            (0, 1),
            family="candidates",
            candidates=CandidateSets.from_sizes(rng.normal(size=(sizes.sum(), 2)), sizes),
        ),
    }


@pytest.mark.parametrize("family", ["discrete", "multilabel", "candidates"])
def test_save_diagnostic_plots_writes_pngs(tmp_path, rng, tiny_log, family):
    log = tiny_log if family == "discrete" else _logs(rng)[family]
    target = StochasticPolicy.uniform(family_from_log(log)) if family == "discrete" else None
    files = save_diagnostic_plots(log, tmp_path, target_policy=target)
    assert sorted(files) == ["action_counts", "propensity_histogram", "weight_distribution"]
    for path in files.values():
        assert (
            path.parent == tmp_path and path.read_bytes()[:8] == PNG and path.stat().st_size > 2000
        )


def test_weight_plot_handles_zero_weights(tmp_path):
    path = plot_weight_distribution(np.array([0.0, 0.5, 2.0, 40.0]), tmp_path / "w.png", clip=10.0)
    assert path.read_bytes()[:8] == PNG


def test_search_plot_keeps_identical_series_visible():
    from poem.diagnostics.search_plot import search_figure

    rows = [
        {"variance_penalty": lam, "ips_risk": risk, "clip": clip}
        for clip in (10.0, 100.0)
        for lam, risk in ((0.0, 0.5), (0.1, 0.4))
    ]
    (ax,) = search_figure(rows).axes
    first, second = ax.get_lines()
    assert (first.get_marker(), first.get_linestyle()) != (
        second.get_marker(),
        second.get_linestyle(),
    )
    assert not np.array_equal(first.get_xdata(), second.get_xdata())  # dodged, not on top
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["clip=10", "clip=100 (= clip=10)"]
