"""MMLU-Pro's rule sets: one recorded answer graded as each harness of the field grades it (the mechanism, the
effect and its words are batch.rule_sets'):

- `lm-eval`: lm-evaluation-harness's `mmlu_pro` as it is: the text cut at its stop string `Question:` (what the
  server would have returned had the string been sent; inside a reasoning model's thinking it leaves no answer),
  the FIRST `answer is \\(?([ABCDEFGHIJ])\\)?`, no match wrong. Its score is what lm-eval would print only for
  answers asked in its prompt format (prompt.py);
- `reference`: MMLU-Pro's authors' evaluate_from_api.py: no stop string, the first `answer is (X)`, else the first
  line's `Answer: X`, else the last lone letter, else a random guess among the question's options, "N/A" padding
  left out (the count each answer's record keeps; all ten letters for runs sealed before it did), seeded per
  question here (theirs draws from one sequence seeded 12345, so which guesses land depends on the order);
- `robust`, sparknb's own: no stop string, the LAST match of the first rule that matches, no match wrong, every
  answer cut at max_tokens counted.

`classify` names why two rule sets grade one answer differently, so a difference of scores is never a bare number.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from ..batch.rule_sets import Graded, Harness, RuleSet, parts, visible
from .data import LETTERS
from .grading import extract

LM_EVAL_STOP = ("Question:",)
ANSWER_IS = re.compile(r"answer is \(?([ABCDEFGHIJ])\)?")  # lm-eval's pattern as its task file writes it
ANSWER_COLON = re.compile(r".*[aA]nswer:\s*([A-J])")
LONE_LETTER = re.compile(r"\b[A-J]\b(?!.*\b[A-J]\b)", re.S)
Pick = Callable[[str, str, int], tuple[str | None, str]]  # (text, question id, options) -> (letter, how)


def _letters(stop: tuple[str, ...], pick: Pick) -> Callable[[dict], Graded]:
    def grade(record: dict) -> Graded:
        text, cut = visible(record, stop)
        if cut == "reasoning":
            return Graded(None, f"stop string {stop} inside the reasoning: no answer", False)
        letter, how = pick(text, str(record.get("question_id")), int(record.get("options") or len(LETTERS)))
        return Graded(letter, how, letter is not None and letter == record.get("answer"))

    return grade


def _lm_eval(text: str, qid: str, options: int) -> tuple[str | None, str]:
    found = ANSWER_IS.search(text)
    return (found.group(1), "first 'answer is'") if found else (None, "no 'answer is': invalid")


def reference(text: str, qid: str, options: int) -> tuple[str | None, str]:
    for how, pattern in (("first 'answer is'", ANSWER_IS), ("'Answer:'", ANSWER_COLON)):
        found = pattern.search(text)
        if found:
            return found.group(1), how
    found = LONE_LETTER.search(text)
    if found:
        return found.group(0), "last lone letter"
    return random.Random(f"12345-{qid}").choice(LETTERS[:options]), "random guess"


def _robust(text: str, qid: str, options: int) -> tuple[str | None, str]:
    found = extract(text)
    return (found.letter, f"last match of {found.rule!r}") if found.letter else (None, "nothing to parse: wrong")


def _set(name: str, follows: str, stop: tuple[str, ...], pick: Pick) -> RuleSet:
    return RuleSet(name, follows, stop, _letters(stop, pick))


RULE_SETS = {
    "lm-eval": _set("lm-eval", "lm-evaluation-harness mmlu_pro (stop 'Question:', first match, no match wrong)",
                    LM_EVAL_STOP, _lm_eval),
    "reference": _set("reference", "MMLU-Pro's evaluate_from_api.py (two fallbacks, then a random guess)", (),
                      reference),
    "robust": _set("robust", "sparknb (no stop string, last match, no match wrong)", (), _robust),
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
    if len(set(ANSWER_IS.findall(text))) > 1:
        return FIRST_LAST
    return NO_ANSWER_LINE


HARNESS = Harness(RULE_SETS, LEAD, cause)
