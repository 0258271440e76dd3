"""The server's own counters (its /metrics), read around each request, under sparknb's own names.

A client clock cannot see inside the server: how long prefill really took, how many draft tokens
were accepted, whether a prefix-cache hit made a prompt cheap. The difference of two scrapes can.
Each engine (sparknb.engines) maps its metric names onto the names below as a scrape is read, so
nothing past this module knows whether `running` was vLLM's num_requests_running or llama-server's
requests_processing. A figure the engine does not count is absent, and reads as unknown (None).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# Gauges (no suffix: they have no delta) and counters (_total); a timing histogram is a base name, read
# as its _sum and _count. An engine that counts only the seconds (llama-server) gives a _sum with no _count.
RUNNING = "requests_running"
WAITING = "requests_waiting"
KV_USE = "kv_cache_usage"  # a fraction of the KV cache
PREEMPTIONS = "preemptions_total"
GENERATED = "generated_tokens_total"
PROMPT_TOKENS = "prompt_tokens_total"  # every prompt token, cached or not (vLLM)
PROMPT_PROCESSED = "prompt_tokens_processed_total"  # only those it computed, not taken from a cache (llama-server)
PREFIX_QUERIES = "prefix_cache_queries_total"
PREFIX_HITS = "prefix_cache_hits_total"
DRAFTS = "spec_drafts_total"
DRAFT_TOKENS = "spec_draft_tokens_total"
ACCEPTED = "spec_accepted_tokens_total"
ACCEPTED_AT = "spec_accepted_tokens_per_pos_total"
TTFT = "ttft_seconds"
PREFILL = "prefill_seconds"
DECODE = "decode_seconds"
QUEUE = "queue_seconds"
E2E = "e2e_seconds"
HISTOGRAM_PARTS = ("_sum", "_count")


def _name(sample: str, names: Mapping[str, str]) -> str:
    """sparknb's name of a sample, by the engine's map (a histogram's parts by its base); else the sample's own."""
    if sample in names:
        return names[sample]
    for part in HISTOGRAM_PARTS:
        if sample.endswith(part) and sample[: -len(part)] in names:
            return names[sample[: -len(part)]] + part
    return sample


def _key(name: str, labels: dict[str, str], kept_labels: tuple[str, ...]) -> str:
    kept = [f'{k}="{labels[k]}"' for k in kept_labels if k in labels]
    return f"{name}{{{','.join(kept)}}}" if kept else name


@dataclass(frozen=True)
class Snapshot:
    """One scrape, summed over engines, for one served model."""

    values: dict[str, float]

    @classmethod
    def parse(cls, text: str, model: str | None = None, engine=None) -> Snapshot:
        """One scrape read by `engine`'s map (an engines.Engine; None keeps the server's own names), only the
        samples of `model` where the engine labels them by model."""
        names = engine.counters if engine is not None else {}
        model_label = engine.model_label if engine is not None else None
        kept_labels = engine.metric_labels if engine is not None else ()
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(("_bucket", "_created")):
                    continue
                if model is not None and model_label and sample.labels.get(model_label, model) != model:
                    continue
                key = _key(_name(sample.name, names), sample.labels, kept_labels)
                values[key] = values.get(key, 0.0) + sample.value
        return cls(values)

    def __getitem__(self, name: str) -> float | None:
        """None where the server does not expose the metric: unknown, never zero."""
        return self.values.get(name)

    def has(self, name: str) -> bool:
        return any(k == name or k.startswith(name + "{") for k in self.values)

    def speculates(self, stated: bool | None) -> bool | None:
        """Whether the server speculates: where its engine can tell (`stated`: llama-server's slots), that; else
        whether it exposes draft counters (vLLM only with a speculative config); None without a scrape.
        llama-server exposes its draft counters always, at zero without a draft model."""
        if stated is not None:
            return stated
        return self.has(DRAFTS) if self.values else None

    def load(self) -> dict[str, float | None]:
        """Requests in flight, for the guard; None where the gauge could not be read."""
        return {"running": self[RUNNING], "waiting": self[WAITING]}


@dataclass(frozen=True)
class Delta:
    """What happened between two scrapes. A counter that went down means the server restarted."""

    values: dict[str, float]
    reset: list[str] = field(default_factory=list)

    def __getitem__(self, name: str) -> float | None:
        """None where neither scrape had the counter: the server does not count it, so it is unknown."""
        return self.values.get(name)

    def prefix_queries(self) -> float | None:
        """Prompt tokens looked up in the prefix cache: the server's count, else (llama-server) the tokens
        it computed plus those it found; None where neither is counted."""
        if self[PREFIX_QUERIES] is not None:
            return self[PREFIX_QUERIES]
        processed, hits = self[PROMPT_PROCESSED], self[PREFIX_HITS]
        return processed + hits if processed is not None and hits is not None else None

    def per_position(self) -> list[float]:
        pos = {int(k.split('"')[1]): v for k, v in self.values.items() if k.startswith(ACCEPTED_AT + "{")}
        return [pos[i] for i in sorted(pos)]

    def spec_decode(self) -> dict[str, float | list[float] | None]:
        """Tokens per step = generated / (generated - accepted): every step of the target yields one token of its
        own plus the draft tokens it accepted. Acceptance = accepted / draft tokens.

        Not 1 + accepted / drafts: `drafts` counts only the steps that drafted, and an n-gram lookup drafts
        only where the text repeats, so that figure gave 15.5 tokens per step for a JSON answer whose server
        counted 1.2 to 1.8 (llama-server, ngram-simple). Without the counters every figure is None (unknown);
        with them and no draft, one token per step; with drafts but no count of generated tokens, unknown.
        """
        drafts, draft_tokens, accepted = self[DRAFTS], self[DRAFT_TOKENS], self[ACCEPTED]
        per_pos = self.per_position()
        known = drafts is not None and accepted is not None
        return {
            "drafts": drafts,
            "draft_tokens": draft_tokens,
            "accepted_tokens": accepted,
            "tokens_per_step": tokens_per_step(self[GENERATED], accepted) if known and drafts else
            1.0 if known else None,
            "acceptance_rate": accepted / draft_tokens if known and draft_tokens else None,
            "acceptance_per_position": [a / drafts for a in per_pos] if known and drafts else [],
        }

    def histogram(self, name: str) -> tuple[float | None, float | None]:
        """(seconds summed, observations) of a timing histogram; (None, None) where it is not exposed."""
        return self[name + "_sum"], self[name + "_count"]

    def mean(self, name: str) -> float | None:
        """Seconds per observation of a timing histogram over the interval, or None where unknown."""
        total, count = self.histogram(name)
        return total / count if total is not None and count else None

    def requests(self) -> float | None:
        """Requests the server finished in the interval."""
        return self[E2E + "_count"]


def tokens_per_step(generated: float | None, accepted: float | None) -> float | None:
    """Tokens per step of the target model (see Delta.spec_decode); None where either count is unknown."""
    if generated is None or accepted is None or generated <= accepted:
        return None
    return generated / (generated - accepted)


def delta(before: Snapshot, after: Snapshot) -> Delta:
    values, reset = {}, []
    for key in before.values.keys() | after.values.keys():
        if not _is_cumulative(key):
            continue
        a, b = after[key], before[key]
        if a is None:  # gone from the later scrape: nothing can be said of it
            continue
        if b is None:  # first exposed by the later scrape (llama-server shows some counters once used)
            values[key] = a
        elif a < b:  # restarted in between: all we know is what it counted since
            reset.append(key)
            values[key] = a
        else:
            values[key] = a - b
    return Delta(values, sorted(reset))


def _is_cumulative(key: str) -> bool:
    name = key.split("{")[0]
    return name.endswith(("_total", "_sum", "_count"))


def settled(scrape: Callable[[], Snapshot], before: Snapshot, requests: int = 1, settle_s: float = 5.0,
            tokens: int | None = None) -> Delta:
    """Servers update their counters just after the answer is sent: scrape until `requests` are counted, or,
    on a server that counts no requests (llama-server), until it counted the `tokens` the client received.

    A server with neither counter cannot settle: the first delta is returned as it is.
    """
    deadline = time.monotonic() + settle_s
    while True:
        d = delta(before, scrape())
        done, generated = d.requests(), d[GENERATED]
        if done is not None:
            if done >= requests:
                return d
        elif tokens is None or generated is None or generated >= tokens:
            return d
        if time.monotonic() > deadline:
            return d
        time.sleep(0.02)


def interference(d: Delta, requests: int, completion_tokens: int | None) -> str | None:
    """Why the server's counters cannot be these requests' alone, or None where they can (or cannot be told)."""
    if d.reset:
        return f"the server restarted during the request (counters went down: {', '.join(d.reset[:3])})"
    n = d.requests()
    if n is not None and n != requests:
        return (f"the server finished {n:g} requests while {'this one' if requests == 1 else f'these {requests}'} "
                "ran; another client was using it")
    generated = d[GENERATED]
    if generated is not None and completion_tokens is not None and generated != completion_tokens:
        return (f"the server generated {generated:g} tokens while {'this request' if requests == 1 else 'the requests'} "
                f"received {completion_tokens}; another client was using it")
    return None


def unchecked(d: Delta, known: Iterable[str] = ()) -> list[str]:
    """The cross-checks this server's counters cannot support, said in words rather than read as zero;
    `known`: the figures (by these names) that the request's own timings gave instead."""
    given = set(known)
    missing = [(GENERATED, "the tokens the server generated"), (PREFIX_HITS, "prefix-cache hits"),
               (DECODE + "_sum", "the server's own decode time")]
    told = d.requests() is not None or d[GENERATED] is not None
    unknown = [what for name, what in missing if d[name] is None and name not in given]
    return ([] if told else ["whether another client used the server"]) + unknown
