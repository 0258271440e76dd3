"""Every ratio of the headline on one chart, turned so that better is always to the right of 1."""

from __future__ import annotations

import math

from ...verdict import decide
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
    return [_sequence(r.study, r.figure, s, h.base, r.sequences[s]) for r in h.rows for s in h.subjects[1:]
            if s in r.sequences]


def _sequence(study: str, figure: str, subject: str, base: str, seq: dict):
    from matplotlib.figure import Figure

    n, low, high, estimate = (list(x) for x in zip(*seq["path"])) if seq["path"] else ([], [], [], [])
    margin = 100 * seq["design"]["margin"]
    fig = Figure(figsize=(8.5, 3.6))
    ax = fig.subplots()
    ax.axhspan(-margin, margin, color="grey", alpha=0.15, label=f"+/-{margin:.0f}-point margin")
    ax.axhline(0, color="grey", ls=":")
    ax.fill_between(n, [100 * x for x in low], [100 * x for x in high], color="C0", alpha=0.3,
                    label="95% confidence sequence")
    ax.plot(n, [100 * x for x in estimate], color="C0", lw=1, label="difference so far")
    if seq.get("stopped_at"):
        ax.axvline(seq["stopped_at"], color="C3", ls="--", label=f"stopped at {seq['stopped_at']:,}: {seq['outcome']}")
    k = min(len(n) - 1, 20)  # the first answers' sequence spans +/-100 points: scale to where it has narrowed
    span = min(100.0, max([3 * margin] + ([100 * abs(low[k]), 100 * abs(high[k])] if n else [])))
    ax.set_ylim(-span, span)
    ax.set_xlabel("questions answered by both, in the first run's order")
    ax.set_ylabel(f"{subject} minus {base} (points)")
    ax.set_title(f"{study}: {figure}, sequential", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return fig
