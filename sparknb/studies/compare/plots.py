"""Every ratio of the headline on one chart, turned so that better is always to the right of 1."""

from __future__ import annotations

import math

from ...verdicts.verdict import decide
from ..batch import sequence
from .headline import Headline

STYLE = {"wins": ("o", 1.0), "cannot tell": ("o", 1.0), "caveated": ("o", 0.35), "not comparable": ("x", 0.35),
         "trap": ("x", 0.35)}


def plot(h: Headline, title: str = ""):
    """One point per figure and subject, its 95% interval as a bar, 1 as the line of no difference.

    A figure where lower is better (a time) is shown inverted (the base's over the subject's), so that
    right of 1 always means the subject is better; the label says so. Filled points could decide; faded
    ones are caveated, not comparable, or the short-prompt trap.

    A Figure of its own, outside pyplot: the run browser draws it inside a widget's callback, and
    JupyterLab hands other widget messages to a second thread of the kernel, after each of which the
    inline backend draws and closes every pyplot figure: that thread drew this one half-built, at the
    same time as the callback, and the picture came out blank or cut. Shown with report.picture.
    """
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    items = []
    for r in h.rows:
        if r.kind != "ratio" or r.better == "none":
            continue
        for s in h.subjects[1:]:
            ratio = r.ratios.get(s)
            if ratio is None or not ratio.estimate or ratio.estimate <= 0:
                continue
            flip = r.better == "lower"
            est, low, high = ((1 / ratio.estimate, 1 / ratio.high, 1 / ratio.low) if flip and not math.isnan(ratio.low)
                              else (1 / ratio.estimate, math.nan, math.nan) if flip
                              else (ratio.estimate, ratio.low, ratio.high))
            label = f"{r.study}: {r.figure}" + (" (inverted: lower is better)" if flip else "")
            items.append((label, s, est, low, high, decide(r, s, h.base).outcome))
    fig = Figure(figsize=(8.5, 0.35 * max(len(items), 3) + 1.8))
    ax = fig.subplots()
    if not items:
        ax.text(0.5, 0.5, "no ratio to show: the runs cover one subject only", ha="center", va="center")
        ax.set_axis_off()
        return fig
    for y, (_, subject, est, low, high, outcome) in enumerate(items):
        color = f"C{h.subjects.index(subject) - 1}"
        marker, alpha = STYLE.get(outcome, ("o", 1.0))
        if not math.isnan(low):
            ax.plot([low, high], [y, y], color=color, lw=3, alpha=0.5 * alpha)
        ax.plot(est, y, marker, color=color, alpha=alpha)
    ax.axvline(1, color="grey", ls=":")
    ax.set_yticks(range(len(items)), [f"{label} ({s})" for label, s, *_ in items], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    # Plain tick labels (0.5, 1, 2): a ratio reads as a number, not as a power of ten.
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"<- {h.base} better    advantage over {h.base} (95% interval)    subject better ->")
    ax.set_title((f"{title}: " if title else "") + f"each against {h.base}; faded: caveated or the trap, never deciding")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig


def sequence_plots(h: Headline) -> list:
    """One chart per sequentially decided comparison: the confidence sequence narrowing as answers arrive (valid at
    every count, so it may be read at any of them), the margin band set before the run, and where it stopped."""
    return [sequence.plot(r.sequences[s], f"{r.study}: {r.figure}", s, h.base) for r in h.rows
            for s in h.subjects[1:] if s in r.sequences]
