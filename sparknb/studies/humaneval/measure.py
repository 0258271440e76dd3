"""Asking and grading: every answer not reused, through the graded batch, each run in the sandbox as it arrives.

An answer is handed to one of `sandboxes` grader threads, each of which runs one program at a time in
a child process; the answer, its code, verdict and reason go to disk as one record the moment the
verdict is in. What the sandbox cost is counted here, from those records.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ...endpoint import stream
from ...endpoint.completion import Completion
from ...runs.study import Study
from ..batch.ask import Batch, Questions
from ..batch.ask import ask as ask_all
from .data import Problem
from .grading import Grade, frame, grade
from .plan import Item, Plan, Work
from . import rule_sets
from .prompt import chat, completion


@dataclass(frozen=True)
class Cost:
    """What running the programs cost, per program and in all, at the isolation had; and how long the
    run waited for verdicts after the last answer arrived."""

    level: str
    programs: int
    wall_median_s: float | None
    wall_total_s: float
    cpu_median_s: float | None  # the sandbox's whole process tree: launcher, interpreter, program
    cpu_total_s: float | None
    lag_s: float | None = None  # from the batch's last answer to its last verdict

    def as_dict(self) -> dict:
        return asdict(self)


def cost(records: list[dict], level: str, lag_s: float | None = None) -> Cost:
    """The sandbox's cost over the programs run (answers without code are not run, reused ones not again)."""
    df = frame([r for r in records if not r.get("resumed_from")])
    walls, cpus = df["sandbox_wall_s"].dropna().tolist(), df["sandbox_cpu_s"].dropna().tolist()
    return Cost(level, len(walls), statistics.median(walls) if walls else None, math.fsum(walls),
                statistics.median(cpus) if cpus else None, math.fsum(cpus) if cpus else None, lag_s)


@dataclass(frozen=True)
class Asked:
    batch: Batch
    cost: Cost


def _request(problem: Problem, plan: Plan) -> stream.Call:
    stop = list(plan.stop) or None
    if plan.style == "chat":
        return lambda ep: ep.chat(chat(problem), max_tokens=plan.max_tokens, temperature=plan.temperature, stop=stop)
    return lambda ep: ep.complete(completion(problem), max_tokens=plan.max_tokens, temperature=plan.temperature,
                                  ignore_eos=False, stop=stop)


def _record(problem: Problem, sample: int, done: Completion, g: Grade | None, order: int, sets: dict | None = None
            ) -> dict:
    timing = {k: v for k, v in done.as_dict().items() if k not in ("chunk_times", "chunk_tokens", "text", "reasoning")}
    verdict = g.as_dict() if g is not None else {"reason": None, "passed": None, "detail": "not graded: the run stopped"}
    if sets is not None:
        verdict["rule_sets"] = sets
    return {"problem": problem.id, "sample": sample, "order": order, "text": done.text, "reasoning": done.reasoning,
            **verdict, **timing}


def questions(work: Work) -> Questions:
    """The answers still to ask for, as the batch asks them: each graded in the sandbox, `sandboxes` at a time."""
    plan = work.plan

    def graded(item: Item, done: Completion, order: int) -> dict:
        problem, sample = item
        g = grade(problem, plan.style, done.text, done.finish_reason, plan.stop, work.sandbox)
        return _record(problem, sample, done, g, order, rule_sets.run(problem, done.text, g, work.sandbox))

    return Questions(work.todo(), lambda item: _request(item[0], plan), graded,
                     lambda item: {"problem": item[0].id, "sample": item[1]}, "passed", "passed",
                     lambda rec: f"{rec['problem']}, {rec['reason']}", "graded answer(s)", plan.sandboxes,
                     lambda item, done, order: _record(item[0], item[1], done, None, order))


def ask(study: Study, work: Work, log: Callable[[str], None] = print) -> Asked:
    """Ask and grade every answer not reused, inside study.measuring(): a failure (Ctrl-C too) seals the run
    as failed halfway with every record taken."""
    batch, lag = ask_all(study, work, questions(work), log)
    return Asked(batch, cost(study.records(), work.sandbox.level, lag))
