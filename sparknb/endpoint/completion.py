"""One streamed answer as both clients record it: its text, the server's token counts and timings, and the one
timing rule (Completion.add_chunk) by which a chunk's arrival becomes TTFT and decode time."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone

from ..engines import Engine
from .tools import Assembly, ToolCall


@dataclass
class Completion:
    """One streamed answer with a timestamp on every chunk (seconds after sending)."""

    started_at: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    last_token_s: float | None = None
    total_s: float | None = None
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int | None] = field(default_factory=list)
    text: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    server: dict | None = None  # the server's own timings, by its engine: queue_s, ttft_s, prefill_s, decode_s, ...
    # Native tool calls (OpenAI's `tools`): the calls assembled from the streamed deltas, and when the first
    # tool-call chunk and the first content chunk came (reasoning apart: it is neither)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_s: float | None = None
    content_s: float | None = None
    usage_cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, where the server sent it
    reasoning_tokens: int | None = None  # usage.completion_tokens_details.reasoning_tokens, where the server sent it
    cached_tokens: int | None = None  # prompt tokens served from its prefix cache by the server's own count (engine)
    # Where the answer had begun to come back while the client did its own work after sending (wire.meanwhile):
    # how long that work took from the sending, the most by which the first stamps may be late; None (and left out
    # of as_dict) where not
    busy_s: float | None = None

    @property
    def decode_s(self) -> float | None:
        """From the first token to the last: the time the server spent decoding, seen from here."""
        if self.ttft_s is None or self.last_token_s is None:
            return None
        return self.last_token_s - self.ttft_s

    @property
    def decode_tokens(self) -> int | None:
        """Tokens after the first chunk: the ones the decode time was spent on."""
        if not self.completion_tokens:
            return None
        first = self.chunk_tokens[0] if self.chunk_tokens and self.chunk_tokens[0] else 1
        return self.completion_tokens - first

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after the first chunk over the time they took. None where the server gave no usage."""
        if not self.decode_tokens or not self.decode_s:
            return None
        return self.decode_tokens / self.decode_s

    def add_tool_deltas(self, t: float, deltas: list[dict], assembly: Assembly) -> None:
        """Streamed `tool_calls` deltas at `t`: the calls so far, reassembled."""
        assembly.add(deltas)
        self.tool_calls = assembly.calls()
        self.tool_call_s = t if self.tool_call_s is None else self.tool_call_s

    def add_chunk(self, t: float, text: str, reasoning: str, tokens: int | None) -> None:
        """A chunk that carries text or tokens, `t` seconds after sending: TTFT is the first such chunk.
        The one place of the timing rule, for the single-stream client and the asyncio one alike."""
        self.text, self.reasoning = self.text + text, self.reasoning + reasoning
        self.content_s = t if self.content_s is None and text else self.content_s
        self.chunk_times.append(t)
        self.chunk_tokens.append(tokens)
        self.ttft_s = t if self.ttft_s is None else self.ttft_s
        self.last_token_s = t

    def as_dict(self) -> dict:
        """Its fields, each list and dict copied: dataclasses' asdict copied every float of them one by one, 0.1 ms of
        the 1.2 ms an agent step waited on the client (bench/agent_client_cost.py)."""
        own = {f.name: _copied(getattr(self, f.name)) for f in fields(self) if f.name != "busy_s" or self.busy_s}
        return own | {"tool_calls": [asdict(c) for c in self.tool_calls], "decode_s": self.decode_s,
                      "decode_tokens": self.decode_tokens, "decode_tokens_per_s": self.decode_tokens_per_s}


def _copied(value):
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


def answer_fields(engine: Engine, max_tokens: int, temperature: float, stop: list[str] | None, ignore_eos: bool,
                  reuse_prompt: bool, extra: dict) -> dict:
    """The fields of a request besides its prompt, for both clients: OpenAI's, the engine's, the caller's."""
    return {"max_tokens": max_tokens, "temperature": temperature, "stop": stop,
            **engine.request_fields(ignore_eos, max_tokens, reuse_prompt), **extra}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")
