"""HumanEval's traps: answers cut by a stop string or at max_tokens, without code, or suspect passes, as recorded when graded."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from ..batch import rule_sets, traps as batch
from ..batch.traps import CUT_BY_STOP, HIT_MAX_TOKENS, LOOPED, examples_markdown, verdict_markdown
from .grading import NO_CODE, SUSPECT, is_graded
from .rule_sets import HARNESS, graded

__all__ = ["Traps", "examples_markdown", "traps", "verdict_markdown"]


@dataclass(frozen=True)
class Traps(batch.Traps):
    """What the raw answers say about whether the score can be believed."""

    cut_after: int = 0  # completion-style answers cut after generation at a classic stop string
    harness: dict = field(default_factory=dict)  # the answers graded under every rule set (rule_sets.HARNESS)
    completion: bool = False  # asked as completions (style: completion)

    NOTHING = "No answer was graded, so nothing can be judged."
    SCORE = "score below is"
    LACKS = "have no code"
    ENDS_BEFORE = "their code"
    STOP_CUTS = "and inside a chat answer's code block"

    def why(self) -> str:
        base = super().why()
        if base or not (self.counts.get(NO_CODE) or self.counts.get(SUSPECT)):
            return base
        if not self.counts.get(NO_CODE):
            return " Read the suspect passes in the table of failures below."
        return " Answers without a fenced Python block: read the examples below; the model may answer in prose."

    def cut_advice(self) -> str:
        """A completion runs to a classic stop string or max_tokens: SmolLM2's finished their function and went on
        in prose to max_tokens, and were told to raise it."""
        if not self.completion:
            return super().cut_advice()
        return (" A completion runs until a classic stop string or max_tokens, so one that finished its function "
                "and went on in prose ran to max_tokens too, and more tokens would not help it: read the examples "
                "below, and raise max_tokens only where the code itself was cut.")

    def more(self) -> str:
        n = self.counts.get(SUSPECT, 0)
        return (f" {n} pass(es) went through a return value the checks cannot trust (a type the reference "
                "solution never returns, or no return at all): suspect, and shown "
                "with the failures below." if n else "")

    def coda(self) -> str:
        after = (f" {self.cut_after} completion(s) were cut after generation at a classic stop string, as the "
                 "original benchmark cuts them." if self.cut_after else "")
        return after + " An answer without code counts as failed, apart from wrong ones."

    def title(self, example: dict) -> str:
        return example["problem"]


def traps(records: Sequence[dict], stop: Sequence[str] = (), share_limit: float = 0.05, n_examples: int = 3) -> Traps:
    """Count the answers cut by a stop string, cut at max_tokens, looping, without code, or passed suspectly; keep raw
    examples."""
    count = batch.Count({CUT_BY_STOP: 0, HIT_MAX_TOKENS: 0, LOOPED: 0, NO_CODE: 0, SUSPECT: 0}, n_examples)
    cut_after = 0
    answers = list(filter(is_graded, records))
    for r in answers:
        cut_after += "cut after generation" in (r.get("how") or "")
        count.add(r, r.get("flag") or (SUSPECT if r.get("suspect") else None), problem=str(r["problem"]))
    completion = any(str(r.get("how") or "").startswith(("completion", "an empty completion")) for r in answers)
    return Traps(count.n, count.counts, share_limit, tuple(stop), count.examples, cut_after,
                 rule_sets.effect(graded(answers), HARNESS), completion)
