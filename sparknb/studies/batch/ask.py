"""Asking in flight: every item not answered before, `concurrency` requests at a time, each answer graded and on
disk the moment it is graded.

The requests go out through stream.batch, the asyncio client the load study uses (microseconds a chunk,
and the server's own timings of each answer kept). An answer is graded on the batch's own thread, or,
where grading is slow (a program run in a sandbox), by a pool of `graders` threads beside the requests;
its record goes to disk under one lock, so lines never interleave. A failed request stops new ones: the
answers in flight are awaited and graded, then it raises. On Ctrl-C the answers whose grading had not
started are kept too, unmarked, and `resume_from` asks them again. The batch figures come with the
server's counters around the whole batch, which say whether anything else used the server meanwhile.

A sequential run (`work.live`) sends no question once its sequence has decided, and awaits each grade before
the next question goes out: a sandboxed grade takes longer than a fast server's answer, and asking ahead of the
grades asked 18 HumanEval problems where the sequence had decided after 4 (concurrency 1, two sandboxes).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, replace
from typing import Any

from ...endpoint import metrics, stream
from ...endpoint.client import Endpoint
from ...endpoint.completion import Completion
from ...errors import EndpointError, StudyError
from ...runs.study import Study


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
    server_e2e_s: float | None  # the same requests as the server timed them, summed
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
        """The share of request time, as the client saw it, that the server's own clock does not cover."""
        if not self.server_e2e_s or not self.client_request_s:
            return None
        return 1 - self.server_e2e_s / self.client_request_s

    def as_dict(self) -> dict:
        return asdict(self) | {"tokens_per_s": self.tokens_per_s, "client_cpu_share": self.client_cpu_share,
                               "outside_server_share": self.outside_server_share}


@dataclass(frozen=True)
class Questions:
    """What a graded study hands the batch. `record` grades one answer and returns what goes to disk: the one
    place a grading rule is applied while asking."""

    items: Sequence[Any]  # what to ask, in order; an item's index is its record's `order`
    call: Callable[[Any], stream.Call]
    record: Callable[[Any, Completion, int], dict]
    named: Callable[[Any], dict]  # the fields that name an item in its record, e.g. its question's id
    right: str  # the record's field that says the answer was right
    verb: str  # "right", "passed": the progress line's word for it
    last: Callable[[dict], str]  # the progress line's account of the last answer
    noun: str = "answer(s)"  # what resume reuses
    graders: int = 0  # threads grading beside the requests; 0 grades on the batch's own thread
    ungraded: Callable[[Any, Completion, int], dict] | None = None  # the record of an answer never graded


@dataclass
class Tally:
    """What the answers so far add up to; added to under the batch's lock."""

    answered: int = 0
    right: int = 0
    tokens: int = 0
    prompt_tokens: int = 0
    unknown: int = 0  # answers without usage: their tokens, and so the batch's, are unknown
    request_s: float = 0.0
    failures: int = 0
    first_error: str | None = None

    def add(self, rec: dict, right: str) -> None:
        self.answered += 1
        self.right += bool(rec[right])
        self.unknown += rec["completion_tokens"] is None or rec["prompt_tokens"] is None
        self.tokens += rec["completion_tokens"] or 0
        self.prompt_tokens += rec["prompt_tokens"] or 0
        self.request_s += rec["total_s"] or 0.0

    def fail(self, error: str) -> None:
        self.failures += 1
        self.first_error = self.first_error or error

    def line(self, total: int, elapsed: float, rec: dict, q: Questions) -> str:
        return (f"[{self.answered}/{total}] {self.right} {q.verb} so far; {self.tokens} tokens in {elapsed:.0f} s "
                f"({self.tokens / elapsed:.1f} tok/s); last: {q.last(rec)}"
                + (f" ({rec['flag']})" if rec.get("flag") else ""))


def ask(study: Study, work, q: Questions, log: Callable[[str], None] = print) -> tuple[Batch, float]:
    """Ask every item of `q` inside study.measuring(): a failure (Ctrl-C too) seals the run as failed halfway
    with every record taken. `work` brings the reused records, the run they came from (`resumed`), the
    concurrency (`plan.concurrency`) and the longest prompt measured (`longest`). Returns the batch and how
    long the run waited for grades after the last answer."""
    with study.measuring():
        batch, lag = _ask(study, work, q, log)
    if work.longest is None:
        return batch, lag
    return replace(batch, longest_prompt_question=work.longest[0], longest_prompt_tokens=work.longest[1]), lag


def _ask(study: Study, work, q: Questions, log: Callable[[str], None]) -> tuple[Batch, float]:
    run, lock, todo = study.run, threading.Lock(), q.items
    for rec in work.reused:
        run.record({**rec, "resumed_from": work.resumed.id})
    total, step = len(todo), max(1, math.ceil(len(todo) / 40))
    if work.reused:
        log(f"{len(work.reused)} {q.noun} reused from {work.resumed.id}; asking the other {total}")
    tally, pending = Tally(), {}
    live = getattr(work, "live", None)  # a sequential run: no question is sent once its sequence has decided

    def graded(index: int, answer: Completion) -> None:  # on the batch's thread, or a grader's
        rec = q.record(todo[index], answer, index)
        with lock:
            run.record(rec)  # on disk before the next question is sent, where graded on the batch's thread
            tally.add(rec, q.right)
            if live is not None:
                live.add(rec[live.key], rec[q.right])
            if tally.answered % step == 0 or tally.answered == total:
                log(tally.line(total, time.perf_counter() - t0, rec, q))

    def done(outcome: stream.Outcome) -> None:  # on the batch's own thread, one outcome at a time
        if outcome.error is not None:
            with lock:
                tally.fail(outcome.error)
                run.record({**q.named(todo[outcome.index]), "order": outcome.index, "error": outcome.error})
        elif pool is None:
            graded(outcome.index, outcome.answer)
        else:
            future = pool.submit(graded, outcome.index, outcome.answer)
            pending[future] = outcome
            if live is not None:  # the sequence decides on grades: the next question waits for this one's
                wait([future])

    before = study.endpoint.metrics()
    cpu0, t0 = time.process_time(), time.perf_counter()
    pool = ThreadPoolExecutor(q.graders, thread_name_prefix="batch-grader") if q.graders else None
    try:
        calls = (q.call(item) for item in todo)
        stream.batch(study.streaming(), live.until_decided(calls) if live else list(calls), work.plan.concurrency, done,
                     stop_on_error=True)
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        wait(pending)  # on the futures: a thread's join interrupted by Ctrl-C can return early when asked again
    except BaseException:
        _keep_ungraded(pending, q, run, lock)
        wait(pending)  # the grades under way end (a program within its timeout) and are recorded
        raise
    finally:
        if pool is not None:
            pool.shutdown(wait=False)
    lag = time.perf_counter() - t0 - wall
    _raise_failures(tally, [f.exception() for f in pending if f.exception() is not None], run)
    return figures(tally, len(work.reused), work.plan.concurrency, wall, cpu,
                   counted(study.endpoint, before, tally.answered)), lag


def _raise_failures(tally: Tally, broken: list[BaseException], run) -> None:
    if broken:
        raise StudyError(f"Grading failed for {len(broken)} answer(s), the first with {broken[0]!r}; the answers "
                         f"graded are in {run.path}.") from broken[0]
    if tally.first_error is not None:
        raise StudyError(f"{tally.failures} request(s) failed, the first with {tally.first_error}. The "
                         f"{tally.answered} answers received are graded and recorded in {run.path}; to finish, run "
                         f"again with resume_from={run.id!r}.")


def _keep_ungraded(pending: dict[Future, stream.Outcome], q: Questions, run, lock: threading.Lock) -> None:
    """Answers whose grading had not started when the run stopped: recorded as they came, without a verdict."""
    for future, outcome in list(pending.items()):
        if q.ungraded is not None and future.cancel():
            with lock:
                run.record(q.ungraded(q.items[outcome.index], outcome.answer, outcome.index))


def figures(t: Tally, reused: int, concurrency: int, wall: float, cpu: float, delta: metrics.Delta | None) -> Batch:
    """The batch's figures from the tally and the server's counters around it (None: every server figure unknown)."""
    completion = None if t.unknown else t.tokens
    d = delta or metrics.Delta({})
    hits, queries = d[metrics.PREFIX_HITS], d.prefix_queries()
    return Batch(t.answered, reused, t.failures, concurrency, wall,
                 None if t.unknown else t.prompt_tokens, completion, cpu, t.request_s,
                 d.histogram(metrics.E2E)[0], d[metrics.GENERATED], d.requests(),
                 hits / queries if hits is not None and queries else None,
                 metrics.interference(d, t.answered, completion) if t.answered else None)


def counted(endpoint: Endpoint, before: metrics.Snapshot, n: int, tokens: int | None = None) -> metrics.Delta | None:
    """The server's counters once all n answers (or, on a server that counts no requests, their `tokens`) are
    counted; None where it stopped answering: the figures are an addition, and a server that stopped counting must
    not lose the answers."""
    try:
        return metrics.settled(endpoint.metrics, before, n, tokens=tokens)
    except EndpointError:
        return None
