"""The sweep: each level's requests, the server's gauges sampled meanwhile, and the client checking itself.

All of a level runs on one event loop (sparknb.endpoint.stream): the requests, a sampler of the server's
/metrics (requests running and waiting, KV-cache use, preemptions, and its count of generated tokens,
which checks the level's tok/s over any window), and a probe of the loop's own lag. The server is read
once more just before the first request and once just after the last answer, so that every window of
the level lies between two readings. Both watchers are cancelled and awaited before the level ends:
none is left behind to be destroyed with the loop. Every request is recorded as it ends, by a writer
thread, so the loop never waits on a disk; then the level itself, with the share of the time its loop
was busy, how late it woke, and the server's counters around the whole level.
"""

from __future__ import annotations

import asyncio
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator

from ...endpoint import keepup, metrics, stream
from ...errors import EndpointError
from ...runs import resume
from ...runs.study import Study, server_view
from .plan import Level, Plan, kv_capacity
from .prompts import Prompts
from .tables import level_line

SAMPLE_S = 0.5  # how often the server's gauges are read during a level
GIVE_UP_AFTER = 4  # an open-loop level whose first this many requests all failed sends no more
GAUGES = (metrics.RUNNING, metrics.WAITING, metrics.KV_USE, metrics.PREEMPTIONS,
          metrics.GENERATED)  # a sample: [t, *GAUGES]
DROPPED = ("text", "reasoning")  # random-weight noise at best; the lengths are kept


def finished(records: list[dict]) -> list[dict]:
    """The levels of a run that ended (their level record was written), with their requests: what a resumed run
    reuses. A level cut short is measured again whole: its requests alone say nothing of the level."""
    done = {r["level_name"] for r in records if r.get("kind") == "level"}
    return [r for r in records if r.get("kind") in ("level", "request") and r.get("level_name") in done]


def reusable(plan: Plan, model: str) -> list[dict]:
    """The finished levels of plan.resume_from, checked against this run's settings before anything starts."""
    return resume.reusable(plan, model, finished)


def sweep(study: Study, plan: Plan, reused: list[dict] = (), *, on_chunk: Callable[[], None] | None = None,
          log: Callable[[str], None] = print) -> tuple[list[dict], str | None]:
    """Every level of the plan, in order, but those `reused` from the run it resumes; returns the run's records and
    a note on levels left out. `on_chunk` is the test hook that loads the client on purpose (stream.AsyncEndpoint)."""
    endpoint = study.streaming(on_chunk)
    capacity = kv_capacity(study.endpoint, plan.source.longest + plan.output_tokens)
    levels, note = plan.levels(capacity)
    resume.copy(study, plan, list(reused), log)
    done = {r["level_name"] for r in reused}
    levels = [lv for lv in levels if lv.name not in done]
    log(note or f"Measuring {', '.join(lv.name for lv in levels) or 'no level: every one is reused'} with "
        f"{plan.source.kind} prompts.")
    writer = _Writer(study.run)
    with study.measuring():
        try:
            for k, level in enumerate(levels, 1):
                rec, requests = _measure(study, endpoint, plan, level, writer)
                rec |= {"kv_capacity": capacity, "loaded_on_purpose": on_chunk is not None}
                writer.put(rec)
                log(f"[{k}/{len(levels)}] " + level_line(rec, requests, plan.slo_ttft_s, plan.slo_tpot_s,
                                                                 plan.percentiles))
        finally:
            writer.close()
    return study.records(), note


def _measure(study: Study, endpoint: stream.AsyncEndpoint, plan: Plan, level: Level,
             writer: _Writer) -> tuple[dict, list[dict]]:
    """One level, with the server's counters read around it: its level record and its request records."""
    before = study.endpoint.metrics()
    requests: list[dict] = []

    def keep(outcome: stream.Outcome) -> None:
        requests.append(request_record(outcome, level))
        writer.put(requests[-1])

    rec = stream.run(lambda: _level(endpoint, level, plan, keep))
    answered = [r for r in requests if "error" not in r]
    if requests and not answered:  # every request the level sent failed: the reason, not an empty table
        raise EndpointError(f"{level.name}: every one of the {len(requests)} request(s) sent failed, so the sweep "
                            f"stops here (each is recorded). The first: {requests[0]['error']}")
    tokens = [r["completion_tokens"] for r in answered]
    total = None if None in tokens else sum(tokens)
    delta = metrics.settled(study.endpoint.metrics, before, len(answered), tokens=total)
    return rec | {"server": server_view(delta), "interference": metrics.interference(
        delta, len(answered), total)}, requests


def request_record(outcome: stream.Outcome, level: Level) -> dict:
    rec = {"kind": "request", "level_name": level.name, "mode": level.mode, "level": level.value,
           "index": outcome.index, "warmup": outcome.index < level.warmup, "sent_s": outcome.sent_s}
    if outcome.error is not None:
        return rec | {"error": outcome.error}
    return rec | {k: v for k, v in outcome.answer.as_dict().items() if k not in DROPPED}


async def _level(endpoint: stream.AsyncEndpoint, level: Level, plan: Plan,
                 keep: Callable[[stream.Outcome], None]) -> dict:
    priority = stream.ahead_of_others()  # as stream.run asked already: this says what was granted
    samples: list[list] = []
    start = time.perf_counter()
    await _read(endpoint, start, samples)  # before the first request: a reading at a negative time
    t0, loop_cpu, cpu = time.perf_counter(), time.thread_time(), time.process_time()
    for sample in samples:
        sample[0] += start - t0
    lags: list[float] = []
    watchers = [asyncio.ensure_future(_sample(endpoint, t0, samples)), asyncio.ensure_future(keepup.probe(lags))]
    try:
        if level.mode == "concurrency":
            sent = await stream.closed_loop(endpoint, _calls(plan.source, level), int(level.value), keep, t0=t0,
                                            give_up_after=int(level.value))
        else:
            offsets = arrivals(level, plan.seed)
            sent = await open_loop(endpoint, (plan.source.call(i) for i in range(len(offsets))), offsets, keep, t0=t0)
        wall = time.perf_counter() - t0
        client = {"priority": priority, "loop_cpu_share": (time.thread_time() - loop_cpu) / wall,
                  "process_cpu_share": (time.process_time() - cpu) / wall}
    finally:
        await stream.cancelled(watchers)
    await _read(endpoint, t0, samples)  # after the last answer
    return {"kind": "level", "level_name": level.name, "mode": level.mode, "level": level.value,
            "warmup_requests": level.warmup, "count_rule": level.count_rule, "sent": len(sent), "wall_s": wall,
            "samples": samples, "client": client | {"lags_s": keepup.spread(lags)}}


def _calls(prompts: Prompts, level: Level) -> Iterator[stream.Call]:
    """The level's requests, made as they are sent: the warmup, then as many as the level measures."""
    index, began = 0, None
    while True:
        if index == level.warmup:
            began = time.perf_counter()
        if level.done(index, None if began is None else time.perf_counter() - began):
            return
        yield prompts.call(index)
        index += 1


def arrivals(level: Level, seed: int) -> list[float]:
    """Poisson arrivals at the level's rate, seeded: seconds from the level's start of each request."""
    rng = random.Random(f"{seed}/{level.value}")
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(level.value)
        if level.done(len(out), t - out[level.warmup] if len(out) > level.warmup else None):
            return out
        out.append(t)


async def open_loop(endpoint: stream.AsyncEndpoint, calls: Iterable[stream.Call], offsets: Iterable[float],
                    on_done: Callable[[stream.Outcome], None], *, t0: float) -> list[stream.Outcome]:
    """Send each request at its own time, however many are in flight: arrivals that do not wait for
    answers, as independent users make them."""
    ended: list[stream.Outcome] = []
    hopeless = asyncio.Event()  # the first GIVE_UP_AFTER requests all failed: send no more (stream.hopeless)

    async def at(offset: float, index: int, call: stream.Call) -> stream.Outcome | None:
        await asyncio.sleep(max(0.0, t0 + offset - time.perf_counter()))
        if hopeless.is_set():
            return None
        outcome = await stream.send(endpoint, index, call, t0)
        ended.append(outcome)
        on_done(outcome)
        if stream.hopeless(ended, GIVE_UP_AFTER):
            hopeless.set()
        return outcome

    tasks = [asyncio.ensure_future(at(offset, i, call)) for i, (call, offset) in enumerate(zip(calls, offsets))]
    try:
        return [o for o in await asyncio.gather(*tasks) if o is not None]
    finally:
        await stream.cancelled(tasks)


async def _sample(endpoint: stream.AsyncEndpoint, t0: float, samples: list[list]) -> None:
    """A reading of the server every SAMPLE_S, until cancelled."""
    while True:
        await _read(endpoint, t0, samples)
        await asyncio.sleep(SAMPLE_S)


async def _read(endpoint: stream.AsyncEndpoint, t0: float, samples: list[list]) -> None:
    """[seconds, *GAUGES]: the server's gauges and counters, stamped halfway through the reading (seconds
    from t0); None where unread, the reason after them. A missed sample is a gap, not a failed level."""
    sent = time.perf_counter()
    try:
        text = await endpoint.get("/metrics")
        t = (sent + time.perf_counter()) / 2 - t0
        lines = [line for line in text.decode().splitlines() if line.startswith(_gauge_lines(endpoint.engine))]
        snap = metrics.Snapshot.parse("\n".join(lines) + "\n", endpoint.model, endpoint.engine)
        samples.append([t, *(snap[g] for g in GAUGES)])
    except Exception as e:
        samples.append([sent - t0, *(None for _ in GAUGES), f"{type(e).__name__}: {e}"])


def _gauge_lines(engine) -> tuple[str, ...]:
    """The starts of the /metrics lines that hold GAUGES, by the engine's own names (labelled or not)."""
    raw = [name for name, ours in engine.counters.items() if ours in GAUGES]
    return tuple(name + end for name in raw for end in ("{", " "))


class _Writer:
    """Records written by a thread of their own, in order: Run.record syncs each line to disk, and the
    event loop must not wait on that."""

    def __init__(self, run):
        self.run, self.queue, self.error = run, queue.Queue(), None
        self.thread = threading.Thread(target=self._work, name="sparknb-records", daemon=True)
        self.thread.start()

    def put(self, record: dict) -> None:
        self.queue.put(record)

    def _work(self) -> None:
        stream.ahead_of_others()  # an ordinary thread preempted while it holds the GIL would hold up the loop
        while (record := self.queue.get()) is not None:
            try:
                self.run.record(record)
            except Exception as e:  # raised again where the sweep waits for the writer
                self.error = self.error or e

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()
        if self.error is not None:
            raise self.error
