"""MMLU-Pro's traps: answers cut by a stop string or at max_tokens, or without the answer line, and the answers
where grading the last match rather than the reference's first decides the grade."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..batch import rule_sets, traps as batch
from ..batch.traps import CUT_BY_STOP, HIT_MAX_TOKENS, LOOPED, examples_markdown, verdict_markdown
from .grading import NO_ANSWER_LINE, grade, is_answer
from .rule_sets import HARNESS

__all__ = ["Traps", "examples_markdown", "traps", "verdict_markdown"]


@dataclass(frozen=True)
class Traps(batch.Traps):
    """What the raw responses say about whether the scores can be believed."""

    unparsed: int = 0
    first_last_differ: int = 0  # answers whose first and last match name different letters
    differ_right_last: int = 0  # of those, right as graded here (last match)
    differ_right_first: int = 0  # of those, right as the reference scripts grade (first match)
    harness: dict = field(default_factory=dict)  # the answers graded under every rule set (rule_sets.HARNESS)

    def more(self) -> str:
        return f" {self.unparsed} answer(s) could not be parsed and count as wrong."

    def coda(self) -> str:
        return " " + self.extraction()

    def extraction(self) -> str:
        """Which match is graded, and how many answers that choice decides."""
        text = ("The LAST match of the answer pattern is graded (a reasoning model restates options before it "
                "concludes); the reference scripts take the FIRST \"answer is (X)\". ")
        if not self.first_last_differ:
            return text + "In no answer do the first and the last match differ, so here the choice changes nothing."
        return text + (f"In {self.first_last_differ} answer(s) they differ: {self.differ_right_last} of those are "
                       f"right as graded here, {self.differ_right_first} would be right graded by the first match.")

    def title(self, example: dict) -> str:
        return f"question {example['question_id']} ({example['category']})"


def traps(records: Sequence[dict], stop: Sequence[str] = (), share_limit: float = 0.05, n_examples: int = 3) -> Traps:
    """Count answers cut by a stop string, cut at max_tokens, or missing the answer line; keep raw examples;
    count the answers whose first and last match differ."""
    count = batch.Count({CUT_BY_STOP: 0, HIT_MAX_TOKENS: 0, LOOPED: 0, NO_ANSWER_LINE: 0}, n_examples)
    unparsed = differ = right_last = right_first = 0
    answers = [r for r in records if is_answer(r)]
    for r in answers:
        g = grade(r["answer"], r.get("text", ""), r.get("finish_reason"), stop)
        count.add(r, g.flag, question_id=str(r["question_id"]), category=r["category"])
        unparsed += g.pred is None
        if g.first != g.pred:
            differ += 1
            right_last += g.pred == r["answer"]
            right_first += g.first == r["answer"]
    return Traps(count.n, count.counts, share_limit, tuple(stop), count.examples, unparsed, differ, right_last,
                 right_first, rule_sets.effect(answers, HARNESS))
