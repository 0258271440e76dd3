"""The headline table, in the shape of the reference study: one row per figure, one column per model,
and every ratio to the first model with its 95% interval. Each study's rows come from its own code."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ... import stats
from ...run import PastRun
from .. import decode, mmlu_pro, mtp, prefill, swap


@dataclass(frozen=True)
class Row:
    study: str
    measure: str
    values: dict[str, float | None]  # model -> figure
    ratios: dict[str, stats.Interval] = field(default_factory=dict)  # model -> its figure over the base's
    note: str = ""
    better: str = "higher"  # which way is better for this figure: higher, lower, or none
    kind: str = "ratio"  # ratio (1 is no difference) or difference (a paired difference in points; 0 is none)


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
                shown = ratio.points(signed=True) if ratio and r.kind == "difference" else ratio.times() if ratio else "-"
                row[f"{m} / {self.base}"] = shown
            row["note"] = r.note
            out.append(row)
        return pd.DataFrame(out)

    def as_dict(self) -> dict:
        return {"base": self.base, "models": self.models,
                "rows": [{"study": r.study, "measure": r.measure, "values": r.values, "note": r.note,
                          "better": r.better, "kind": r.kind, "ratios": {m: i.as_dict() for m, i in r.ratios.items()}}
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
    plain = {m for m in frames if not (runs[m].params.get("model") or {}).get("speculative")}
    for kind in kinds:
        steps = {m: 1.0 if m in plain else _median(f[f["kind"] == kind]["tokens_per_step"].dropna().tolist())
                 for m, f in frames.items()}
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


def mmlu_pro_rows(runs: dict[str, PastRun], models: list[str], base: str, half_width: float = 0.02) -> list[Row]:
    """Accuracy per model (Wilson), and against the base on the questions both answered: the paired
    difference (Bonett-Price), McNemar's exact test, and the questions a narrower interval would need."""
    graded = {m: mmlu_pro.frame(runs[m].records, tuple(runs[m].settings.get("stop") or ())).set_index("question_id")
              for m in models if m in runs}
    graded = {m: g for m, g in graded.items() if len(g)}
    if base not in graded:
        return []
    accuracy = {m: stats.accuracy(int(g["correct"].sum()), len(g)) for m, g in graded.items()}
    rows = [Row("MMLU-Pro", "accuracy % (all answered questions)", {m: 100 * a.estimate for m, a in accuracy.items()},
                note="; ".join(f"{m} {a.points()} of {len(graded[m])}" for m, a in accuracy.items()), better="none")]
    differences, notes = {}, []
    for m, g in graded.items():
        if m == base:
            continue
        common = [q for q in graded[base].index if q in g.index]
        if not common:
            notes.append(f"{m} answered none of {base}'s questions: no paired comparison")
            continue
        pairs = stats.Pairs.of(g.loc[common, "correct"].astype(bool).tolist(),
                               graded[base].loc[common, "correct"].astype(bool).tolist())
        differences[m] = stats.paired_difference(pairs)
        needed = (f"+/-{100 * half_width:.0f} points would need about {stats.questions_needed(pairs, half_width):,} "
                  "questions" if pairs.discordant else "they never disagreed")
        notes.append(f"{m} on {pairs.n} shared questions: McNemar p = {stats.mcnemar(pairs).pvalue:.3g}, "
                     f"{pairs.discordant} discordant; {needed}")
    if differences:
        rows.append(Row("MMLU-Pro", "paired difference in accuracy (points)",
                        {m: None for m in graded}, differences, note="; ".join(notes), kind="difference"))
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
    volumes = {m: b.get("completion_tokens") for m, b in batches.items()}
    tokens = ", ".join(f"{m} {v:,}" if v is not None else f"{m} unknown" for m, v in volumes.items())
    same = "the same volume" if len(set(volumes.values())) == 1 else "not the same volume: the ratio mixes in the lengths"
    concurrency = batches[base].get("concurrency")
    rows = [Row("batch", f"MMLU-Pro batch tok/s at concurrency {concurrency}", values, ratios,
                note=f"one batch per model; generated tokens {tokens} ({same})")]
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
    "mmlu_pro": mmlu_pro_rows,
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
