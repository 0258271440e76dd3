"""vLLM: the server sparknb was first drawn around, and the one with the most side doors.

- /version names it; /tokenize takes `{"model", "prompt", "add_special_tokens"}` (or `messages` with the
  chat template) and answers `{"tokens": [...]}`.
- A request may ask for the token ids of each chunk (`return_token_ids`): a token whose text is empty (a
  special token, half of a UTF-8 character) still counts, and the tokens in each chunk are known; a fixed
  answer length is `ignore_eos`. A prompt may be token ids.
- With --enable-per-request-metrics the final usage chunk carries the request's own timings (`metrics`:
  queue time, TTFT from scheduling, generation time, mean ITL, speculative counts).
- /metrics: `vllm:` gauges and counters, labelled by model_name; histograms of TTFT (from arrival at the
  API server), prefill, decode, queue and end-to-end time; per-position acceptance of speculative tokens.
- Its start-up log is read by serving.startup_log (stages, compile cache); it reads its key from VLLM_API_KEY.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..endpoint import metrics
from ..serving import startup_log
from .base import Engine, Post

PER_REQUEST = {"queue_time_ms": "queue_s", "time_to_first_token_ms": "ttft_s", "generation_time_ms": "decode_s",
               "mean_itl_ms": "itl_s"}


class Vllm(Engine):
    key = "vllm"
    name = "vLLM"
    signature_path = "/version"
    token_prompts = True
    counters = {
        "vllm:num_requests_running": metrics.RUNNING,
        "vllm:num_requests_waiting": metrics.WAITING,
        "vllm:kv_cache_usage_perc": metrics.KV_USE,
        "vllm:num_preemptions_total": metrics.PREEMPTIONS,
        "vllm:generation_tokens_total": metrics.GENERATED,
        "vllm:prompt_tokens_total": metrics.PROMPT_TOKENS,
        "vllm:prefix_cache_queries_total": metrics.PREFIX_QUERIES,
        "vllm:prefix_cache_hits_total": metrics.PREFIX_HITS,
        "vllm:spec_decode_num_drafts_total": metrics.DRAFTS,
        "vllm:spec_decode_num_draft_tokens_total": metrics.DRAFT_TOKENS,
        "vllm:spec_decode_num_accepted_tokens_total": metrics.ACCEPTED,
        "vllm:spec_decode_num_accepted_tokens_per_pos_total": metrics.ACCEPTED_AT,
        "vllm:time_to_first_token_seconds": metrics.TTFT,
        "vllm:request_prefill_time_seconds": metrics.PREFILL,
        "vllm:request_decode_time_seconds": metrics.DECODE,
        "vllm:request_queue_time_seconds": metrics.QUEUE,
        "vllm:e2e_request_latency_seconds": metrics.E2E,
    }
    metric_labels = ("position",)  # the per-position acceptance counters are told apart by this label
    model_label = "model_name"
    cache_count = ("usage.prompt_tokens_details.cached_tokens, sent only where the server was started with "
                   "--enable-prompt-tokens-details")
    tool_parser_fix = "start vLLM with --enable-auto-tool-choice --tool-call-parser NAME (hermes for <tool_call> JSON)"
    cache_tool_flags = {"--enable-prefix-caching": "prefix caching", "--no-enable-prefix-caching": "no prefix caching",
                        "--enable-prompt-tokens-details": "prompt tokens details",
                        "--enable-auto-tool-choice": "auto tool choice", "--tool-call-parser": "tool call parser",
                        "--chat-template": "chat template", "--max-num-seqs": "max sequences"}
    timings_field = "metrics"
    api_key_variable = "VLLM_API_KEY"
    context_option = "--max-model-len"
    process_name = "vllm"  # its engine retitles itself VLLM::EngineCore
    log = startup_log

    def recognises(self, answer: Any) -> bool:
        return isinstance(answer, dict) and "version" in answer

    def request_fields(self, ignore_eos: bool, max_tokens: int, reuse_prompt: bool) -> dict:
        # vLLM's prefix cache cannot be declined per request; its counters show every hit (prefill stops on one).
        return {"return_token_ids": True, "ignore_eos": ignore_eos}

    def tokenize(self, post: Post, model: str, text: str, special_tokens: bool) -> list[int] | None:
        answer = post("/tokenize", {"model": model, "prompt": text, "add_special_tokens": special_tokens})
        return None if answer is None else answer["tokens"]

    def tokenize_chat(self, post: Post, model: str, messages: list[dict]) -> list[int] | None:
        answer = post("/tokenize", {"model": model, "messages": messages, "add_generation_prompt": True})
        return None if answer is None else answer["tokens"]

    def timings(self, block: dict) -> dict:
        out = {name: (block[key] / 1000 if block.get(key) is not None else None) for key, name in PER_REQUEST.items()}
        return out | {"tokens_per_s": block.get("tokens_per_second"), "spec_decode": block.get("speculative_decoding")}

    def kv_capacity(self, metrics_text: str, tokens_per_request: int) -> int | None:
        found = re.search(r'kv_cache_size_tokens="(\d+)"', metrics_text)  # the cache_config_info gauge
        return int(found.group(1)) // tokens_per_request if found else None

    def kv_cache_dtype(self, metrics_text: str | None) -> tuple[str, str] | None:
        found = re.search(r'cache_dtype="([^"]+)"', metrics_text or "")  # the cache_config_info gauge; auto: the model's
        return (found.group(1), "vLLM's cache_config_info (--kv-cache-dtype)") if found else None

    def cache_block(self, metrics_text: Callable[[], str | None]) -> tuple[int | None, str]:
        """Its prefix cache holds whole blocks only: the cache_config_info gauge's block_size (16 tokens by default
        on GPUs, 128 on the CPU build of vLLM 0.32), so of a prompt sent before only its whole blocks are served."""
        line = next((x for x in (metrics_text() or "").splitlines() if x.startswith("vllm:cache_config_info{")), "")
        size = dict(re.findall(r'(\w+)="([^"]*)"', line)).get("block_size", "")
        if not size.isdigit():
            return None, "vLLM's /metrics gives no cache_config_info block_size"
        return int(size), "vLLM's /metrics cache_config_info block_size"

    def facts(self, ask: Post, model_entry: dict) -> dict:
        answer = ask("/version", None)
        version = answer.get("version", "unknown") if isinstance(answer, dict) else "unknown"
        return {"version": version, "root": model_entry.get("root"), "max_model_len": model_entry.get("max_model_len")}


VLLM = Vllm()
