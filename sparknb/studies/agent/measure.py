"""How the agent study measures: the tools checked on the server before the first session, then each session's
steps sent one session at a time or several in flight (the asyncio client), the server's counters read around all
of them (counted), and, where a step lost its cache, the server's own re-rendering of the prompt to say where.

Before the first session, native mode asks the server twice, with the tools and without (one token each): a
server that refuses `tools` is named with the option that enables them, and one that accepts them but renders the
same prompt without them (the pinned llama-server with --jinja and SmolLM2's own template: 41 tokens both ways,
`/props` supports_tools False) is refused there, before a session is spent.

Sessions in flight (`in_flight` a list, or the capacity search): the same replayed sessions at each level, N at once
on the asyncio client, the client checking itself meanwhile (endpoint.keepup), the search choosing its levels as it
goes (capacity.next_level). Every record of a level carries `level`; the level's own record closes it, with its
client check and, where an SLO is given, its verdict; the search's record ends the run. A level of N needs N
sessions: with fewer, fewer than N are ever in flight, and a copy of a session would share its prefix with its twin
in the server's cache (a cached share no real agent gets); so the levels stop at the replayed run's session count
(a sweep asking more is refused when the plan is built).

A resumed run writes the sessions it reuses first, their records whole (work.Work.kept); a sequential run asks the
rest one at a time, each graded the moment it ends (work.judged), and sends nothing once its sequence decides.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ...endpoint import keepup, metrics, stream
from ...errors import EndpointError, ParamsError, Refused
from ..batch import ask
from .capacity import at_level, boundary, check, judge, next_level
from .figures import cache_block, whole_blocks
from .plan import Plan
from .sessions import Replay, Session
from .work import Work, judged, prepare

PROBE = [{"role": "user", "content": "Change into the folder named 'document'."}]
LOST = 0.5  # a step that kept less than this share of the prompt it had sent before lost its cache


def measure(study, work: Work | Plan) -> list[dict]:
    """The sessions of the work (a plan is prepared here: work.prepare), measured inside study.measuring(); a
    resumed run's reused sessions first, copied whole; a sequential run's asked until its sequence decides."""
    work = prepare(work, study.model.name) if isinstance(work, Plan) else work
    plan, fields = work.plan, {"max_tokens": work.plan.max_tokens, "temperature": work.plan.temperature}
    with study.measuring():
        for r in work.kept() + work.reused:
            study.run.record({**r, "resumed_from": plan.resumed.id})
        runs = replays(plan, fields, study.run.record) if plan.replayed else lives(work, fields, study.run.record)
        study.run.record({"kind": "drawn", "sessions": work.ids or [s.id for s in runs], "source": work.dataset,
                          **blocks_said(study.endpoint)})
        if plan.mode == "native" and runs and not plan.replayed:
            probe_tools(study, runs[0].fields["tools"])
        before, taken = study.endpoint.metrics(), len(study.records())
        if plan.searching or plan.levels:
            sweep(study, plan, lambda record: replays(plan, fields, record))
        elif plan.in_flight == 1:
            for session in (work.live.until_decided(runs) if work.live else runs):
                one(study, session)
                if plan.sequential:
                    judged(study, work, session.id)
        else:
            stream.run(lambda: many(study.streaming(), runs, plan.in_flight, study.run.record))
        study.run.record(counted(study, before, taken))
        if not (plan.searching or plan.levels):
            diagnose(study, runs)
    return study.records()


def blocks_said(ep) -> dict:
    """The blocks the server's prefix cache keeps a prompt in, as it says them (figures.should_cache counts in
    them): vLLM served 1,024 of a 1,074-token prompt sent before, in blocks of 128; unknown where it does not say."""
    try:
        tokens, said = ep.engine.cache_block(ep.metrics_text)
    except EndpointError as e:
        tokens, said = None, f"its /metrics could not be read ({e})"
    return {"cache_block": tokens, "cache_block_said": said}


def lives(work: Work, fields: dict, record) -> list[Session]:
    """The sessions still to ask, in the order asked."""
    return [Session(e, work.plan.mode, work.plan.max_steps, fields, record) for e in work.todo()]


def replays(plan: Plan, fields: dict, record) -> list[Replay]:
    """The live run's sessions, each with its own records, to replay; a replay of a replay is refused."""
    records = plan.replayed.records
    openings = [r for r in records if r.get("kind") == "session"]
    if not openings or any(r.get("replayed") for r in openings):
        raise ParamsError(f"replay_from {plan.replayed.id} is not a live agent run with sessions; name a sealed run "
                          "of live sessions (replay_from empty).")
    return [Replay(o, [r for r in records if r.get("session") == o["session"] and r.get("kind") in ("step", "tools")],
                   fields, record) for o in openings]


def probe_tools(study, tools: list[dict]) -> None:
    """The tools reach the prompt, else refused before any session (see the module's docstring)."""
    ep = study.endpoint
    try:
        bare = study.request({"kind": "probe", "tools": False}, lambda e: e.chat(PROBE, max_tokens=1))
        given = study.request({"kind": "probe", "tools": True}, lambda e: e.chat(PROBE, max_tokens=1, tools=tools))
    except EndpointError as e:
        raise ParamsError(f"The server refused a request with tools ({e}). {ep.engine.tool_parser_fix}; or ask with "
                          "mode='prompt' (BFCL's system prompt, no tools parameter).") from None
    caps = ep.engine.template_caps(ep._ask)
    said = "" if caps is None else f"; its /props chat_template_caps say supports_tools {caps.get('supports_tools')}"
    if given["prompt_tokens"] == bare["prompt_tokens"] or (caps is not None and not caps.get("supports_tools")):
        raise ParamsError(
            f"TOOLS DROPPED IN SILENCE: the server accepted {len(tools)} tools and rendered a prompt of "
            f"{given['prompt_tokens']} tokens, against {bare['prompt_tokens']} without them{said}. Its chat template "
            f"renders no tools, so the model never sees them. Fix: a tool-capable template "
            f"({ep.engine.tool_parser_fix}), or mode='prompt'.")


def one(study, session) -> None:
    """A session's steps one after the other, each step's records written while the next request is out (Run.holding,
    wire.meanwhile). The server's counters are read around all the sessions (counted), not around each step: on an
    H100's host a scrape of llama-server's /metrics took 1.5 ms, half of what a step of 119 ms waited on the client.
    A request the server refused (it answered with an error status) is recorded and ends its turn, as in flight
    (many): llama-server refuses a conversation holding the model's own call cut at max_tokens (500: "Failed to
    parse tool call arguments"), which failed a 20-session run of the real model in its 10th session, and would
    fail it again resumed. Anything else (a lost connection) is recorded, and fails the run, to be resumed."""
    with study.run.holding() as flush:
        steps = session.steps()
        request = next(steps, None)
        while request is not None:
            tag, fields = request
            try:
                answer = answered(tag, study.endpoint.chat(list(session.messages), meanwhile=flush, **fields),
                                  in_flight=1)
            except Refused as e:
                answer = {**tag, "error": f"{type(e).__name__}: {e}"}
            except Exception as e:
                study.run.record({**tag, "error": f"{type(e).__name__}: {e}"})
                raise
            study.run.record(answer)
            request = _next(steps, answer)


def answered(tag: dict, done, **more) -> dict:
    """A step's record, one session at a time or in flight: its answer, and the server's own timings of it."""
    return {**tag, **done.as_dict(), "server": {"per_request": done.server}, **more}


def counted(study, before: metrics.Snapshot, taken: int) -> dict:
    """The server's counters over the sessions (`before` read as they began, `taken` records then) against the
    steps' own sums: whether another client used the server meanwhile, and its prefix-cache hits against the steps'
    per-request cached counts, the server's two counts of one thing (vLLM's hits counter and its usage). A server
    that stopped answering its /metrics leaves every figure unchecked (batch's counted), never the run failed."""
    steps = [r for r in study.records()[taken:] if r.get("kind") == "step" and "error" not in r]
    tokens = sum(r.get("completion_tokens") or 0 for r in steps)
    d = ask.counted(study.endpoint, before, len(steps), tokens) or metrics.Delta({})
    cached = [r.get("cached_tokens") for r in steps]
    return {"kind": "counters", "steps": len(steps), "interference": metrics.interference(d, len(steps), tokens),
            "prefix_cache_hits": d[metrics.PREFIX_HITS], "cached_tokens": None if None in cached else sum(cached),
            "unchecked": metrics.unchecked(d)}


def _next(steps, answer: dict):
    try:
        return steps.send(answer)
    except StopIteration:
        return None


async def many(endpoint: stream.AsyncEndpoint, runs: list, in_flight: int, record) -> None:
    """`in_flight` sessions at once, a new one started as one ends."""
    queue = iter(runs)

    running = [0]  # sessions in flight now: fewer than `in_flight` once the queue runs dry

    async def worker() -> None:
        for session in queue:
            running[0] += 1
            steps = session.steps()
            request = next(steps, None)
            while request is not None:
                tag, fields = request
                try:
                    done = await endpoint.chat(list(session.messages), **fields)
                    answer = answered(tag, done, in_flight=in_flight, running=running[0])
                except EndpointError as e:
                    answer = {**tag, "error": f"{type(e).__name__}: {e}"}
                record(answer)
                request = _next(steps, answer)
            running[0] -= 1

    await asyncio.gather(*(worker() for _ in range(in_flight)))


def diagnose(study, runs: list, level: int | None = None) -> None:
    """Each step that lost its cache: the previous request's prompt and this one's, rendered and tokenized by the
    server itself, and the first token where they differ (none: the server did not keep an unchanged prefix)."""
    done = study.records()
    block, steps = cache_block(done), [r for r in done if r.get("kind") == "step" and "error" not in r
                                          and r.get("level") == level]
    by_session: dict[str, list[dict]] = {}
    for r in steps:
        by_session.setdefault(r["session"], []).append(r)
    for session in runs:
        records = by_session.get(session.id, [])
        for before, after in zip(records, records[1:]):
            if lost(before, after, block) and len(session.sent) == len(records):
                found = where_it_broke(study.endpoint, session, records, before, after)
                study.run.record(found | ({"level": level} if level is not None else {}))


def lost(before: dict, after: dict, block: int | None = 1) -> bool:
    """Less than half of the prompt sent before served from the cache: of its whole blocks, where the server says
    them (on vLLM's CPU build, blocks of 128, a prompt of 127 tokens is never cached); of every token where not."""
    cached, sent = after.get("cached_tokens"), before.get("prompt_tokens")
    whole = whole_blocks(sent, block) if sent and block else sent
    return cached is not None and bool(whole) and cached < LOST * whole


def where_it_broke(ep, session, records: list[dict], before: dict, after: dict) -> dict:
    """The two prompts as the server renders them (its chat template, the session's tools), tokenized by it: the
    first token where they differ, and the text there."""
    upto = records.index(after)
    out = {"kind": "cache_check", "session": session.id, "turn": after["turn"], "step": after["step"],
           "prompt_before": before["prompt_tokens"], "cached": after["cached_tokens"]}
    texts = [ep.engine.render_chat(ep._ask, ep.model, session.sent[i], session.fields.get("tools"))
             for i in (upto - 1, upto)]
    if None in texts:
        return out | {"first_difference": None, "why": f"{ep.engine.name} cannot render a prompt (no /apply-template)"}
    first, second = (ep.tokenize(t) for t in texts)
    at = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), None)
    char = next((i for i, (a, b) in enumerate(zip(*texts)) if a != b), None)
    return out | {"first_difference": at, "rendered_before": len(first),
                  "text_before": texts[0][max(0, char - 60):char + 60] if char is not None else None,
                  "text_after": texts[1][max(0, char - 60):char + 60] if char is not None else None}


def sweep(study, plan: Plan, replays: Callable[[Callable[[dict], None]], list]) -> None:
    """The plan's levels in order, or the capacity search's; `replays(record)` gives the sessions afresh."""
    count = len(replays(lambda r: None))  # the sweep's levels were checked against it (Plan._check_levels)
    if not plan.searching:
        for n in plan.levels:
            level(study, plan, replays, n)
        return
    cap, tried = min(plan.max_in_flight, count), {}
    while (n := next_level(tried, cap)) is not None:
        tried[n] = level(study, plan, replays, n)["verdict"]
    study.run.record({"kind": "capacity", "slo_ttft_p95_ms": plan.slo_ttft_p95_ms,
                      "slo_decode_tok_s": plan.slo_decode_tok_s, "sessions": count, **boundary(tried, cap)})


def level(study, plan: Plan, replays, n: int) -> dict:
    """One level: every replayed session, n at once; then its record (the client's check, the verdict)."""
    def record(r: dict) -> None:
        study.run.record(r | {"level": n})

    runs = replays(record)

    async def measured() -> dict:
        watch = keepup.Watch()
        await many(study.streaming(), runs, n, record)
        return await watch.client()

    client = stream.run(measured)
    steps = [r for r in at_level(study.records(), n) if r.get("kind") == "step"]
    checks = check(steps, client)
    out = {"kind": "level", "level": n, "client": client, "checks": checks,
           **judge(steps, plan.slo_ttft_p95_ms, plan.slo_decode_tok_s, checks["saturated"])}
    if not plan.searching and out["verdict"] != "client":
        out |= {"verdict": None, "why": None}  # no SLO: nothing to judge, the client's check stands
    study.run.record(out)
    diagnose(study, runs, n)
    return out
