"""What one streamed chunk costs the client, in CPU microseconds, in every mode a study uses it.

A server in another process (bench/fake_vllm.py) sends vLLM-shaped chunks (token ids, a finish reason,
a usage chunk with per-request metrics), each chunk one write of HTTP chunked encoding, as uvicorn sends
them. The client's CPU time (all its threads) for a long answer less that for a 2-chunk one, over the
chunks between, is the cost per chunk; the 2-chunk answer's CPU is the cost per request (connection,
thread and garbage collection before the clock, parsing of the ends), shown apart:
- back to back: the server writes as fast as it can, the client's own ceiling (chunks/s = 1e6 / us);
- paced: each stream gets a chunk every `--gap-ms`, as a decoding server sends them; every chunk then
  also pays for waking the client up, so this figure is higher and nearer what a study costs.

The modes: one stream through client.Endpoint (decode, prefill and mtp: a blocking socket read in the
caller's thread), one and many streams through stream.batch (load and MMLU-Pro: an asyncio loop in a
thread of its own), the openai package's streaming client for reference (what decode, prefill and mtp
used to go through), and the floor: a bare blocking socket read of the same bytes, no parsing at all.

Why a paced chunk costs more than a back-to-back one, measured here (2-core VM, quiet or shared with
other work, 2 ms pacing): the floor, a thread that sleeps in the kernel and wakes for each chunk with no
parsing at all, costs 17 to 34 us a chunk, against 1 to 3 back to back: the machine's price of a
wake-up. The single-stream client then costs 66 to 88 us a paced chunk (7 to 17 back to back: the same
code, run hot), one wake-up and one cold pass through the reader; the asyncio client 82 to 114, its
loop's own turn on top. The 130 to 180 us this script used to print for one paced asyncio stream was
largely the request's own cost spread over its chunks (a full garbage collection and a thread before
each batch: 60 to 90 ms of CPU, now shown apart as ms/request); measured without it, the old asyncio
client cost 88 to 120 us, and its fresh 256 KiB buffer per read (mmap, mremap and munmap on every chunk,
which strace counts) is gone, within this machine's noise. The openai package's path, which decode,
prefill and mtp used to take, costs 200 to 360 us a paced chunk and 70 to 95 back to back.

    python bench/client_overhead.py            # every mode; the last lines are the table and the headline
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fake_vllm import MODEL, FakeServer  # noqa: E402
from sparknb.endpoint import stream  # noqa: E402
from sparknb.endpoint.client import Endpoint  # noqa: E402


def single(url: str, streams: int, chunks: int, gap_s: float) -> tuple[float, int]:
    """(CPU seconds, chunks received): one stream through client.Endpoint, as decode, prefill and mtp."""
    endpoint = Endpoint(url, MODEL)
    endpoint.complete([1, 2, 3], max_tokens=8, bench_gap_s=gap_s)  # warm: imports, first connection
    cpu = time.process_time()
    done = endpoint.complete([1, 2, 3], max_tokens=chunks, bench_gap_s=gap_s)
    cpu = time.process_time() - cpu
    endpoint.close()
    return cpu, len(done.chunk_times)


def batched(url: str, streams: int, chunks: int, gap_s: float) -> tuple[float, int]:
    """`streams` requests at once through stream.batch, as the load study and MMLU-Pro send them."""
    endpoint = stream.AsyncEndpoint(url, MODEL)
    calls = [lambda ep: ep.complete([1, 2, 3], max_tokens=chunks, bench_gap_s=gap_s)] * streams
    stream.batch(endpoint, calls[:1], 1)  # warm
    cpu = time.process_time()
    outcomes = stream.batch(endpoint, calls, streams)
    cpu = time.process_time() - cpu
    errors = [o.error for o in outcomes if o.error]
    if errors:
        raise SystemExit(f"the asyncio client failed: {errors[0]}")
    return cpu, sum(len(o.answer.chunk_times) for o in outcomes)


def reference(url: str, streams: int, chunks: int, gap_s: float) -> tuple[float, int]:
    """The openai package's streaming client, each chunk read as sparknb read it through the package."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)

    def ask(n: int) -> int:
        got = 0
        for chunk in client.completions.create(model=MODEL, prompt=[1, 2, 3], max_tokens=n, stream=True,
                                               stream_options={"include_usage": True},
                                               extra_body={"return_token_ids": True, "bench_gap_s": gap_s}):
            time.perf_counter()
            _ = chunk.usage
            for choice in chunk.choices:
                if choice.text or (choice.model_extra or {}).get("token_ids"):
                    got += 1
        return got

    ask(8)
    cpu = time.process_time()
    got = ask(chunks)
    cpu = time.process_time() - cpu
    client.close()
    return cpu, got


def floor(url: str, streams: int, chunks: int, gap_s: float) -> tuple[float, int]:
    """A bare blocking read of the same answer, no parsing: what the machine charges per wake-up."""
    host, port = url.split("//")[1].split("/")[0].split(":")
    body = json.dumps({"model": MODEL, "prompt": [1, 2, 3], "max_tokens": chunks, "bench_gap_s": gap_s}).encode()
    request = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body)) + body
    buffer = bytearray(65536)
    with socket.create_connection((host, int(port))) as sock:
        cpu = time.process_time()
        sock.sendall(request)
        while sock.recv_into(buffer):
            pass
        cpu = time.process_time() - cpu
    return cpu, chunks


MODES = {"Endpoint (decode, prefill, mtp)": single, "stream.batch (load, MMLU-Pro)": batched,
         "openai package (reference)": reference, "floor: bare socket read": floor}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20000, help="chunks per back-to-back stream")
    parser.add_argument("--gap-ms", type=float, default=2.0, help="time between two chunks of a paced stream")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of a paced stream")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each mode, interleaved (the median is shown)")
    args = parser.parse_args()
    gap, paced = args.gap_ms / 1000, int(args.seconds * 1000 / args.gap_ms)
    many_fast, many_paced = 8, 16
    cases = [(name, 1, args.chunks, 0.0) for name in MODES]
    cases += [("stream.batch (load, MMLU-Pro)", many_fast, args.chunks // many_fast, 0.0)]
    cases += [(name, 1, paced, gap) for name in MODES]
    cases += [("stream.batch (load, MMLU-Pro)", many_paced, paced, gap)]
    runs: dict[tuple, list[tuple[float, float]]] = {case: [] for case in cases}
    with FakeServer() as server:
        for rep in range(args.repeat):
            for case in cases:
                name, streams, chunks, pacing = case
                small_cpu, small = MODES[name](server.url, streams, 2, pacing)
                cpu, got = MODES[name](server.url, streams, chunks, pacing)
                runs[case].append((1e6 * (cpu - small_cpu) / (got - small), 1e3 * small_cpu / streams))
                print(f"run {rep + 1}/{args.repeat}: {name}, {streams} stream(s), "
                      f"{'back to back' if not pacing else f'{1000 * pacing:g} ms'}: {runs[case][-1][0]:.1f} us/chunk",
                      flush=True)
    us = {case: statistics.median(v[0] for v in values) for case, values in runs.items()}
    setup = {case: statistics.median(v[1] for v in values) for case, values in runs.items()}
    print(f"\nCPU per chunk, us (median of {args.repeat} runs; paced: a chunk every {args.gap_ms:g} ms per stream), "
          "and per request, ms")
    print(f"{'client':34} {'streams':>7} {'pacing':>12} {'us/chunk':>9} {'ms/request':>11}")
    for (name, streams, chunks, pacing), value in us.items():
        print(f"{name:34} {streams:>7} {('back to back' if not pacing else f'{args.gap_ms:g} ms'):>12} {value:>9.1f} "
              f"{setup[(name, streams, chunks, pacing)]:>11.2f}")

    def at(name: str, streams: int, pacing: float) -> float:
        return next(v for (n, s, _, p), v in us.items() if (n, s, p) == (name, streams, pacing))
    one, many, ref = "Endpoint (decode, prefill, mtp)", "stream.batch (load, MMLU-Pro)", "openai package (reference)"
    print(f"single stream: {at(one, 1, 0.0):.1f} us back to back, {at(one, 1, gap):.1f} paced "
          f"(floor {at('floor: bare socket read', 1, gap):.1f}); load and MMLU-Pro: {at(many, 1, 0.0):.1f} to "
          f"{at(many, many_fast, 0.0):.1f} back to back, {at(many, 1, gap):.1f} paced alone, "
          f"{at(many, many_paced, gap):.1f} paced at {many_paced}; the openai package: {at(ref, 1, 0.0):.1f} and "
          f"{at(ref, 1, gap):.1f}.")


if __name__ == "__main__":
    main()
