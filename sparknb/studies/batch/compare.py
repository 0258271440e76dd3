"""This run against another on the same questions: the paired comparison (McNemar's exact test, Bonett and
Price's interval for the paired difference), and the two batches' speed, each from its own run's figures.

Two runs on the same questions are paired: only the questions where they disagree say anything about the
difference, and an interval for independent samples would be wrong. The pairing is kept question by
question (`Pair`, in this run's order), so that a comparison can also be read as the answers came in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import ClassVar

import pandas as pd

from ...errors import DataError
from ...runs.run import PastRun
from ...verdicts import stats
from .ask import Batch
from .traps import Traps


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
class Pair:
    """One question, graded in both runs: the unit of every paired comparison."""

    id: str
    a: bool  # right in this run
    b: bool  # right in the other


def paired(ours: Mapping[str, bool], theirs: Mapping[str, bool], other: str, unit: str = "questions") -> list[Pair]:
    """Every question of this run beside the other run's verdict on it, in this run's order; a question the other
    did not answer is refused, as the comparison would not be paired."""
    missing = [q for q in ours if q not in theirs]
    if missing:
        raise DataError(f"{len(missing)} graded {unit} of this run have no graded answer in {other} (e.g. "
                        f"{missing[0]}); the comparison would not be paired.")
    return [Pair(q, bool(right), bool(theirs[q])) for q, right in ours.items()]


@dataclass(frozen=True)
class Paired:
    """This run (A) against another (B) on the same questions; a study's subclass names its unit and rate."""

    a: str
    b: str
    pairs: stats.Pairs
    rate_a: stats.Interval
    rate_b: stats.Interval
    difference: stats.Interval
    test: stats.Test
    half_width: float
    needed: int
    b_traps: Traps
    settings_differ: dict
    speed: BatchSpeed | None = None
    per_question: tuple[Pair, ...] = ()

    UNIT: ClassVar[str] = "questions"
    FIRST: ClassVar[str] = ""  # which answers were paired, where a question had several
    RATE: ClassVar[str] = ""  # the rate's name before a figure, e.g. "pass@1 "
    VERDICTS: ClassVar[tuple[str, str]] = ("right", "wrong")
    WON: ClassVar[str] = "got right"  # what one run did that the other did not
    KEYS: ClassVar[tuple[str, str, str]] = ("accuracy_a", "accuracy_b", "questions_needed")

    @classmethod
    def of(cls, pairs: list[Pair], label: str, other: PastRun, half_width: float, b_traps: Traps,
           differ: dict, speed: BatchSpeed | None, **more) -> Paired:
        """The comparison of the paired verdicts, the other run named by its label (and id, where the labels agree)."""
        a, b = [p.a for p in pairs], [p.b for p in pairs]
        counts = stats.Pairs.of(a, b)
        b_label = other.label if other.label != label else f"{other.label} ({other.id})"
        return cls(label, b_label, counts, stats.accuracy(sum(a), len(a)), stats.accuracy(sum(b), len(b)),
                   stats.paired_difference(counts), stats.mcnemar(counts), half_width,
                   stats.questions_needed(counts, half_width), b_traps, differ, speed, tuple(pairs), **more)

    def table(self) -> pd.DataFrame:
        right, wrong = self.VERDICTS
        return pd.DataFrame(self.pairs.table(), index=[f"{self.a} {right}", f"{self.a} {wrong}"],
                            columns=[f"{self.b} {right}", f"{self.b} {wrong}"])

    @property
    def beyond_data(self) -> bool:
        """A narrower interval would need more questions than the data holds."""
        return False

    def beyond(self) -> str:
        """What the study adds to the questions a narrower interval would need."""
        return ""

    def as_dict(self) -> dict:
        rate_a, rate_b, needed = self.KEYS
        return {"a": self.a, "b": self.b, "pairs": self.pairs.as_dict(), rate_a: self.rate_a.as_dict(),
                rate_b: self.rate_b.as_dict(), "difference": self.difference.as_dict(),
                "mcnemar": self.test.as_dict(), "half_width": self.half_width, needed: self.needed,
                "b_traps": self.b_traps.as_dict(), "settings_differ": self.settings_differ,
                "batch_speed": None if self.speed is None else self.speed.as_dict()}


def needed_text(c: Paired) -> str:
    h = f"+/-{100 * c.half_width:.1f} points"
    if not c.pairs.discordant:
        return (f"the two never disagreed, so how many {c.UNIT} would narrow the interval to {h} cannot be "
                "estimated from this run")
    return (f"narrowing the interval to {h} would take about {c.needed} {c.UNIT}, if the two disagree as often as "
            "here" + c.beyond())


def comparison_markdown(c: Paired) -> str:
    d = c.difference
    return (f"Rows: {c.a}; columns: {c.b}; {c.pairs.n} {c.UNIT}{c.FIRST}.\n\n"
            f"- {c.RATE}{c.a}: {c.rate_a.points()}; {c.b}: {c.rate_b.points()}\n"
            f"- difference ({c.a} minus {c.b}): **{d.points(signed=True)}**, 95%, {d.method}\n"
            f"- McNemar's exact test on the {c.pairs.discordant} discordant {c.UNIT}: p = {c.test.pvalue:.3g}\n"
            f"- {needed_text(c)}")
