"""The llama.cpp test bed's own figures: GGUF writes, llama-server's start to /health, decode speed, memory.

- GGUF: seconds to write each file (into a temporary folder, the cached ones untouched) and its size;
- start: launch until /health answers 200, over --starts starts of each model;
- decode: a 64-token greedy answer (ignore_eos), --reps times, as tokens/s by llama-server's own clock
  (timings.predicted_per_second: (tokens - 1) / eval time) and by the client's (64 / request time);
  tiny-moe with its draft model (as the test bed serves it) and without;
- memory: the server's proportional set size once ready (the KV cache is allocated at start);
- llama-bench's pp512 and tg64 on one thread, where the binary has llama-bench beside it.

    python bench/llamacpp_testbed.py            # prints one table per part
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from sparknb.serving import gguf_models, llama_server, testbed, tiny_models  # noqa: E402
from sparknb.serving.processes import free_port  # noqa: E402

PROMPT = "The model reads the prompt and"


def gguf_writes() -> None:
    print("GGUF writes (the checkpoint already built; seconds of the write alone)")
    with tempfile.TemporaryDirectory() as tmp:
        for name, quantization in (("tiny-dense", None), ("tiny-moe", None), ("tiny-moe", "Q4_0")):
            written = gguf_models.write(name, Path(tmp) / f"{name}-{quantization}.gguf", quantization)
            print(f"  {name:10} {quantization or 'BF16':5} {written.seconds:6.2f} s  {written.bytes / 2**20:6.2f} MiB  "
                  f"{written.tensors} tensors")


def serve(name: str, starts: int, reps: int, draft: bool = True) -> None:
    label = f"{name}{'' if draft or name not in gguf_models.SPECULATIVE else ' (no draft)'}"
    saved = dict(gguf_models.SPECULATIVE)
    if not draft:
        gguf_models.SPECULATIVE.pop(name, None)
    try:
        ready, memory, server_tps, client_tps, acceptance = [], [], [], [], []
        for i in range(starts):
            with testbed.start(name, free_port(), engine="llama.cpp", timeout=120,
                               log_path=Path(tempfile.gettempdir()) / f"bench-{name}-{i}.log") as server:
                ready.append(server.ready_s)
                memory.append(server.memory_bytes() or 0)
                if i:
                    continue
                with httpx.Client(timeout=60) as http:
                    for _ in range(reps):
                        t0 = time.monotonic()
                        reply = http.post(f"{server.url}/completions", json={
                            "model": name, "prompt": PROMPT, "max_tokens": 64, "temperature": 0, "ignore_eos": True,
                            "cache_prompt": False}).json()
                        elapsed = time.monotonic() - t0
                        timings = reply["timings"]
                        assert timings["predicted_n"] == 64, timings
                        server_tps.append(timings["predicted_per_second"])
                        client_tps.append(64 / elapsed)
                        if timings.get("draft_n"):
                            acceptance.append(timings["draft_n_accepted"] / timings["draft_n"])
    finally:
        gguf_models.SPECULATIVE.clear()
        gguf_models.SPECULATIVE.update(saved)
    line = (f"  {label:20} start to /health {statistics.median(ready):5.2f} s (min {min(ready):.2f}, max {max(ready):.2f}, "
            f"{len(ready)} starts)  memory {statistics.median(memory) / 2**20:5.0f} MiB  "
            f"64 tokens: server {statistics.median(server_tps):6.0f} tok/s, client {statistics.median(client_tps):6.0f} "
            f"tok/s (median of {len(server_tps)})")
    if acceptance:
        line += f"  draft acceptance {statistics.median(acceptance):.2f}"
    print(line)


def bench(binary: llama_server.Binary) -> None:
    path = binary.bench()
    if path is None:
        print(f"llama-bench: none beside {binary.path}")
        return
    print("llama-bench, one thread (pp512 and tg64 tokens/s)")
    for name, file in (("tiny-dense", gguf_models.gguf_file("tiny-dense")), ("tiny-moe", gguf_models.gguf_file("tiny-moe")),
                       ("tiny-moe Q4_0", gguf_models.draft_file("tiny-moe"))):
        done = subprocess.run([str(path), "-m", str(file), "-t", "1", "-p", "512", "-n", "64", "-r", "3", "-o", "csv"],
                              capture_output=True, text=True, timeout=600)
        rows = [r.split(",") for r in done.stdout.strip().splitlines()]
        if done.returncode != 0 or len(rows) < 3:
            print(f"  {name}: llama-bench failed: {done.stderr[-300:]}")
            continue
        head = [h.strip('"') for h in rows[0]]
        for row in rows[1:]:
            values = dict(zip(head, (v.strip('"') for v in row)))
            test = f"pp{values['n_prompt']}" if values["n_prompt"] != "0" else f"tg{values['n_gen']}"
            print(f"  {name:14} {test:6} {float(values['avg_ts']):8.0f} +- {float(values['stddev_ts']):5.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    binary = llama_server.find()
    if binary is None:
        sys.exit(llama_server.missing_reason())
    print(f"llama-server: {binary.path} ({binary.origin}): {binary.version()}")
    gguf_writes()
    print("serving")
    for name in tiny_models.NAMES:
        serve(name, args.starts, args.reps)
    serve("tiny-moe", args.starts, args.reps, draft=False)
    bench(binary)


if __name__ == "__main__":
    main()
