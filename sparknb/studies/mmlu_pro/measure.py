"""Asking: every question not answered before, `concurrency` at a time.

The questions go out through stream.batch, the asyncio client the load study uses (microseconds a
chunk, and vLLM's own timings of each answer kept). Each answer is on disk the moment it ends, before
the next question goes out (from the batch's one thread, so lines never interleave): a run stopped
halfway keeps what it got, and `resume_from` then asks only the rest.
The batch figures come with the server's counters around the whole batch, which say whether
anything else used the server meanwhile.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

from ... import metrics, stream
from ...client import Completion, Endpoint
from ...errors import EndpointError, StudyError
from ...study import Study
from .data import Question
from .grading import grade
from .plan import Plan, Work
from .prompt import messages


@dataclass(frozen=True)
class Batch:
    """The batch as a whole: the speed a user of concurrent requests gets, not single-stream speed."""

    asked: int
    reused: int
    failed: int
    concurrency: int
    wall_s: float
    prompt_tokens: int | None  # None where an answer came without usage: unknown, not fewer
    completion_tokens: int | None
    client_cpu_s: float  # CPU time of this process (all threads) during the batch
    client_request_s: float  # the requests' durations as the client saw them, summed
    server_e2e_s: float | None  # the same requests as vLLM timed them, summed
    server_generated_tokens: float | None
    server_requests: float | None
    prefix_cache_hit_rate: float | None
    interference: str | None  # why the server's counters cannot be this batch's alone, or None
    longest_prompt_tokens: int | None = None  # by the server's tokenizer, chat template included
    longest_prompt_question: str | None = None

    @property
    def tokens_per_s(self) -> float | None:
        if not (self.wall_s and self.asked) or self.completion_tokens is None:
            return None
        return self.completion_tokens / self.wall_s

    @property
    def client_cpu_share(self) -> float | None:
        """The share of the batch's wall time that the client spent computing rather than waiting."""
        return self.client_cpu_s / self.wall_s if self.wall_s and self.asked else None

    @property
    def outside_server_share(self) -> float | None:
        """The share of request time, as the client saw it, that vLLM's own clock does not cover."""
        if not self.server_e2e_s or not self.client_request_s:
            return None
        return 1 - self.server_e2e_s / self.client_request_s

    def as_dict(self) -> dict:
        return asdict(self) | {"tokens_per_s": self.tokens_per_s, "client_cpu_share": self.client_cpu_share,
                               "outside_server_share": self.outside_server_share}


def _question(text: str, plan: Plan) -> stream.Call:
    return lambda ep: ep.chat(messages(text), max_tokens=plan.max_tokens, temperature=plan.temperature,
                              stop=list(plan.stop) or None)


def _record(q: Question, done: Completion, plan: Plan, order: int) -> dict:
    g = grade(q.answer, done.text, done.finish_reason, plan.stop)
    timing = {k: v for k, v in done.as_dict().items() if k not in ("chunk_times", "chunk_tokens", "text", "reasoning")}
    return {"question_id": q.id, "category": q.category, "answer": q.answer, "order": order,
            "pred": g.pred, "rule": g.rule, "correct": g.correct, "flag": g.flag,
            "text": done.text, "reasoning": done.reasoning, **timing}


def ask(study: Study, work: Work, log: Callable[[str], None] = print) -> Batch:
    """Ask every question not answered before, inside study.measuring(): a failure (Ctrl-C too) seals
    the run as failed halfway with every answer taken."""
    with study.measuring():
        batch = _ask(study, work, log)
    if work.longest is None:
        return batch
    return replace(batch, longest_prompt_question=work.longest[0], longest_prompt_tokens=work.longest[1])


@dataclass
class _Tally:
    """What the answers so far add up to."""

    answered: int = 0
    right: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    unknown: int = 0  # answers without usage: their tokens, and so the batch's, are unknown
    request_s: float = 0.0
    failures: int = 0
    first_error: str | None = None

    def add(self, rec: dict) -> None:
        self.answered += 1
        self.right += rec["correct"]
        self.unknown += rec["completion_tokens"] is None or rec["prompt_tokens"] is None
        self.tokens += rec["completion_tokens"] or 0
        self.prompt_tokens += rec["prompt_tokens"] or 0
        self.request_s += rec["total_s"] or 0.0

    def line(self, total: int, elapsed: float, rec: dict) -> str:
        return (f"[{self.answered}/{total}] {self.right} right so far; {self.tokens} tokens in {elapsed:.0f} s "
                f"({self.tokens / elapsed:.1f} tok/s); last: {rec['category']}, {rec['pred'] or 'unparsed'}"
                + (f" ({rec['flag']})" if rec["flag"] else ""))


def _ask(study: Study, work: Work, log: Callable[[str], None]) -> Batch:
    """On a failed request nothing new is sent; the answers in flight are awaited and kept, then it raises."""
    plan, run = work.plan, study.run
    for rec in work.reused:
        run.record({**rec, "resumed_from": work.resumed.id})
    todo = work.todo()
    total, step = len(todo), max(1, math.ceil(len(todo) / 40))
    if work.reused:
        log(f"{len(work.reused)} answer(s) reused from {work.resumed.id}; asking the other {total}")
    tally = _Tally()

    def done(outcome: stream.Outcome) -> None:  # on the batch's own thread, one outcome at a time
        q = todo[outcome.index]
        if outcome.error is not None:
            tally.failures += 1
            tally.first_error = tally.first_error or outcome.error
            run.record({"question_id": q.id, "category": q.category, "order": outcome.index, "error": outcome.error})
            return
        rec = _record(q, outcome.answer, plan, outcome.index)
        run.record(rec)  # on disk before the next question is sent
        tally.add(rec)
        if tally.answered % step == 0 or tally.answered == total:
            log(tally.line(total, time.perf_counter() - t0, rec))

    before = study.endpoint.metrics()
    cpu0, t0 = time.process_time(), time.perf_counter()
    stream.batch(study.streaming(), [_question(work.prompts[q.id], plan) for q in todo], plan.concurrency, done,
                 stop_on_error=True)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if tally.first_error is not None:
        raise StudyError(f"{tally.failures} request(s) failed, the first with {tally.first_error}. The "
                         f"{tally.answered} answers received are recorded in {run.path}; to finish, run again with "
                         f"resume_from={run.id!r}.")
    return _batch(tally, work, wall, cpu, _counted(study.endpoint, before, tally.answered))


def _batch(t: _Tally, work: Work, wall: float, cpu: float, delta: metrics.Delta | None) -> Batch:
    completion = None if t.unknown else t.tokens
    d = delta or metrics.Delta({})  # no second scrape: every server figure unknown
    hits, queries = d[metrics.PREFIX_HITS], d.prefix_queries()
    return Batch(t.answered, len(work.reused), t.failures, work.plan.concurrency, wall,
                 None if t.unknown else t.prompt_tokens, completion, cpu, t.request_s,
                 d.histogram(metrics.E2E)[0], d[metrics.GENERATED], d.requests(),
                 hits / queries if hits is not None and queries else None,
                 metrics.interference(d, t.answered, completion) if t.answered else None)


def _counted(endpoint: Endpoint, before: metrics.Snapshot, n: int) -> metrics.Delta | None:
    """The server's counters once all n answers are counted; None where it stopped answering: the figures are
    an addition, and a server that stopped counting must not lose the answers."""
    try:
        return metrics.settled(endpoint.metrics, before, n)
    except EndpointError:
        return None
