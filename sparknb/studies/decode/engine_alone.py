"""The engine alone: llama-bench on the GGUF llama-server serves, at each prompt length as its depth, so the rest
of a step (beyond reading the weights) splits into the engine's own and the server's.

On an H100 (random F16 GGUFs, the pinned build), llama-bench's tg128 took 2.533 ms a token for an MoE whose
llama-server step was 2.942 ms, and 4.067 against 4.438 for a dense model: of each step's 1.8 ms beyond reading,
about 1.4 ms was the engine's and 0.4 ms llama-server's own (which the client agreed with to 0.04%). Optional
(`engine_alone: true`): llama-bench loads a second copy of the weights beside the running server's.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

from ...serving import processes
from ...serving.llama_server import bench_beside

TIMEOUT_S = 600  # loading a 31 GB GGUF and 3 samples a depth took well under a minute on an H100
SAMPLES = 3


def measure(study, plan) -> tuple[dict[int, float], str]:
    """llama-bench's ms per token at each prompt length (the mean of its samples after the first, which runs
    cold), and how it was had; empty with the reason where it could not be."""
    bench, gguf, why = _tools(study)
    if why:
        print(f"The engine alone is not measured: {why}.", flush=True)
        return {}, why
    argv = [str(bench), "-m", gguf, "-p", "0", "-n", str(plan.output_tokens), "-r", str(SAMPLES), "-o", "json",
            "-d", ",".join(str(n) for n in plan.prompt_lengths)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        tests = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError) as e:
        return {}, f"llama-bench failed ({e})"
    if not tests:
        print(f"llama-bench exited {done.returncode}: {done.stderr.strip()[-300:]}", flush=True)
        return {}, f"llama-bench exited {done.returncode}"
    return _by_depth(tests), f"{Path(bench).name} on {Path(gguf).name}, tg{plan.output_tokens} at each length"


def _by_depth(tests: list[dict]) -> dict[int, float]:
    out = {}
    for t in tests:
        samples = [float(s) for s in t["samples_ts"]]
        warm = samples[1:] or samples
        out[int(t["n_depth"])] = 1000 * len(warm) / sum(warm)
    return out


def _tools(study) -> tuple[Path | None, str, str]:
    """llama-bench beside the binary that listens on the endpoint's port, and the GGUF the census counted."""
    if study.endpoint is None or study.endpoint.engine.key != "llama.cpp":
        return None, "", "the engine alone is measured only where llama.cpp's llama-server serves the model"
    port = urlsplit(study.endpoint.url).port
    binary = None
    for pid in sorted(processes.listeners(port)) if port else ():
        with contextlib.suppress(OSError):
            binary = Path(os.readlink(f"/proc/{pid}/exe"))
    bench = bench_beside(binary) if binary else None
    gguf = study.census.checkpoint if study.census is not None else ""
    if bench is None:
        return None, "", f"no llama-bench beside the server's binary ({binary or 'not readable on this machine'})"
    if not gguf or not Path(gguf).is_file():
        return None, "", "the GGUF the server serves cannot be read here"
    return bench, gguf, ""
