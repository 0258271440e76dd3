"""A server with OpenAI's API alone (transformers serve, and any other without vLLM's or llama.cpp's side
doors): no /version, /props, /tokenize or /metrics.

Prompts are counted by the local tokenizer the model's params name and sent as text (the server's usage
shows whether it read them back the same); every counter reads as unknown. A fixed answer length is asked
for in transformers serve's way, a generation config with min_new_tokens: a server that refuses fields it
does not know would refuse vLLM's too, and one that ignores it may stop early (the findings count short answers).
"""

from __future__ import annotations

import json

from .base import Engine


class Transformers(Engine):
    key = "transformers"
    name = "an OpenAI-API-only server"
    process_name = "transformers"

    def request_fields(self, ignore_eos: bool, max_tokens: int, reuse_prompt: bool) -> dict:
        return {"generation_config": json.dumps({"min_new_tokens": max_tokens})} if ignore_eos else {}


TRANSFORMERS = Transformers()
