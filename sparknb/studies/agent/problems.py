"""What was wrong with the calls of a live run's steps, each problem counted over the steps and named with an
example, by the classifier BFCL's single-turn answers use (batch.calls): an answer whose calls do not parse, a call
to a function the session does not offer, a required argument missing, an argument of the wrong type (BFCL's
types, from its function docs), and a call where none was wanted (a step of a turn whose ground truth has no call:
BFCL asks it to see that the model says it cannot). A replay's answers are filler: not looked at."""

from __future__ import annotations

import json
import re
from collections import Counter

from ...runs.report import Finding, info
from ..batch import bfcl
from ..batch.calls import MISSING, NOT_OFFERED, UNPARSED, UNWANTED, WRONG_TYPE, named, schema_problems
from .grades import replayed, truths
from .sessions import parses, read_calls

LOOKED_AT = (UNPARSED, NOT_OFFERED, MISSING, WRONG_TYPE, UNWANTED)
# Text that begins a call: in prompt mode, a text that is not calls is the model's answer (BFCL's turn ends on it),
# a problem only where it looks like a call that did not parse
CALL_IN_TEXT = re.compile(r"<tool_call>|\{\s*\"name\"\s*:|^\s*\[?\s*[A-Za-z_][\w.]*\(\w+\s*=", re.M)


def step_problems(records: list[dict]) -> list[tuple[dict, list[str], str, bool]]:
    """Each answered step of a live run: (its record, its problems, what it answered, whether it made a call)."""
    if replayed(records):
        return []
    opened = {r["session"]: r for r in records if r.get("kind") == "session"}
    offered = {s: {f["name"]: f["parameters"] for f in bfcl.functions(r["involved_classes"])}
               for s, r in opened.items()}
    empty = {(s, t) for s, (_, truth) in truths(records).items() for t, calls in enumerate(truth) if not calls}
    out = []
    for r in (r for r in records if r.get("kind") == "step" and "error" not in r and r["session"] in opened):
        calls, problem = read_calls(r, opened[r["session"]]["mode"])
        decoded = [{c.name: c.parsed()} for c in calls if parses(c)]
        mode = opened[r["session"]]["mode"]
        broken = problem and (mode == "native" or CALL_IN_TEXT.search(r.get("text") or ""))
        found = ([UNPARSED] if broken else []) + schema_problems(decoded, offered[r["session"]])
        found += [UNWANTED] if calls and (r["session"], r["turn"]) in empty else []
        shown = json.dumps(decoded) if decoded else repr((r.get("text") or "")[:120])
        out.append((r, list(dict.fromkeys(found)), f"`{shown[:200]}`", bool(calls)))
    return out


def findings(records: list[dict]) -> list[Finding]:
    """How many steps made a call, then each problem counted with its first example."""
    steps = step_problems(records)
    if not steps:
        return []
    seen: dict[str, list[tuple[str, str]]] = {p: [] for p in LOOKED_AT}
    for r, found, shown, _ in steps:
        for p in found:
            seen[p].append((f"session {r['session']} turn {r['turn'] + 1} step {r['step'] + 1}", shown))
    called = sum(made for *_, made in steps)
    return [info(f"{called} of {len(steps)} steps made at least one call.")] + named(seen, len(steps), "steps")


def counts(records: list[dict]) -> dict[str, int]:
    """Each problem's count over the steps, for the run's summary."""
    found = Counter(p for _, ps, *_ in step_problems(records) for p in ps)
    return {p: found.get(p, 0) for p in LOOKED_AT}
