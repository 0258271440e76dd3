"""The overall accuracy, labelled with what it is an average of: an even draw is not the published score."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...errors import DataError
from ...verdicts import stats
from .plan import Work
from .traps import Traps


@dataclass(frozen=True)
class Scores:
    headline: stats.Interval
    headline_label: str
    other: stats.Interval | None
    other_label: str | None
    n: int
    unparsed: int


def per_category(df: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """(right, asked) for every category answered."""
    return {c: (int(g["correct"].sum()), len(g)) for c, g in df.groupby("category")}


def scores(df: pd.DataFrame, work: Work) -> Scores:
    """Macro for an even draw (with the micro reweighting beside it), micro for the whole split, plain for a suite."""
    if df.empty:
        raise DataError("No answer was received; there is nothing to score.")
    counts = per_category(df)
    unparsed = int(df["pred"].isna().sum())
    if work.is_suite:
        return Scores(stats.accuracy(int(df["correct"].sum()), len(df)), f"accuracy on {work.dataset.name}",
                      None, None, len(df), unparsed)
    sizes = work.dataset.sizes()
    macro = stats.stratified(counts, {c: 1.0 for c in counts})
    micro = stats.stratified(counts, {c: sizes[c] for c in counts})
    if work.plan.per_category:
        return Scores(macro, f"macro average of an even draw ({work.plan.per_category} per category)",
                      micro, "micro average, reweighted to the category sizes of the full test set", len(df), unparsed)
    pooled = stats.accuracy(int(df["correct"].sum()), len(df))
    return Scores(pooled, "micro average over the whole test split (the published kind)",
                  macro, "macro average (every category weighted alike)", len(df), unparsed)


def scores_markdown(s: Scores | None, t: Traps) -> str:
    if s is None:
        return "No answer was received: there is nothing to score."
    mark = "**SUSPECT** (see the check above): " if t.tripped else ""
    text = (f"{mark}**{s.headline.points()}**: the {s.headline_label}, {s.n} questions, "
            f"95% interval ({s.headline.method}).")
    if s.other is not None:
        text += f"\n\n{mark}{s.other.points()}: the {s.other_label}."
    return text + f"\n\n{s.unparsed} answer(s) could not be parsed and count as wrong."
