"""The server's own counters (vLLM's /metrics), read around each request.

A client clock cannot see inside the server: how long prefill really took, how many draft tokens
were accepted, whether a prefix-cache hit made a prompt cheap. The difference of two scrapes can.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

KEPT_LABELS = ("position",)  # the per-position acceptance counters are told apart by this label

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
ACCEPTED_AT = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
GENERATED = "vllm:generation_tokens_total"
TTFT = "vllm:time_to_first_token_seconds"
PREFILL = "vllm:request_prefill_time_seconds"
DECODE = "vllm:request_decode_time_seconds"
QUEUE = "vllm:request_queue_time_seconds"
E2E = "vllm:e2e_request_latency_seconds"


def _key(name: str, labels: dict[str, str]) -> str:
    kept = [f'{k}="{labels[k]}"' for k in KEPT_LABELS if k in labels]
    return f"{name}{{{','.join(kept)}}}" if kept else name


@dataclass(frozen=True)
class Snapshot:
    """One scrape, summed over engines, for one served model."""

    values: dict[str, float]

    @classmethod
    def parse(cls, text: str, model: str | None = None) -> Snapshot:
        values: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.endswith(("_bucket", "_created")):
                    continue
                if model is not None and sample.labels.get("model_name", model) != model:
                    continue
                key = _key(sample.name, sample.labels)
                values[key] = values.get(key, 0.0) + sample.value
        return cls(values)

    def __getitem__(self, name: str) -> float | None:
        """None where the server does not expose the metric: unknown, never zero."""
        return self.values.get(name)

    def has(self, name: str) -> bool:
        return any(k == name or k.startswith(name + "{") for k in self.values)

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

    def per_position(self) -> list[float]:
        pos = {int(k.split('"')[1]): v for k, v in self.values.items() if k.startswith(ACCEPTED_AT + "{")}
        return [pos[i] for i in sorted(pos)]

    def spec_decode(self) -> dict[str, float | list[float] | None]:
        """Tokens per step = 1 + accepted / drafts; acceptance = accepted / draft tokens.

        Without the counters every figure is None (unknown); with them and no draft, one token per step.
        """
        drafts, draft_tokens, accepted = self[DRAFTS], self[DRAFT_TOKENS], self[ACCEPTED]
        per_pos = self.per_position()
        known = drafts is not None and accepted is not None
        return {
            "drafts": drafts,
            "draft_tokens": draft_tokens,
            "accepted_tokens": accepted,
            "tokens_per_step": (1.0 + accepted / drafts if drafts else 1.0) if known else None,
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


def delta(before: Snapshot, after: Snapshot) -> Delta:
    values, reset = {}, []
    for key in before.values.keys() | after.values.keys():
        if not _is_cumulative(key):
            continue
        a, b = after[key], before[key]
        if a < b:  # restarted in between: all we know is what it counted since
            reset.append(key)
            values[key] = a
        else:
            values[key] = a - b
    return Delta(values, sorted(reset))


def _is_cumulative(key: str) -> bool:
    name = key.split("{")[0]
    return name.endswith(("_total", "_sum", "_count"))


def settled(scrape: Callable[[], Snapshot], before: Snapshot, requests: int = 1, settle_s: float = 5.0) -> Delta:
    """vLLM updates its counters just after the answer is sent: scrape until `requests` are counted.

    A server without the request counter cannot settle: the first delta is returned as it is.
    """
    deadline = time.monotonic() + settle_s
    while True:
        d = delta(before, scrape())
        done = d.requests()
        if done is None or done >= requests or time.monotonic() > deadline:
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


def unchecked(d: Delta) -> list[str]:
    """The cross-checks this server's counters cannot support, said in words rather than read as zero."""
    missing = [(E2E + "_count", "whether another client used the server"), (GENERATED, "the tokens the server generated"),
               (PREFIX_HITS, "prefix-cache hits"), (DECODE + "_sum", "the server's own decode time")]
    return [what for name, what in missing if d[name] is None]
