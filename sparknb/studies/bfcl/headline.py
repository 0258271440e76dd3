"""BFCL's rows of the comparison: the score under BFCL's rules per serving, and the paired difference on the tasks
both answered (the row that decides; with two servings of one model in different formats, the format's effect),
from a sequential run's own sequence where it was asked so; beside them the cost of a solved task (context)."""

from __future__ import annotations

from ...verdicts.verdict import Row, Runs
from ..batch.headline import graded_rows
from .plan import NOTEBOOK, Plan
from .scores import cost, frame, right

HALF_WIDTH = 0.05  # +/- 5 points


def headline_rows(runs: Runs) -> list[Row]:
    mine = {s: r for s, r in runs.of(NOTEBOOK).items() if right(r)}
    if runs.base not in mine:
        return []
    rights = {s: right(r) for s, r in mine.items()}
    formats = ", ".join(f"{s} {r.settings.get('format')}" for s, r in mine.items())
    rows = graded_rows("BFCL", ("BFCL score % (all answered tasks)", "BFCL score"), rights, mine, runs.base, Plan,
                       HALF_WIDTH, interval=" (Wilson)")
    costs = {s: cost(frame(r.records)).seconds for s, r in mine.items()}
    said = "; ".join(f"{s} {c.estimate:.2f} s [{c.low:.2f}, {c.high:.2f}]" if c else f"{s} unknown (none solved)"
                     for s, c in costs.items())
    return rows + [Row("BFCL", "seconds per task solved", {s: c.estimate if c else None for s, c in costs.items()},
                       {s: len(v) for s, v in rights.items()}, role="context", better="lower",
                       note=f"formats: {formats}; all answers' seconds over the tasks solved (95% bootstrap): {said}")]
