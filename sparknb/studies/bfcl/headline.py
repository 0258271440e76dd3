"""BFCL's rows of the comparison: the score under BFCL's rules per serving, and the paired difference on the tasks
both answered (the row that decides; with two servings of one model in different formats, the format's effect),
from a sequential run's own sequence where it was asked so; beside them the cost of a solved task, in seconds and
in generated tokens (context: batch.cost.rows)."""

from __future__ import annotations

from ...verdicts.verdict import Row, Runs
from ..batch.cost import rows as cost_rows
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
    costs = {s: cost(frame(r.records)) for s, r in mine.items()}
    return rows + cost_rows("BFCL", "task", costs, {s: len(v) for s, v in rights.items()}, f"formats: {formats}")
