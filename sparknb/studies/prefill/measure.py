"""The sweep: one request at a time, shortest prompts first, proven free of prefix-cache hits.

A prefix-cache hit would make prefill look many times faster than it is: every prompt is unique
from its first token, and any hit the server counts stops the run, with the counts, unless hits
were allowed on purpose. A server that does not count hits cannot prove their absence: that is
said in the findings, never read as zero hits.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from ...endpoint import metrics
from ...endpoint.prompts import PromptMaker
from ...errors import CacheHitError
from ...runs.report import Finding, duration, info, warning
from ...runs.schedule import Schedule
from ...runs.study import Study, rep_label
from .plan import Plan
from .tables import frame

UNCHECKED = "prefix-cache hits could not be checked"


@dataclass(frozen=True)
class CacheCount:
    """The server's prefix-cache counters over the whole sweep: read before the first request, after the last."""

    queries: float | None  # prompt tokens looked up in the cache; None: the server does not count them
    hits: float | None  # of those, tokens found there; None: unknown
    restarted: bool = False

    @property
    def exposed(self) -> bool:
        return self.queries is not None and self.hits is not None

    def finding(self) -> Finding:
        if not self.exposed:
            return warning(f"{UNCHECKED} over the whole sweep: the server exposes no prefix-cache counters, so a "
                           "cache hit would not have been seen and any TTFT here may be a cache hit's.")
        return info(f"Prefix cache over the whole sweep (server counters before and after): {self.queries:,.0f} "
                    f"prompt tokens looked up, {self.hits:,.0f} found"
                    + (" (the server restarted meanwhile)" if self.restarted else "") + ".")


def repeating(make: Callable[[int], list[int]]) -> Callable[[int], list[int]]:
    """The same prompt again for each length: what a naive benchmark does, and what the cache serves."""
    made: dict[int, list[int]] = {}

    def prompt(n: int) -> list[int]:
        if n not in made:
            made[n] = make(n)
        return made[n]

    return prompt


def sweep(study: Study, plan: Plan, lengths: Sequence[int],
          prompts: Callable[[int], list[int]] | None = None) -> tuple[pd.DataFrame, CacheCount, dict[int, str]]:
    """All requests, in the plan's order, one at a time (as many as `repetitions auto` asks for); stops at
    the first cache hit not allowed. Returns the measured requests, the cache counters over the sweep, and
    per length why it has the requests it has.

    `prompts` makes the prompt of a given length: fresh ones by default, the same one per length
    where cache hits are allowed on purpose. A failure halfway (a cache hit included) seals the run
    with the reason and every record taken.
    """
    maker = PromptMaker(study.endpoint.tokenize)
    prompts = prompts or (repeating(maker.make) if plan.allow_cache_hits else maker.make)
    order = Schedule(lengths, plan.warmup, plan.repetitions, plan.order, plan.seed, plan.target_width,
                     plan.max_repetitions)
    with study.measuring():
        before = study.endpoint.metrics()
        for k, (length, rep) in enumerate(order, 1):
            prompt = prompts(length)
            # ignore_eos: the answer is exactly output_tokens long, whatever the random text says.
            rec = study.request(
                {"prompt_length": length, "rep": rep, "warmup": rep < 0, "seq": k,
                 "cache_hits_allowed": plan.allow_cache_hits, "load_1m": _load()},
                lambda ep, prompt=prompt: ep.complete(prompt, max_tokens=plan.output_tokens, temperature=0.0,
                                                      ignore_eos=True, reuse_prompt=plan.allow_cache_hits),
            )
            if rep >= 0:
                order.add(length, None if rec["interference"] else rec["ttft_s"])
            print(f"[{k}/{order.planned}] {length} tokens, {rep_label(rep)}: "
                  + _line(rec), flush=True)
            if not plan.allow_cache_hits:
                check_no_cache_hits([rec])
        d = metrics.delta(before, study.endpoint.metrics())
        cache = CacheCount(queries=d.prefix_queries(), hits=d[metrics.PREFIX_HITS], restarted=bool(d.reset))
        records = study.records()
        if not plan.allow_cache_hits:
            check_no_cache_hits(records, cache)
    stopped = order.stopped()
    print(f"{k} requests done. {cache.finding()} " + "; ".join(f"{n:,} tokens: {why}" for n, why in stopped.items()),
          flush=True)
    return frame(records), cache, stopped


def _line(rec: dict) -> str:
    """One request as it completes: the client's TTFT, the server's prefill, and any reason to doubt them."""
    server = rec["server"]
    hits = server.get("prefix_cache_hits")
    return (f"TTFT {duration(rec['ttft_s'])}, server prefill {duration(server.get('prefill_s'))}"
            + (f", CACHE HIT {hits:g} tokens" if hits else "")
            + (f", {UNCHECKED}" if hits is None else "")
            + (f"  !! {rec['interference']}" if rec["interference"] else ""))


def _load() -> float | None:
    """This machine's 1-minute load average: a busy client delays every token it receives."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def check_no_cache_hits(records: Sequence[dict], cache: CacheCount | None = None) -> None:
    """Raise, with the counts, if the server served any prompt token from its prefix cache.

    Requests whose counters are unknown cannot be checked here; findings() says so.
    """
    hit = [r for r in records if ((r.get("server") or {}).get("prefix_cache_hits") or 0) > 0]
    if not hit and not (cache and cache.hits):
        return
    lines = [f"{r.get('prompt_length')}-token prompt, {rep_label(-1 if r.get('warmup') else r.get('rep', 0))}: "
             f"{r['server']['prefix_cache_hits']:g} of {r['server'].get('prefix_cache_queries') or 0:g} prompt tokens "
             "from the cache" for r in hit[:5]]
    more = f" (and {len(hit) - 5} more)" if len(hit) > 5 else ""
    total = (f" Over the sweep the server counted {cache.hits:,.0f} hits in {cache.queries:,.0f} looked-up tokens."
             if cache and cache.exposed else "")
    raise CacheHitError(
        f"PREFIX-CACHE HIT: {len(hit)} request(s) were served partly from the prefix cache: "
        + "; ".join(lines) + more + "." + total
        + " Their TTFT is not a prefill time, so the run stops here (every record so far is kept). Every prompt "
        "is meant to be unique from its first token: is another client sending the same prompts? To show the "
        "cache's effect on purpose, set allow_cache_hits true; the run is then marked as such.")
