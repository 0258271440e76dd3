"""Grading that reads every raw answer: the reference extraction, and the flags that reveal the traps.

Two ways this benchmark lies, each made impossible to miss here:
- A stop string fires inside a reasoning model's own thinking (vLLM applies stop strings to the
  reasoning too), cutting every answer before its "the answer is (X)" line: a good model then scores
  13%. Every raw response is read for cut or answerless ones (traps).
- An answer that cannot be parsed is scored as a random guess by the reference scripts. Here it is
  wrong, and counted.
One choice differs from the reference scripts on purpose: they take the FIRST "answer is (X)"; here
the LAST match wins, since a reasoning model restates the options before it concludes. The answers
where the two differ are counted, so the choice is never silent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from ..batch.traps import CUT_BY_STOP, HIT_MAX_TOKENS

# The reference scripts' rules, in order; the first rule that matches decides, and here its LAST match wins.
RULES = (
    ("answer is", re.compile(r"answer is \(?([A-J])\)?")),
    ("Answer:", re.compile(r"[aA]nswer:\s*([A-J])")),
    ("last letter", re.compile(r"\b([A-J])\b")),
)
ANSWER_LINES = (RULES[0][1], RULES[1][1])  # "the answer is (X)" or "Answer: X": the model said it outright

NO_ANSWER_LINE = "no answer line"
COLUMNS = ["question_id", "category", "answer", "pred", "first", "rule", "correct", "flag", "finish_reason",
           "completion_tokens", "total_s", "resumed"]


@dataclass(frozen=True)
class Extraction:
    letter: str | None  # the last match of the deciding rule: the one graded
    rule: str | None  # which of RULES decided; None when nothing could be parsed
    first: str | None = None  # the first match of that rule: what the reference scripts would grade


def extract(text: str) -> Extraction:
    """The reference rules on the answer text with '**' stripped; the last match of the first rule that matches."""
    clean = (text or "").replace("**", "")
    for name, pattern in RULES:
        found = pattern.findall(clean)
        if found:
            return Extraction(found[-1], name, found[0])
    return Extraction(None, None)


def flag(text: str, finish_reason: str | None, stop: Sequence[str] = ()) -> str | None:
    """Why a raw answer cannot be taken at face value, or None.

    A finish at max_tokens is cut; a normal finish without an answer line ("the answer is (X)" or
    "Answer: X") is either cut by a stop string (when any are set: the server does not say whether a
    string or the model ended it) or a model that never stated its answer.
    """
    if finish_reason == "length":
        return HIT_MAX_TOKENS
    clean = (text or "").replace("**", "")
    if any(p.search(clean) for p in ANSWER_LINES):
        return None
    return CUT_BY_STOP if stop else NO_ANSWER_LINE


@dataclass(frozen=True)
class Grade:
    pred: str | None
    rule: str | None
    correct: bool  # an unparsed answer is wrong
    flag: str | None
    first: str | None = None


def grade(q_answer: str, text: str, finish_reason: str | None, stop: Sequence[str] = ()) -> Grade:
    found = extract(text)
    return Grade(found.letter, found.rule, found.letter == q_answer, flag(text, finish_reason, stop), found.first)


def is_answer(record: dict) -> bool:
    """A finished answer: neither a failed request nor one cut off without a finish reason."""
    return "error" not in record and bool(record.get("finish_reason"))


def answered(records: Sequence[dict]) -> dict[str, dict]:
    """The last finished answer of each question (failed requests left out)."""
    return {str(r["question_id"]): r for r in records if is_answer(r)}


def frame(records: Sequence[dict], stop: Sequence[str] = ()) -> pd.DataFrame:
    """One row per finished answer, graded afresh from its raw text, so every run is graded alike."""
    rows = []
    for r in records:
        if not is_answer(r):
            continue
        g = grade(r["answer"], r.get("text", ""), r.get("finish_reason"), stop)
        rows.append({"question_id": str(r["question_id"]), "category": r["category"], "answer": r["answer"],
                     "pred": g.pred, "first": g.first, "rule": g.rule, "correct": g.correct, "flag": g.flag,
                     "finish_reason": r.get("finish_reason"), "completion_tokens": r.get("completion_tokens"),
                     "total_s": r.get("total_s"), "resumed": bool(r.get("resumed_from"))})
    return pd.DataFrame(rows, columns=COLUMNS).drop_duplicates("question_id", keep="last").reset_index(drop=True)
