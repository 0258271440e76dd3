"""Asking: every question not answered before, `concurrency` at a time, through the graded batch.

Each answer is graded from its raw text and on disk the moment it ends, before the next question goes
out: a run stopped halfway keeps what it got, and `resume_from` then asks only the rest.
"""

from __future__ import annotations

from collections.abc import Callable

from ...endpoint import stream
from ...endpoint.completion import Completion
from ...runs.study import Study
from ..batch.ask import Batch, Questions
from ..batch.ask import ask as ask_all
from .data import Question
from .grading import grade
from .plan import Plan, Work


def _question(turns: list[dict], plan: Plan) -> stream.Call:
    return lambda ep: ep.chat(turns, max_tokens=plan.max_tokens, temperature=plan.temperature,
                              stop=list(plan.stop) or None)


def _record(q: Question, done: Completion, plan: Plan, order: int) -> dict:
    g = grade(q.answer, done.text, done.finish_reason, plan.stop)
    timing = {k: v for k, v in done.as_dict().items() if k not in ("chunk_times", "chunk_tokens", "text", "reasoning")}
    return {"question_id": q.id, "category": q.category, "answer": q.answer, "options": len(q.options), "order": order,
            "pred": g.pred, "rule": g.rule, "correct": g.correct, "flag": g.flag,
            "text": done.text, "reasoning": done.reasoning, **timing}


def questions(work: Work) -> Questions:
    """The questions still to ask, as the batch asks them."""
    plan = work.plan
    return Questions(
        work.todo(), lambda q: _question(work.prompts[q.id], plan), lambda q, done, i: _record(q, done, plan, i),
        lambda q: {"question_id": q.id, "category": q.category}, "correct", "right",
        lambda rec: f"{rec['category']}, {rec['pred'] or 'unparsed'}")


def ask(study: Study, work: Work, log: Callable[[str], None] = print) -> Batch:
    """Ask every question not answered before, inside study.measuring(): a failure (Ctrl-C too) seals
    the run as failed halfway with every answer taken."""
    return ask_all(study, work, questions(work), log)[0]
