"""The asyncio streaming client: many streamed requests at once, timed chunk by chunk, tens of microseconds a chunk.

Each request has a connection of its own, read by an asyncio BufferedProtocol through the same reader
as the single-stream client (sparknb.endpoint.wire: the request serialized before the clock, the clock started
as it is written, each read stamped as it arrives, one timing rule, the same errors in the same words).
Reads land in a buffer of the exchange's own (asyncio's plain Protocol makes a fresh 256 KiB bytes object
per read, which glibc maps, shrinks and unmaps: three system calls on every chunk). A paced single
stream still costs 80 to 115 us of CPU a chunk here: the wake-up and a cold pass through the reader,
as for the single-stream client (see sparknb.endpoint.wire), plus the loop's own turn; with many streams one
wake-up serves several chunks (20 to 30 us a chunk at 16 streams paced at 2 ms: bench/client_overhead.py).
`batch()` sends many requests at a fixed concurrency in one call, on an event loop of its own thread
(a notebook's kernel runs one in the main thread, and the chunks' clock must not wait on it).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from .. import engines
from ..engines import Engine
from ..errors import EndpointError
from . import wire
from .completion import Completion, answer_fields, now
from .wire import ahead_of_others

T = TypeVar("T")


class _Exchange(asyncio.BufferedProtocol):
    """One request on a connection of its own: written by `send` (the clock starts there), its answer's
    bytes fed to a wire.Reader as they arrive, `finished` set when it ends."""

    def __init__(self, request: bytes, reader: wire.Reader, finished: asyncio.Future):
        self.request, self.reader, self.finished = request, reader, finished
        self.buffer = bytearray(wire.BUFFER)
        self.view = memoryview(self.buffer)
        self.transport: asyncio.Transport | None = None
        self.heard = time.perf_counter()  # the last sign of life: the request written, or bytes read

    def connection_made(self, transport) -> None:
        self.transport = transport

    def send(self) -> None:
        if not self.finished.done():
            self.reader.sink.sent = self.heard = time.perf_counter()
            self.transport.write(self.request)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self.buffer

    def buffer_updated(self, nbytes: int) -> None:
        now = self.heard = time.perf_counter()
        try:
            self.reader.feed(bytes(self.view[:nbytes]), now)
        except ValueError as e:  # a malformed answer ends this request only
            self._end(e)
            return
        if self.reader.ended is not None:
            self._end(None)

    def eof_received(self) -> bool:
        try:
            self.reader.eof(time.perf_counter())
            self._end(None)
        except ConnectionError as e:
            self._end(e)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or ConnectionError("the connection closed before the answer ended"))

    def _end(self, error: Exception | None) -> None:
        if not self.finished.done():
            if error is None:
                self.finished.set_result(None)
            else:
                self.finished.set_exception(error)
        if self.transport is not None:
            self.transport.close()


class AsyncEndpoint:
    """An OpenAI-compatible server and one model on it, for many streamed requests at once. `on_chunk`
    runs on the event loop for every chunk that carries tokens: a test hook that loads the client on
    purpose, to show that a level whose client cannot keep up is caught. `engine` is the server's family
    as client.Endpoint.info found it (sparknb.engines): what its requests carry, where its timings are.
    A server that takes no token ids gets `decode`'s text for them (the local tokenizer's, as
    client.Endpoint sends it), made before any request is timed."""

    def __init__(self, url: str, model: str, api_key: str | None = None, timeout: float = 600.0,
                 on_chunk: Callable[[], None] | None = None, engine: Engine = engines.VLLM,
                 decode: Callable[[list[int]], str] | None = None, key_env: str | None = None,
                 stall_s: float | None = None):
        self.route = wire.Route(url, api_key, key_env)
        self.stall = stall_s or timeout  # the longest a stream may send nothing (wire.stalled)
        self.url, self.shown, self.model, self.timeout, self.on_chunk = (self.route.url, self.route.shown, model,
                                                                         timeout, on_chunk)
        self.engine, self.decode = engine, decode

    async def complete(self, prompt: str | list[int], max_tokens: int, temperature: float = 0.0,
                       ignore_eos: bool = True, stop: list[str] | None = None, reuse_prompt: bool = False,
                       **extra: Any) -> Completion:
        """A text completion; a list of token ids is sent as is, so its length is exact."""
        if isinstance(prompt, list) and not self.engine.token_prompts:
            if self.decode is None:
                raise EndpointError(f"{self.shown} ({self.engine.name}) takes no token ids and no local tokenizer "
                                    "was given to send them as text: add `tokenizer:` to the model's params.")
            prompt = self.decode(prompt)
        return await self._stream("/completions", {"prompt": prompt, **answer_fields(
            self.engine, max_tokens, temperature, stop, ignore_eos, reuse_prompt, extra)})

    async def chat(self, messages: list[dict], max_tokens: int, temperature: float = 0.0,
                   ignore_eos: bool = False, stop: list[str] | None = None, reuse_prompt: bool = True,
                   **extra: Any) -> Completion:
        return await self._stream("/chat/completions", {"messages": messages, **answer_fields(
            self.engine, max_tokens, temperature, stop, ignore_eos, reuse_prompt, extra)})

    async def get(self, path: str) -> bytes:
        """A GET on the server's root (e.g. /metrics), read whole; for sampling while streams run."""
        sink = wire.Collect()
        reader = await self._exchange(self.route.request("GET", path), sink)
        error = wire.refused(self.route, self.shown.removesuffix("/v1") + path, reader)
        if error is not None:
            raise error
        return b"".join(sink.parts)

    async def _exchange(self, request: bytes, sink: wire.Sink) -> wire.Reader:
        """One request on a new connection, awaited to the end of its answer."""
        loop = asyncio.get_running_loop()
        reader = wire.Reader(sink)
        exchange = _Exchange(request, reader, loop.create_future())
        try:
            await loop.create_connection(lambda: exchange, self.route.host, self.route.port, ssl=self.route.ssl)
        except OSError as e:
            raise wire.unreachable(self.shown, e) from None
        # Written on the loop's next turn, once this task waits: the loop's own work then comes before the
        # request leaves, not after it, where it would hold up a server process woken on this core.
        loop.call_soon(exchange.send)
        try:  # asyncio.timeout, not wait_for: in Python 3.11 wait_for swallows a cancellation that lands as
            # its future completes, and a watcher cancelled so would never end (nor the loop that awaits it)
            async with asyncio.timeout(self.timeout):
                await self._heard(exchange, sink)
        except TimeoutError:
            raise wire.late(self.shown, self.timeout, sink) from None
        except ValueError as e:
            raise wire.garbled(self.shown, e) from None
        except OSError as e:
            raise wire.lost(self.shown, e, sink) from None
        finally:
            if exchange.transport is not None:
                exchange.transport.close()
        return reader

    async def _heard(self, exchange: _Exchange, sink: wire.Sink) -> None:
        """The answer's end, or wire.stalled where nothing came for `stall` seconds."""
        while not exchange.finished.done():
            await asyncio.wait([exchange.finished], timeout=max(0.0, exchange.heard + self.stall - time.perf_counter()))
            if not exchange.finished.done() and time.perf_counter() - exchange.heard >= self.stall:
                exchange.finished.cancel()  # ended here: the connection closing later has nobody to tell
                raise wire.stalled(self.shown, self.stall, sink)
        exchange.finished.result()

    async def _stream(self, path: str, fields: dict) -> Completion:
        request = self.route.post(path, self.model, fields)  # serialized before the clock starts
        events = wire.Events(Completion(started_at=now()), self.on_chunk, engine=self.engine)
        return wire.finish(self.route, await self._exchange(request, events), events)


# -- many requests ----------------------------------------------------------------------------------------

Call = Callable[[AsyncEndpoint], Awaitable[Completion]]


@dataclass(frozen=True)
class Outcome:
    """How one request of a batch ended: its answer or its error, and when it was sent."""

    index: int
    sent_s: float  # from the batch's start
    answer: Completion | None
    error: str | None


async def send(endpoint: AsyncEndpoint, index: int, call: Call, t0: float) -> Outcome:
    """One request of many: an endpoint's refusal or failure is its outcome, not the batch's end."""
    sent = time.perf_counter() - t0
    try:
        return Outcome(index, sent, await call(endpoint), None)
    except EndpointError as e:
        return Outcome(index, sent, None, f"{type(e).__name__}: {e}")


def hopeless(outcomes: list[Outcome], after: int | None) -> bool:
    """Whether the first `after` requests to end all failed and none answered: a level or batch whose every
    request fails (a server that refuses them all) stops there, rather than keep failing for its duration."""
    return after is not None and len(outcomes) >= after and all(o.error is not None for o in outcomes)


async def closed_loop(endpoint: AsyncEndpoint, calls: Iterable[Call], concurrency: int,
                      on_done: Callable[[Outcome], None] | None = None, *, t0: float | None = None,
                      stop_on_error: bool = False, give_up_after: int | None = None) -> list[Outcome]:
    """Keep `concurrency` requests in flight, a new one sent as one ends, until `calls` run out (a
    generator may stop on a clock), a request fails when `stop_on_error`, or the first `give_up_after`
    all failed (see `hopeless`); in-flight ones are awaited."""
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
                stopped = (stopped or (stop_on_error and outcome.error is not None)
                           or hopeless(outcomes, give_up_after))
                more()
    finally:
        await cancelled(flight)
    return outcomes


async def cancelled(tasks: Iterable[asyncio.Future]) -> None:
    """Cancel `tasks` and wait until each has really ended: a task still pending when its loop closes is
    destroyed later, with an asyncio traceback in whatever output is open then ("Task was destroyed but it
    is pending!"), and its coroutine closed in the middle of an await ("coroutine ignored GeneratorExit")."""
    left = [task for task in tasks if not task.done()]
    for task in left:
        task.cancel()
    if left:
        await asyncio.gather(*left, return_exceptions=True)


def run(main: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on a fresh event loop in a thread of its own, ahead of ordinary threads where the
    OS allows (ahead_of_others), and wait for it here; Ctrl-C cancels it (its requests are closed) and
    goes on up. The loop is an asyncio.Runner's: whatever task is still pending when `main` ends is
    cancelled and awaited before the loop closes, so none is left to be destroyed later. What the
    process holds already is frozen out of the garbage collector meanwhile: a full collection over a
    notebook's heap (pandas, matplotlib) stalls the loop for tens of milliseconds, and every chunk that
    arrives meanwhile is stamped late.
    """
    box: dict[str, Any] = {}

    async def tracked() -> T:
        box["task"] = asyncio.current_task()
        return await main()

    def target() -> None:
        ahead_of_others()
        try:
            with asyncio.Runner() as runner:
                box["loop"] = runner.get_loop()
                box["value"] = runner.run(tracked())
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e

    gc.collect()
    gc.freeze()
    thread = threading.Thread(target=target, name="sparknb-stream", daemon=True)
    thread.start()
    try:
        thread.join()  # wakes for Ctrl-C too (a lock's wait is interruptible), and for nothing else
    except KeyboardInterrupt:
        if "task" in box:
            box["loop"].call_soon_threadsafe(box["task"].cancel)
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
