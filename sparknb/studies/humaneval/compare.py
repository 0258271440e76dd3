"""This run against another on the same problems: paired pass@1 (McNemar, Bonett-Price), and the two batches' speed.

HumanEval has 164 problems and no more: when a narrower interval would need more problems than the
data holds, the comparison says so instead of suggesting a run that cannot be made.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import stats
from ...errors import DataError
from ..mmlu_pro.compare import BatchSpeed, batch_speed
from ..mmlu_pro.measure import Batch
from .grading import frame
from .traps import Traps, traps
from .plan import Work



def passes(records: list[dict]) -> dict[str, bool]:
    """Each problem's verdict on its first answer (sample 0), as recorded: the unit of every paired comparison."""
    df = frame(records)
    first = df[df["sample"] == 0]
    return dict(zip(first["problem"], first["passed"].astype(bool)))


@dataclass(frozen=True)
class Comparison:
    """This run (A) against another (B) on the same problems, first answers only."""

    a: str
    b: str
    pairs: stats.Pairs
    pass_a: stats.Interval
    pass_b: stats.Interval
    difference: stats.Interval
    test: stats.Test
    half_width: float
    needed: int
    available: int  # problems the data holds: no run can ask more
    dataset: str
    b_traps: Traps
    settings_differ: dict
    speed: BatchSpeed | None = None

    @property
    def beyond_data(self) -> bool:
        """A narrower interval would need more problems than the data holds (judged only where the two disagreed)."""
        return self.pairs.discordant > 0 and self.needed > self.available

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.pairs.table(), index=[f"{self.a} passed", f"{self.a} failed"],
                            columns=[f"{self.b} passed", f"{self.b} failed"])

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "pairs": self.pairs.as_dict(), "pass_at_1_a": self.pass_a.as_dict(),
                "pass_at_1_b": self.pass_b.as_dict(), "difference": self.difference.as_dict(),
                "mcnemar": self.test.as_dict(), "half_width": self.half_width, "problems_needed": self.needed,
                "problems_available": self.available, "beyond_data": self.beyond_data,
                "b_traps": self.b_traps.as_dict(), "settings_differ": self.settings_differ,
                "batch_speed": None if self.speed is None else self.speed.as_dict()}


def compare(df: pd.DataFrame, work: Work, label: str, batch: Batch | None = None) -> Comparison:
    """The paired comparison with the run named by compare_with, on the problems both graded."""
    other = work.other
    if other is None:
        raise DataError("compare needs compare_with: the folder or run id of another humaneval run.")
    first = df[df["sample"] == 0].set_index("problem")["passed"].astype(bool)
    theirs = passes(other.records)
    missing = [p for p in first.index if p not in theirs]
    if missing:
        raise DataError(f"{len(missing)} graded problem(s) of this run have no graded answer in {other.id} (e.g. "
                        f"{missing[0]}); the comparison would not be paired.")
    a, b = first.tolist(), [theirs[p] for p in first.index]
    pairs = stats.Pairs.of(a, b)
    differ = work.plan.differences(work.settings(), other.settings)
    b_label = other.label if other.label != label else f"{other.label} ({other.id})"
    return Comparison(label, b_label, pairs, stats.accuracy(sum(a), len(a)), stats.accuracy(sum(b), len(b)),
                      stats.paired_difference(pairs), stats.mcnemar(pairs), work.plan.target_half_width,
                      stats.questions_needed(pairs, work.plan.target_half_width), work.dataset.size, work.dataset.name,
                      traps(other.records, tuple(other.settings.get("stop") or ()), work.plan.trap_share), differ,
                      batch_speed(batch, other))


def needed_text(c: Comparison) -> str:
    h = f"+/-{100 * c.half_width:.1f} points"
    if not c.pairs.discordant:
        return (f"the two never disagreed, so how many problems would narrow the interval to {h} cannot be "
                "estimated from this run")
    text = f"narrowing the interval to {h} would take about {c.needed} problems, if the two disagree as often as here"
    if c.beyond_data:
        return text + (f"; {c.dataset} has only {c.available}, so no run of it can: a narrower interval needs a larger "
                       "benchmark, not another run of this one")
    if c.pairs.n < c.available:
        return text + f" ({c.dataset} has {c.available}; this comparison used {c.pairs.n})"
    return text


def comparison_markdown(c: Comparison) -> str:
    d = c.difference
    return (f"Rows: {c.a}; columns: {c.b}; {c.pairs.n} problems, first answers.\n\n"
            f"- pass@1 {c.a}: {c.pass_a.points()}; {c.b}: {c.pass_b.points()}\n"
            f"- difference ({c.a} minus {c.b}): **{d.points(signed=True)}**, 95%, {d.method}\n"
            f"- McNemar's exact test on the {c.pairs.discordant} discordant problems: p = {c.test.pvalue:.3g}\n"
            f"- {needed_text(c)}")
