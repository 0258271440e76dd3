"""The two windows of a level, the aggregate figures over each, and the server's own count over the same.

- steady: from the first measured request's sending to the last measured answer's end; the ramp of the
  warmup wave is left out, the tokens it still delivers inside the window are not;
- all: from the level's first sending to its last answer's end, every request.

Aggregate tok/s over a window = the output tokens that reached the client inside it (stamped on arrival,
counted by the server's own tokens per chunk), over its length. A request wholly inside counts its
completion tokens; one that straddles an edge counts its chunks inside, which needs the server to say
how many tokens each chunk holds (vLLM's token ids), else the figure is unknown, never guessed.

The server's figure for the same window comes from its count of generated tokens, read during the level
(measure.SAMPLE_S apart) and once before the first request and after the last answer: each edge of the
window is interpolated between the two readings around it, and those readings bound what the server can
have generated inside it (`spread_pct`, the half-width of that bound against the interpolated figure).
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATED_AT = 5  # a sample is [seconds, running, waiting, KV use, preemptions, generated tokens, (error)]
STEADY, ALL = "steady", "all"


@dataclass(frozen=True)
class Window:
    name: str
    start: float
    end: float
    tokens: float | None  # that reached the client inside the window
    server_tokens: float | None  # the server's count over it, interpolated
    spread_pct: float | None  # how far the readings around its edges let the server's figure move, in %

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def tok_s(self) -> float | None:
        return self.tokens / self.seconds if self.tokens is not None and self.seconds > 0 else None

    @property
    def server_tok_s(self) -> float | None:
        return self.server_tokens / self.seconds if self.server_tokens is not None and self.seconds > 0 else None

    @property
    def vs_server_pct(self) -> float | None:
        if self.tokens is None or not self.server_tokens:
            return None
        return 100 * (self.tokens / self.server_tokens - 1)


def windows(level: dict, requests: list[dict]) -> dict[str, Window] | None:
    """Both windows of a level; None where no request was answered."""
    answered = [r for r in requests if "error" not in r]
    measured = [r for r in answered if not r["warmup"]]
    if not measured:
        return None
    spans = {STEADY: (min(r["sent_s"] for r in requests if not r["warmup"]),
                      max(r["sent_s"] + r["total_s"] for r in measured)),
             ALL: (min(r["sent_s"] for r in requests), max(r["sent_s"] + r["total_s"] for r in answered))}
    readings = [(s[0], s[GENERATED_AT]) for s in level.get("samples", [])
                if len(s) > GENERATED_AT and isinstance(s[GENERATED_AT], (int, float))]
    out = {}
    for name, (start, end) in spans.items():
        server = _server_tokens(readings, start, end)
        out[name] = Window(name, start, end, tokens_between(answered, start, end), *server)
    return out


def tokens_between(answered: list[dict], start: float, end: float) -> float | None:
    """Output tokens whose chunks reached the client between `start` and `end` (seconds from the level's start)."""
    total = 0
    for r in answered:
        times = [r["sent_s"] + t for t in r["chunk_times"]]
        if not times or times[-1] < start or times[0] > end:
            continue
        if start <= times[0] and times[-1] <= end:
            if r.get("completion_tokens") is None:
                return None
            total += r["completion_tokens"]
            continue
        inside = [n for t, n in zip(times, r["chunk_tokens"]) if start <= t <= end]
        if None in inside:
            return None
        total += sum(inside)
    return total


def _server_tokens(readings: list[tuple[float, float]], start: float,
                   end: float) -> tuple[float | None, float | None]:
    """(interpolated count, spread in %) of the server's generated tokens between start and end."""
    before_start = [r for r in readings if r[0] <= start]
    after_end = [r for r in readings if r[0] >= end]
    if not before_start or not after_end:
        return None, None
    at_start, low_start, high_start = _at(readings, start)
    at_end, low_end, high_end = _at(readings, end)
    count = at_end - at_start
    if count <= 0:
        return None, None
    low, high = max(0.0, low_end - high_start), high_end - low_start
    return count, 100 * (high - low) / 2 / count


def _at(readings: list[tuple[float, float]], t: float) -> tuple[float, float, float]:
    """The counter at `t`, interpolated between the readings around it, and those two readings."""
    before = max((r for r in readings if r[0] <= t), key=lambda r: r[0])
    after = min((r for r in readings if r[0] >= t), key=lambda r: r[0])
    if after[0] == before[0]:
        return before[1], before[1], after[1]
    share = (t - before[0]) / (after[0] - before[0])
    return before[1] + share * (after[1] - before[1]), before[1], after[1]
