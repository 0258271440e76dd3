"""Serve the random-weight GGUFs with llama-server and run decode, prefill (twice), load and swap against them.

What made the run folders under docs/examples/h200-llamacpp/. Each stage brings up one model through
its own lifecycle (params/models/qwen3-4b-random-llamacpp*.yaml), runs its notebooks with `sparknb run`
into sealed folders, and stops the server whatever happened; the swap study starts and stops its models
itself, on an empty GPU.

  1. qwen3-4b-random-llamacpp (one slot, --cache-ram 0): decode, then prefill;
  2. qwen3-4b-random-llamacpp-cache (one slot, llama-server's default host prompt cache): prefill;
  3. qwen3-4b-random-llamacpp-np4 (four slots, --cache-ram 0): load at 1, 2, 4 and 8 in flight;
  4. swap: qwen3-4b-random-llamacpp -> qwen3-1.7b-random-llamacpp -> qwen3-4b-random-llamacpp, twice.

    python docs/examples/h200-llamacpp/session.py OUTPUTS                   # on the GPU machine
    python docs/examples/h200-llamacpp/session.py OUTPUTS --small           # short prompts and answers (CPU rehearsal)
    python docs/examples/h200-llamacpp/session.py OUTPUTS --budget-s 420    # skip a stage that would not end in time

A stage that would not end within --budget-s (by its estimate) is skipped and said so; a notebook that
fails is reported and the next one still gets its turn.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sparknb.cli import run_notebook
from sparknb.runs.params import load_model
from sparknb.serving import lifecycle, targets

MODEL = "qwen3-4b-random-llamacpp"
CACHE = "qwen3-4b-random-llamacpp-cache"
SLOTS4 = "qwen3-4b-random-llamacpp-np4"
SMALL_MODEL = "qwen3-1.7b-random-llamacpp"

DECODE = {"prompt_lengths": [111, 512, 4096, 10714], "output_tokens": 128, "warmup": 1, "repetitions": 6}
PREFILL = {"warmup": 1, "repetitions": 6}  # the standard lengths 111 to 10,714 (the slot holds 16,384)
LOAD = {"concurrency": [1, 2, 4, 8], "prompt_tokens": 512, "output_tokens": 128, "warmup": 1,
        "requests_per_level": 16}
SWAP = {"models": [MODEL, SMALL_MODEL, MODEL], "repetitions": 2}
SMALL = {
    "decode": {"prompt_lengths": [64, 256], "output_tokens": 16, "repetitions": 2},
    "prefill": {"prompt_lengths": [64, 256, 1024], "repetitions": 2},
    "load": {"concurrency": [1, 2], "prompt_tokens": 128, "output_tokens": 16, "requests_per_level": 4},
    "swap": {"repetitions": 1},
}
# (server or None, [(notebook, settings)], estimated seconds on the H200, notebooks' own start-up included)
STAGES = [
    (MODEL, [("decode", DECODE), ("prefill", PREFILL)], 130),
    (CACHE, [("prefill", PREFILL)], 90),
    (SLOTS4, [("load", LOAD)], 80),
    (None, [("swap", SWAP)], 110),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", type=Path)
    parser.add_argument("--small", action="store_true", help="short prompts and answers, for a CPU rehearsal")
    parser.add_argument("--budget-s", type=float, default=0, help="skip a stage that would end past this (0: none)")
    parser.add_argument("--only", nargs="*", default=[], help="notebooks to run (default: all)")
    args = parser.parse_args()
    t0 = time.monotonic()
    failed = 0
    for server_model, notebooks, estimate in STAGES:
        notebooks = [(n, s) for n, s in notebooks if not args.only or n in args.only]
        if not notebooks:
            continue
        names = ", ".join(n for n, _ in notebooks)
        if args.budget_s and time.monotonic() - t0 + estimate > args.budget_s:
            print(f"SKIPPED {names} on {server_model or 'an empty GPU'} at {time.monotonic() - t0:.0f} s: "
                  f"it would end past the budget of {args.budget_s:.0f} s (estimate {estimate} s)", flush=True)
            continue
        if server_model is None:
            failed += run_all(notebooks, args, t0, None)
            continue
        model = load_model(server_model)
        log = args.outputs / f"server-{model.name}.log"
        with lifecycle.launch(targets.resolve(model), log) as server:
            server.wait_ready()
            print(f"{model.name} ready at {server.url} after {server.ready_s:.1f} s "
                  f"(at {time.monotonic() - t0:.0f} s)", flush=True)
            failed += run_all(notebooks, args, t0, server_model)
    print(f"session done at {time.monotonic() - t0:.0f} s, {failed} notebook(s) failed", flush=True)


def run_all(notebooks: list[tuple[str, dict]], args: argparse.Namespace, t0: float, model: str | None) -> int:
    failed = 0
    for notebook, settings in notebooks:
        parameters = ({"model": model} if model else {}) | settings | (SMALL[notebook] if args.small else {})
        try:
            folder = run_notebook(notebook, parameters, args.outputs)
            print(f"{notebook}: sealed {folder} at {time.monotonic() - t0:.0f} s", flush=True)
        except Exception as e:  # any failure: the next notebook still gets its turn on the machine
            failed += 1
            print(f"{notebook} FAILED at {time.monotonic() - t0:.0f} s: {type(e).__name__}: {e}", flush=True)
    return failed


if __name__ == "__main__":
    main()
