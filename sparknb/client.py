"""The endpoint client: one streamed request, timed chunk by chunk, plus the server's side doors.

Timing rules that keep the numbers true:
- TTFT runs from sending to the first chunk that carries text (content or reasoning); a chunk with
  only the role is not a token.
- Decode speed is the server's own token count (usage) over the time from the first to the last
  token, so a chunk holding several tokens (speculative decoding) is counted right. Without usage
  the token count is left unknown rather than guessed from chunks.
- vLLM is asked for the token ids of each chunk (`return_token_ids`): a token whose text is empty
  (a special token, half of a UTF-8 character) still counts, and the tokens in each chunk are known.

Servers beyond vLLM (`transformers serve`, ...) have the OpenAI API but not vLLM's side doors. A
server without /version gets none of vLLM's request extensions; without /tokenize, prompts are
counted by the local tokenizer the model's params name and sent as text; without /metrics, every
counter reads as unknown (None), never zero. What a server lacks is listed in ServerInfo.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import httpx
import openai

from .errors import EndpointError
from .metrics import Snapshot
from .redaction import redact
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
        The one place of the timing rule, for the synchronous client and the asyncio one alike."""
        self.text, self.reasoning = self.text + text, self.reasoning + reasoning
        self.chunk_times.append(t)
        self.chunk_tokens.append(tokens)
        self.ttft_s = t if self.ttft_s is None else self.ttft_s
        self.last_token_s = t

    def as_dict(self) -> dict:
        return asdict(self) | {"decode_s": self.decode_s, "decode_tokens": self.decode_tokens,
                               "decode_tokens_per_s": self.decode_tokens_per_s}


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Endpoint:
    """An OpenAI-compatible server and one model on it."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 600.0,
                 tokenizer: str | None = None):
        self.url = url.rstrip("/")
        self.root_url = self.url.removesuffix("/v1")
        self.shown = redact(self.url)  # the URL in messages: a password in it never reaches an error text
        self.shown_root = self.shown.removesuffix("/v1")
        self.model = model
        self.tokenizer = tokenizer  # the params' local tokenizer, for a server without /tokenize
        self.not_available: dict[str, str] = {}  # side doors this server was found to lack
        self.extensions = True  # vLLM's request extensions (ignore_eos, return_token_ids); off without /version
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.root_url, headers=headers, timeout=timeout)
        self._openai = openai.OpenAI(base_url=self.url, api_key=api_key or "none", timeout=timeout, max_retries=0)

    def close(self) -> None:
        self._http.close()
        self._openai.close()

    # -- the side doors -------------------------------------------------------------------------

    def _get(self, path: str, **kw) -> httpx.Response:
        try:
            r = self._http.request(kw.pop("method", "GET"), path, **kw)
        except httpx.HTTPError as e:
            raise EndpointError(
                f"Cannot reach the endpoint at {self.shown_root} ({type(e).__name__}: {e}). Is the server "
                "running? Start a tiny one with `sparknb serve tiny-dense`, or fix `endpoint` in the "
                "model's params file."
            ) from None
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
            self.extensions = False
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

        A server without vLLM's extensions takes text only: the ids are sent as the local tokenizer's
        text for them (the server's prompt count in usage shows whether it read them back the same).
        """
        if isinstance(prompt, list) and not self.extensions:
            prompt = self.local_tokenizer().decode(prompt)
        return self._stream(self._openai.completions.create, prompt=prompt, max_tokens=max_tokens,
                            temperature=temperature, stop=stop, extra_body=self._extras(ignore_eos, max_tokens, extra))

    def chat(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
             ignore_eos: bool = False, stop: list[str] | None = None, **extra) -> Completion:
        return self._stream(self._openai.chat.completions.create, messages=messages, max_tokens=max_tokens,
                            temperature=temperature, stop=stop, extra_body=self._extras(ignore_eos, max_tokens, extra))

    def _extras(self, ignore_eos: bool, max_tokens: int, extra: dict) -> dict:
        return request_fields(self.extensions, ignore_eos, max_tokens) | extra

    def _stream(self, create, **kw) -> Completion:
        done = Completion(started_at=now())
        sent = time.perf_counter()
        try:
            stream = create(model=self.model, stream=True, stream_options={"include_usage": True}, **kw)
            for chunk in stream:
                t = time.perf_counter() - sent
                if chunk.usage is not None:
                    done.prompt_tokens = chunk.usage.prompt_tokens
                    done.completion_tokens = chunk.usage.completion_tokens
                for choice in chunk.choices:
                    text, reasoning = _texts(choice)
                    tokens = _token_count(choice)
                    if choice.finish_reason:
                        done.finish_reason = choice.finish_reason
                    if not (text or reasoning or tokens):  # e.g. the role-only opening chunk of a chat
                        continue
                    done.add_chunk(t, text, reasoning, tokens)
        except openai.APIConnectionError as e:
            raise EndpointError(f"Lost the connection to {self.shown} ({e}); the answer so far had "
                                f"{len(done.chunk_times)} chunks.") from None
        except openai.APIStatusError as e:
            raise EndpointError(f"{self.shown} refused the request ({e.status_code}): "
                                f"{error_message(e.response.content)}") from None
        except openai.APIError as e:  # an error event inside a stream that had started well
            raise EndpointError(f"{self.shown} failed the request after {len(done.chunk_times)} chunks: "
                                f"{e.message}") from None
        if done.finish_reason is None:  # a clean end of the connection can still cut an answer short
            raise EndpointError(f"Lost the connection to {self.shown}: the stream ended without a finish reason "
                                f"after {len(done.chunk_times)} chunks.")
        done.total_s = time.perf_counter() - sent
        return done


def request_fields(vllm: bool, ignore_eos: bool, max_tokens: int) -> dict:
    """The request fields beyond OpenAI's: vLLM's own where it is vLLM; elsewhere a fixed answer length is
    asked in transformers serve's way (a generation config with min_new_tokens), as a server that
    refuses fields it does not know would refuse vLLM's, and one that ignores it may stop early."""
    if vllm:
        return {"return_token_ids": True, "ignore_eos": ignore_eos}
    return {"generation_config": json.dumps({"min_new_tokens": max_tokens})} if ignore_eos else {}


def _version(answer: httpx.Response) -> str:
    try:
        return answer.json().get("version", "unknown") if answer.status_code == 200 else "unknown"
    except (ValueError, AttributeError):
        return "unknown"


def _texts(choice) -> tuple[str, str]:
    """Answer text and reasoning text of one streamed choice, for completions and chat alike."""
    if hasattr(choice, "text"):
        return choice.text or "", ""
    delta = choice.delta
    extra = delta.model_extra or {}
    reasoning = extra.get("reasoning") or extra.get("reasoning_content") or ""
    return delta.content or "", reasoning


def _token_count(choice) -> int | None:
    """Tokens in this chunk where the server says (vLLM with return_token_ids), else None."""
    ids = (choice.model_extra or {}).get("token_ids")
    return len(ids) if ids is not None else None


def error_message(body: bytes) -> str:
    """The server's own words in an error answer: OpenAI's error.message where it is there, else the body's start."""
    try:
        err = json.loads(body)
    except ValueError:
        err = None
    if isinstance(err, dict):
        err = err.get("error", err)
        text = err.get("message") if isinstance(err, dict) else str(err)
        if text:
            return text
    return body[:300].decode(errors="replace")
