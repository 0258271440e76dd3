"""The endpoint client: one streamed request, timed chunk by chunk, plus the server's side doors.

Timing rules that keep the numbers true:
- The request is built and serialized before the clock starts; the clock starts when its bytes are
  written, and every read is stamped as it returns (sparknb.endpoint.wire, the same reader as the asyncio
  client's).
- TTFT runs from sending to the first chunk that carries text (content or reasoning) or tokens; a chunk
  with only the role is not a token.
- Decode speed is the server's own token count (usage) over the time from the first to the last
  token, so a chunk holding several tokens (speculative decoding) is counted right. Without usage
  the token count is left unknown rather than guessed from chunks.
- What a request carries beyond OpenAI's fields, how a prompt is tokenized, which counters mean what and
  where the server's own timings of a request are, is its engine's (sparknb.engines: vLLM, llama.cpp's
  llama-server, an OpenAI-API-only server), chosen once by what the server answers or by the model's
  params. The server's own timings of a request come back as `Completion.server`, in sparknb's names.

One stream is read in the caller's own thread, on a blocking socket (see sparknb.endpoint.wire for why), with
no openai package in the way: its client spent 9 to 42 us of CPU per prompt token before a request of
token ids left (97 to 456 ms of TTFT at 10,714 tokens on a 2-core box), and 70 to 95 us per chunk back to
back, 200 to 360 paced (bench/client_ttft.py and bench/client_overhead.py keep it as the reference).

A server without /tokenize has its prompts counted by the local tokenizer the model's params name (and
sent as text where it takes no token ids); without /metrics, every counter reads as unknown (None), never
zero. What a server lacks is listed in ServerInfo. A /tokenize that answers no tokens for a non-empty text
(llama-server given another engine's body) is an error, never a count of zero.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import httpx

from .. import engines
from ..engines import Engine
from ..errors import EndpointError
from . import wire
from .completion import Completion, answer_fields, now
from .metrics import Snapshot
from .tokenizer import LocalTokenizer, load

NOT_AVAILABLE = "not available from this server"
# The side doors and what a server without one cannot tell; the measurement goes on without it.
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
    engine: str = engines.TRANSFORMERS.key  # engines.ENGINES' key: which server family answered
    facts: dict = field(default_factory=dict)  # what the engine could read of it (dtype, quantization, slots...)

    def as_dict(self) -> dict:
        return asdict(self)


def _json(r: httpx.Response) -> object:
    """An answer's json, or None where it is not json."""
    try:
        return r.json()
    except ValueError:
        return None


class Endpoint:
    """An OpenAI-compatible server and one model on it: its side doors, and one timed stream at a time."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 600.0,
                 tokenizer: str | None = None, engine: str | None = None, key_env: str | None = None,
                 stall_s: float | None = None):
        self.route = wire.Route(url, api_key, key_env)
        self.stall = stall_s or timeout  # the longest a stream may send nothing (wire.stalled)
        self.url = self.route.url
        self.shown = self.route.shown  # the URL in messages: a password in it never reaches an error text
        self.shown_root = self.shown.removesuffix("/v1")
        self.model, self.timeout = model, timeout
        self.tokenizer = tokenizer  # the params' local tokenizer, for a server without /tokenize
        self.not_available: dict[str, str] = {}  # side doors this server was found to lack
        # The server's family: as the model's params name it, else found by info(); vLLM's until then.
        self.named_engine = engines.named(engine) if engine else None
        self.engine: Engine = self.named_engine or engines.VLLM
        # The route's one credential, never httpx's own reading of the URL (it would send the user:password)
        headers = {"Authorization": self.route.authorization} if self.route.authorization else {}
        self._http = httpx.Client(base_url=self.route.bare.removesuffix("/v1"), headers=headers, timeout=timeout)

    def close(self) -> None:
        self._http.close()

    # -- the side doors -------------------------------------------------------------------------

    def _get(self, path: str, **kw) -> httpx.Response:
        try:
            r = self._http.request(kw.pop("method", "GET"), path, **kw)
        except httpx.HTTPError as e:
            raise wire.unreachable(self.shown_root, e) from None
        if r.status_code == 401:
            raise self.route.refusal(self.shown_root + path)
        return r

    def _ask(self, path: str, body: dict | None) -> object:
        """A side door's json answer (a POST with `body`, else a GET), or None where the server has no such route."""
        r = self._get(path, method="POST", json=body) if body is not None else self._get(path)
        if r.status_code in ABSENT:
            return None
        if r.status_code != 200:
            raise EndpointError(f"{self.shown_root}{path} answered {r.status_code}: {r.text[:200]}.")
        try:
            return r.json()
        except ValueError:
            raise EndpointError(f"{self.shown_root}{path} answered 200 with no json: {r.text[:200]!r}.") from None

    def _probe(self, path: str) -> tuple[int, object]:
        """(status, json or None) of a GET, for telling engines apart: any answer is evidence, none is an error."""
        r = self._get(path)
        return r.status_code, _json(r)

    def info(self) -> ServerInfo:
        """Who answers, which engine it is, and whether it serves our model: checked before any measurement."""
        models = self._get("/v1/models")
        listed = _json(models)
        if models.status_code != 200 or not isinstance(listed, dict) or not isinstance(listed.get("data"), list):
            raise self._not_openai("GET", "/models", models)
        if not self.route.prefix.endswith("/v1"):  # its side doors answer, and every request then failed halfway
            raise EndpointError(f"{self.shown} lacks /v1: the server answers its OpenAI API under {self.shown}/v1 "
                                f"(GET {self.shown}/v1/models answered). Add /v1: give {self.shown}/v1 as endpoint.")
        data = listed["data"]
        served = [m["id"] for m in data]
        mine = next((m for m in data if m["id"] == self.model), None)
        if mine is None:
            raise EndpointError(
                f"Model {self.model!r} is not served at {self.shown}. It serves: {', '.join(served) or 'nothing'}. "
                "Fix served_model_name in the model's params, or start the right model."
            )
        self.engine = self.named_engine or engines.detect(
            {path: self._probe(path) for path in ("/version", "/props")})
        facts = self.engine.facts(self._ask, mine)
        if self.engine is engines.TRANSFORMERS:  # neither vLLM nor llama-server: does it take requests at all?
            # An empty body, on a connection of its own: after transformers serve refuses it, the next request on
            # the same kept-alive connection was reset (every test of that server failed at GET /metrics).
            answer = self._get("/v1/completions", method="POST", json={}, headers={"Connection": "close"})
            if answer.status_code in ABSENT:
                raise self._not_openai("POST", "/completions", answer)
        if self.engine is not engines.VLLM:  # find out now which side doors it lacks
            if not facts.get("version"):
                self._lacks("/version")
            self.metrics()
            self._tokenize("a", False)
        return ServerInfo(
            url=self.url,
            version=facts.get("version") or f"version {NOT_AVAILABLE}",
            model=self.model,
            root=facts.get("root", mine.get("root")),
            max_model_len=facts.get("max_model_len", mine.get("max_model_len")),
            served=served,
            not_available=dict(self.not_available),
            engine=self.engine.key,
            facts={k: v for k, v in facts.items() if k not in ("version", "root", "max_model_len")},
        )

    def _not_openai(self, method: str, path: str, r: httpx.Response) -> EndpointError:
        """A server that does not speak OpenAI's API, in one sentence (its own page is never pasted in)."""
        kind = r.headers.get("content-type", "").split(";")[0] or "no content type"
        should = "lists its models" if path == "/models" else "takes a completion request"
        return EndpointError(
            f"{self.shown} is not an OpenAI-compatible server: {method} {self.shown}{path} answered "
            f"{r.status_code} ({kind}) where an OpenAI server {should}; "
            "give the base URL (ending in /v1) of a vLLM, llama-server or other OpenAI-compatible server in `endpoint`.")

    def _lacks(self, door: str) -> None:
        self.not_available[door] = SIDE_DOORS[door]

    def _tokenize(self, text: str, special_tokens: bool) -> list[int] | None:
        """The server's own token ids, or None where it has no /tokenize (then the local tokenizer counts)."""
        if "/tokenize" in self.not_available:
            return None
        ids = self.engine.tokenize(self._ask, self.model, text, special_tokens)
        if ids is None:
            self._lacks("/tokenize")
        return self._counted(ids, text)

    def _counted(self, ids: list[int] | None, text: object) -> list[int] | None:
        if ids is not None and not ids and text:
            raise EndpointError(
                f"{self.shown_root}/tokenize answered no tokens for a non-empty text: it did not read the body "
                f"{self.engine.name}'s way (is the server another engine? name it with `engine:` in the model's "
                "params), or add `tokenizer:` to the model's params and the local tokenizer counts instead.")
        return ids

    def local_tokenizer(self) -> LocalTokenizer:
        if not self.tokenizer:
            raise EndpointError(
                f"{self.shown_root}/tokenize is {NOT_AVAILABLE}, and the model's params name no local tokenizer. "
                "Exact-length prompts need one of the two: add `tokenizer:` (the model's folder or hub id) to the "
                "model's params.")
        return load(self.tokenizer)

    def tokenize(self, text: str, special_tokens: bool = True) -> list[int]:
        ids = self._tokenize(text, special_tokens)
        return ids if ids is not None else self.local_tokenizer().encode(text, special_tokens)

    def tokenize_chat(self, messages: list[dict]) -> list[int]:
        """The prompt tokens of a chat request as the server will see them, chat template included."""
        ids = None
        if "/tokenize" not in self.not_available:
            ids = self._counted(self.engine.tokenize_chat(self._ask, self.model, messages), messages)
        return ids if ids is not None else self.local_tokenizer().encode_chat(messages)

    def metrics_text(self) -> str | None:
        """The server's /metrics as it gives it (its own names), or None from a server without /metrics."""
        if "/metrics" in self.not_available:
            return None
        r = self._get("/metrics")
        if r.status_code in ABSENT:
            self._lacks("/metrics")
            return None
        if r.status_code != 200:
            raise EndpointError(f"{self.shown_root}/metrics answered {r.status_code}; the server's own "
                                "counters are needed to check the client's figures.")
        return r.text

    def metrics(self) -> Snapshot:
        """The server's counters, under sparknb's names; an empty scrape (every figure unknown) from a server
        without /metrics."""
        return self.snapshot(self.metrics_text())

    def snapshot(self, text: str | None) -> Snapshot:
        """A /metrics text already read (None: the server has none) as the counters under sparknb's names."""
        return Snapshot({}) if text is None else Snapshot.parse(text, self.model, self.engine)

    # -- one streamed request -------------------------------------------------------------------

    def complete(self, prompt: str | list[int], max_tokens: int, temperature: float = 0.0,
                 ignore_eos: bool = True, stop: list[str] | None = None, reuse_prompt: bool = False,
                 **extra) -> Completion:
        """A text completion; a list of token ids is sent as is, so its length is exact.

        A server that takes no token ids (Engine.token_prompts) gets the local tokenizer's text for
        them (the server's prompt count in usage shows whether it read them back the same).
        `reuse_prompt` lets a server that can be told (llama-server) serve the prompt's start from its
        cache of earlier prompts; a timed request declines it.
        """
        if isinstance(prompt, list) and not self.engine.token_prompts:
            prompt = self.local_tokenizer().decode(prompt)
        return self._stream("/completions", {"prompt": prompt, **answer_fields(
            self.engine, max_tokens, temperature, stop, ignore_eos, reuse_prompt, extra)})

    def chat(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
             ignore_eos: bool = False, stop: list[str] | None = None, reuse_prompt: bool = True,
             meanwhile: Callable[[], None] | None = None, **extra) -> Completion:
        """A chat completion; `meanwhile`, the caller's own work to do once the request has gone (wire.meanwhile)."""
        return self._stream("/chat/completions", {"messages": messages, **answer_fields(
            self.engine, max_tokens, temperature, stop, ignore_eos, reuse_prompt, extra)}, meanwhile)

    def _stream(self, path: str, fields: dict, meanwhile: Callable[[], None] | None = None) -> Completion:
        """One stream, read in this thread (wire.exchange): serialized first, timed from its writing."""
        request = self.route.post(path, self.model, fields)
        events = wire.Events(Completion(started_at=now()), engine=self.engine)
        events.meanwhile = meanwhile
        return wire.finish(self.route, wire.exchange(self.route, request, events, self.timeout, self.stall), events)
