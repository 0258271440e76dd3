"""Grading that reads every raw answer: the reference extraction, the flags, and the traps they reveal.

Two ways this benchmark lies, each made impossible to miss here:
- A stop string fires inside a reasoning model's own thinking (vLLM applies stop strings to the
  reasoning too), cutting every answer before its "the answer is (X)" line: a good model then scores
  13%. `traps` reads every raw response for cut or answerless ones.
- An answer that cannot be parsed is scored as a random guess by the reference scripts. Here it is
  wrong, and counted.
One choice differs from the reference scripts on purpose: they take the FIRST "answer is (X)"; here
the LAST match wins, since a reasoning model restates the options before it concludes. The answers
where the two differ are counted, so the choice is never silent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import pandas as pd

# The reference scripts' rules, in order; the first rule that matches decides, and here its LAST match wins.
RULES = (
    ("answer is", re.compile(r"answer is \(?([A-J])\)?")),
    ("Answer:", re.compile(r"[aA]nswer:\s*([A-J])")),
    ("last letter", re.compile(r"\b([A-J])\b")),
)
ANSWER_LINES = (RULES[0][1], RULES[1][1])  # "the answer is (X)" or "Answer: X": the model said it outright

CUT_BY_STOP = "cut by a stop string"
HIT_MAX_TOKENS = "hit max_tokens"
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


@dataclass(frozen=True)
class Traps:
    """What the raw responses say about whether the scores can be believed."""

    n: int
    counts: dict[str, int]
    unparsed: int
    share_limit: float
    stop: tuple[str, ...]
    examples: list[dict]
    first_last_differ: int = 0  # answers whose first and last match name different letters
    differ_right_last: int = 0  # of those, right as graded here (last match)
    differ_right_first: int = 0  # of those, right as the reference scripts grade (first match)

    @property
    def suspect(self) -> int:
        return sum(self.counts.values())

    @property
    def tripped(self) -> bool:
        return self.n > 0 and self.suspect > self.share_limit * self.n

    @property
    def level(self) -> str:
        return "warning" if self.tripped else "info"

    def headline(self) -> str:
        """The verdict in words; `level` says whether it is a warning."""
        if not self.n:
            return "No answer was received, so nothing can be judged."
        parts = ", ".join(f"{k}: {v}" for k, v in self.counts.items() if v)
        if self.tripped:
            text = (f"{self.suspect} of {self.n} answers ({100 * self.suspect / self.n:.0f}%) cannot be taken "
                    f"at face value ({parts}); above {100 * self.share_limit:.0f}%, the scores below are marked "
                    f"SUSPECT. {self.unparsed} answer(s) could not be parsed and count as wrong.")
            if self.counts.get(CUT_BY_STOP):
                text += (f" Stop strings {list(self.stop)} were set: vLLM applies them inside a reasoning model's "
                         "thinking too, which cuts answers before their last line. Run with stop=[] to check.")
            elif self.counts.get(HIT_MAX_TOKENS):
                text += " Answers cut at max_tokens end before the answer line: raise max_tokens if the model allows."
            return text + " " + self.extraction()
        text = (f"The raw answers look sound: {self.suspect} of {self.n} are cut or lack the answer line"
                + (f" ({parts})" if parts else "") + f", within the {100 * self.share_limit:.0f}% allowed. "
                f"{self.unparsed} answer(s) could not be parsed and count as wrong.")
        if self.stop:
            text += f" Stop strings {list(self.stop)} are set: they also apply inside reasoning."
        return text + " " + self.extraction()

    def extraction(self) -> str:
        """Which match is graded, and how many answers that choice decides."""
        text = ("The LAST match of the answer pattern is graded (a reasoning model restates options before it "
                "concludes); the reference scripts take the FIRST \"answer is (X)\". ")
        if not self.first_last_differ:
            return text + "In no answer do the first and the last match differ, so here the choice changes nothing."
        return text + (f"In {self.first_last_differ} answer(s) they differ: {self.differ_right_last} of those are "
                       f"right as graded here, {self.differ_right_first} would be right graded by the first match.")

    def as_dict(self) -> dict:
        return asdict(self) | {"suspect": self.suspect, "tripped": self.tripped, "headline": self.headline()}


def traps(records: Sequence[dict], stop: Sequence[str] = (), share_limit: float = 0.05, n_examples: int = 3) -> Traps:
    """Count answers cut by a stop string, cut at max_tokens, or missing the answer line; keep raw examples;
    count the answers whose first and last match differ."""
    counts = {CUT_BY_STOP: 0, HIT_MAX_TOKENS: 0, NO_ANSWER_LINE: 0}
    examples, unparsed, n = [], 0, 0
    differ = right_last = right_first = 0
    for r in records:
        if not is_answer(r):
            continue
        n += 1
        g = grade(r["answer"], r.get("text", ""), r.get("finish_reason"), stop)
        unparsed += g.pred is None
        if g.first != g.pred:
            differ += 1
            right_last += g.pred == r["answer"]
            right_first += g.first == r["answer"]
        if g.flag:
            counts[g.flag] += 1
            if len(examples) < n_examples:
                examples.append({"question_id": str(r["question_id"]), "category": r["category"], "why": g.flag,
                                 "finish_reason": r.get("finish_reason"),
                                 "completion_tokens": r.get("completion_tokens"),
                                 "reasoning_end": _tail(r.get("reasoning", "")),
                                 "content_end": _tail(r.get("text", ""))})
    return Traps(n, counts, unparsed, share_limit, tuple(stop), examples, differ, right_last, right_first)


def _tail(text: str, n: int = 240) -> str:
    text = text or ""
    return text if len(text) <= n else "..." + text[-n:]


def verdict_markdown(t: Traps) -> str:
    """The verdict on the raw answers, shown at the top of the notebook and its report."""
    if t.tripped:
        counts = " | ".join(f"{k}: **{v}**" for k, v in t.counts.items())
        return f"### ⚠ WARNING: {t.headline()}\n\nOf {t.n} answers: {counts}."
    return f"**Raw answers checked.** {t.headline()}"


def examples_markdown(t: Traps) -> str:
    """The raw examples, as a reader should see them: where each answer ended."""
    out = []
    for e in t.examples:
        out.append(f"**question {e['question_id']} ({e['category']})**: {e['why']}, finish_reason "
                   f"`{e['finish_reason']}`, {e['completion_tokens']} tokens")
        for part in ("reasoning_end", "content_end"):
            body = e[part].replace("```", "'''") if e[part] else "(empty)"
            out.append(f"{part.replace('_', ' ')}:\n```\n{body}\n```")
    return "\n\n".join(out)
