"""Sessions in flight, measured: the same replayed sessions at each level, N at once on the asyncio client, the
client checking itself meanwhile (endpoint.keepup), and the capacity search choosing its levels as it goes
(capacity.next_level). Every record of a level carries `level`; the level's own record closes it, with its client
check and, where an SLO is given, its verdict; the search's record ends the run.

A level of N in flight needs N sessions: with fewer, fewer than N are ever in flight, and a copy of a session would
share its prefix with its twin in the server's cache (a cached share no real agent gets). So the levels stop at the
replayed run's session count, refused before the run starts where a sweep asks more (Plan).
"""

from __future__ import annotations

from collections.abc import Callable

from ...endpoint import keepup, stream
from .capacity import at_level, boundary, check, judge, next_level
from .measure import diagnose, many
from .plan import Plan


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
