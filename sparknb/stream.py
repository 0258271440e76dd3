"""The asyncio streaming client: many streamed requests at once, timed chunk by chunk, microseconds a chunk.

client.py builds the openai package's pydantic objects for every chunk (60 to 80 us): at a few dozen
streams that is the client's limit, not the server's. Here each request has a connection of its own,
read by an asyncio Protocol: a chunk is stamped when its bytes arrive, split into server-sent events and
parsed with json, into client.py's Completion by its timing rules (see its docstring). vLLM's own
timings of the request (--enable-per-request-metrics, in the final usage chunk) are kept as `server`.
`batch()` sends many requests at a fixed concurrency in one call, on an event loop of its own thread
(a notebook's kernel runs one in the main thread, and the chunks' clock must not wait on it).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

from .client import Completion, error_message, now, request_fields
from .errors import EndpointError
from .redaction import redact

T = TypeVar("T")
SERVER_FIELDS = {"queue_time_ms": "queue_s", "time_to_first_token_ms": "ttft_s", "generation_time_ms": "decode_s",
                 "mean_itl_ms": "itl_s"}


@dataclass
class Streamed(Completion):
    """A Completion plus the server's own timings of the same request, where the server gives them."""

    server: dict | None = None  # queue_s, ttft_s (from scheduled), decode_s, itl_s, tokens_per_s, spec_decode


def server_timings(block: dict) -> dict:
    """vLLM's per-request `metrics` block in seconds; a field it leaves out stays None (unknown)."""
    out = {name: (block[key] / 1000 if block.get(key) is not None else None) for key, name in SERVER_FIELDS.items()}
    return out | {"tokens_per_s": block.get("tokens_per_second"), "spec_decode": block.get("speculative_decoding")}


class _Events:
    """Server-sent events of one answer, applied to its record as they arrive."""

    def __init__(self, done: Streamed, on_chunk: Callable[[], None] | None):
        self.done, self.on_chunk = done, on_chunk
        self.sent, self.rest = 0.0, b""  # perf_counter when the request went out; a line not yet ended
        self.error: str | None = None

    def feed(self, data: bytes, now: float) -> None:
        *lines, self.rest = (self.rest + data).split(b"\n")
        for line in lines:
            if line[:5] == b"data:":
                payload = line[5:].strip()
                if payload and payload != b"[DONE]":
                    self.apply(json.loads(payload), now - self.sent)

    def apply(self, event: dict, t: float) -> None:
        done = self.done
        if "error" in event or event.get("object") == "error":  # an error inside a stream that had started well
            err = event.get("error", event)
            self.error = err.get("message", str(err)) if isinstance(err, dict) else str(err)
            return
        usage = event.get("usage")
        if usage:
            done.prompt_tokens, done.completion_tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if event.get("metrics"):
            done.server = server_timings(event["metrics"])
        for choice in event.get("choices") or ():
            if "text" in choice:
                text, reasoning = choice["text"] or "", ""
            else:
                delta = choice.get("delta") or {}
                text = delta.get("content") or ""
                reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
            ids = choice.get("token_ids")
            tokens = len(ids) if ids is not None else None
            if choice.get("finish_reason"):
                done.finish_reason = choice["finish_reason"]
            if not (text or reasoning or tokens):  # e.g. the role-only opening chunk of a chat
                continue
            if self.on_chunk is not None:
                self.on_chunk()
            done.add_chunk(t, text, reasoning, tokens)


class _Exchange(asyncio.Protocol):
    """One HTTP/1.1 request on a connection of its own: status, headers, then the body as it arrives
    (chunked, of a stated length, or up to the end of the connection)."""

    def __init__(self, request: bytes, sink: _Events | _Collect, finished: asyncio.Future):
        self.request, self.sink, self.finished = request, sink, finished
        self.raw, self.body = b"", b""  # bytes not yet taken apart; an error answer's body, kept whole
        self.status: int | None = None
        self.chunked, self.left = False, None  # left: body bytes still to come, where the length is stated
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        try:
            self._take(data, now)
        except Exception as e:  # a malformed answer ends this request only, as a ValueError the caller names
            self._end(ValueError(f"{type(e).__name__}: {e}"))

    def _take(self, data: bytes, now: float) -> None:
        self.raw += data
        if self.status is None:
            head, sep, rest = self.raw.partition(b"\r\n\r\n")
            if not sep:
                return
            self._head(head)
            self.raw = rest
        if not self.chunked:
            piece, self.raw = self.raw, b""
            if self.left is not None:
                piece, self.left = piece[: self.left], self.left - len(piece[: self.left])
            self._body(piece, now)
            if self.left == 0:
                self._end(None, now)
            return
        while True:  # chunked: size line, data, CRLF
            line_end = self.raw.find(b"\r\n")
            if line_end < 0:
                return
            size = int(self.raw[:line_end].split(b";")[0], 16)
            if len(self.raw) < line_end + 4 + size:
                return
            piece = self.raw[line_end + 2: line_end + 2 + size]
            self.raw = self.raw[line_end + 4 + size:]
            if size == 0:
                self._end(None, now)
                return
            self._body(piece, now)

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not self.chunked and "content-length" in headers:
            self.left = int(headers["content-length"])

    def _body(self, piece: bytes, now: float) -> None:
        if self.status == 200:
            self.sink.feed(piece, now)
        else:
            self.body += piece

    def eof_received(self) -> bool:
        self._end(None if self.left is None and not self.chunked and self.status else
                  ConnectionError("the server closed the connection mid-answer"), time.perf_counter())
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or ConnectionError("the connection closed before the answer ended"))

    def _end(self, error: Exception | None, now: float | None = None) -> None:
        if not self.finished.done() and error is None:
            self.finished.set_result(now)
        elif not self.finished.done():
            self.finished.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class AsyncEndpoint:
    """An OpenAI-compatible server and one model on it, for many streamed requests at once. `on_chunk`
    runs on the event loop for every chunk that carries tokens: a test hook that loads the client on
    purpose, to show that a level whose client cannot keep up is caught. `vllm` false (a server without
    /version, see client.Endpoint.info) sends none of vLLM's request fields, as client.py does."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 600.0,
                 on_chunk: Callable[[], None] | None = None, vllm: bool = True):
        parts = urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(f"{redact(url)} is not an http(s) URL; give the server's base URL ending in /v1.")
        self.url, self.model, self.timeout, self.on_chunk = url.rstrip("/"), model, timeout, on_chunk
        self.vllm = vllm
        self.shown = redact(self.url)
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self._prefix = parts.path
        self._auth = f"Authorization: Bearer {api_key}\r\n".encode() if api_key else b""

    async def complete(self, prompt: str | list[int], max_tokens: int, temperature: float = 0.0,
                       ignore_eos: bool = True, stop: list[str] | None = None, **extra: Any) -> Streamed:
        """A text completion; a list of token ids is sent as is, so its length is exact."""
        if isinstance(prompt, list) and not self.vllm:
            raise EndpointError(f"{self.shown} is not vLLM: a prompt of token ids needs client.Endpoint, which "
                                "sends it as the local tokenizer's text.")
        return await self._stream("/completions", {"prompt": prompt, "max_tokens": max_tokens,
                                                   "temperature": temperature, "stop": stop,
                                                   **request_fields(self.vllm, ignore_eos, max_tokens), **extra})

    async def chat(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
                   ignore_eos: bool = False, stop: list[str] | None = None, **extra: Any) -> Streamed:
        return await self._stream("/chat/completions", {"messages": messages, "max_tokens": max_tokens,
                                                        "temperature": temperature, "stop": stop,
                                                        **request_fields(self.vllm, ignore_eos, max_tokens),
                                                        **extra})

    async def get(self, path: str) -> bytes:
        """A GET on the server's root (e.g. /metrics), read whole; for sampling while streams run."""
        sink = _Collect()
        exchange, _, _ = await self._exchange(self._request("GET", path, b""), sink)
        if exchange.status != 200:
            raise EndpointError(f"{self.shown.removesuffix('/v1')}{path} answered {exchange.status}: "
                                f"{error_message(exchange.body)}")
        return b"".join(sink.parts)

    def _request(self, method: str, path: str, body: bytes) -> bytes:
        return (f"{method} {path} HTTP/1.1\r\nHost: {self._host}:{self._port}\r\nConnection: close\r\n"
                f"Accept-Encoding: identity\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                ).encode() + self._auth + b"\r\n" + body

    async def _exchange(self, request: bytes, sink: _Events | _Collect) -> tuple[_Exchange, float, float]:
        """One request on a new connection, awaited to the end of its answer: (exchange, sent, ended)."""
        loop = asyncio.get_running_loop()
        exchange = _Exchange(request, sink, loop.create_future())
        sink.sent = sent = time.perf_counter()
        try:
            await loop.create_connection(lambda: exchange, self._host, self._port, ssl=self._ssl)
            ended = await asyncio.wait_for(exchange.finished, self.timeout)
        except asyncio.TimeoutError:
            raise EndpointError(f"{self.shown} gave no complete answer within {self.timeout:g} s.") from None
        except OSError as e:
            got = f"; the answer so far had {len(sink.done.chunk_times)} chunks" if isinstance(sink, _Events) else ""
            raise EndpointError(f"Cannot reach or lost the connection to {self.shown} ({type(e).__name__}: {e})"
                                f"{got}. Is the server running?") from None
        except ValueError as e:
            raise EndpointError(f"{self.shown} answered something that is not HTTP with JSON events ({e}).") from None
        finally:
            if exchange.transport is not None:
                exchange.transport.close()
        return exchange, sent, ended

    async def _stream(self, path: str, body: dict) -> Streamed:
        done = Streamed(started_at=now())
        events = _Events(done, self.on_chunk)
        payload = json.dumps({"model": self.model, "stream": True, "stream_options": {"include_usage": True},
                              **body}).encode()
        exchange, sent, ended = await self._exchange(self._request("POST", self._prefix + path, payload), events)
        if exchange.status == 401:
            raise EndpointError(f"{self.shown} refused the API key (401). Set the environment variable named by "
                                "api_key_env in the model's params to the server's key.")
        if exchange.status != 200:
            raise EndpointError(f"{self.shown} refused the request ({exchange.status}): {error_message(exchange.body)}")
        if events.error is not None:
            raise EndpointError(f"{self.shown} failed the request after {len(done.chunk_times)} chunks: {events.error}")
        if done.finish_reason is None:  # a clean end of the connection can still cut an answer short
            raise EndpointError(f"Lost the connection to {self.shown}: the stream ended without a finish reason "
                                f"after {len(done.chunk_times)} chunks.")
        done.total_s = ended - sent
        return done


class _Collect:
    """A whole body, for the plain GETs (no server-sent events)."""

    def __init__(self):
        self.parts, self.sent = [], 0.0

    def feed(self, data: bytes, now: float) -> None:
        self.parts.append(data)


# -- many requests ----------------------------------------------------------------------------------------

Call = Callable[[AsyncEndpoint], Awaitable[Streamed]]


@dataclass(frozen=True)
class Outcome:
    """How one request of a batch ended: its answer or its error, and when it was sent."""

    index: int
    sent_s: float  # from the batch's start
    answer: Streamed | None
    error: str | None


async def send(endpoint: AsyncEndpoint, index: int, call: Call, t0: float) -> Outcome:
    """One request of many: an endpoint's refusal or failure is its outcome, not the batch's end."""
    sent = time.perf_counter() - t0
    try:
        return Outcome(index, sent, await call(endpoint), None)
    except EndpointError as e:
        return Outcome(index, sent, None, f"{type(e).__name__}: {e}")


async def closed_loop(endpoint: AsyncEndpoint, calls: Iterable[Call], concurrency: int,
                      on_done: Callable[[Outcome], None] | None = None, *, t0: float | None = None,
                      stop_on_error: bool = False) -> list[Outcome]:
    """Keep `concurrency` requests in flight, a new one sent as one ends, until `calls` run out (a
    generator may stop on a clock) or a request fails when `stop_on_error`; in-flight ones are awaited."""
    t0 = time.perf_counter() if t0 is None else t0
    queue, flight, outcomes, stopped = iter(enumerate(calls)), set(), [], False

    def more() -> None:
        item = None if stopped else next(queue, None)
        if item is not None:
            flight.add(asyncio.ensure_future(send(endpoint, item[0], item[1], t0)))

    try:
        for _ in range(concurrency):
            more()
        while flight:
            finished, _ = await asyncio.wait(flight, return_when=asyncio.FIRST_COMPLETED)
            for task in finished:
                flight.discard(task)
                outcome = task.result()
                outcomes.append(outcome)
                if on_done is not None:
                    on_done(outcome)
                stopped = stopped or (stop_on_error and outcome.error is not None)
                more()
    finally:
        for task in flight:
            task.cancel()
    return outcomes


def ahead_of_others() -> str:
    """Ask the OS to run the calling thread before ordinary ones (SCHED_FIFO, lowest real-time priority);
    says what it granted. Where a server keeps every core busy (vLLM's CPU build spins), an ordinary
    thread waits up to hundreds of ms for a CPU and stamps chunks that late; the client needs a few %."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "real-time (SCHED_FIFO 1)"
    except (AttributeError, OSError) as e:  # no permission (CAP_SYS_NICE), or not Linux
        return f"ordinary ({type(e).__name__}: real-time scheduling refused)"


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a fresh event loop in a thread of its own, ahead of ordinary threads where the
    OS allows (ahead_of_others), and wait for it here; Ctrl-C cancels it (its requests are closed) and
    goes on up. What the process holds already is frozen out
    of the garbage collector meanwhile: a full collection over a notebook's heap (pandas, matplotlib)
    stalls the loop for tens of milliseconds, and every chunk that arrives meanwhile is stamped late.
    """
    loop = asyncio.new_event_loop()
    box: dict[str, Any] = {}

    def target() -> None:
        ahead_of_others()
        asyncio.set_event_loop(loop)
        box["task"] = loop.create_task(main())
        try:
            box["value"] = loop.run_until_complete(box["task"])
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e
        finally:
            loop.close()

    gc.collect()
    gc.freeze()
    thread = threading.Thread(target=target, name="sparknb-stream", daemon=True)
    thread.start()
    try:
        thread.join()  # wakes for Ctrl-C too (a lock's wait is interruptible), and for nothing else
    except KeyboardInterrupt:
        if "task" in box:
            loop.call_soon_threadsafe(box["task"].cancel)
        thread.join()
        raise
    finally:
        gc.unfreeze()
    if "error" in box:
        raise box["error"]
    return box["value"]


def batch(endpoint: AsyncEndpoint, calls: Iterable[Call], concurrency: int,
          on_done: Callable[[Outcome], None] | None = None, *, stop_on_error: bool = False) -> list[Outcome]:
    """Every request of `calls`, `concurrency` at a time, in one call from ordinary (or notebook) code;
    `on_done` sees each outcome as it ends, all on one thread, so records written there never interleave."""
    return run(lambda: closed_loop(endpoint, calls, concurrency, on_done, stop_on_error=stop_on_error))
