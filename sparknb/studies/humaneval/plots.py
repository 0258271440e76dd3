"""How the first answers ended, per run: a stacked bar by reason, with pass@1 and its 95% Wilson interval."""

from __future__ import annotations

import pandas as pd

from .grading import REASONS
from .scores import pass_at_1


def plot(df: pd.DataFrame, label: str, other: pd.DataFrame | None = None, other_label: str = ""):
    """One bar per run, on this run's problems: every reason a colour, passed first, so the pass share reads at a glance."""
    import matplotlib.pyplot as plt

    runs = [(label, df)] + ([(other_label, other[other["problem"].isin(df["problem"])])] if other is not None else [])
    fig, ax = plt.subplots(figsize=(8, 1.2 * len(runs) + 1.6))
    colours, named = plt.get_cmap("tab10"), set()
    for y, (name, d) in enumerate(runs):
        first = d[d["sample"] == 0]
        counts = first["reason"].value_counts()
        left = 0.0
        for i, reason in enumerate(REASONS):
            share = 100 * counts.get(reason, 0) / max(1, len(first))
            if share:
                ax.barh(y, share, left=left, color=colours(i), label=None if reason in named else reason)
                named.add(reason)
            left += share
        ci = pass_at_1(d)
        below, above = max(0.0, ci.estimate - ci.low), max(0.0, ci.high - ci.estimate)  # Wilson's ends can be off by 1e-17
        ax.errorbar(100 * ci.estimate, y, xerr=[[100 * below], [100 * above]],
                    fmt="|", color="black", capsize=4)
    ax.set_yticks(range(len(runs)), [name for name, _ in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of problems (first answers); black: pass@1 with its 95% Wilson interval")
    ax.set_title(f"How the answers ended: {label}" + (f" against {other_label}" if other is not None else ""))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.35), ncol=4, fontsize="small", frameon=False)
    fig.tight_layout()
    return fig
