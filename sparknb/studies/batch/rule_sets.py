"""Grading rule sets, named: one recorded answer graded as each harness of the field would grade it.

A published MMLU-Pro score is a model under some harness's rules, and the rules move the score (seed 000: a
strong model scored 13.3% under lm-evaluation-harness, where its stop string fired inside the reasoning, and
86.7% under sparknb's). A run records each answer once, asked without a stop string, and grades it under:

- `lm-eval`: lm-evaluation-harness's `mmlu_pro` as it is: the text cut at its stop string `Question:` (what the
  server would have returned had the string been sent; inside a reasoning model's thinking it leaves no answer),
  the FIRST `answer is \\(?([ABCDEFGHIJ])\\)?`, no match wrong;
- `reference`: MMLU-Pro's authors' evaluate_from_api.py: no stop string, the first `answer is (X)`, else the first
  line's `Answer: X`, else the last lone letter, else a random guess (seeded per question here; theirs draws
  from one sequence seeded 12345, so which guesses land depends on the order);
- `robust`, sparknb's own: no stop string, the LAST match of the first rule that matches, no match wrong, every
  answer cut at max_tokens counted.

`classify` names why two rule sets grade one answer differently, so a difference of scores is never
a bare number.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

LETTERS = "ABCDEFGHIJ"
LM_EVAL_STOP = ("Question:",)
ANSWER_IS = re.compile(r"answer is \(?([ABCDEFGHIJ])\)?")
ANSWER_COLON = re.compile(r".*[aA]nswer:\s*([A-J])")
LONE_LETTER = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.S)


@dataclass(frozen=True)
class Graded:
    """One answer under one rule set."""

    letter: str | None  # None: invalid (wrong)
    how: str  # which rule decided, or why there is no letter
    correct: bool


@dataclass(frozen=True)
class RuleSet:
    name: str
    follows: str  # whose rules, in words
    stop: tuple[str, ...]  # applied to the recorded answer as the server would have applied them
    pick: Callable[[str, str, int], tuple[str | None, str]]  # (text, question id, options) -> (letter, how)

    def grade(self, record: dict) -> Graded:
        text, cut = visible(record, self.stop)
        if cut == "reasoning":
            return Graded(None, f"stop string {self.stop} inside the reasoning: no answer", False)
        letter, how = self.pick(text, str(record.get("question_id")), int(record.get("options") or len(LETTERS)))
        return Graded(letter, how, letter is not None and letter == record.get("answer"))


def visible(record: dict, stop: Sequence[str]) -> tuple[str, str | None]:
    """The answer text a server sent `stop` would have returned, and where a stop string cut it (None, "content",
    or "reasoning": a stop string fires inside the thinking too, ending the answer before it began)."""
    text = record.get("text") or ""
    if any(s in parts(record)[0] for s in stop):
        return "", "reasoning"
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return (text[:min(cuts)], "content") if cuts else (text, None)


def parts(record: dict) -> tuple[str, str]:
    """The thinking and the answer after it: vLLM's reasoning field beside the content, or the content's own
    `<think>...</think>` (a server without a reasoning parser; the chat template may open it, and one never closed
    is all thinking), where a stop string fires as it does in the field."""
    reasoning, text = record.get("reasoning") or "", record.get("text") or ""
    if "</think>" in text:
        inner, _, after = text.rpartition("</think>")
        return reasoning + inner.replace("<think>", "", 1), after
    if text.lstrip().startswith("<think>"):
        return reasoning + text, ""
    return reasoning, text


def _lm_eval(text: str, qid: str, options: int) -> tuple[str | None, str]:
    found = ANSWER_IS.search(text)
    return (found.group(1), "first 'answer is'") if found else (None, "no 'answer is': invalid")


def _reference(text: str, qid: str, options: int) -> tuple[str | None, str]:
    for how, pattern in (("first 'answer is'", ANSWER_IS), ("'Answer:'", ANSWER_COLON)):
        found = pattern.search(text)
        if found:
            return found.group(1), how
    found = LONE_LETTER.search(text)
    if found:
        return found.group(0), "last lone letter"
    return random.Random(f"12345-{qid}").choice(LETTERS[:options]), "random guess"


def _robust(text: str, qid: str, options: int) -> tuple[str | None, str]:
    from ..mmlu_pro.grading import extract

    found = extract(text)
    return (found.letter, f"last match of {found.rule!r}") if found.letter else (None, "nothing to parse: wrong")


RULE_SETS = {
    "lm-eval": RuleSet("lm-eval", "lm-evaluation-harness mmlu_pro (stop 'Question:', first match, no match wrong)",
                       LM_EVAL_STOP, _lm_eval),
    "reference": RuleSet("reference", "MMLU-Pro's evaluate_from_api.py (two fallbacks, then a random guess)", (),
                         _reference),
    "robust": RuleSet("robust", "sparknb (no stop string, last match, no match wrong)", (), _robust),
}
LEAD = "robust"

# Why two rule sets grade one answer differently, the most telling first.
STOP_IN_REASONING = "a stop string inside the reasoning"
STOP_IN_ANSWER = "a stop string cut the answer before its answer line"
CUT_IN_THINKING = "cut at max_tokens inside <think>"
EMPTY_AFTER_THINKING = "empty content after thinking"
CUT_AT_MAX = "cut at max_tokens"
NO_ANSWER_LINE = "no answer line (a fallback or a guess decided)"
FIRST_LAST = "first and last 'answer is' disagree"


def classify(record: dict, a: RuleSet, b: RuleSet) -> str | None:
    """Why `a` and `b` grade this answer differently (right under one, wrong under the other), or None."""
    return None if a.grade(record).correct == b.grade(record).correct else cause(record, a, b)


def cause(record: dict, a: RuleSet, b: RuleSet) -> str:
    """Why `a` and `b` grade this answer differently, given that they do."""
    text, (thinking, answer) = record.get("text") or "", parts(record)
    cut = {visible(record, rs.stop)[1] for rs in (a, b)}
    if "reasoning" in cut:
        return STOP_IN_REASONING
    if "content" in cut and not ANSWER_IS.search(visible(record, a.stop + b.stop)[0]):
        return STOP_IN_ANSWER
    length = record.get("finish_reason") == "length"
    if thinking and not answer.strip():
        return CUT_IN_THINKING if length else EMPTY_AFTER_THINKING
    if length:
        return CUT_AT_MAX
    found = ANSWER_IS.findall(text)
    if len(set(found)) > 1:
        return FIRST_LAST
    return NO_ANSWER_LINE


def effect(records: Sequence[dict], lead: str = LEAD) -> dict:
    """The same answers graded under every rule set: each score with its interval, and each other set's paired
    difference from the lead with its interval and why every differently graded answer differs."""
    from collections import Counter

    from ...verdicts.stats import Pairs, accuracy, paired_difference

    if not records:
        return {}
    right = {name: [rs.grade(r).correct for r in records] for name, rs in RULE_SETS.items()}
    out = {"lead": lead, "n": len(records), "sets": {}, "differences": {}}
    for name, rs in RULE_SETS.items():
        out["sets"][name] = {"follows": rs.follows, "correct": sum(right[name]),
                             "accuracy": accuracy(sum(right[name]), len(records)).as_dict()}
        if name != lead:
            pairs = Pairs.of(right[name], right[lead])
            why = Counter(cause(r, RULE_SETS[lead], rs)  # graded once above: a cause only where they differ
                          for r, mine, led in zip(records, right[name], right[lead]) if mine != led)
            out["differences"][name] = {"difference": paired_difference(pairs).as_dict(), "pairs": pairs.as_dict(),
                                        "why": dict(why.most_common())}
    return out


def sentences(harness: dict) -> list[str]:
    """The harness effect in words: every rule set's score beside the lead's, then each difference and its causes."""
    if not harness:
        return []
    from ...verdicts.stats import Interval

    lead, sets = harness["lead"], harness["sets"]
    scores = ", ".join(f"{name} {Interval(**s['accuracy']).points()}" for name, s in sets.items())
    out = [f"The same {harness['n']} answers graded under each rule set: {scores}. The verdict uses {lead} "
           f"({sets[lead]['follows']}); lm-eval is {sets['lm-eval']['follows']}, reference is "
           f"{sets['reference']['follows']}."]
    for name, d in harness["differences"].items():
        causes = "; ".join(f"{why}: {n}" for why, n in d["why"].items()) or "none"
        out.append(f"Harness effect, {name} minus {lead}: {Interval(**d['difference']).points(signed=True)} (95%, "
                   f"paired); {d['pairs']['a_only'] + d['pairs']['b_only']} answer(s) graded differently ({causes}).")
    return out
