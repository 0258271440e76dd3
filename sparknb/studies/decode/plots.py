"""Decode tok/s against context length, with the median's interval, the spread and the bandwidth limit."""

from __future__ import annotations

import pandas as pd

from ...runs.report import length_axis


def plot(table: pd.DataFrame, study):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    x = table.index.to_numpy()
    ax.plot(x, table["decode tok/s (median)"], "o-", label=f"{study.model.name}, median")
    ax.fill_between(x, table["min"].astype(float), table["max"].astype(float), alpha=0.2, label="min to max")
    if table["limit tok/s"].notna().all():
        ax.plot(x, table["limit tok/s"], "k--", label="bandwidth limit")
    length_axis(ax, x)
    ax.set_ylabel("decode tokens per second")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Decode speed against context: {study.model.name} on {study.hardware.name}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
