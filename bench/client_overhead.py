"""What one streamed chunk costs the client, in CPU microseconds: the asyncio client (sparknb.stream)
against the synchronous openai-package path (sparknb.client), on a local stream of synthetic chunks.

A server in another process sends vLLM-shaped chunks (token ids, a finish reason, a usage chunk with
per-request metrics), each chunk one write of HTTP chunked encoding, as uvicorn sends them. The
client's CPU time (all its threads) over the chunks it received is the cost per chunk:
- back to back: the server writes as fast as it can, the client's own ceiling (chunks/s = 1e6 / us);
- paced: each stream gets a chunk every `--gap-ms`, as a decoding server sends them; every chunk then
  also pays for waking the client up, so this figure is higher and nearer what a load sweep costs.

    python bench/client_overhead.py            # prints the table and the headline figure
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparknb import stream  # noqa: E402
from sparknb.client import Endpoint  # noqa: E402

MODEL = "bench-model"


def _frame(event: dict | str) -> bytes:
    text = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    data = f"data: {text}\n\n".encode()
    return b"%x\r\n" % len(data) + data + b"\r\n"


CHUNK = _frame({"id": "cmpl-5f0c2ad1e4b34a0d", "object": "text_completion", "created": 1796091679, "model": MODEL,
                "choices": [{"index": 0, "text": " word", "logprobs": None, "finish_reason": None,
                             "stop_reason": None, "prompt_token_ids": None, "token_ids": [3464]}]})


def _tail(n: int) -> bytes:
    last = {"id": "x", "object": "text_completion", "created": 1, "model": MODEL,
            "choices": [{"index": 0, "text": "", "finish_reason": "length", "token_ids": [225]}]}
    usage = {"id": "x", "object": "text_completion", "created": 1, "model": MODEL, "choices": [],
             "usage": {"prompt_tokens": 8, "completion_tokens": n + 1, "total_tokens": n + 9},
             "metrics": {"time_to_first_token_ms": 1.0, "generation_time_ms": 2.0, "queue_time_ms": 0.1,
                         "mean_itl_ms": 0.5, "tokens_per_second": 100.0}}
    return _frame(last) + _frame(usage) + _frame("[DONE]") + b"0\r\n\r\n"


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        body = json.loads(await reader.readexactly(length))
    except (asyncio.IncompleteReadError, ConnectionError, StopIteration):
        writer.close()
        return
    n, gap = body["max_tokens"] - 1, body.get("bench_gap_s", 0.0)
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    due = time.perf_counter()
    for i in range(n):
        writer.write(CHUNK)
        if gap:
            due += gap
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
        elif i % 64 == 63:
            await writer.drain()
    writer.write(_tail(n))
    await writer.drain()
    writer.close()


def _serve(port: int) -> None:
    async def main() -> None:
        server = await asyncio.start_server(_answer, "127.0.0.1", port, backlog=256)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def asyncio_client(url: str, streams: int, chunks: int, gap_s: float) -> tuple[float, int]:
    """(CPU seconds, chunks received) for `streams` requests at once through sparknb.stream."""
    endpoint = stream.AsyncEndpoint(url, MODEL)
    calls = [lambda ep: ep.complete([1, 2, 3], max_tokens=chunks, bench_gap_s=gap_s)] * streams
    stream.batch(endpoint, calls[:1], 1)  # warm: imports, first connection
    cpu = time.process_time()
    outcomes = stream.batch(endpoint, calls, streams)
    cpu = time.process_time() - cpu
    errors = [o.error for o in outcomes if o.error]
    if errors:
        raise SystemExit(f"the asyncio client failed: {errors[0]}")
    return cpu, sum(len(o.answer.chunk_times) for o in outcomes)


def openai_client(url: str, streams: int, chunks: int, gap_s: float) -> tuple[float, int]:
    """The synchronous path, one stream (it has no concurrency of its own)."""
    endpoint = Endpoint(url, MODEL)
    endpoint.complete([1, 2, 3], max_tokens=8, bench_gap_s=gap_s)
    cpu = time.process_time()
    done = endpoint.complete([1, 2, 3], max_tokens=chunks, bench_gap_s=gap_s)
    cpu = time.process_time() - cpu
    endpoint.close()
    return cpu, len(done.chunk_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20000, help="chunks per back-to-back stream")
    parser.add_argument("--gap-ms", type=float, default=2.0, help="time between two chunks of a paced stream")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of a paced stream")
    args = parser.parse_args()
    port = _free_port()
    server = multiprocessing.Process(target=_serve, args=(port,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        paced = int(args.seconds * 1000 / args.gap_ms)
        cases = [("asyncio (sparknb.stream)", asyncio_client, 1, args.chunks, 0.0),
                 ("asyncio (sparknb.stream)", asyncio_client, 8, args.chunks // 8, 0.0),
                 ("openai package (sparknb.client)", openai_client, 1, args.chunks, 0.0),
                 ("asyncio (sparknb.stream)", asyncio_client, 1, paced, args.gap_ms / 1000),
                 ("asyncio (sparknb.stream)", asyncio_client, 16, paced, args.gap_ms / 1000),
                 ("openai package (sparknb.client)", openai_client, 1, paced, args.gap_ms / 1000)]
        print(f"{'client':34} {'streams':>7} {'pacing':>12} {'chunks':>8} {'us/chunk':>9}")
        results = {}
        for name, measure, streams, chunks, gap in cases:
            cpu, got = measure(url, streams, chunks, gap)
            pacing = "back to back" if not gap else f"{1000 * gap:g} ms"
            results[(name, streams, gap)] = 1e6 * cpu / got
            print(f"{name:34} {streams:>7} {pacing:>12} {got:>8} {1e6 * cpu / got:>9.1f}", flush=True)
        worst = max(results[("asyncio (sparknb.stream)", s, 0.0)] for s in (1, 8))
        print(f"\nasyncio client: {worst:.1f} us of CPU per chunk back to back (worst of 1 and 8 streams); "
              f"the openai-package path: {results[('openai package (sparknb.client)', 1, 0.0)]:.1f} us.")
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    main()
