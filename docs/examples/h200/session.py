"""Serve the random-weight model with `transformers serve` and run the decode and prefill notebooks against it.

What made the run folders under docs/examples/h200/: the model's own lifecycle (params/models/
qwen3-4b-random.yaml) starts the server, `sparknb run` executes each notebook into a sealed folder,
and the server is stopped at the end whatever happened.

    python docs/examples/h200/session.py OUTPUTS                 # on the GPU machine
    python docs/examples/h200/session.py OUTPUTS --model X.yaml  # another model's params (a CPU rehearsal)
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sparknb.cli import run_notebook
from sparknb.runs.params import load_model
from sparknb.serving import lifecycle, targets

DECODE = {"prompt_lengths": [111, 364, 5378, 10714], "output_tokens": 150, "warmup": 1, "repetitions": 3}
PREFILL = {"warmup": 1, "repetitions": 3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outputs", type=Path)
    parser.add_argument("--model", default="qwen3-4b-random")
    parser.add_argument("--small", action="store_true", help="short prompts and answers, for a CPU rehearsal")
    args = parser.parse_args()
    model = load_model(args.model)
    small = {"prompt_lengths": [64, 256], "output_tokens": 16, "repetitions": 2} if args.small else {}
    t0 = time.monotonic()
    with lifecycle.launch(targets.resolve(model), args.outputs / "server.log") as server:
        server.wait_ready()
        print(f"{model.name} ready at {server.url} after {server.ready_s:.1f} s", flush=True)
        for notebook, settings in (("decode", DECODE | small), ("prefill", PREFILL | small)):
            try:
                folder = run_notebook(notebook, {"model": args.model, **settings}, args.outputs)
                print(f"{notebook}: sealed {folder} at {time.monotonic() - t0:.0f} s", flush=True)
            except Exception as e:  # any failure: the next notebook still gets its turn on the machine
                print(f"{notebook} FAILED at {time.monotonic() - t0:.0f} s: {type(e).__name__}: {e}", flush=True)


if __name__ == "__main__":
    main()
