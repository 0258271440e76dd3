"""This run against another on the same questions: paired accuracy, both graded afresh by the same code, and the
two batches' speed, each from its own numbers."""

from __future__ import annotations

import pandas as pd

from ...errors import DataError
from ..batch.ask import Batch
from ..batch.compare import BatchSpeed, Paired, batch_speed, comparison_markdown, needed_text, paired
from .grading import frame
from .plan import Work
from .traps import traps

__all__ = ["BatchSpeed", "Comparison", "batch_speed", "compare", "comparison_markdown", "needed_text"]

Comparison = Paired  # the batch's paired comparison, in its own words: questions, right and wrong


def compare(df: pd.DataFrame, work: Work, label: str, batch: Batch | None = None) -> Comparison:
    """The paired comparison with the run named by compare_with, both graded by the same code."""
    other = work.other
    if other is None:
        raise DataError("compare needs compare_with: the folder or run id of another mmlu_pro run.")
    stop_b = tuple(other.settings.get("stop") or ())
    theirs = frame(other.records, stop_b)
    pairs = paired(dict(zip(df["question_id"], df["correct"])), dict(zip(theirs["question_id"], theirs["correct"])),
                   other.id, "question(s)")
    return Comparison.of(pairs, label, other, work.plan.target_half_width,
                         traps(other.records, stop_b, work.plan.trap_share),
                         work.plan.differences(work.settings(), other.settings), batch_speed(batch, other))
