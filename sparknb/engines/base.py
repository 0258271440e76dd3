"""The record of one server family, with what every OpenAI-compatible server shares as its defaults."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

# A POST (or, with no body, a GET) to the server's root: (path, json body) -> its json answer, or None where
# the server has no such route. The engine says what to ask; the endpoint owns the connection, the key, and
# the error for any other answer.
Post = Callable[[str, dict | None], Any]


class Engine:
    """What one kind of server wants and gives beyond OpenAI's API. Subclasses set the class attributes
    and override the methods where their server differs; one instance of each lives in engines.ENGINES."""

    key = "openai"
    name = "an OpenAI-compatible server"  # in sentences: "as {name} timed it"
    signature_path = ""  # the route whose answer tells this engine apart (see engines.detect)
    token_prompts = False  # a prompt may be a list of token ids, read as those tokens
    counters: Mapping[str, str] = {}  # the server's metric names (a histogram by its base name) -> sparknb's
    metric_labels: tuple[str, ...] = ()  # labels that tell samples of one metric apart (kept in the key)
    model_label: str | None = None  # the label naming the served model, where one server serves several
    timings_field: str | None = None  # the key of the per-request timings in a stream's events
    api_key_variable: str | None = None  # where the server reads its API key from its own environment
    process_name = ""  # a word of its GPU process's command line
    log: ModuleType | None = None  # the reader of its start-up log (serving.startup_log or serving.llama_log)
    untimed: tuple[str, ...] = ()  # the server-time columns of the tables it never fills (not a missing counter)
    idle_draft = ""  # why a server set to speculate may draft nothing at all, and the fix
    context_option = "its context-length option"  # what gives it a longer context (vLLM's name misled others)
    # Its command line's options that move its speed (threads, batch, slots, speculation): option -> name
    speed_flags: Mapping[str, str] = {}
    # How it tells a request's prompt tokens served from its prefix cache (Engine.cached_tokens reads it), and
    # what makes it parse a model's tool calls into `tool_calls` (without it they stay in `content`)
    cache_count = "usage.prompt_tokens_details.cached_tokens, where the server sends it"
    tool_parser_fix = "the server's own option that parses tool calls (see its documentation)"
    # Its command line's options that set its prefix cache and its tool calls (the fingerprint records them)
    cache_tool_flags: Mapping[str, str] = {}

    def recognises(self, answer: Any) -> bool:
        return False

    def settings(self, argv: list[str], flags: Mapping[str, str] | None = None) -> dict[str, str | bool]:
        """The speed_flags (or `flags`) its command line sets, by name (a switch as True); an option left out is its
        default."""
        found: dict[str, str | bool] = {}
        flags = self.speed_flags if flags is None else flags
        for i, word in enumerate(argv):
            option, _, inline = word.partition("=")
            if option in flags:
                following = argv[i + 1] if i + 1 < len(argv) else ""
                found[flags[option]] = inline or (following if following and not following.startswith(
                    "--") and not (following.startswith("-") and not following[1:2].isdigit()) else True)
        return found

    def micro_batch(self, settings: dict | None) -> int | None:
        """The tokens its prefill reads the weights once for, from its command line's settings (fingerprint);
        None where it does not say: prefill's floor then counts one pass, the least it could read."""
        return None

    def request_fields(self, ignore_eos: bool, max_tokens: int, reuse_prompt: bool) -> dict:
        """The request's fields beyond OpenAI's: a fixed answer length (`ignore_eos`), and whether the server
        may serve the prompt's start from a cache of earlier prompts (`reuse_prompt`), where it can be told."""
        return {}

    def tokenize(self, post: Post, model: str, text: str, special_tokens: bool) -> list[int] | None:
        """The server's own token ids of `text`, or None where it has no /tokenize (the local tokenizer counts)."""
        return None

    def tokenize_chat(self, post: Post, model: str, messages: list[dict]) -> list[int] | None:
        """The prompt tokens of a chat request as the server will see them, or None where it cannot say."""
        return None

    def timings(self, block: dict) -> dict:
        """The server's timings of one request (the block under `timings_field`), in seconds and sparknb's
        names: queue_s, ttft_s, prefill_s, decode_s, prompt_tokens, decode_tokens, cached_tokens, spec_decode."""
        return {}

    def cached_tokens(self, done: Any) -> int | None:
        """A request's prompt tokens served from the prefix cache by the server's own count (`done`: its
        endpoint.completion.Completion); None where the server does not tell it, never an estimate."""
        return done.usage_cached_tokens

    def cache_block(self, metrics_text: Callable[[], str | None]) -> tuple[int | None, str]:
        """The tokens its prefix cache keeps a prompt in (of a prompt sent before, only whole blocks can be served
        again), and who says so; None where the server does not say (`metrics_text` reads its /metrics)."""
        return None, f"{self.name} does not say what blocks its prefix cache keeps"

    def render_chat(self, post: Post, model: str, messages: list[dict], tools: list[dict] | None) -> str | None:
        """A chat request's prompt as the server's template renders it (tools included), or None where it cannot."""
        return None

    def template_caps(self, ask: Post) -> dict | None:
        """What the server says its chat template can render (supports_tools, supports_tool_calls, ...), or None
        where it does not say: then only the prompt's token count with and without tools tells."""
        return None

    def kv_capacity(self, metrics_text: str, tokens_per_request: int) -> int | None:
        """How many requests of this many tokens its KV cache holds at once, where its /metrics says."""
        return None

    def kv_cache_dtype(self, metrics_text: str | None) -> tuple[str, str] | None:
        """The KV cache's type as the server says it, and where it said it (the census counts the cache's bytes
        at this width); None where it does not say."""
        return None

    def facts(self, ask: Post, model_entry: dict) -> dict:
        """What the fingerprint can read of the server: version, weights, dtype, quantization, context
        (`ask(path, None)` GETs a path of the server's root; `model_entry` is the model's in /v1/models)."""
        return {}

    def stall(self, outside_ms: list[float], after_length: list[int | None]) -> str | None:
        """Where the time requests spent outside the server's own clock before their first token (TTFT less the
        server's time to it, in the order sent; `after_length`: the prompt length sent just before each) is a
        known stall of this engine: the finding that names it, its evidence and its fix. None: nothing of the
        engine's own explains it."""
        return None

    def __repr__(self) -> str:
        return f"<engine {self.key}>"
