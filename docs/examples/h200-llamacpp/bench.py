"""llama-bench's JSON (`-o json`) as a table: every sample, the first left out as the cold one, and the bandwidth share.

    python docs/examples/h200-llamacpp/bench.py llama-bench.json [--params qwen3-4b-random-llamacpp]

llama-bench runs one warm-up pass per test and then `-r` timed samples; on the H200 the first timed
prompt-processing sample still runs at a low clock (seen: SM 345 MHz before it), so the warm figure
here is the mean of the samples after the first, beside llama-bench's own average of all of them.
For the tg rows, the share of the bandwidth limit of the model's params (bytes read per token over the
hardware's peak bandwidth, as sparknb's decode study draws it).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def rows(tests: list[dict]) -> list[dict]:
    out = []
    for t in tests:
        kind = f"pp{t['n_prompt']}" if t["n_prompt"] and not t["n_gen"] else f"tg{t['n_gen']}"
        samples = [float(s) for s in t["samples_ts"]]
        warm = samples[1:] or samples
        out.append({"test": f"{kind} @ d{t['n_depth']}", "kind": kind, "depth": t["n_depth"], "samples_ts": samples,
                    "warm_mean_ts": statistics.fmean(warm), "warm_stdev_ts": statistics.stdev(warm) if len(warm) > 1 else 0.0,
                    "avg_ts": float(t["avg_ts"]), "stddev_ts": float(t["stddev_ts"])})
    return out


def table(tests: list[dict], limit_tps: float | None) -> str:
    first = tests[0]
    lines = [f"llama-bench {first['build_number']} ({first['build_commit']}), {first['model_type']}, "
             f"{first['model_n_params']:,} parameters, {first['model_size']:,} bytes; GPU {first['gpu_info']}, "
             f"backends {first['backends']}, -ngl {first['n_gpu_layers']}, flash_attn {first['flash_attn']}, "
             f"n_batch {first['n_batch']}, n_ubatch {first['n_ubatch']}, threads {first['n_threads']}", "",
             "| test | samples (tok/s, in order) | warm: mean of samples 2.. (tok/s) | llama-bench avg of all | "
             "ms per token (warm) | share of bandwidth limit |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in rows(tests):
        share = (f"{r['warm_mean_ts'] / limit_tps:.1%} of {limit_tps:.1f} tok/s"
                 if limit_tps and r["kind"].startswith("tg") else "")
        lines.append(f"| {r['test']} | {', '.join(f'{s:,.1f}' for s in r['samples_ts'])} | "
                     f"{r['warm_mean_ts']:,.1f} +/- {r['warm_stdev_ts']:,.1f} | {r['avg_ts']:,.1f} +/- {r['stddev_ts']:,.1f} | "
                     f"{1000 / r['warm_mean_ts']:.3f} | {share} |")
    return "\n".join(lines)


def limit(params: str | None) -> float | None:
    """Tokens per second at which the weights are read once per token at the hardware's peak bandwidth."""
    if not params:
        return None
    from sparknb.runs.params import load_hardware, load_model

    model = load_model(params)
    gbs = load_hardware(model.hardware).memory_bandwidth_gbs
    per_token = model.weights.bytes_per_token or model.weights.dense_params * model.weights.bytes_per_param
    return gbs * 1e9 / per_token if gbs else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json", type=Path)
    parser.add_argument("--params", help="the model's params, for the bandwidth limit")
    args = parser.parse_args()
    tests = json.loads(args.json.read_text())
    print(table(tests, limit(args.params)))


if __name__ == "__main__":
    main()
