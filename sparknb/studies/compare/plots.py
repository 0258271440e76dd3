"""Every ratio of the headline on one chart: where each model is ahead, and how sure the runs are."""

from __future__ import annotations

import math

from .headline import Headline


def plot(h: Headline):
    """One point per figure and model, its 95% interval as a bar, 1 as the line of no difference.

    A Figure of its own, outside pyplot: the run browser draws it inside a widget's callback, and
    JupyterLab hands other widget messages to a second thread of the kernel, after each of which the
    inline backend draws and closes every pyplot figure: that thread drew this one half-built, at the
    same time as the callback, and the picture came out blank or cut. Shown with report.picture.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, NullFormatter

    items = [(f"{r.study}: {r.measure}", m, r.ratios[m]) for r in h.rows if r.kind == "ratio"
             for m in h.models[1:] if m in r.ratios]
    fig = Figure(figsize=(8, 0.35 * max(len(items), 3) + 1.5))
    ax = fig.subplots()
    if not items:
        ax.text(0.5, 0.5, "no ratio to show: the runs cover one model only", ha="center", va="center")
        ax.set_axis_off()
        return fig
    for y, (label, model, ratio) in enumerate(items):
        color = f"C{h.models.index(model) - 1}"
        if not math.isnan(ratio.low):
            ax.plot([ratio.low, ratio.high], [y, y], color=color, lw=3, alpha=0.5)
        ax.plot(ratio.estimate, y, "o", color=color)
    ax.axvline(1, color="grey", ls=":")
    ax.set_yticks(range(len(items)), [f"{label} ({model})" for label, model, _ in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    # Plain tick labels (0.5, 1, 2): a ratio reads as a number, not as a power of ten.
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"ratio to {h.base} (95% interval)")
    ax.set_title(f"Each model against {h.base}")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
