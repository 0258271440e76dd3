"""Whether the asyncio client kept up: the one self-check every study that drives it shares (the load sweep, the
agent study's sessions in flight).

While requests run, the loop's own lag is probed (how late it wakes from a short sleep: the time by which a chunk's
stamp can be late) and its CPU share measured; afterwards the client's timings of the same requests are set against
the server's own (`agreement`). A level whose client could not keep up (`saturation`) is the client's limit, never
reported as the server's.
"""

from __future__ import annotations

import asyncio
import time

LOOP_CPU_LIMIT = 0.5  # a loop busy more than half the time queues chunks behind each other
LAG_LIMIT_S = 0.005  # a loop waking later than this (p99) stamps chunks late by as much
AGREEMENT_PCT = 2.0
PROBE_S = 0.01  # the lag probe's sleep


async def probe(lags: list[float]) -> None:
    """How late the loop wakes from a short sleep, until cancelled."""
    while True:
        t = time.perf_counter()
        await asyncio.sleep(PROBE_S)
        lags.append(time.perf_counter() - t - PROBE_S)


def spread(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    ordered = sorted(values)
    return {"n": len(ordered), "p50": ordered[len(ordered) // 2], "p99": ordered[int(0.99 * (len(ordered) - 1))],
            "max": ordered[-1]}


class Watch:
    """The client's view of itself over a span of the loop: `client()` gives its loop's CPU share, the process's,
    and the lag probe's spread (what `saturation` reads as level["client"])."""

    def __init__(self) -> None:
        self.lags: list[float] = []
        self.t0, self.loop_cpu, self.cpu = time.perf_counter(), time.thread_time(), time.process_time()
        self.task = asyncio.ensure_future(probe(self.lags))

    async def client(self) -> dict:
        wall = time.perf_counter() - self.t0
        out = {"loop_cpu_share": (time.thread_time() - self.loop_cpu) / wall,
               "process_cpu_share": (time.process_time() - self.cpu) / wall}
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        return out | {"lags_s": spread(self.lags)}


def saturation(level: dict, checks: dict | None = None) -> str | None:
    """Why the client could not keep up at this level, or None where it did.

    A busy loop is the client's own limit. A loop that woke late may only have shared a stall of the
    whole machine with the server: where the server's own timings of the same requests agree with the
    client's (decode and end to end within AGREEMENT_PCT), the stall is in both clocks and the figures
    hold; where they disagree, or cannot be had, the level is the client's.
    """
    client = level.get("client") or {}
    share, lag = client.get("loop_cpu_share"), (client.get("lags_s") or {}).get("p99")
    why = []
    if share is not None and share > LOOP_CPU_LIMIT:
        why.append(f"its event loop was busy {100 * share:.0f}% of the time (limit {100 * LOOP_CPU_LIMIT:.0f}%)")
    values = [(checks or {}).get(k) for k in ("decode vs server %", "E2E vs server %")]
    if lag is not None and lag > LAG_LIMIT_S and (None in values or any(abs(v) > AGREEMENT_PCT for v in values)):
        why.append(f"its event loop woke {1000 * lag:.1f} ms late (p99; limit {1000 * LAG_LIMIT_S:.0f} ms) and "
                   + ("no timings of the server could show its clock was still right" if None in values else
                      f"its timings differ from the server's own by more than {AGREEMENT_PCT:g}%"))
    return "; ".join(why) or None


def agreement(level: dict, requests: list[dict]) -> dict:
    """The client's timings against the server's own for the same requests: all the level's answered
    requests, warmup included, since the server's counters around the level cover exactly those.

    Decode time against the server's own per-request decode time (vLLM's per-request metrics, llama-server's
    predicted_ms; else vLLM's decode histogram); end to end
    against its e2e histogram, which runs from the request's arrival at the API server; TTFT as the
    milliseconds beyond the server's own TTFT histogram (HTTP, a fixed cost, not a share); and the
    milliseconds the API server held a request before its engine queued it (its TTFT histogram less the
    per-request queue + TTFT), which grows as the API server's own loop gets busy.
    """
    view = level.get("server") or {}
    answered = [r for r in requests if "error" not in r]

    def timed(*fields: str) -> bool:  # every answered request carries the server's own figure (its engine's)
        return bool(answered) and all(all((r.get("server") or {}).get(k) is not None for k in fields)
                                      for r in answered)

    def average(field: str, server: bool = False) -> float | None:
        return mean([(r["server"] if server else r).get(field) for r in answered]) if answered else None

    per_request, decode_timed = timed("queue_s", "ttft_s", "decode_s"), timed("decode_s")
    engine_ttft = average("queue_s", True) + average("ttft_s", True) if per_request else None
    decode = average("decode_s", True) if decode_timed else view.get("decode_s")
    source = "per-request metrics" if per_request else "per-request timings" if decode_timed else None
    if view.get("e2e_s") is not None or view.get("ttft_s") is not None:
        source = f"{source} + histograms" if source else "histograms (level means)"
    return {"decode vs server %": _over(average("decode_s"), decode),
            "E2E vs server %": _over(average("last_token_s"), view.get("e2e_s")),
            "TTFT beyond server ms": _ms(average("ttft_s"), view.get("ttft_s")),
            "API server ms": _ms(view.get("ttft_s"), engine_ttft), "server truth": source}


def _over(client: float | None, server: float | None) -> float | None:
    return 100 * (client / server - 1) if client is not None and server else None


def _ms(a: float | None, b: float | None) -> float | None:
    return 1000 * (a - b) if a is not None and b is not None else None


def mean(values: list) -> float | None:
    return None if not values or None in values else sum(values) / len(values)
