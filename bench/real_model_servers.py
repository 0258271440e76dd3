"""The real model on both servers: how long vLLM's CPU build takes to serve the dequantized SmolLM2, and how far its
greedy answers agree with llama-server's on the GGUF as shipped.

- write: seconds to write the checkpoint from the GGUF (into a temporary folder, the cached one untouched);
- start: vLLM's launch until /v1/models answers, with its compile cache as found (cold the first time);
- tokens: each server's own count of every prompt (chat template included): equal, or the prompt is named;
- agreement: the first --questions of the shipped demo questions asked greedily of both (max_tokens 64): how many
  answers are equal, and how many leading tokens each pair shares (both answers counted by llama-server's
  /tokenize). vLLM decodes the float32 model at about 10 tok/s on a busy 2-core box: 12 questions take 3 minutes.

    python bench/real_model_servers.py [--questions 12]     # run it alone: two servers on 2 cores
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from sparknb.serving import dequantized, real_models, testbed  # noqa: E402
from sparknb.serving.processes import free_port  # noqa: E402

QUESTIONS = Path(__file__).resolve().parents[1] / "sparknb" / "data" / "demo_questions.jsonl"
MAX_TOKENS = 64


def write() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        dequantized._write(real_models.gguf_file(), Path(tmp))
        size = sum(p.stat().st_size for p in Path(tmp).iterdir())
        print(f"checkpoint written from the GGUF in {time.monotonic() - t0:.1f} s, {size / 2**20:.0f} MiB", flush=True)


def answer(url: str, question: str) -> tuple[int, str]:
    body = {"model": real_models.SERVED, "messages": [{"role": "user", "content": question}],
            "max_tokens": MAX_TOKENS, "temperature": 0}
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=300).json()
    return r["usage"]["prompt_tokens"], r["choices"][0]["message"]["content"]


def tokens(llama_url: str, text: str) -> list[int]:
    return httpx.post(llama_url.removesuffix("/v1") + "/tokenize", json={"content": text}, timeout=60).json()["tokens"]


def shared(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def compare(vllm_url: str, llama_url: str, n: int) -> None:
    questions = [json.loads(line)["question"] for line in QUESTIONS.read_text().splitlines() if line.strip()][:n]
    equal, prefixes, miscounted = 0, [], []
    for q in questions:
        (n_v, a_v), (n_l, a_l) = answer(vllm_url, q), answer(llama_url, q)
        if n_v != n_l:
            miscounted.append((q, n_v, n_l))
        equal += a_v == a_l
        prefixes.append(shared(tokens(llama_url, a_v), tokens(llama_url, a_l)))
        print(f"  {prefixes[-1]:3} leading tokens shared{' (equal)' if a_v == a_l else ''}: {q[:60]!r}", flush=True)
    print(f"prompt tokens (each server's own count): equal on {len(questions) - len(miscounted)} of {len(questions)} prompts {miscounted or ''}")
    print(f"greedy answers ({MAX_TOKENS} tokens at most): {equal} of {len(questions)} equal; leading tokens shared: "
          f"median {statistics.median(prefixes)}, min {min(prefixes)}, max {max(prefixes)}", flush=True)


def start(again: str) -> testbed.Server:
    t0 = time.monotonic()
    server = testbed.start(real_models.SERVED, free_port(), engine="vllm")
    print(f"vLLM ({dequantized.DTYPE}) serves after {time.monotonic() - t0:.0f} s, compile cache {again} "
          f"(log {server.log_path})", flush=True)
    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=12, help="how many demo questions to ask both servers")
    n = parser.parse_args().questions
    write()
    warm = (testbed.compile_cache(real_models.SERVED) / "torch_compile_cache").is_dir()
    with start("as found: warm" if warm else "cold") as vllm:
        with testbed.start(real_models.SERVED, free_port(), engine="llama.cpp", timeout=120) as llama:
            compare(vllm.url, llama.url, n)


if __name__ == "__main__":
    main()
