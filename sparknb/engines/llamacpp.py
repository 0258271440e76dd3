"""llama.cpp's llama-server: what Spark owners run most after vLLM (llama.cpp 0.5.0-dev as checked).

- No /version; /props names it (`build_info`, `model_path`, `total_slots`, the slot's `n_ctx`), and each
  model's entry in /v1/models carries `meta` (n_ctx_train, n_params, size in bytes, n_vocab, file type).
- /tokenize reads `{"content", "add_special"}`. Given vLLM's body it answers 200 `{"tokens": []}`, an empty
  list rather than an error: the endpoint refuses an empty count of a non-empty text, so nothing loops on it.
  A chat's prompt is its template applied by /apply-template, then tokenized with the special tokens.
- A fixed answer length is `ignore_eos`; a prompt may be token ids. `cache_prompt` (on by default) lets a
  slot reuse the longest common prefix of its previous prompt: off in a timed request unless the study
  allows cache hits, and any reuse is seen per request as `cache_n`.
- The last event of every stream carries `timings`: prompt_n and prompt_ms (the prompt tokens it processed
  and the time), predicted_n and predicted_ms (generation), cache_n, and draft_n / draft_n_accepted with a
  draft model (--model-draft). No per-token ids come back, so one text event is taken as one token.
- /metrics only with --metrics: `llamacpp:` counters of prompt and predicted tokens and their seconds,
  cached prompt tokens, speculative counts, and the gauges requests_processing / requests_deferred. No count
  of finished requests: whether another client used the server is told by the tokens it generated.
- Its own trap: the host-memory prompt cache (--cache-ram, 8192 MiB by default) saves the previous prompt
  before each new one, tens to hundreds of ms before prefill starts, which a client sees as TTFT: the
  studies measure it as TTFT less the server's prompt time and name it, with its fix (--cache-ram 0).
- Its start-up log is read by serving.llama_log; it reads its key from LLAMA_API_KEY.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any

from ..endpoint import metrics
from ..serving import llama_log
from .base import Engine, Post

STALL_FIX = "--cache-ram 0"
UBATCH = 512  # llama-server's --ubatch-size by default: a prompt's weights are read again for each such micro-batch
STALL_MS = 5.0  # beyond HTTP and the client (under 1 ms at any length here): a wait inside the server


class LlamaCpp(Engine):
    key = "llama.cpp"
    name = "llama-server"
    signature_path = "/props"
    token_prompts = True
    counters = {
        "llamacpp:requests_processing": metrics.RUNNING,
        "llamacpp:requests_deferred": metrics.WAITING,
        "llamacpp:kv_cache_usage_ratio": metrics.KV_USE,
        "llamacpp:tokens_predicted_total": metrics.GENERATED,
        "llamacpp:prompt_tokens_total": metrics.PROMPT_PROCESSED,  # a prompt's cached start is not in it
        "llamacpp:prompt_tokens_cached_total": metrics.PREFIX_HITS,
        "llamacpp:tokens_predicted_seconds_total": metrics.DECODE + "_sum",
        "llamacpp:prompt_seconds_total": metrics.PREFILL + "_sum",
        "llamacpp:spec_decode_num_drafts_total": metrics.DRAFTS,
        "llamacpp:spec_decode_num_draft_tokens_total": metrics.DRAFT_TOKENS,
        "llamacpp:spec_decode_num_accepted_tokens_total": metrics.ACCEPTED,
    }
    speed_flags = {
        **dict.fromkeys(("-t", "--threads"), "threads"), **dict.fromkeys(("-tb", "--threads-batch"), "threads batch"),
        **dict.fromkeys(("-b", "--batch-size"), "batch"), **dict.fromkeys(("-ub", "--ubatch-size"), "ubatch"),
        **dict.fromkeys(("-np", "--parallel"), "slots"), **dict.fromkeys(("-c", "--ctx-size"), "context"),
        **dict.fromkeys(("-nr", "--no-repack"), "no repack"), **dict.fromkeys(("-fa", "--flash-attn"), "flash attention"),
        **dict.fromkeys(("-cb", "--cont-batching"), "continuous batching"),
        **dict.fromkeys(("-nocb", "--no-cont-batching"), "no continuous batching"),
        **dict.fromkeys(("-C", "--cpu-mask"), "cpu mask"), **dict.fromkeys(("-Cr", "--cpu-range"), "cpu range"),
        "--poll": "poll", "--prio": "priority", "--numa": "numa", "--mlock": "mlock",
        **dict.fromkeys(("-ctk", "--cache-type-k"), "cache type k"),
        **dict.fromkeys(("-ctv", "--cache-type-v"), "cache type v"),
        **dict.fromkeys(("-cram", "--cache-ram"), "cache ram"),
        **dict.fromkeys(("-td", "--threads-draft", "--spec-draft-threads"), "draft threads"),
        **dict.fromkeys(("-md", "--model-draft", "--spec-draft-model"), "draft model"),
        "--spec-type": "speculative type", "--spec-draft-n-max": "draft tokens",
    }
    cache_count = "timings.cache_n of each answer (prompt_n: the tokens it processed), also usage's cached_tokens"
    tool_parser_fix = ("start llama-server with --jinja and a chat template that renders tools (the model's own, or "
                       "--chat-template-file FILE)")
    cache_tool_flags = {"--jinja": "jinja", "--no-jinja": "no jinja", "--chat-template-file": "chat template file",
                        "--chat-template": "chat template", "--cache-reuse": "cache reuse",
                        "--no-cache-prompt": "no prompt cache", **dict.fromkeys(("-cram", "--cache-ram"), "cache ram"),
                        **dict.fromkeys(("-np", "--parallel"), "slots"), "--swa-full": "swa full",
                        "--slot-prompt-similarity": "slot prompt similarity"}
    timings_field = "timings"
    api_key_variable = "LLAMA_API_KEY"
    context_option = "-c/--ctx-size (each of its --parallel slots gets an equal share of it)"
    process_name = "llama-server"
    log = llama_log
    untimed = ("server TTFT ms", "server queue ms")  # it times the prompt, not the request from its arrival
    idle_draft = ("llama-server loads a draft model given by --model-draft but drafts with it only under "
                  "--spec-type draft-simple (its default is none): add it. With --spec-type ngram-simple a step "
                  "drafts only where the text repeats a run of 12 tokens")

    def micro_batch(self, settings: dict | None) -> int | None:
        """--ubatch-size, 512 unless its command line (read where it runs here) sets it; unknown where it cannot
        be read."""
        if not isinstance(settings, dict) or "unknown" in settings:
            return None
        given = settings.get("ubatch")
        return int(given) if isinstance(given, str) and given.isdigit() else UBATCH

    def settings(self, argv: list[str], flags: Mapping[str, str] | None = None) -> dict[str, str | bool]:
        """Its speed flags, and whether it reuses a slot's earlier prompt: on unless --no-cache-prompt, and with it
        on, identical greedy requests to SmolLM2 came back different."""
        cached = "off (--no-cache-prompt)" if "--no-cache-prompt" in argv else "on (llama-server's default)"
        return super().settings(argv, flags) | {"prompt cache": cached}

    def recognises(self, answer: Any) -> bool:
        return isinstance(answer, dict) and ("build_info" in answer or "default_generation_settings" in answer)

    def request_fields(self, ignore_eos: bool, max_tokens: int, reuse_prompt: bool) -> dict:
        return {"ignore_eos": ignore_eos, **({} if reuse_prompt else {"cache_prompt": False})}

    def tokenize(self, post: Post, model: str, text: str, special_tokens: bool) -> list[int] | None:
        answer = post("/tokenize", {"content": text, "add_special": special_tokens})
        return None if answer is None else answer["tokens"]

    def tokenize_chat(self, post: Post, model: str, messages: list[dict]) -> list[int] | None:
        text = self.render_chat(post, model, messages, None)
        return None if text is None else self.tokenize(post, model, text, True)

    def timings(self, block: dict) -> dict:
        def seconds(key: str) -> float | None:
            return block[key] / 1000 if block.get(key) is not None else None

        drafted = block.get("draft_n")
        return {"queue_s": None, "ttft_s": None, "prefill_s": seconds("prompt_ms"), "decode_s": seconds("predicted_ms"),
                "prompt_tokens": block.get("prompt_n"), "decode_tokens": block.get("predicted_n"),
                "cached_tokens": block.get("cache_n"), "tokens_per_s": block.get("predicted_per_second"),
                "spec_decode": None if drafted is None else {"draft_tokens": drafted,
                                                             "accepted_tokens": block.get("draft_n_accepted")}}

    def cached_tokens(self, done: Any) -> int | None:
        """`timings.cache_n`, the slot's own count; usage's cached_tokens where no timings came."""
        cached = (done.server or {}).get("cached_tokens")
        return cached if cached is not None else done.usage_cached_tokens

    def cache_block(self, metrics_text: Callable[[], str | None]) -> tuple[int | None, str]:
        """No blocks: a slot serves again the whole prefix its earlier prompt shares with the new one, token by
        token (timings.cache_n)."""
        return 1, "llama-server keeps a slot's earlier prompt token by token (no blocks)"

    def render_chat(self, post: Post, model: str, messages: list[dict], tools: list[dict] | None) -> str | None:
        applied = post("/apply-template", {"messages": messages, **({"tools": tools} if tools else {})})
        return applied.get("prompt") if isinstance(applied, dict) else None

    def template_caps(self, ask: Post) -> dict | None:
        """/props `chat_template_caps` (given with --jinja)."""
        caps = (ask("/props", None) or {}).get("chat_template_caps")
        return caps if isinstance(caps, dict) else None

    def stall(self, outside_ms: list[float], after_length: list[int | None]) -> str | None:
        """The host-memory prompt cache's stall: a wait before the prompt beyond HTTP and the client, which grows
        with the prompt sent before (the one being saved), not with this one."""
        if len(outside_ms) < 2 or statistics.median(outside_ms) < STALL_MS:
            return None
        by_before: dict[int, list[float]] = {}
        for ms, before in zip(outside_ms, after_length):
            if before is not None:
                by_before.setdefault(before, []).append(ms)
        evidence = ""
        if len(by_before) >= 2:
            short, long_ = min(by_before), max(by_before)
            a, b = statistics.median(by_before[short]), statistics.median(by_before[long_])
            if b < 1.5 * a:  # not the previous prompt's size: nothing of llama-server's own explains it
                return None
            evidence = (f"; it grows with the prompt sent before, the one being saved ({a:.0f} ms after prompts of "
                        f"{short:,} tokens, {b:.0f} ms after prompts of {long_:,})")
        return (f"LLAMA-SERVER'S OWN STALL: requests waited {min(outside_ms):.0f} to {max(outside_ms):.0f} ms "
                f"(median {statistics.median(outside_ms):.0f} ms) before llama-server began their prompt (the client's "
                f"TTFT less the server's own prompt time){evidence}. That is llama-server's host-memory prompt cache "
                "(--cache-ram, 8192 MiB by default) saving the previous prompt before each new one, not this machine: "
                "its log shows the wait between 'selected slot by LRU' and 'processing task'. Start llama-server with "
                f"{STALL_FIX} to measure prefill alone; the TTFTs here include the stall, and so does any fixed "
                "overhead fitted to them.")

    def kv_cache_dtype(self, metrics_text: str | None) -> tuple[str, str] | None:
        # Neither /props nor /metrics names the cache type; f16 unless started with --cache-type-k/-v.
        return ("f16", "llama-server's default (--cache-type-k/-v f16; set kv_cache_dtype where it was started "
                "otherwise)")

    def facts(self, ask: Post, model_entry: dict) -> dict:
        props = ask("/props", None) or {}
        meta = model_entry.get("meta") or {}
        slot = props.get("default_generation_settings") or {}
        ftype = meta.get("ftype") or props.get("model_ftype")
        slots = ask("/slots", None) if props.get("endpoint_slots", True) else None
        speculative = any(s.get("speculative") for s in slots) if isinstance(slots, list) and slots else None
        return {"version": props.get("build_info", "unknown"), "root": props.get("model_path"),
                "speculative": speculative,  # a draft model loaded: its spec counters exist either way
                "max_model_len": slot.get("n_ctx") or meta.get("n_ctx"),
                "dtype": ftype or "not stated", "quantization": _quantization(ftype),
                "parameters": meta.get("n_params"), "weights_bytes": meta.get("size"),
                "context_trained": meta.get("n_ctx_train"), "slots": props.get("total_slots"),
                "chat_template_caps": props.get("chat_template_caps")}  # with --jinja: whether it renders tools


def _quantization(ftype: str | None) -> str:
    """A GGUF file type names its quantization (Q4_0, Q8_0, IQ4_XS, ...); F32, F16 and BF16 are none."""
    if not ftype:
        return "not stated"
    return "none" if ftype.upper() in ("F32", "F16", "BF16") else ftype


LLAMACPP = LlamaCpp()
