"""Decode sweep: single-stream decode speed against context length, set against the bandwidth limit.

Each prompt is unique and exactly as long as asked; each answer has a fixed length (max_tokens with
ignore_eos), so every repetition does the same work. Warmup requests are recorded but left out.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

import pandas as pd
from pydantic import Field, PrivateAttr, model_validator

from .. import benchy, fingerprint, params, stats
from ..bandwidth import Limit
from ..client import Endpoint, ServerInfo
from ..errors import ParamsError
from ..prompts import PromptMaker
from ..report import Finding, info, length_axis, warning
from ..run import PastRun, measured, read_past
from ..study import Study, drifts, schedule


class Plan(params.Plan):
    study: ClassVar[str] = "decode"
    prompt_lengths: list[Annotated[int, Field(ge=16)]] = Field(
        min_length=1, description="prompt sizes in whole tokens, 16 or more, e.g. [111, 364]")
    output_tokens: int = Field(150, ge=2, description="decode speed needs two tokens or more")
    warmup: int = Field(1, ge=0)
    repetitions: int = Field(5, ge=1)
    temperature: float = Field(0.0, ge=0, le=2)
    order: Literal["shuffled", "grouped"] = Field("shuffled", description="shuffled (seeded) or grouped by length")
    seed: int = 0
    compare_with: params.RunIds = Field(default_factory=list, description="earlier decode runs: folders or run ids")
    outputs: str = Field("", exclude=True)
    _past: list[PastRun] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _read(self) -> Plan:
        """The earlier runs, read once and verified, before any request."""
        self._past = read_past(self.compare_with, "decode", outputs=self.outputs)
        return self

    @property
    def past(self) -> list[PastRun]:
        return list(self._past)

    def check_server(self, server: ServerInfo, endpoint: Endpoint | None = None) -> None:
        """Every prompt plus its answer must fit the model's context, or the server would refuse halfway."""
        if server.max_model_len is None:
            return
        too_long = [n for n in self.prompt_lengths if n + self.output_tokens > server.max_model_len]
        if too_long:
            raise ParamsError(
                f"prompt length(s) {too_long} plus {self.output_tokens} output tokens exceed the server's "
                f"max_model_len of {server.max_model_len} for {server.model}. Drop them from prompt_lengths "
                "or restart the server with a larger --max-model-len.")


def sweep(study: Study, plan: Plan) -> pd.DataFrame:
    """All requests of the plan, in order, one at a time; returns one row per measured request."""
    maker = PromptMaker(study.endpoint.tokenize)
    order = schedule(plan.prompt_lengths, plan.warmup, plan.repetitions, plan.order, plan.seed)
    with study.measuring():
        for k, (length, rep) in enumerate(order, 1):
            prompt = maker.make(length)
            rec = study.request(
                {"prompt_length": length, "rep": rep, "warmup": rep < 0, "seq": k},
                lambda ep: ep.complete(prompt, max_tokens=plan.output_tokens, temperature=plan.temperature),
            )
            tps = rec["decode_tokens_per_s"]
            print(f"[{k}/{len(order)}] {length} tokens, {'warmup' if rep < 0 else f'rep {rep + 1}'}: "
                  f"TTFT {1000 * (rec['ttft_s'] or float('nan')):.0f} ms, decode "
                  f"{'n/a' if tps is None else f'{tps:.1f}'} tok/s"
                  + (f"  !! {rec['interference']}" if rec["interference"] else ""), flush=True)
    return frame(study.records())


def frame(records: list[dict]) -> pd.DataFrame:
    """Measured requests as a table, with the server's view beside the client's."""
    rows = []
    for r in measured(records):
        server = r.get("server") or {}
        spec = server.get("spec_decode") or {}
        rows.append({
            "seq": r.get("seq"),
            "prompt_length": r["prompt_length"],
            "prompt_tokens": r["prompt_tokens"],
            "completion_tokens": r["completion_tokens"],
            "decode_tokens": r["decode_tokens"],
            "ttft_s": r["ttft_s"],
            "decode_s": r["decode_s"],
            "decode_tok_s": r["decode_tokens_per_s"],
            "server_decode_s": server.get("decode_s"),
            "server_ttft_s": server.get("ttft_s"),
            "tokens_per_step": spec.get("tokens_per_step"),
            "interference": r.get("interference"),
            "unchecked": ", ".join(server.get("unchecked") or []) or None,
        })
    return pd.DataFrame(rows)


def summarize(df: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Per prompt length: the spread of decode speed, TTFT, vLLM's own decode time and the limit.

    Tokens per step comes from the server's speculative-decoding counters; a server without them
    serves one token per step only if the model's params name no speculative method, else it is unknown
    and so is the limit.
    """
    clean = df[df["interference"].isna()]
    out = []
    for length, g in clean.groupby("prompt_length"):
        tokens = g["decode_tokens"].sum()
        ms_client = 1000 * g["decode_s"].sum() / tokens
        ms_server = 1000 * g["server_decode_s"].sum() / tokens if g["server_decode_s"].notna().all() else None
        steps = g["tokens_per_step"].dropna()
        tps_step = float(steps.median()) if len(steps) else (None if study.model.speculative else 1.0)
        limit_tps = study.limit.tokens_per_s(tps_step) if tps_step is not None else None
        median = float(g["decode_tok_s"].median())
        out.append({
            "prompt tokens": int(length),
            "n": len(g),
            "decode tok/s (median)": median,
            "std": float(g["decode_tok_s"].std(ddof=1)) if len(g) > 1 else float("nan"),
            "min": float(g["decode_tok_s"].min()),
            "max": float(g["decode_tok_s"].max()),
            "ms/token": ms_client,
            "vLLM ms/token": ms_server,
            "client vs vLLM %": 100 * (ms_client / ms_server - 1) if ms_server else None,
            "TTFT ms (median)": 1000 * float(g["ttft_s"].median()),
            "tokens/step": tps_step,
            "limit tok/s": limit_tps,
            "% of limit": 100 * median / limit_tps if limit_tps else None,
        })
    return pd.DataFrame(out).set_index("prompt tokens") if out else pd.DataFrame()


def findings(df: pd.DataFrame, table: pd.DataFrame, limit: Limit, hardware: str) -> list[Finding]:
    """Plain sentences about what the numbers mean, and every reason to doubt them."""
    notes = []
    dropped = df["interference"].notna().sum()
    if dropped:
        notes.append(warning(f"{dropped} request(s) were left out because another client used the server "
                             "meanwhile; see the 'interference' column of the records."))
    unchecked = sorted(set(df["unchecked"].dropna())) if "unchecked" in df else []
    if unchecked:
        notes.append(warning(f"The server's counters could not be read for: {'; '.join(unchecked)}. Those "
                             "cross-checks are unknown, not passed."))
    off = df[df["prompt_tokens"] != df["prompt_length"]]
    if len(off):
        notes.append(warning(f"{len(off)} prompt(s) were not the length asked for: the server counted "
                             f"{sorted(set(off['prompt_tokens']))} tokens for {sorted(set(off['prompt_length']))}."))
    if df["completion_tokens"].isna().any():
        notes.append(warning("the server sent no usage; token counts and decode speeds are unknown, not guessed."))
    if table.empty:
        return notes + [info("No clean measurement was taken.")]
    speeds = table["decode tok/s (median)"]
    first, last = speeds.iloc[0], speeds.iloc[-1]
    notes.append(info(f"Decode runs at {first:.1f} tok/s with a {table.index[0]}-token prompt and {last:.1f} tok/s "
                      f"at {table.index[-1]} tokens ({100 * (last / first - 1):+.1f}%)."))
    timed = df[df["interference"].isna() & df["server_decode_s"].notna()]
    bursty = timed[(timed["decode_s"] - timed["server_decode_s"]).abs() > 0.1 * timed["server_decode_s"]]
    if len(bursty):
        notes.append(warning(f"{len(bursty)} of {len(timed)} answers reached the client in bursts: their first-to-last "
                             "token time differs from vLLM's own by more than 10%, so their client-side speeds are "
                             "not per-token speeds (a busy client machine or API server does this). Lengths "
                             f"affected: {sorted(set(bursty['prompt_length']))}."))
    gap = table["client vs vLLM %"].dropna()
    if len(gap):
        worst = gap.abs().max()
        text = f"The client's ms per token is within {worst:.1f}% of vLLM's own request_decode_time over the same requests"
        notes.append(info(text + " - close enough to trust.") if worst <= 2 else
                     warning(text + " - more than 2%, look at the network or client load before trusting these figures."))
    else:
        notes.append(warning("vLLM's own decode time could not be read, so the client's figures are not "
                             "cross-checked against the server's."))
    notes += drifts(df, "decode_tok_s", "decode tok/s")
    share = table["% of limit"].dropna()
    if len(share):
        notes.append(info(f"That is {share.min():.0f}% to {share.max():.0f}% of the bandwidth limit ({limit.source})."))
    elif limit.bandwidth_bytes_s is None:
        notes.append(info(f"No bandwidth limit is drawn: the hardware params ({hardware}) give no memory bandwidth."))
    else:
        notes.append(warning("No bandwidth limit is drawn: the model is speculative and the server exposes no "
                             "speculative-decoding counters, so the tokens per step are unknown."))
    if (table["tokens/step"].dropna() > 1).any():
        notes.append(info("Speculative decoding is on: the limit is divided by the measured tokens per step, and "
                          "tok/s depends on how predictable the text is (random filler here)."))
    return notes


def compare(df: pd.DataFrame, study: Study, past: list[PastRun]) -> tuple[pd.DataFrame, list[Finding]]:
    """Earlier runs beside this one at the lengths both measured: each one's median decode tok/s over this
    run's, with a 95% bootstrap interval, every figure of theirs from their own sealed records."""
    mine = df[df["interference"].isna()]
    rows, notes = [], []
    for run in past:
        theirs = frame(run.records)
        theirs = theirs[theirs["interference"].isna()] if len(theirs) else theirs
        label = f"{run.label} ({run.id})"
        for facet, diffs in fingerprint.differences(study.fingerprint, run.fingerprint, fingerprint.SAME_SETUP).items():
            notes.append(warning(f"{label} ran elsewhere: {facet} differs: {', '.join(diffs)}."))
        if run.failure:
            notes.append(warning(f"{label} failed halfway ({run.failure.get('reason')}): its figures come from the "
                                 "requests it measured before it stopped."))
        shared = sorted(set(mine["prompt_length"]) & set(theirs.get("prompt_length", [])))
        missing = sorted(set(mine["prompt_length"]) - set(shared))
        if missing:
            notes.append(info(f"{label} has no clean request at {missing} tokens: no ratio there."))
        for n in shared:
            a = theirs[theirs["prompt_length"] == n]["decode_tok_s"].dropna()
            b = mine[mine["prompt_length"] == n]["decode_tok_s"].dropna()
            ratio = stats.median_ratio(a.tolist(), b.tolist())
            rows.append({"prompt tokens": int(n), "run": label, "their tok/s": float(a.median()),
                         f"{study.model.name} tok/s": float(b.median()), "theirs / this": ratio.estimate,
                         "95% low": ratio.low, "95% high": ratio.high})
    return pd.DataFrame(rows), notes


def share(study: Study, df: pd.DataFrame, plan: Plan) -> str:
    """The sweep as the rows Spark owners post (tg at each depth), written beside the run's own tables."""
    clean = df[df["interference"].isna()]
    return benchy.write(study.run, benchy.generation_rows(study.model.name, clean, plan.output_tokens))


def plot(table: pd.DataFrame, study: Study):
    """Decode tok/s against context length, with the min-max spread and the bandwidth limit."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    x = table.index.to_numpy()
    y = table["decode tok/s (median)"]
    ax.plot(x, y, "o-", label=f"{study.model.name}, median")
    ax.fill_between(x, table["min"], table["max"], alpha=0.2, label="min to max")
    if table["limit tok/s"].notna().all():
        ax.plot(x, table["limit tok/s"], "k--", label="bandwidth limit")
    length_axis(ax, x)
    ax.set_ylabel("decode tokens per second")
    ax.set_ylim(bottom=0)
    ax.set_title(f"Decode speed against context: {study.model.name} on {study.hardware.name}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
