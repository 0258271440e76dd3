"""HumanEval's rows of the comparison: pass@1 per model, and the paired difference on the problems both answered
(the row that decides), with what a narrower interval would need, and when that is more than HumanEval holds."""

from __future__ import annotations

from ...verdicts.verdict import Row, Runs
from ..batch.headline import graded_rows
from .grading import passes
from .plan import Plan

HALF_WIDTH = 0.05  # +/- 5 points: a reader's usual wish, and already near what 164 problems allow


def headline_rows(runs: Runs) -> list[Row]:
    mine = runs.of("humaneval")
    verdicts = {s: passes(r.records) for s, r in mine.items()}
    verdicts = {s: v for s, v in verdicts.items() if v}
    if runs.base not in verdicts:
        return []
    return graded_rows("humaneval", ("pass@1 % (first answers)", "pass@1"), verdicts, mine, runs.base, Plan,
                       HALF_WIDTH, interval=" (Wilson)", holds="HumanEval")
