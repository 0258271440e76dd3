"""Grading rule sets, named: one recorded answer graded as each harness of the field would grade it, the score under
each, and the harness effect: each set's paired difference from the lead set with its interval, and why every
differently graded answer differs.

A published score is a model under some harness's rules, and the rules move the score (seed 000: a strong model
scored 13.3% on MMLU-Pro under lm-evaluation-harness, where its stop string fired inside the reasoning, and 86.7%
under sparknb's). A run records each answer once, asked without a stop string, and grades it under every set of its
study (mmlu_pro.rule_sets, humaneval.rule_sets); a set's stop strings are applied to the recorded answer as the
server would have applied them (`visible`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ...verdicts.stats import Interval, Pairs, accuracy, paired_difference


@dataclass(frozen=True)
class Graded:
    """One answer under one rule set."""

    answer: str | None  # what the set graded (a letter, ...); None: nothing it could grade
    how: str  # which rule decided, or why there is nothing
    correct: bool


@dataclass(frozen=True)
class RuleSet:
    name: str
    follows: str  # whose rules, in words
    stop: tuple[str, ...]  # applied to the recorded answer as the server would have applied them
    grade: Callable[[dict], Graded]


@dataclass(frozen=True)
class Harness:
    """A study's rule sets, the one its verdict uses, and what names the cause of a difference between two sets."""

    sets: Mapping[str, RuleSet]
    lead: str
    cause: Callable[[dict, RuleSet, RuleSet], str]  # (record, lead, other) -> why, given that they differ


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


def effect(records: Sequence[dict], harness: Harness) -> dict:
    """The same answers graded under every rule set, each once: each score with its interval, and each other set's
    paired difference from the lead with its interval and why every differently graded answer differs."""
    if not records:
        return {}
    lead, sets = harness.lead, harness.sets
    right = {name: [rs.grade(r).correct for r in records] for name, rs in sets.items()}
    out = {"lead": lead, "n": len(records), "sets": {}, "differences": {}}
    for name, rs in sets.items():
        out["sets"][name] = {"follows": rs.follows, "correct": sum(right[name]),
                             "accuracy": accuracy(sum(right[name]), len(records)).as_dict()}
        if name != lead:
            pairs = Pairs.of(right[name], right[lead])
            why = Counter(harness.cause(r, sets[lead], rs)
                          for r, mine, led in zip(records, right[name], right[lead]) if mine != led)
            out["differences"][name] = {"difference": paired_difference(pairs).as_dict(), "pairs": pairs.as_dict(),
                                        "why": dict(why.most_common())}
    return out


def sentences(harness: dict) -> list[str]:
    """The harness effect in words: every rule set's score beside the lead's, then each difference and its causes."""
    if not harness:
        return []
    lead, sets = harness["lead"], harness["sets"]
    scores = ", ".join(f"{name} {Interval(**s['accuracy']).points()}" for name, s in sets.items())
    others = "; ".join(f"{name} is {s['follows']}" for name, s in sets.items() if name != lead)
    out = [f"The same {harness['n']} answers graded under each rule set: {scores}. The verdict uses {lead} "
           f"({sets[lead]['follows']}); {others}."]
    for name, d in harness["differences"].items():
        causes = "; ".join(f"{why}: {n}" for why, n in d["why"].items()) or "none"
        out.append(f"Harness effect, {name} minus {lead}: {Interval(**d['difference']).points(signed=True)} (95%, "
                   f"paired); {d['pairs']['a_only'] + d['pairs']['b_only']} answer(s) graded differently ({causes}).")
    return out

