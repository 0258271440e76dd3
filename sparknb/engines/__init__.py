"""What differs between servers, one record per server family: the engine room.

Everything engine-specific that sparknb reads or sends is here, and only here: the fields a request
carries beyond OpenAI's (a fixed answer length, token ids back), whether a prompt may be token ids,
the /tokenize body and its answer, the counter names behind each figure sparknb reads from /metrics
(requests running and waiting, generated tokens, decode time, prefix-cache hits, speculative counts),
the per-request timings in a stream's events, the start-up log's reader, the variable a server reads
its API key from, what the fingerprint can read of it, and the engine's own traps.

An engine is chosen once per endpoint, by what the server answers (`detect`: vLLM has /version, llama.cpp's
llama-server has /props), unless the model's params name it (`engine:`). Everything downstream reads
sparknb's own names for the figures (metrics.RUNNING, metrics.GENERATED, ...), never an engine's.
"""

from __future__ import annotations

from .base import Engine
from .llamacpp import LLAMACPP
from .transformers import TRANSFORMERS
from .vllm import VLLM

ENGINES: dict[str, Engine] = {e.key: e for e in (VLLM, LLAMACPP, TRANSFORMERS)}


def named(key: str) -> Engine:
    """The engine a model's params name; a clear error for any other name."""
    try:
        return ENGINES[key]
    except KeyError:
        raise ValueError(f"unknown engine {key!r}; choose one of {', '.join(ENGINES)}") from None


def detect(answers: dict[str, tuple[int, object]]) -> Engine:
    """The engine whose signature the server's answers carry; `answers` maps a path to (status, json or None).

    Asked in order: vLLM first (its /version), then llama.cpp (its /props); a server with neither is
    taken as an OpenAI-API-only server with transformers serve's request fields.
    """
    for engine in (VLLM, LLAMACPP):
        status, body = answers.get(engine.signature_path, (404, None))
        if status == 200 and engine.recognises(body):
            return engine
    return TRANSFORMERS


__all__ = ["ENGINES", "Engine", "LLAMACPP", "TRANSFORMERS", "VLLM", "detect", "named"]
