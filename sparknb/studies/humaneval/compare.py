"""This run against another on the same problems: paired pass@1 (McNemar, Bonett-Price), and the two batches' speed.

HumanEval has 164 problems and no more: when a narrower interval would need more problems than the
data holds, the comparison says so instead of suggesting a run that cannot be made.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ...errors import DataError
from ..batch.ask import Batch
from ..batch.compare import Paired, batch_speed, comparison_markdown, needed_text, paired
from .grading import first_answers, frame, passes
from .plan import Work
from .traps import traps

__all__ = ["Comparison", "compare", "comparison_markdown", "needed_text"]


@dataclass(frozen=True)
class Comparison(Paired):
    """This run (A) against another (B) on the same problems, first answers only."""

    available: int = 0  # problems the data holds: no run can ask more
    dataset: str = ""

    UNIT = "problems"
    FIRST = " (first answers)"
    RATE = "pass@1 "
    VERDICTS = ("passed", "failed")
    WON = "passed"
    KEYS = ("pass_at_1_a", "pass_at_1_b", "problems_needed")

    @property
    def beyond_data(self) -> bool:
        """A narrower interval would need more problems than the data holds (judged only where the two disagreed)."""
        return self.pairs.discordant > 0 and self.needed > self.available

    def beyond(self) -> str:
        if self.beyond_data:
            return (f"; {self.dataset} has only {self.available}, so no run of it can: a narrower interval needs a "
                    "larger benchmark, not another run of this one")
        if self.pairs.n < self.available:
            return f" ({self.dataset} has {self.available}; this comparison used {self.pairs.n})"
        return ""

    def as_dict(self) -> dict:
        return super().as_dict() | {"problems_available": self.available, "beyond_data": self.beyond_data}


def compare(df: pd.DataFrame, work: Work, label: str, batch: Batch | None = None) -> Comparison:
    """The paired comparison with the run named by compare_with, on the problems both graded."""
    other = work.other
    if other is None:
        raise DataError("compare needs compare_with: the folder or run id of another humaneval run.")
    pairs = paired(first_answers(df), passes(other.records), other.id, "problem(s)")
    return Comparison.of(pairs, label, other, work.plan.target_half_width,
                         traps(other.records, tuple(other.settings.get("stop") or ()), work.plan.trap_share),
                         work.plan.differences(work.settings(), other.settings), batch_speed(batch, other),
                         available=work.dataset.size, dataset=work.dataset.name)
