"""The prefill figures: TTFT against prompt length with the fit, and run against run.

Static images on log axes labelled at the lengths measured, so the report reads offline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...runs.report import length_axis
from .compare import Comparison
from .fit import LEVEL, Fit


def plot(table: pd.DataFrame, fit_: Fit | None, label: str, allow_cache_hits: bool = False):
    """TTFT against prompt length with the fit and its interval; prefill throughput beside it."""
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    x = table.index.to_numpy(dtype=float)
    y = table["TTFT ms (median)"].to_numpy()
    ax.errorbar(x, y, yerr=[y - table["min"].to_numpy(), table["max"].to_numpy() - y], fmt="o", capsize=3,
                label=f"{label}, median (min to max)")
    if fit_ is not None:
        grid = np.geomspace(x.min(), x.max(), 100)
        pred = fit_.predict(grid)
        ax.plot(grid, 1000 * pred["ttft_s"], "-", color="C1", label=f"fit ({fit_.shape})")
        ax.fill_between(grid, 1000 * pred["low"], 1000 * pred["high"], color="C1", alpha=0.2,
                        label=f"{100 * fit_.level:.0f}% interval of the fit")
        if fit_.overhead_s.value > 0:  # a log axis cannot show zero or less
            ax.axhline(1000 * fit_.overhead_s.value, color="grey", ls=":", label="fixed overhead")
    _log_ms_axis(ax)
    length_axis(ax, x)
    ax.set_ylabel("time to first token (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax2.plot(x, table["prefill tok/s"], "o-")
    length_axis(ax2, x)
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("prefill tokens per second (prompt / TTFT)")
    ax2.grid(alpha=0.3)
    mark = " - CACHE HITS ALLOWED ON PURPOSE" if allow_cache_hits else ""
    fig.suptitle(f"Prefill: {label}{mark}")
    fig.tight_layout()
    return fig


def plot_comparison(comparison: Comparison):
    """Every run's TTFT, and each other run's TTFT over this one's, against prompt length."""
    import matplotlib.pyplot as plt

    t = comparison.table
    x = t.index.to_numpy(dtype=float)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label in (comparison.base, *comparison.labels):
        ax.plot(x, t[f"{label} TTFT ms"], "o-", label=label)
    _log_ms_axis(ax)
    length_axis(ax, x)
    ax.set_ylabel("median time to first token (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    for i, label in enumerate(comparison.labels):
        col = f"{label} / {comparison.base}"
        y = t[col].to_numpy(dtype=float)
        err = np.vstack([y - t[f"{col} low"].to_numpy(dtype=float), t[f"{col} high"].to_numpy(dtype=float) - y])
        ax2.errorbar(x, y, yerr=np.nan_to_num(err), fmt="o-", color=f"C{i}", capsize=3,
                     label=f"{col}, {100 * LEVEL:.0f}% bootstrap interval")
        if f"{col} (server)" in t:
            ax2.plot(x, t[f"{col} (server)"], "s--", color=f"C{i}", alpha=0.6, label=f"{col}, the server's own TTFT")
    ax2.axhline(1, color="grey", ls=":")
    length_axis(ax2, x)
    ax2.set_ylabel("TTFT ratio")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle("Time to first token, run against run")
    fig.tight_layout()
    return fig


def _log_ms_axis(ax) -> None:
    from matplotlib.ticker import LogFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
