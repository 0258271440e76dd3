"""Where a client's wait goes: one stacked bar per start, in the order of the steps."""

from __future__ import annotations

import pandas as pd


def plot(table: pd.DataFrame, title: str = "Where a client's wait goes, per start"):
    """Each bar is the client's whole wait; a stage the log does not show draws no segment (its time is in the next)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.6 * max(len(table), 2) + 1.8))
    if table.empty:
        ax.text(0.5, 0.5, "no finished start to show", ha="center", va="center")
        ax.set_axis_off()
        return fig
    data = table.fillna(0.0)
    left = pd.Series(0.0, index=data.index)
    colors = plt.get_cmap("tab10")
    for i, part in enumerate(data.columns):
        if not data[part].any():
            continue
        ax.barh(data.index, data[part], left=left, color=colors(i % 10), label=part)
        left += data[part]
    ax.invert_yaxis()
    ax.set_xlabel("seconds (vLLM stamps its log in whole seconds: its stages are good to about 1 s)")
    ax.set_title(title)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.08), ncol=4, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig
