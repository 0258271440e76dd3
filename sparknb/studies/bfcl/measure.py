"""Asking: every item not answered before, `concurrency` at a time, through the graded batch, in the plan's format;
each answer decoded as BFCL decodes it, graded under BFCL's rules and on disk the moment it ends.

Decoding, as BFCL's handlers do: native, the answer's `tool_calls` as `{name: arguments}` (arguments that are
not a JSON object: the answer did not parse), and an answer without tool calls is no call where its text is
empty, else one that did not parse (BFCL's function-calling decoder fails on text); prompt mode, the text read as
`[func(arg=value), ...]` exactly as BFCL's decoder reads it, with `ast`, never eval (endpoint.prompt_calls).
"""

from __future__ import annotations

from collections.abc import Callable

from ...endpoint import stream
from ...endpoint.completion import Completion
from ...endpoint.prompt_calls import decode
from ...runs.study import Study
from ..batch.ask import Batch, Questions
from ..batch.ask import ask as ask_all
from .plan import Item, Work
from .prompt import messages, tools
from .rule_sets import bfcl, robust

DROPPED = ("chunk_times", "chunk_tokens", "text", "reasoning", "tool_calls")


def _request(item: Item, work: Work) -> stream.Call:
    plan, turns = work.plan, messages(item.entry, work.plan.format)
    extra = {"tools": tools(item.entry["function"])} if plan.format == "native" else {}
    return lambda ep: ep.chat(turns, max_tokens=plan.max_tokens, temperature=plan.temperature, **extra)


def decoded(done: Completion, form: str) -> tuple[list | None, str | None]:
    """The answer's calls in BFCL's decoded form, or None and why it did not parse."""
    try:
        if form == "native":
            if not done.tool_calls:
                return ([], None) if not done.text.strip() else (None, "text where a tool call was expected")
            return [{c.name: c.parsed()} for c in done.tool_calls], None
        return decode(done.text), None
    except (ValueError, TypeError) as e:
        return None, str(e)[:200]


def _record(item: Item, done: Completion, work: Work, order: int) -> dict:
    calls, why = decoded(done, work.plan.format)
    rec = {"item": item.id, "category": item.category, "format": work.plan.format, "order": order,
           "functions": item.entry["function"], "answer": item.answer, "calls": calls, "unparsed": why,
           "text": done.text, "reasoning": done.reasoning, "tool_calls": [c.as_dict() for c in done.tool_calls]}
    verdict = bfcl(rec)
    timing = {k: v for k, v in done.as_dict().items() if k not in DROPPED}
    return rec | {"correct": verdict.valid, "error_type": verdict.error_type, "error": verdict.error,
                  "robust": robust(rec).valid, **timing}


def questions(work: Work) -> Questions:
    return Questions(
        work.todo(), lambda i: _request(i, work), lambda i, done, n: _record(i, done, work, n),
        lambda i: {"item": i.id, "category": i.category}, "correct", "right",
        lambda rec: f"{rec['category']}, {rec['error_type'] or 'passed'}")


def ask(study: Study, work: Work, log: Callable[[str], None] = print) -> Batch:
    """Ask every item not answered before, inside study.measuring(): a failure (Ctrl-C too) seals the run as
    failed halfway with every answer taken."""
    return ask_all(study, work, questions(work), log)[0]
