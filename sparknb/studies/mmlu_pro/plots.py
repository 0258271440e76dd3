"""Accuracy per category with its 95% Wilson interval; the compared run beside it."""

from __future__ import annotations

import pandas as pd

from .tables import table


def plot(df: pd.DataFrame, label: str, cmp_df: pd.DataFrame | None = None, cmp_label: str = ""):
    """Horizontal bars, one row per category, so fourteen category names stay readable."""
    import matplotlib.pyplot as plt

    runs = [(label, df)] + ([(cmp_label, cmp_df)] if cmp_df is not None else [])
    cats = sorted(df["category"].unique())
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(cats) + 1.5))
    height = 0.8 / len(runs)
    for i, (name, d) in enumerate(runs):
        t = table(d[d["question_id"].isin(df["question_id"])]).reindex(cats)
        y = [k + (i - (len(runs) - 1) / 2) * height for k in range(len(cats))]
        ax.barh(y, t["accuracy %"], height=height, label=name, alpha=0.8,
                xerr=[t["accuracy %"] - t["95% low"], t["95% high"] - t["accuracy %"]], capsize=2)
    ax.set_yticks(range(len(cats)), cats)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("accuracy % (95% Wilson interval)")
    ax.set_title(f"Accuracy per category: {label}" + (f" against {cmp_label}" if cmp_df is not None else ""))
    ax.grid(axis="x", alpha=0.3)
    if len(runs) > 1:
        ax.legend()
    fig.tight_layout()
    return fig
