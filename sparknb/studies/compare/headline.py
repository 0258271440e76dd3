"""The headline table, in the shape of the reference study: one row per figure, one column per model,
and every ratio to the first model with its 95% interval. Each study's rows come from its own code."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ... import stats
from ...run import PastRun
from .. import decode, mtp, prefill, swap


@dataclass(frozen=True)
class Row:
    study: str
    measure: str
    values: dict[str, float | None]  # model -> figure
    ratios: dict[str, stats.Interval] = field(default_factory=dict)  # model -> its figure over the base's
    note: str = ""
    better: str = "higher"  # which way is better for this figure: higher, lower, or none


@dataclass(frozen=True)
class Headline:
    base: str
    models: list[str]
    rows: list[Row]

    def table(self) -> pd.DataFrame:
        out = []
        for r in self.rows:
            row = {"study": r.study, "figure": r.measure}
            for m in self.models:
                v = r.values.get(m)
                row[m] = "-" if v is None or (isinstance(v, float) and math.isnan(v)) else _fmt(v)
            for m in self.models[1:]:
                ratio = r.ratios.get(m)
                row[f"{m} / {self.base}"] = ratio.times() if ratio else "-"
            row["note"] = r.note
            out.append(row)
        return pd.DataFrame(out)

    def as_dict(self) -> dict:
        return {"base": self.base, "models": self.models,
                "rows": [{"study": r.study, "measure": r.measure, "values": r.values, "note": r.note,
                          "better": r.better, "ratios": {m: i.as_dict() for m, i in r.ratios.items()}}
                         for r in self.rows]}


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"


def _ratios(samples: dict[str, list[float]], base: str) -> dict[str, stats.Interval]:
    return {m: stats.median_ratio(s, samples[base]) for m, s in samples.items() if m != base and s and samples.get(base)}


def _median(values: list[float]) -> float | None:
    return float(pd.Series(values).median()) if values else None


def decode_rows(runs: dict[str, PastRun], models: list[str], base: str) -> list[Row]:
    """Decode tok/s per context length, and the share of the bandwidth limit each model reaches."""
    frames = {m: decode.frame(runs[m].records) for m in models if m in runs}
    frames = {m: f[f["interference"].isna()] for m, f in frames.items() if len(f)}
    rows = []
    lengths = sorted(set.intersection(*(set(f["prompt_length"]) for f in frames.values()))) if frames else []
    for n in lengths:
        samples = {m: f[f["prompt_length"] == n]["decode_tok_s"].dropna().tolist() for m, f in frames.items()}
        rows.append(Row("decode", f"tok/s at {n:,} tokens", {m: _median(s) for m, s in samples.items()},
                        _ratios(samples, base)))
    shares = {}
    for m, run in runs.items():
        table = (run.summary or {}).get("table") or []
        values = [r.get("% of limit") for r in table if r.get("% of limit") is not None]
        shares[m] = sum(values) / len(values) if values else None
    if any(v is not None for v in shares.values()):
        rows.append(Row("decode", "% of the bandwidth limit (mean over lengths)", shares,
                        note="the limit: bytes read per token over the hardware's bandwidth", better="none"))
    return rows


def prefill_rows(runs: dict[str, PastRun], models: list[str], base: str) -> list[Row]:
    """Time to first token per prompt length; the first and last rows show the short-prompt trap."""
    frames = {m: prefill.frame(runs[m].records) for m in models if m in runs}
    frames = {m: f[f["interference"].isna()] for m, f in frames.items() if len(f)}
    lengths = sorted(set.intersection(*(set(f["prompt_length"]) for f in frames.values()))) if frames else []
    rows = []
    for n in lengths:
        samples = {m: (1000 * f[f["prompt_length"] == n]["ttft_s"].dropna()).tolist() for m, f in frames.items()}
        rows.append(Row("prefill", f"TTFT ms at {n:,} tokens", {m: _median(s) for m, s in samples.items()},
                        _ratios(samples, base), better="lower"))
    if len(rows) > 1:
        rows[0] = Row(**{**rows[0].__dict__, "note": "a single short-prompt test measures mostly fixed overhead"})
    return rows


def mtp_rows(runs: dict[str, PastRun], models: list[str], base: str) -> list[Row]:
    """Tokens per step and tok/s by kind of prompt: speculative decoding's gain depends on the text."""
    frames = {m: mtp.frame(runs[m].records) for m in models if m in runs}
    frames = {m: f[f["excluded"].isna()] for m, f in frames.items() if len(f)}
    rows = []
    kinds = list(dict.fromkeys(k for f in frames.values() for k in f["kind"]))
    for kind in kinds:
        steps = {m: _median(f[f["kind"] == kind]["tokens_per_step"].dropna().tolist()) for m, f in frames.items()}
        rows.append(Row("speculative decoding", f"tokens/step, {kind}", steps, better="none"))
        speed = {m: f[f["kind"] == kind]["tok_s"].dropna().tolist() for m, f in frames.items()}
        rows.append(Row("speculative decoding", f"tok/s, {kind}", {m: _median(s) for m, s in speed.items()},
                        _ratios(speed, base)))
    return rows


def swap_rows(runs: dict[str, PastRun], models: list[str], base: str) -> list[Row]:
    """What a client waits for each model to be served after a swap, compile cache cold and warm."""
    frames = [swap.frame(r.records) for r in runs.values()]
    waits = pd.concat([f for f in frames if len(f)]) if any(len(f) for f in frames) else pd.DataFrame()
    if waits.empty:
        return []
    waits = waits[waits["status"] == "ok"]
    rows = []
    for cache in ("cold", "warm"):
        chosen = waits[waits["compile cache"].astype(str).str.startswith(cache)]
        samples = {m: chosen[chosen["to"] == m]["client wait s"].dropna().tolist() for m in models}
        if not any(samples.values()):
            continue
        rows.append(Row("swap", f"client wait s, compile cache {cache}", {m: _median(s) for m, s in samples.items()},
                        _ratios(samples, base), note="single measurements unless the swap run repeated them",
                        better="lower"))
    return rows


def batch_rows(by_study: dict[str, dict[str, PastRun]], models: list[str], base: str) -> list[Row]:
    """Batched throughput (MMLU-Pro's concurrent batch) beside single-stream decode, both from the runs.

    The single-stream ratio is taken at the decode length nearest the batch's mean prompt length, so
    both ratios speak of prompts of about the same size.
    """
    batches = {m: ((r.summary or {}).get("batch") or {}) for m, r in by_study.get("mmlu_pro", {}).items()}
    batches = {m: b for m, b in batches.items() if b.get("tokens_per_s")}
    if base not in batches or len(batches) < 2:
        return []
    values = {m: b["tokens_per_s"] for m, b in batches.items()}
    ratios = {m: stats.Interval(v / values[base], math.nan, math.nan, 0.95, "one batch each")
              for m, v in values.items() if m != base}
    tokens = ", ".join(f"{m} {b['completion_tokens']:,}" for m, b in batches.items())
    concurrency = batches[base].get("concurrency")
    rows = [Row("batch", f"MMLU-Pro batch tok/s at concurrency {concurrency}", values, ratios,
                note=f"one batch per model, generated tokens: {tokens}")]
    decodes = by_study.get("decode", {})
    if base in decodes:
        prompt = batches[base].get("prompt_tokens", 0) / max(1, batches[base].get("asked", 1))
        frames = {m: decode.frame(r.records) for m, r in decodes.items() if m in values}
        lengths = sorted(set(frames[base]["prompt_length"])) if len(frames[base]) else []
        if lengths:
            n = min(lengths, key=lambda x: abs(x - prompt))
            samples = {m: f[(f["prompt_length"] == n) & f["interference"].isna()]["decode_tok_s"].dropna().tolist()
                       for m, f in frames.items()}
            rows.append(Row("batch", f"single-stream decode tok/s at {n:,} tokens (batch prompts: {prompt:,.0f})",
                            {m: _median(s) for m, s in samples.items()}, _ratios(samples, base)))
    return rows


STUDIES: dict[str, Callable[[dict[str, PastRun], list[str], str], list[Row]]] = {
    "decode": decode_rows,
    "prefill": prefill_rows,
    "swap": swap_rows,
    "mtp": mtp_rows,
}


def headline(by_study: dict[str, dict[str, PastRun]], models: list[str]) -> Headline:
    base = models[0]
    rows = []
    for study, rows_of in STUDIES.items():
        if study in by_study:
            rows += rows_of(by_study[study], models, base)
    rows += batch_rows(by_study, models, base)
    return Headline(base, models, rows)
