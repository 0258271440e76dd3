"""Asking and grading: every answer not reused, `concurrency` requests at a time, each run in the sandbox as it arrives.

The requests go out through stream.batch (the asyncio client MMLU-Pro and the load study use). An
answer is handed to a pool of `sandboxes` threads, each of which runs one program at a time in a
child process; the answer, its code, verdict and reason go to disk as one record the moment the
verdict is in. A failed request stops new ones: the answers in flight are awaited and graded, then
it raises. On Ctrl-C the answers not yet graded are kept too, unmarked, and `resume_from` asks them again.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace

from ... import stream
from ...client import Completion
from ...errors import StudyError
from ...study import Study
from ..mmlu_pro.measure import Batch, _batch, _counted
from .data import Problem
from .grading import Grade, frame, grade
from .plan import Plan, Work
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


def _record(problem: Problem, sample: int, done: Completion, g: Grade | None, order: int) -> dict:
    timing = {k: v for k, v in done.as_dict().items() if k not in ("chunk_times", "chunk_tokens", "text", "reasoning")}
    verdict = g.as_dict() if g is not None else {"reason": None, "passed": None, "detail": "not graded: the run stopped"}
    return {"problem": problem.id, "sample": sample, "order": order, "text": done.text, "reasoning": done.reasoning,
            **verdict, **timing}


@dataclass
class _Tally:
    """What the answers so far add up to; added to from the sandbox threads, under the lock."""

    answered: int = 0
    passed: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    unknown: int = 0  # answers without usage: their tokens, and so the batch's, are unknown
    request_s: float = 0.0
    failures: int = 0
    first_error: str | None = None

    def add(self, rec: dict) -> None:
        self.answered += 1
        self.passed += bool(rec["passed"])
        self.unknown += rec["completion_tokens"] is None or rec["prompt_tokens"] is None
        self.tokens += rec["completion_tokens"] or 0
        self.prompt_tokens += rec["prompt_tokens"] or 0
        self.request_s += rec["total_s"] or 0.0

    def line(self, total: int, elapsed: float, rec: dict) -> str:
        return (f"[{self.answered}/{total}] {self.passed} passed so far; {self.tokens} tokens in {elapsed:.0f} s; "
                f"last: {rec['problem']}, {rec['reason']}" + (f" ({rec['flag']})" if rec.get("flag") else ""))


def ask(study: Study, work: Work, log: Callable[[str], None] = print) -> Asked:
    """Ask and grade every answer not reused, inside study.measuring(): a failure (Ctrl-C too) seals the run
    as failed halfway with every record taken."""
    with study.measuring():
        asked = _ask(study, work, log)
    if work.longest is None:
        return asked
    return replace(asked, batch=replace(asked.batch, longest_prompt_question=work.longest[0],
                                        longest_prompt_tokens=work.longest[1]))


def _ask(study: Study, work: Work, log: Callable[[str], None]) -> Asked:
    plan, run, lock = work.plan, study.run, threading.Lock()
    for rec in work.reused:
        run.record({**rec, "resumed_from": work.resumed.id})
    todo = work.todo()
    total, step = len(todo), max(1, math.ceil(len(todo) / 40))
    if work.reused:
        log(f"{len(work.reused)} graded answer(s) reused from {work.resumed.id}; asking the other {total}")
    tally, pending, t0 = _Tally(), {}, time.perf_counter()

    def graded(index: int, answer: Completion) -> None:  # on a sandbox thread
        problem, sample = todo[index]
        rec = _record(problem, sample, answer, grade(problem, plan.style, answer.text, answer.finish_reason,
                                                     plan.stop, work.sandbox), index)
        with lock:
            run.record(rec)
            tally.add(rec)
            if tally.answered % step == 0 or tally.answered == total:
                log(tally.line(total, time.perf_counter() - t0, rec))

    def done(outcome: stream.Outcome) -> None:  # on the batch's own thread
        problem, sample = todo[outcome.index]
        if outcome.error is not None:
            with lock:
                tally.failures += 1
                tally.first_error = tally.first_error or outcome.error
                run.record({"problem": problem.id, "sample": sample, "order": outcome.index, "error": outcome.error})
            return
        pending[pool.submit(graded, outcome.index, outcome.answer)] = outcome

    before = study.endpoint.metrics()
    cpu0 = time.process_time()
    pool = ThreadPoolExecutor(plan.sandboxes, thread_name_prefix="humaneval-sandbox")
    try:
        stream.batch(study.streaming(), [_request(p, plan) for p, _ in todo], plan.concurrency, done,
                     stop_on_error=True)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        wait(pending)  # on the futures: a thread's join interrupted by Ctrl-C can return early when asked again
    except BaseException:
        _keep_ungraded(pending, todo, run, lock)
        wait(pending)  # the programs running now end within their timeout, and are recorded
        raise
    finally:
        pool.shutdown(wait=False)
    lag = time.perf_counter() - t0 - wall
    broken = [f.exception() for f in pending if f.exception() is not None]
    if broken:
        raise StudyError(f"Grading failed for {len(broken)} answer(s), the first with {broken[0]!r}; the answers "
                         f"graded are in {run.path}.") from broken[0]
    if tally.first_error is not None:
        raise StudyError(f"{tally.failures} request(s) failed, the first with {tally.first_error}. The "
                         f"{tally.answered} answers received are graded and recorded in {run.path}; to finish, run "
                         f"again with resume_from={run.id!r}.")
    batch = _batch(tally, work, wall, cpu, _counted(study.endpoint, before, tally.answered))
    return Asked(batch, cost(study.records(), work.sandbox.level, lag))


def _keep_ungraded(pending: dict[Future, stream.Outcome], todo: list, run, lock: threading.Lock) -> None:
    """Answers whose grading had not started when the run stopped: recorded as they came, without a verdict."""
    for future, outcome in list(pending.items()):
        if future.cancel():
            problem, sample = todo[outcome.index]
            with lock:
                run.record(_record(problem, sample, outcome.answer, None, outcome.index))
