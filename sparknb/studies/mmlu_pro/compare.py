"""This run against another on the same questions: paired accuracy, and the two batches' speed, each from its own numbers."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import pandas as pd

from ... import stats
from ...errors import DataError
from ...run import PastRun
from .grading import frame
from .traps import Traps, traps
from .measure import Batch
from .plan import Work



@dataclass(frozen=True)
class BatchSpeed:
    """The batch tok/s of both runs and their ratio, read from each run's own figures, never typed in."""

    a_tokens_per_s: float | None
    b_tokens_per_s: float | None
    a_tokens: int | None  # generated tokens: the volumes differ, and a longer batch keeps full concurrency longer
    b_tokens: int | None
    a_asked: int
    b_asked: int | None
    a_concurrency: int
    b_concurrency: int | None
    ratio: float | None  # this run's batch tok/s over the other's; None where either is unknown

    def as_dict(self) -> dict:
        return asdict(self)


def batch_speed(batch: Batch | None, other: PastRun) -> BatchSpeed | None:
    """None where either run has no batch figures (this one asked nothing, or the other has no summary)."""
    theirs = (other.summary or {}).get("batch")
    if batch is None or not batch.asked or not theirs:
        return None
    a, b = batch.tokens_per_s, theirs.get("tokens_per_s")
    return BatchSpeed(a, b, batch.completion_tokens, theirs.get("completion_tokens"), batch.asked, theirs.get("asked"),
                      batch.concurrency, theirs.get("concurrency"), a / b if a and b else None)


@dataclass(frozen=True)
class Comparison:
    """This run (A) against another (B) on the same questions."""

    a: str
    b: str
    pairs: stats.Pairs
    accuracy_a: stats.Interval
    accuracy_b: stats.Interval
    difference: stats.Interval
    test: stats.Test
    half_width: float
    needed: int
    b_traps: Traps
    settings_differ: dict
    speed: BatchSpeed | None = None

    def table(self) -> pd.DataFrame:
        t = self.pairs.table()
        return pd.DataFrame(t, index=[f"{self.a} right", f"{self.a} wrong"],
                            columns=[f"{self.b} right", f"{self.b} wrong"])

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "pairs": self.pairs.as_dict(), "accuracy_a": self.accuracy_a.as_dict(),
                "accuracy_b": self.accuracy_b.as_dict(), "difference": self.difference.as_dict(),
                "mcnemar": self.test.as_dict(), "half_width": self.half_width, "questions_needed": self.needed,
                "b_traps": self.b_traps.as_dict(), "settings_differ": self.settings_differ,
                "batch_speed": None if self.speed is None else self.speed.as_dict()}


def compare(df: pd.DataFrame, work: Work, label: str, batch: Batch | None = None) -> Comparison:
    """The paired comparison with the run named by compare_with, both graded by the same code."""
    other = work.other
    if other is None:
        raise DataError("compare needs compare_with: the folder or run id of another mmlu_pro run.")
    stop_b = tuple(other.settings.get("stop") or ())
    theirs = frame(other.records, stop_b).set_index("question_id")
    ours = df.set_index("question_id")
    common = [q for q in ours.index if q in theirs.index]
    if len(common) != len(ours):
        raise DataError(f"{len(ours) - len(common)} answered question(s) of this run have no answer in "
                        f"{other.id}; the comparison would not be paired.")
    a = ours.loc[common, "correct"].astype(bool).tolist()
    b = theirs.loc[common, "correct"].astype(bool).tolist()
    pairs = stats.Pairs.of(a, b)
    differ = work.plan.differences(work.settings(), other.settings)
    b_label = other.label if other.label != label else f"{other.label} ({other.id})"
    return Comparison(label, b_label, pairs, stats.accuracy(sum(a), len(a)), stats.accuracy(sum(b), len(b)),
                      stats.paired_difference(pairs), stats.mcnemar(pairs), work.plan.target_half_width,
                      stats.questions_needed(pairs, work.plan.target_half_width),
                      traps(other.records, stop_b, work.plan.trap_share), differ, batch_speed(batch, other))


def needed_text(c: Comparison) -> str:
    if not c.pairs.discordant:
        return ("the two never disagreed, so how many questions would narrow the interval to "
                f"+/-{100 * c.half_width:.1f} points cannot be estimated from this run")
    return (f"narrowing the interval to +/-{100 * c.half_width:.1f} points would take about {c.needed} questions, "
            "if the two disagree as often as here")


def comparison_markdown(c: Comparison) -> str:
    d = c.difference
    return (f"Rows: {c.a}; columns: {c.b}; {c.pairs.n} questions.\n\n"
            f"- {c.a}: {c.accuracy_a.points()}; {c.b}: {c.accuracy_b.points()}\n"
            f"- difference ({c.a} minus {c.b}): **{d.points(signed=True)}**, 95%, {d.method}\n"
            f"- McNemar's exact test on the {c.pairs.discordant} discordant questions: p = {c.test.pvalue:.3g}\n"
            f"- {needed_text(c)}")
