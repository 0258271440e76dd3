"""The endpoint client: one streamed request, timed chunk by chunk, plus the server's side doors.

Timing rules that keep the numbers true:
- TTFT runs from sending to the first chunk that carries text (content or reasoning); a chunk with
  only the role is not a token.
- Decode speed is the server's own token count (usage) over the time from the first to the last
  token, so a chunk holding several tokens (speculative decoding) is counted right. Without usage
  the token count is left unknown rather than guessed from chunks.
- vLLM is asked for the token ids of each chunk (`return_token_ids`): a token whose text is empty
  (a special token, half of a UTF-8 character) still counts, and the tokens in each chunk are known.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

import httpx
import openai

from .errors import EndpointError
from .metrics import Snapshot
from .redaction import redact


@dataclass(frozen=True)
class ServerInfo:
    url: str
    version: str
    model: str
    root: str | None
    max_model_len: int | None
    served: list[str]

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

    def as_dict(self) -> dict:
        return asdict(self) | {"decode_s": self.decode_s, "decode_tokens": self.decode_tokens,
                               "decode_tokens_per_s": self.decode_tokens_per_s}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


class Endpoint:
    """An OpenAI-compatible server and one model on it."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 600.0):
        self.url = url.rstrip("/")
        self.root_url = self.url.removesuffix("/v1")
        self.shown = redact(self.url)  # the URL in messages: a password in it never reaches an error text
        self.shown_root = self.shown.removesuffix("/v1")
        self.model = model
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
        return ServerInfo(
            url=self.url,
            version=version.json().get("version", "unknown") if version.status_code == 200 else "unknown",
            model=self.model,
            root=mine.get("root"),
            max_model_len=mine.get("max_model_len"),
            served=served,
        )

    def tokenize(self, text: str, special_tokens: bool = True) -> list[int]:
        r = self._get("/tokenize", method="POST",
                      json={"model": self.model, "prompt": text, "add_special_tokens": special_tokens})
        if r.status_code != 200:
            raise EndpointError(f"{self.shown_root}/tokenize answered {r.status_code}: {r.text[:200]}. "
                                "Exact-length prompts need vLLM's /tokenize.")
        return r.json()["tokens"]

    def tokenize_chat(self, messages: list[dict]) -> list[int]:
        """The prompt tokens of a chat request as the server will see them, chat template included."""
        r = self._get("/tokenize", method="POST",
                      json={"model": self.model, "messages": messages, "add_generation_prompt": True})
        if r.status_code != 200:
            raise EndpointError(f"{self.shown_root}/tokenize answered {r.status_code} for a chat: {r.text[:200]}.")
        return r.json()["tokens"]

    def metrics(self) -> Snapshot:
        r = self._get("/metrics")
        if r.status_code != 200:
            raise EndpointError(f"{self.shown_root}/metrics answered {r.status_code}; the server's own "
                                "counters are needed to check the client's figures.")
        return Snapshot.parse(r.text, self.model)

    # -- one streamed request -------------------------------------------------------------------

    def complete(self, prompt: str | list[int], max_tokens: int, temperature: float = 0.0,
                 ignore_eos: bool = True, stop: list[str] | None = None, **extra) -> Completion:
        """A text completion; a list of token ids is sent as is, so its length is exact."""
        return self._stream(self._openai.completions.create, prompt=prompt, max_tokens=max_tokens,
                            temperature=temperature, stop=stop, extra_body={"ignore_eos": ignore_eos, **extra})

    def chat(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
             ignore_eos: bool = False, stop: list[str] | None = None, **extra) -> Completion:
        return self._stream(self._openai.chat.completions.create, messages=messages, max_tokens=max_tokens,
                            temperature=temperature, stop=stop, extra_body={"ignore_eos": ignore_eos, **extra})

    def _stream(self, create, **kw) -> Completion:
        done = Completion(started_at=_now())
        sent = time.perf_counter()
        try:
            kw["extra_body"] = {"return_token_ids": True} | kw["extra_body"]
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
                    done.text += text
                    done.reasoning += reasoning
                    done.chunk_times.append(t)
                    done.chunk_tokens.append(tokens)
                    if done.ttft_s is None:
                        done.ttft_s = t
                    done.last_token_s = t
        except openai.APIConnectionError as e:
            raise EndpointError(f"Lost the connection to {self.shown} ({e}); the answer so far had "
                                f"{len(done.chunk_times)} chunks.") from None
        except openai.APIStatusError as e:
            raise EndpointError(f"{self.shown} refused the request ({e.status_code}): {_message(e)}") from None
        except openai.APIError as e:  # an error event inside a stream that had started well
            raise EndpointError(f"{self.shown} failed the request after {len(done.chunk_times)} chunks: "
                                f"{e.message}") from None
        if done.finish_reason is None:  # a clean end of the connection can still cut an answer short
            raise EndpointError(f"Lost the connection to {self.shown}: the stream ended without a finish reason "
                                f"after {len(done.chunk_times)} chunks.")
        done.total_s = time.perf_counter() - sent
        return done


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


def _message(e: openai.APIStatusError) -> str:
    try:
        return e.response.json().get("error", {}).get("message") or e.response.text[:300]
    except Exception:
        return e.response.text[:300]
