"""The endpoint client: one streamed request, timed chunk by chunk, plus the server's side doors.

Timing rules that keep the numbers true:
- The request is built and serialized before the clock starts; the clock starts when its bytes are
  written, and every read is stamped as it returns (sparknb.wire, the same reader as the asyncio client's).
- TTFT runs from sending to the first chunk that carries text (content or reasoning) or tokens; a chunk
  with only the role is not a token.
- Decode speed is the server's own token count (usage) over the time from the first to the last
  token, so a chunk holding several tokens (speculative decoding) is counted right. Without usage
  the token count is left unknown rather than guessed from chunks.
- vLLM is asked for the token ids of each chunk (`return_token_ids`): a token whose text is empty
  (a special token, half of a UTF-8 character) still counts, and the tokens in each chunk are known.
- vLLM's own timings of the request (--enable-per-request-metrics, in the final usage chunk) come back
  as `Completion.server`.

One stream is read in the caller's own thread, on a blocking socket (see sparknb.wire for why), with
no openai package in the way: its client spent 9 to 42 us of CPU per prompt token before a request of
token ids left (97 to 456 ms of TTFT at 10,714 tokens on a 2-core box), and 70 to 95 us per chunk back to
back, 200 to 360 paced (bench/client_ttft.py and bench/client_overhead.py keep it as the reference).

Servers beyond vLLM (`transformers serve`, ...) have the OpenAI API but not vLLM's side doors. A
server without /version gets none of vLLM's request fields (its Dialect is PLAIN); without /tokenize,
prompts are counted by the local tokenizer the model's params name and sent as text; without /metrics,
every counter reads as unknown (None), never zero. What a server lacks is listed in ServerInfo.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import httpx

from . import wire
from .errors import EndpointError
from .metrics import Snapshot
from .tokenizer import LocalTokenizer, load

NOT_AVAILABLE = "not available from this server"
# vLLM's side doors and what a server without one cannot tell; the measurement goes on without it.
SIDE_DOORS = {
    "/version": "the server's version",
    "/tokenize": "the server's own token counts (the model's local tokenizer counts instead)",
    "/metrics": "the server's own counters: requests in flight, whether another client used it, the tokens it "
                "generated, its own timings, prefix-cache hits, speculative decoding",
}
ABSENT = (404, 405, 501)  # the answers of a server that has no such route


@dataclass(frozen=True)
class ServerInfo:
    url: str
    version: str
    model: str
    root: str | None
    max_model_len: int | None
    served: list[str]
    not_available: dict[str, str] = field(default_factory=dict)  # side door -> what could not be checked

    def as_dict(self) -> dict:
        return asdict(self)


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
    server: dict | None = None  # vLLM's own timings: queue_s, ttft_s (from scheduled), decode_s, itl_s, ...

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

    def add_chunk(self, t: float, text: str, reasoning: str, tokens: int | None) -> None:
        """A chunk that carries text or tokens, `t` seconds after sending: TTFT is the first such chunk.
        The one place of the timing rule, for the single-stream client and the asyncio one alike."""
        self.text, self.reasoning = self.text + text, self.reasoning + reasoning
        self.chunk_times.append(t)
        self.chunk_tokens.append(tokens)
        self.ttft_s = t if self.ttft_s is None else self.ttft_s
        self.last_token_s = t

    def as_dict(self) -> dict:
        return asdict(self) | {"decode_s": self.decode_s, "decode_tokens": self.decode_tokens,
                               "decode_tokens_per_s": self.decode_tokens_per_s}


def _vllm_fields(ignore_eos: bool, max_tokens: int) -> dict:
    return {"return_token_ids": True, "ignore_eos": ignore_eos}


def _plain_fields(ignore_eos: bool, max_tokens: int) -> dict:
    return {"generation_config": json.dumps({"min_new_tokens": max_tokens})} if ignore_eos else {}


@dataclass(frozen=True)
class Dialect:
    """What one kind of server wants in a request beyond OpenAI's fields: the one place they are built,
    for both clients. `token_prompts`: a prompt may be a list of token ids (else it goes as text)."""

    name: str
    token_prompts: bool
    request_fields: Callable[[bool, int], dict]  # (ignore_eos, max_tokens) -> the request's extra fields


VLLM = Dialect("vLLM", True, _vllm_fields)
# A server without vLLM's fields asks for a fixed answer length in transformers serve's way (a generation
# config with min_new_tokens): a server that refuses fields it does not know would refuse vLLM's, and
# one that ignores it may stop early.
PLAIN = Dialect("OpenAI API only", False, _plain_fields)


def answer_fields(dialect: Dialect, max_tokens: int, temperature: float, stop: list[str] | None,
                  ignore_eos: bool, extra: dict) -> dict:
    """The fields of a request besides its prompt, for both clients: OpenAI's, the dialect's, the caller's."""
    return {"max_tokens": max_tokens, "temperature": temperature, "stop": stop,
            **dialect.request_fields(ignore_eos, max_tokens), **extra}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Endpoint:
    """An OpenAI-compatible server and one model on it: its side doors, and one timed stream at a time."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 600.0,
                 tokenizer: str | None = None):
        self.route = wire.Route(url, api_key)
        self.url = self.route.url
        self.root_url = self.url.removesuffix("/v1")
        self.shown = self.route.shown  # the URL in messages: a password in it never reaches an error text
        self.shown_root = self.shown.removesuffix("/v1")
        self.model, self.timeout = model, timeout
        self.tokenizer = tokenizer  # the params' local tokenizer, for a server without /tokenize
        self.not_available: dict[str, str] = {}  # side doors this server was found to lack
        self.dialect = VLLM  # what its requests carry beyond OpenAI's fields; PLAIN once info() finds no /version
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.root_url, headers=headers, timeout=timeout)

    @property
    def extensions(self) -> bool:
        """Whether vLLM's own request fields are sent."""
        return self.dialect is VLLM

    def close(self) -> None:
        self._http.close()

    # -- the side doors -------------------------------------------------------------------------

    def _get(self, path: str, **kw) -> httpx.Response:
        try:
            r = self._http.request(kw.pop("method", "GET"), path, **kw)
        except httpx.HTTPError as e:
            raise wire.unreachable(self.shown_root, e) from None
        if r.status_code == 401:
            raise EndpointError(f"{self.shown_root}{path} refused the API key (401). Set the environment "
                                "variable named by api_key_env in the model's params to the server's key.")
        return r

    def info(self) -> ServerInfo:
        """Who answers, and whether it serves our model: checked before any measurement."""
        models = self._get("/v1/models")
        if models.status_code != 200:
            raise EndpointError(f"{self.shown}/models answered {models.status_code}: {models.text[:200]}")
        data = models.json().get("data", [])
        served = [m["id"] for m in data]
        mine = next((m for m in data if m["id"] == self.model), None)
        if mine is None:
            raise EndpointError(
                f"Model {self.model!r} is not served at {self.shown}. It serves: {', '.join(served) or 'nothing'}. "
                "Fix served_model_name in the model's params, or start the right model."
            )
        version = self._get("/version")
        if version.status_code in ABSENT:  # not vLLM: find out now which other side doors it lacks
            self._lacks("/version")
            self.dialect = PLAIN
            self.metrics()
            self._tokenize({"prompt": "a", "add_special_tokens": False})
        return ServerInfo(
            url=self.url,
            version=f"version {NOT_AVAILABLE}" if "/version" in self.not_available else _version(version),
            model=self.model,
            root=mine.get("root"),
            max_model_len=mine.get("max_model_len"),
            served=served,
            not_available=dict(self.not_available),
        )

    def _lacks(self, door: str) -> None:
        self.not_available[door] = SIDE_DOORS[door]

    def _tokenize(self, body: dict) -> list[int] | None:
        """The server's own token ids, or None where it has no /tokenize (then the local tokenizer counts)."""
        if "/tokenize" in self.not_available:
            return None
        r = self._get("/tokenize", method="POST", json={"model": self.model, **body})
        if r.status_code in ABSENT:
            self._lacks("/tokenize")
            return None
        if r.status_code != 200:
            raise EndpointError(f"{self.shown_root}/tokenize answered {r.status_code}: {r.text[:200]}.")
        return r.json()["tokens"]

    def local_tokenizer(self) -> LocalTokenizer:
        if not self.tokenizer:
            raise EndpointError(
                f"{self.shown_root}/tokenize is {NOT_AVAILABLE}, and the model's params name no local tokenizer. "
                "Exact-length prompts need one of the two: add `tokenizer:` (the model's folder or hub id) to the "
                "model's params.")
        return load(self.tokenizer)

    def tokenize(self, text: str, special_tokens: bool = True) -> list[int]:
        ids = self._tokenize({"prompt": text, "add_special_tokens": special_tokens})
        return ids if ids is not None else self.local_tokenizer().encode(text, special_tokens)

    def tokenize_chat(self, messages: list[dict]) -> list[int]:
        """The prompt tokens of a chat request as the server will see them, chat template included."""
        ids = self._tokenize({"messages": messages, "add_generation_prompt": True})
        return ids if ids is not None else self.local_tokenizer().encode_chat(messages)

    def metrics(self) -> Snapshot:
        """The server's counters; an empty scrape (every figure unknown) from a server without /metrics."""
        if "/metrics" in self.not_available:
            return Snapshot({})
        r = self._get("/metrics")
        if r.status_code in ABSENT:
            self._lacks("/metrics")
            return Snapshot({})
        if r.status_code != 200:
            raise EndpointError(f"{self.shown_root}/metrics answered {r.status_code}; the server's own "
                                "counters are needed to check the client's figures.")
        return Snapshot.parse(r.text, self.model)

    # -- one streamed request -------------------------------------------------------------------

    def complete(self, prompt: str | list[int], max_tokens: int, temperature: float = 0.0,
                 ignore_eos: bool = True, stop: list[str] | None = None, **extra) -> Completion:
        """A text completion; a list of token ids is sent as is, so its length is exact.

        A server that takes no token ids (Dialect.token_prompts) gets the local tokenizer's text for
        them (the server's prompt count in usage shows whether it read them back the same).
        """
        if isinstance(prompt, list) and not self.dialect.token_prompts:
            prompt = self.local_tokenizer().decode(prompt)
        return self._stream("/completions", {"prompt": prompt, **answer_fields(
            self.dialect, max_tokens, temperature, stop, ignore_eos, extra)})

    def chat(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
             ignore_eos: bool = False, stop: list[str] | None = None, **extra) -> Completion:
        return self._stream("/chat/completions", {"messages": messages, **answer_fields(
            self.dialect, max_tokens, temperature, stop, ignore_eos, extra)})

    def _stream(self, path: str, fields: dict) -> Completion:
        """One stream, read in this thread (wire.exchange): serialized first, timed from its writing."""
        request = self.route.post(path, self.model, fields)
        events = wire.Events(Completion(started_at=now()))
        return wire.finish(self.shown, wire.exchange(self.route, request, events, self.timeout), events)


def _version(answer: httpx.Response) -> str:
    try:
        return answer.json().get("version", "unknown") if answer.status_code == 200 else "unknown"
    except (ValueError, AttributeError):
        return "unknown"
