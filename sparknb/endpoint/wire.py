"""One request on the wire and its streamed answer: the bytes sent, and the bytes read back as they arrive.

Both clients go through here: client.Endpoint reads one stream in the caller's own thread (`exchange`, a
blocking socket), stream.AsyncEndpoint reads many at once on an event loop. Either way:
- the request is built and serialized before the clock starts (`Route.post`), and the clock starts when
  its bytes are written; the connection is opened before, as a kept-alive one would be;
- every read is stamped as it returns and taken apart by the same `Reader` (HTTP/1.1: chunked, of a
  stated length, or up to the end of the connection) and the same `Events` (server-sent events, json),
  into completion.Completion by its one timing rule (Completion.add_chunk);
- the end is judged by one `finish`, in the same words: a refused key, a refused request with the
  server's own words, an error event inside the stream, a stream cut short, a lost connection.

Why a blocking socket for one stream, measured against the two other designs on this 2-core VM (a
server that answers at once, bench/fake_vllm.py, interleaved runs): paced at 2 ms a chunk, as a
decoding server sends them, each design pays about the same per chunk, 85 to 95 us of CPU, since every
chunk is one wake-up of a sleeping thread and one cold pass through this reader either way (a bare
read of the same bytes, no parsing, costs 17 to 34 us). They differ around the request: the TTFT the
client adds at 3,000 prompt tokens is 0.1 to 0.3 ms here, 0.7 to 1.1 ms through a persistent event-loop
thread (the hop to it and back), and an event loop per call, though as quick, costs 30 ms of CPU a
request (its thread, its loop, a full garbage collection first). So: no event loop, no thread hop; the
caller's own thread reads.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import os
import select
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from ..errors import EndpointError, Refused
from ..runs.redaction import redact
from .completion import Completion
from .failures import garbled, late, lost, stalled, unreachable  # as wire.late etc. for both clients
from .tools import Assembly

if TYPE_CHECKING:
    from ..engines import Engine

BUFFER = 65536  # bytes per read: below glibc's mmap threshold, so a read costs no mapping


class Route:
    """Where the requests go (the URL taken apart once), and the bytes of each request.

    One credential goes with every request, the streams' and the side doors' alike: the API key (as
    Bearer) where one is set, else the URL's user:password (as Basic), else none. A request carries one
    Authorization header, so a URL's user:password given beside a key is not sent; `refusal` says so
    when the server answers 401. `key_env` names the variable the key is read from, for that message.
    """

    def __init__(self, url: str, api_key: str | None = None, key_env: str | None = None):
        self.url = url.rstrip("/")
        self.shown = redact(self.url)  # the URL in messages: a password in it never reaches an error text
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise EndpointError(f"{self.shown} is not an http(s) URL; give the server's base URL ending in /v1.")
        self.host, self.prefix = parts.hostname, parts.path
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.ssl = ssl.create_default_context() if parts.scheme == "https" else None
        self.key_env, self.has_key = key_env, bool(api_key)
        self.has_password = bool(parts.username or parts.password)
        self.authorization = f"Bearer {api_key}" if api_key else basic(parts) if self.has_password else ""
        self._auth = f"Authorization: {self.authorization}\r\n".encode() if self.authorization else b""
        # The URL without its user:password, for a client that would send them itself (httpx does)
        self.bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()

    def refusal(self, where: str) -> EndpointError:
        """The 401 of `where`: which credential was sent, and how to give the one the server wants."""
        var = f"${self.key_env}" if self.key_env else "the variable named by api_key_env in the model's params"
        if self.has_key and self.has_password:
            return EndpointError(
                f"{where} refused the API key read from {var} (401). The URL's user:password was not sent: a "
                "request carries one Authorization header, and sparknb sends the API key (Bearer) where one is "
                f"set. If the key is right and the server checks the user:password instead, unset {var}; if it "
                "needs both (a proxy asking for a password in front of a server asking for a key), let the proxy "
                "check the password and add the key itself (nginx: proxy_set_header Authorization \"Bearer "
                "<key>\"), and give sparknb only the URL's user:password.")
        if self.has_key:
            return EndpointError(f"{where} refused the API key read from {var} (401): set {var} to the server's key.")
        if self.has_password:
            return EndpointError(
                f"{where} refused the URL's user:password (401, sent as Basic auth, since no API key is set in "
                f"{var}): fix them in the endpoint, or, where the server asks for an API key, export it in {var}.")
        if self.key_env:
            return EndpointError(f"{where} asks for an API key (401), and none was sent: {var}, which the model's "
                                 f"api_key_env names, is not set. Export {self.key_env}=<the server's key>.")
        return EndpointError(f"{where} asks for an API key (401), and none was sent: no api_key_env was given. Name "
                             "one in the model's params (api_key_env: NAME) and export NAME=<the server's key>.")

    def request(self, method: str, path: str, body: bytes = b"") -> bytes:
        return (f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nConnection: close\r\n"
                f"Accept-Encoding: identity\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                ).encode() + self._auth + b"\r\n" + body

    def post(self, path: str, model: str, fields: dict) -> bytes:
        """A streamed request for `model` under the URL's path, serialized whole (before any clock starts)."""
        body = {"model": model, "stream": True, "stream_options": {"include_usage": True}, **fields}
        return self.request("POST", self.prefix + path, json.dumps(body, separators=(",", ":")).encode())


class Events:
    """Server-sent events of one answer, applied to its record as they arrive. `on_chunk` runs for every
    chunk that carries tokens (a test hook, see stream.AsyncEndpoint); `sent` is set when the request goes;
    `meanwhile`, the caller's own work to do once it has gone (see `meanwhile`).
    The server's own timings of the request are read where its `engine` puts them (vLLM: `metrics`, in the
    final usage chunk; llama-server: `timings`, in the last event)."""

    def __init__(self, done: Completion, on_chunk: Callable[[], None] | None = None, *, engine: Engine):
        self.done, self.on_chunk = done, on_chunk
        self.engine, self.timings_field = engine, engine.timings_field
        self.sent, self.rest = 0.0, b""  # perf_counter when the request went out; a line not yet ended
        self.error: str | None = None
        self.finished: float | None = None  # when the event carrying the finish reason came
        self.assembly = Assembly()  # streamed tool-call deltas, by index
        self.meanwhile: Callable[[], None] | None = None

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
            done.usage_cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
            done.reasoning_tokens = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        if self.timings_field and event.get(self.timings_field):
            done.server = self.engine.timings(event[self.timings_field])
        for choice in event.get("choices") or ():
            completion = "text" in choice  # a completion's event, never a chat's role-only opening chunk
            if completion:
                text, reasoning = choice["text"] or "", ""
            else:
                delta = choice.get("delta") or {}
                text = delta.get("content") or ""
                reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
                if delta.get("tool_calls"):  # a tool call's piece is a token chunk with no text: it times TTFT
                    done.add_tool_deltas(t, delta["tool_calls"], self.assembly)
                    completion = True
            ids = choice.get("token_ids")
            tokens = len(ids) if ids is not None else None
            if choice.get("finish_reason"):
                done.finish_reason, self.finished = choice["finish_reason"], t
                completion = False  # the closing event: its text, if any, is taken below; an empty one is no token
            # A completion's event of empty text is a token whose text is empty (a special token, or bytes of a
            # character still incomplete): its time counts (5 of 272 one-token answers had no first-token time).
            if not (text or reasoning or tokens or (completion and tokens is None)):
                continue
            if self.on_chunk is not None:
                self.on_chunk()
            done.add_chunk(t, text, reasoning, tokens)

    @property
    def chunks(self) -> int:
        return len(self.done.chunk_times)


class Collect:
    """A whole body, for the plain GETs (no server-sent events)."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.sent, self.chunks, self.meanwhile = 0.0, 0, None

    def feed(self, data: bytes, now: float) -> None:
        self.parts.append(data)


Sink = Events | Collect


class Reader:
    """One HTTP/1.1 answer, taken apart as its bytes arrive: status and headers, then the body (chunked, of
    a stated length, or up to the end of the connection), handed to `sink` piece by piece where the status
    is 200 and kept whole otherwise (an error's body, for its message). `ended` is when its last byte came."""

    def __init__(self, sink: Sink):
        self.sink = sink
        self.raw, self.body = b"", b""  # bytes not yet taken apart; an error answer's body
        self.status: int | None = None
        self.chunked, self.left = False, None  # left: body bytes still to come, where the length is stated
        self.ended: float | None = None

    def feed(self, data: bytes, now: float) -> None:
        """Bytes that arrived at `now`; a malformed answer raises ValueError, which the caller names."""
        try:
            self._take(data, now)
        except Exception as e:
            raise ValueError(f"{type(e).__name__}: {e}") from None

    def eof(self, now: float) -> None:
        """The server closed the connection: the end of an answer that runs to it, else a cut one."""
        if self.ended is None and (self.left is not None or self.chunked or not self.status):
            raise ConnectionError("the server closed the connection mid-answer")
        self.ended = now if self.ended is None else self.ended

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
                self.ended = now
            return
        raw, at = self.raw, 0  # chunked: size line, data, CRLF; what is left is cut off once, at the end
        while True:
            line_end = raw.find(b"\r\n", at)
            if line_end < 0:
                break
            size = int(raw[at:line_end].split(b";")[0], 16)
            if len(raw) < line_end + 4 + size:
                break
            piece, at = raw[line_end + 2: line_end + 2 + size], line_end + 4 + size
            if size == 0:
                self.ended = now
                break
            self._body(piece, now)
        self.raw = raw[at:]

    def _head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if not self.chunked and "content-length" in headers:
            self.left = int(headers["content-length"])

    def _body(self, piece: bytes, now: float) -> None:
        if not piece:
            return
        if self.status == 200:
            self.sink.feed(piece, now)
        else:
            self.body += piece


def basic(parts) -> str:
    """A URL's user and password as Basic auth, as httpx would send them."""
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def refused(route: Route, shown: str, reader: Reader) -> EndpointError | None:
    """The error of an answer whose status is not 200, in the server's own words; None for a 200."""
    if reader.status == 401:
        return route.refusal(shown)
    if reader.status != 200:
        return Refused(f"{shown} refused the request ({reader.status}): {error_message(reader.body)}")
    return None


def finish(route: Route, reader: Reader, events: Events) -> Completion:
    """The answer, whole, or the EndpointError that says how it went wrong."""
    done, shown = events.done, route.shown
    error = refused(route, shown, reader)
    if error is not None:
        raise error
    if events.error is not None:
        raise EndpointError(f"{shown} failed the request after {events.chunks} chunks: {events.error}")
    if done.finish_reason is None:  # a clean end of the connection can still cut an answer short
        raise EndpointError(f"Lost the connection to {shown}: the stream ended without a finish reason "
                            f"after {events.chunks} chunks.")
    done.total_s = reader.ended - events.sent
    done.cached_tokens = events.engine.cached_tokens(done)
    if done.ttft_s is None and done.completion_tokens and events.finished is not None:
        # Every token came with the closing event, none before it: that is when the client saw them.
        done.add_chunk(events.finished, "", "", done.completion_tokens)
    if done.completion_tokens == len(done.chunk_tokens) and None in done.chunk_tokens:
        # No token ids came back (llama-server sends none), but as many chunks as the server counted tokens: each
        # chunk held exactly one. Any other count leaves the chunks' tokens unknown, never guessed.
        done.chunk_tokens = [1] * len(done.chunk_tokens)
    return done


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


# -- one stream in the caller's thread -----------------------------------------------------------------------

def ahead_of_others() -> str:
    """Ask the OS to run the calling thread before ordinary ones (SCHED_FIFO, lowest real-time priority);
    says what it granted. Where a server keeps every core busy (vLLM's CPU build spins), an ordinary
    thread waits up to hundreds of ms for a CPU and stamps chunks that late; the client needs a few %."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        return "real-time (SCHED_FIFO 1)"
    except (AttributeError, OSError) as e:  # no permission (CAP_SYS_NICE), or not Linux
        return f"ordinary ({type(e).__name__}: real-time scheduling refused)"


@contextlib.contextmanager
def undisturbed() -> Iterator[str]:
    """Around one stream read in the caller's thread: ahead of ordinary threads where the OS allows, and
    no garbage collection (a full one over a notebook's heap takes tens of ms, and every chunk arriving
    meanwhile would be stamped late); both as they were afterwards. Yields what the OS granted."""
    try:
        policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    except (AttributeError, OSError):
        policy = param = None
    granted = ahead_of_others()
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield granted
    finally:
        if collecting:
            gc.enable()
        if policy is not None:
            with contextlib.suppress(OSError):
                os.sched_setscheduler(0, policy, param)


def meanwhile(sink: Sink, sock: socket.socket) -> None:
    """The caller's own work once the request has gone (`sink.meanwhile`), while the server reads it: the agent writes
    a step's records there, off its sessions' path. Where any of the answer had come by its end, the first stamps may
    be late by up to that long, and the answer says so (Completion.busy_s): a chat step's answer began 20 to 47 ms
    after its sending on an H200 (the server renders and tokenizes first); the records took 0.6 ms."""
    if sink.meanwhile is None:
        return
    sink.meanwhile()
    if select.select([sock], [], [], 0)[0]:
        sink.done.busy_s = time.perf_counter() - sink.sent


def exchange(route: Route, request: bytes, sink: Sink, timeout: float, stall: float | None = None) -> Reader:
    """One request on a connection of its own, read in the calling thread until its answer ends.

    The connection (and a TLS handshake) is made before the clock; the clock (`sink.sent`) starts as the
    request is written; each read lands in one buffer and is stamped as it returns. No read waits more
    than `stall` (default: `timeout`), nor does the whole answer run past `timeout` by more than one read.
    """
    reader = Reader(sink)
    try:
        sock = socket.create_connection((route.host, route.port), timeout=timeout)
    except OSError as e:
        raise unreachable(route.shown, e) from None
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if route.ssl is not None:
            sock = route.ssl.wrap_socket(sock, server_hostname=route.host)
        buffer = bytearray(BUFFER)
        view = memoryview(buffer)
        with undisturbed():
            sink.sent = time.perf_counter()
            deadline = sink.sent + timeout
            sock.sendall(request)
            meanwhile(sink, sock)
            sock.settimeout(stall or timeout)
            while reader.ended is None:
                try:
                    n = sock.recv_into(buffer)
                except TimeoutError:
                    raise stalled(route.shown, stall or timeout, sink) from None
                now = time.perf_counter()
                if not n:
                    reader.eof(now)
                    break
                reader.feed(bytes(view[:n]), now)
                if now > deadline and reader.ended is None:
                    raise TimeoutError(f"past {timeout:g} s")
    except TimeoutError:
        raise late(route.shown, timeout, sink) from None
    except ValueError as e:
        raise garbled(route.shown, e) from None
    except OSError as e:
        raise lost(route.shown, e, sink) from None
    finally:
        sock.close()
    return reader

