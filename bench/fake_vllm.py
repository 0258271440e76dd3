"""A server that answers at once, in vLLM's shape, for the client benches: no model, no engine, no clock but ours.

It runs in a process of its own (asyncio), reads each request whole (the body to its last byte, as a
real server must before it can start), and answers with HTTP chunked encoding, one write per chunk, as
uvicorn sends them: completions chunks with token ids, or chat chunks after a role-only opening one,
then a finish reason and a usage chunk with vLLM's per-request metrics. Asked for `return_token_ids`,
its first chunk echoes the prompt's token ids, as vLLM's does (`prompt_token_ids`: 55 kB of JSON for
10,714 tokens, which the client must read before it sees the first token). It reads only `max_tokens`,
`bench_gap_s` (seconds between two chunks; 0: back to back) and the prompt's ids from the body, by
regular expressions, so that a 10,714-token prompt costs the server a scan, not a JSON parse, and the
time to its first chunk is the client's and the loopback's.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import re
import socket
import time

MODEL = "bench-model"
MAX_TOKENS = re.compile(rb'"max_tokens":\s*(\d+)')
GAP = re.compile(rb'"bench_gap_s":\s*([0-9.e-]+)')
PROMPT_IDS = re.compile(rb'"prompt":\s*(\[[0-9,\s]*\])')


def frame(event: dict | str) -> bytes:
    text = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    data = f"data: {text}\n\n".encode()
    return b"%x\r\n" % len(data) + data + b"\r\n"


COMPLETION_EVENT = json.dumps({"id": "cmpl-5f0c2ad1e4b34a0d", "object": "text_completion", "created": 1796091679,
                               "model": MODEL, "choices": [{"index": 0, "text": " word", "logprobs": None,
                                                            "finish_reason": None, "stop_reason": None,
                                                            "prompt_token_ids": None, "token_ids": [3464]}]},
                              separators=(",", ":"))
COMPLETION = frame(COMPLETION_EVENT)
CHAT_ROLE = frame({"id": "chatcmpl-5f0c2ad1e4b34a0d", "object": "chat.completion.chunk", "created": 1796091679,
                   "model": MODEL, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                "logprobs": None, "finish_reason": None}]})
CHAT = frame({"id": "chatcmpl-5f0c2ad1e4b34a0d", "object": "chat.completion.chunk", "created": 1796091679,
              "model": MODEL, "choices": [{"index": 0, "delta": {"content": " word"}, "logprobs": None,
                                           "finish_reason": None, "token_ids": [3464]}]})


def tail(n: int, chat: bool) -> bytes:
    choice = ({"index": 0, "delta": {"content": ""}, "finish_reason": "length", "token_ids": [225]} if chat else
              {"index": 0, "text": "", "finish_reason": "length", "token_ids": [225]})
    last = {"id": "x", "object": "text_completion", "created": 1, "model": MODEL, "choices": [choice]}
    usage = {"id": "x", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
             "usage": {"prompt_tokens": 8, "completion_tokens": n + 1, "total_tokens": n + 9},
             "metrics": {"time_to_first_token_ms": 1.0, "generation_time_ms": 2.0, "queue_time_ms": 0.1,
                         "mean_itl_ms": 0.5, "tokens_per_second": 100.0}}
    return frame(last) + frame(usage) + frame("[DONE]") + b"0\r\n\r\n"


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        body = await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError, StopIteration):
        writer.close()
        return
    if head.startswith(b"GET"):  # /metrics and the like: an empty answer
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        writer.close()
        return
    chat = b"/chat/" in head.split(b"\r\n", 1)[0]
    n = int(MAX_TOKENS.search(body).group(1)) - 1
    gap = float(found.group(1)) if (found := GAP.search(body)) else 0.0
    chunk = CHAT if chat else COMPLETION
    first = CHAT_ROLE + chunk if chat else chunk
    if not chat and b'"return_token_ids":true' in body and (ids := PROMPT_IDS.search(body)):
        first = frame(COMPLETION_EVENT.replace('"prompt_token_ids":null', '"prompt_token_ids":' + ids.group(1).decode()))
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                 + first)
    due = time.perf_counter()
    for i in range(n - 1):
        if gap:
            due += gap
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        elif i % 64 == 63:
            await writer.drain()
        writer.write(chunk)
    writer.write(tail(n, chat))
    await writer.drain()
    writer.close()


def _serve(port: int) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_answer, "127.0.0.1", port, backlog=256)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class FakeServer:
    """The fake server in a process of its own, for a `with` block; `url` ends in /v1."""

    def __enter__(self) -> FakeServer:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.process = multiprocessing.Process(target=_serve, args=(self.port,), daemon=True)
        self.process.start()
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.__exit__()
        raise SystemExit("the fake server did not start within 10 s")

    def __exit__(self, *exc) -> None:
        self.process.terminate()
        self.process.join()
