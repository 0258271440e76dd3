"""Speculative-decoding gain by kind of prompt.

A draft (MTP head, draft model or n-gram lookup) guesses the next tokens and the model checks them
in one step. How many guesses are right depends on the text: JSON and code are predictable, a story
or a translation less so. The step time stays the same, so tokens per second follow tokens per step.
Random filler, what most benchmarks send, cannot be guessed and hides the gain.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..client import ServerInfo
from ..params import load_prompts
from ..prompts import filler
from ..run import read_records, verify
from ..study import Study

FILLER = "random filler"
SHORT_ANSWER = 128  # tokens: below this a tokens-per-step median rests on too few steps


@dataclass(frozen=True)
class Plan:
    prompts: dict[str, str]
    repetitions: int
    temperature: float
    output_tokens: int
    random_filler: bool
    compare_with: tuple[str, ...] = field(default=())

    @classmethod
    def build(cls, prompt_set: str, kinds: list, repetitions: int, temperature: float, output_tokens: int,
              random_filler: bool, compare_with: list | str = ()) -> Plan:
        """Everything checked before a request is sent: the prompt file, the kinds, the numbers."""
        available = load_prompts(prompt_set).prompts
        unknown = [k for k in kinds if k not in available]
        if unknown:
            raise ValueError(f"unknown prompt kind(s) {unknown}; {prompt_set!r} has {list(available)}. "
                             "Add them to the prompt file or drop them from `kinds`.")
        chosen = {k: available[k] for k in (kinds or available)}
        problems = []
        if not isinstance(repetitions, int) or repetitions < 1:
            problems.append(f"repetitions must be 1 or more; got {repetitions!r}")
        if not isinstance(output_tokens, int) or output_tokens < 16:
            problems.append(f"output_tokens must be 16 or more; got {output_tokens!r}")
        if not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            problems.append(f"temperature must be between 0 and 2; got {temperature!r}")
        if problems:
            raise ValueError("Bad mtp parameters:\n  " + "\n  ".join(problems))
        runs = (compare_with,) if isinstance(compare_with, str) else tuple(compare_with)
        for run in runs:
            _check_comparable(Path(run))
        return cls(chosen, repetitions, temperature, output_tokens, random_filler, runs)

    def check_server(self, server: ServerInfo) -> None:
        if server.max_model_len is not None and self.output_tokens + 512 > server.max_model_len:
            raise ValueError(f"output_tokens {self.output_tokens} leaves no room for a prompt within the "
                             f"server's max_model_len of {server.max_model_len}")


def _check_comparable(path: Path) -> None:
    params = path / "params.json"
    if not params.is_file():
        raise ValueError(f"compare_with: {path} is not a sparknb run folder (no params.json)")
    notebook = json.loads(params.read_text()).get("notebook")
    if notebook != "mtp":
        raise ValueError(f"compare_with: {path} is a {notebook!r} run, not an mtp run")


def sweep(study: Study, plan: Plan) -> pd.DataFrame:
    """One warmup, then every kind in turn, `repetitions` times, one request at a time."""
    kinds = list(plan.prompts) + ([FILLER] if plan.random_filler else [])
    total = 1 + len(kinds) * plan.repetitions
    k = 0
    for rep in range(-1, plan.repetitions):
        for kind in kinds if rep >= 0 else kinds[:1]:
            k += 1
            text = plan.prompts.get(kind) or "Continue this text: " + filler(150, seed=rep + 1)
            rec = study.request(
                {"kind": kind, "rep": rep, "warmup": rep < 0},
                lambda ep: ep.chat([{"role": "user", "content": text}], max_tokens=plan.output_tokens,
                                   temperature=plan.temperature),
            )
            row = _row(rec)
            print(f"[{k}/{total}] {kind}{' (warmup)' if rep < 0 else ''}: {rec['completion_tokens']} tokens, "
                  f"{row['tok_s']:.1f} tok/s, {row['tokens_per_step']:.2f} tokens/step"
                  + (f"  !! left out: {row['excluded']}" if row["excluded"] else "")
                  + (f"  !! reached the client in a burst ({row['burst']})" if row["burst"] else ""), flush=True)
    return frame(study.records())


def _row(r: dict) -> dict:
    """One request's figures. A burst spoils only the client's clock: the counters stay good."""
    spec = r["server"]["spec_decode"]
    tps = spec["tokens_per_step"]
    tok_s = r["decode_tokens_per_s"] or float("nan")
    excluded, burst = r.get("interference"), None
    server_s = r["server"]["decode_s"]
    if not excluded and spec["accepted_tokens"] > (r["completion_tokens"] or 0):
        excluded = (f"{spec['accepted_tokens']:g} draft tokens accepted for a {r['completion_tokens']}-token "
                    "answer: the counters include another request")
    if server_s and r["decode_s"] is not None and abs(r["decode_s"] - server_s) > 0.1 * server_s:
        burst = f"{r['decode_s']:.2f} s first to last token here, {server_s:.2f} s in vLLM"
        tok_s = float("nan")
    return {
        "kind": r["kind"],
        "answer_tokens": r["completion_tokens"],
        "tok_s": tok_s,
        "tokens_per_step": tps,
        "acceptance_rate": spec["acceptance_rate"],
        "acceptance_per_position": spec["acceptance_per_position"],
        "ms_per_step": 1000 * tps / tok_s if tok_s == tok_s and tok_s > 0 else float("nan"),
        "drafts": spec["drafts"],
        "excluded": excluded,
        "burst": burst,
    }


def frame(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([_row(r) for r in records if not r.get("warmup") and "error" not in r])


def summarize(df: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Per kind of prompt, medians over the clean requests, fastest first."""
    clean = df[df["excluded"].isna()]
    rows = []
    for kind, g in clean.groupby("kind", sort=False):
        tps = float(g["tokens_per_step"].median())
        answer = float(g["answer_tokens"].median())
        rows.append({
            "prompt": kind,
            "n": len(g),
            "tok/s": float(g["tok_s"].median()),
            "tokens/step": tps,
            "acceptance": g["acceptance_rate"].median(),
            "ms/step": float(g["ms_per_step"].median()),
            "answer tokens": answer,
            "short answer": answer < SHORT_ANSWER,
            "GB read/token": study.limit.bytes_per_token(tps) / 1e9,
            "limit tok/s": study.limit.tokens_per_s(tps),
        })
    table = pd.DataFrame(rows)
    return table.sort_values("tok/s", ascending=False).set_index("prompt") if rows else table


def compare(table: pd.DataFrame, runs: tuple[str, ...]) -> tuple[pd.DataFrame, list[str]]:
    """Speed-up per kind against earlier runs (read from their sealed records, never typed in)."""
    out, notes = pd.DataFrame(index=table.index), []
    for run in runs:
        path = Path(run)
        problems = verify(path)
        if problems:
            notes.append(f"WARNING: {path.name} no longer matches its manifest: {'; '.join(problems[:3])}")
        params = json.loads((path / "params.json").read_text())
        other = frame(read_records(path))
        other = other[other["excluded"].isna()].groupby("kind")["tok_s"].median()
        label = f"{params['model']['name']} ({path.name})"
        out[f"tok/s {label}"] = other.reindex(table.index)
        out[f"speed-up vs {label}"] = table["tok/s"] / other.reindex(table.index)
        missing = sorted(set(table.index) - set(other.index))
        if missing:
            notes.append(f"{path.name} has no requests of kind {missing}.")
    return out, notes


def findings(df: pd.DataFrame, table: pd.DataFrame, study: Study, speculative: bool) -> list[str]:
    notes = []
    excluded = df[df["excluded"].notna()]
    if len(excluded):
        notes.append(f"WARNING: {len(excluded)} request(s) left out of the medians: "
                     + "; ".join(sorted(set(excluded["excluded"])))[:400])
    bursts = df[df["burst"].notna() & df["excluded"].isna()]
    if len(bursts):
        notes.append(f"WARNING: {len(bursts)} answer(s) reached the client in bursts (first-to-last-token time more "
                     "than 10% off vLLM's own), so their tokens per second are left out; their tokens per step, from "
                     "the server's counters, are kept.")
    if table.empty:
        return notes + ["No clean measurement was taken."]
    if not speculative:
        notes.append("This server does not run speculative decoding (vLLM exposes no speculative-decoding "
                     "counters), so every step yields one token; tokens per second is reported as it is. "
                     "Compare a speculative run of the same model against this one with `compare_with`.")
    fast, slow = table.iloc[0], table.iloc[-1]
    notes.append(f"Tokens per second range from {slow['tok/s']:.1f} ({table.index[-1]}) to {fast['tok/s']:.1f} "
                 f"({table.index[0]}), {fast['tok/s'] / slow['tok/s']:.2f}x, with tokens per step from "
                 f"{table['tokens/step'].min():.2f} to {table['tokens/step'].max():.2f}.")
    steps = table["ms/step"]
    spread = (steps.max() - steps.min()) / steps.median()
    notes.append(f"Time per step is {steps.min():.1f} to {steps.max():.1f} ms across kinds ({100 * spread:.0f}% "
                 + ("spread): nearly constant, so the speed follows tokens per step." if spread < 0.2 else
                    "spread): not constant, so something beyond acceptance changes with the text."))
    if FILLER in table.index:
        f = table.loc[FILLER]
        notes.append(f"Random filler gives {f['tok/s']:.1f} tok/s at {f['tokens/step']:.2f} tokens/step: a benchmark "
                     "that only sends filler would report that and nothing of the range above.")
    short = list(table.index[table["short answer"]])
    if short:
        notes.append(f"Answers of {short} were shorter than {SHORT_ANSWER} tokens: those rows are less precise.")
    return notes


def plot(table: pd.DataFrame, study: Study):
    """Tok/s against tokens/step: on a straight line through zero when the step time is constant."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.scatter(table["tokens/step"], table["tok/s"])
    for kind, row in table.iterrows():
        ax.annotate(kind, (row["tokens/step"], row["tok/s"]), textcoords="offset points", xytext=(4, 4))
    top = max(table["tokens/step"].max() * 1.1, 1.5)
    step_s = table["ms/step"].median() / 1000
    ax.plot([0, top], [0, top / step_s], "k:", label=f"constant step time ({1000 * step_s:.1f} ms)")
    ax.set_xlim(0, top)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("tokens per step (1 + accepted / drafts)")
    ax.set_ylabel("decode tokens per second")
    ax.set_title(f"Speculative decoding by prompt: {study.model.name}")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
