"""Speculative-decoding gain by kind of prompt.

A draft (MTP head, draft model or n-gram lookup) guesses the next tokens and the model checks them
in one step. How many guesses are right depends on the text: JSON and code are predictable, a story
or a translation less so. The step time stays the same, so tokens per second follow tokens per step.
Random filler, what most benchmarks send, cannot be guessed and hides the gain.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import pandas as pd
from pydantic import Field, PrivateAttr, model_validator

from ..endpoint.client import Endpoint, ServerInfo
from ..endpoint.prompts import filler
from ..errors import ParamsError
from ..runs import params, plan
from ..runs.plan import COMPARED, IGNORED
from ..runs.report import Finding, info, warning
from ..runs.run import PastRun, measured
from ..runs.study import BURST, Study, drifts, seen_by_client, timing
from ..verdicts.verdict import Row, Runs, caveats, median_row
from .registry import Contract

FILLER = "random filler"
SHORT_ANSWER = 128  # tokens: below this a tokens-per-step median rests on too few steps


class Plan(plan.Plan):
    study: ClassVar[str] = "mtp"
    prompt_set: Annotated[str, COMPARED] = Field("reference", description="a prompt file under params/prompts/, "
                                                 "or a path to one")
    kinds: list[str] = Field(default_factory=list, description="kinds of the set to send; empty for all")
    random_filler: bool = True
    repetitions: int = Field(3, ge=1)
    temperature: Annotated[float, COMPARED] = Field(0.7, ge=0, le=2)
    output_tokens: Annotated[int, COMPARED] = Field(512, ge=16)
    compare_with: Annotated[plan.RunIds, IGNORED] = Field(default_factory=list,
                                                          description="earlier mtp run folders or run ids")
    _prompts: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _read(self) -> Plan:
        """The prompt file, read once, before any request."""
        available = params.load_prompts(self.prompt_set).prompts
        unknown = [k for k in self.kinds if k not in available]
        if unknown:
            raise ValueError(f"unknown prompt kind(s) {unknown}; {self.prompt_set!r} has {list(available)}. "
                             "Add them to the prompt file or drop them from `kinds`.")
        self._prompts = {k: available[k] for k in (self.kinds or available)}
        return self

    @property
    def prompts(self) -> dict[str, str]:
        return dict(self._prompts)

    def texts(self) -> dict[str, str]:
        """Every kind that will be sent, with its text; random filler is seeded per repetition."""
        return self.prompts | ({FILLER: filler_prompt(0)} if self.random_filler else {})

    def check_server(self, server: ServerInfo, endpoint: Endpoint) -> None:
        """Each prompt, measured by the server's own tokenizer with the chat template, plus the answer must fit."""
        max_model_len = server.max_model_len
        if max_model_len is None:
            return
        lengths = {kind: len(endpoint.tokenize_chat(_messages(text))) for kind, text in self.texts().items()}
        kind, longest = max(lengths.items(), key=lambda kv: kv[1])
        if longest + self.output_tokens > max_model_len:
            raise ParamsError(f"The {kind!r} prompt is {longest} tokens; with output_tokens {self.output_tokens} it "
                              f"exceeds the server's max_model_len of {max_model_len}. Lower output_tokens to "
                              f"{max_model_len - longest} or less, or shorten the prompt.")


def filler_prompt(rep: int) -> str:
    return "Continue this text: " + filler(150, seed=rep + 1)


def _messages(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def sweep(study: Study, plan: Plan) -> pd.DataFrame:
    """One warmup, then every kind in turn, `repetitions` times, one request at a time."""
    kinds = list(plan.prompts) + ([FILLER] if plan.random_filler else [])
    total = 1 + len(kinds) * plan.repetitions
    k = 0
    with study.measuring():
        for rep in range(-1, plan.repetitions):
            for kind in kinds if rep >= 0 else kinds[:1]:
                k += 1
                text = plan.prompts.get(kind) or filler_prompt(rep)
                rec = study.request(
                    {"kind": kind, "rep": rep, "warmup": rep < 0},
                    lambda ep: ep.chat(_messages(text), max_tokens=plan.output_tokens, temperature=plan.temperature),
                )
                row = _row(rec)
                tps = row["tokens_per_step"]
                speed = "n/a" if row["tok_s"] is None else f"{row['tok_s']:.1f}"
                print(f"[{k}/{total}] {kind}{' (warmup)' if rep < 0 else ''}: {rec['completion_tokens']} tokens, "
                      f"{speed} tok/s{' by the server' + chr(39) + 's clock' if row['burst'] else ''}, "
                      f"{'unknown' if tps is None else f'{tps:.2f}'} tokens/step"
                      + (f"  !! left out: {row['excluded']}" if row["excluded"] else "")
                      + (f"  !! BURST: {seen_by_client(row['client_tok_s'])}" if row["burst"] else ""), flush=True)
    return frame(study.records())


def _row(r: dict) -> dict:
    """One request's figures, by the burst rule (study.timing): an answer that reached the client
    in a burst is counted at the server's time; its tokens per step come from the counters either way."""
    spec = r["server"]["spec_decode"]
    tps = spec["tokens_per_step"]
    t = timing(r)
    excluded = r.get("interference")
    if not excluded and (spec["accepted_tokens"] or 0) > (r["completion_tokens"] or 0):
        excluded = (f"{spec['accepted_tokens']:g} draft tokens accepted for a {r['completion_tokens']}-token "
                    "answer: the counters include another request")
    tok_s = t["decode_tok_s"]
    return {
        "kind": r["kind"],
        "answer_tokens": r["completion_tokens"],
        "tok_s": tok_s,
        "client_tok_s": t["client_tok_s"],
        "timed_by": t["timed_by"],
        "tokens_per_step": tps,
        "acceptance_rate": spec["acceptance_rate"],
        "acceptance_per_position": spec["acceptance_per_position"],
        "ms_per_step": 1000 * tps / tok_s if tps is not None and tok_s else None,
        "drafts": spec["drafts"],
        "excluded": excluded,
        "burst": t["burst"],
        "interference": r.get("interference"),
        "seq": r.get("started_at"),  # the order sent, for the drift check
    }


def frame(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([_row(r) for r in measured(records)])


def summarize(df: pd.DataFrame, study: Study) -> pd.DataFrame:
    """Per kind of prompt, medians over the clean requests, fastest first."""
    clean = df[df["excluded"].isna()]
    rows = []
    for kind, g in clean.groupby("kind", sort=False):
        steps = g["tokens_per_step"].dropna()
        tps = float(steps.median()) if len(steps) else (None if study.model.speculative else 1.0)
        answer = float(g["answer_tokens"].median())
        rows.append({
            "prompt": kind,
            "n": len(g),
            "tok/s": _median(g["tok_s"]),
            "tokens/step": tps,
            "acceptance": g["acceptance_rate"].median(),
            "ms/step": _median(g["ms_per_step"]),
            "server-timed": int(g["burst"].sum()),
            "answer tokens": answer,
            "short answer": answer < SHORT_ANSWER,
            "GB read/token": study.limit.bytes_per_token(tps) / 1e9 if tps else None,
            "limit tok/s": study.limit.tokens_per_s(tps) if tps else None,
        })
    table = pd.DataFrame(rows)
    return table.sort_values("tok/s", ascending=False, na_position="last").set_index("prompt") if rows else table


def compare(table: pd.DataFrame, past: list[PastRun], df: pd.DataFrame, settings: dict | None = None,
            ) -> tuple[pd.DataFrame, list[Finding]]:
    """Speed-up per kind against earlier runs, computed from their sealed records, never typed in, by the rows the
    comparison report draws (kind_rows): the ratio with its 95% interval and the row's standing there."""
    out, notes, mine = pd.DataFrame(index=table.index), [], df[df["excluded"].isna()] if len(df) else df
    for run in past:
        theirs = frame(run.records)
        theirs = theirs[theirs["excluded"].isna()] if len(theirs) else theirs
        other = theirs.groupby("kind")["tok_s"].median() if len(theirs) else pd.Series(dtype=float)
        label = f"{run.label} ({run.id})"
        out[f"tok/s {label}"] = other.reindex(table.index)
        apart = Plan.same({"this run": settings, label: run})
        rows = kind_rows({label: theirs, "this run": mine}, label, lambda s, k: caveats(run, k) if s == label
                         else (), apart) if len(theirs) and len(mine) else {}
        said = {k: (row.ratios.get("this run"), row.standing("this run", label)) for k, row in rows.items()}
        out[f"speed-up vs {label}"] = [said[k][0].estimate if k in said and said[k][0] else None for k in table.index]
        out[f"95% interval vs {label}"] = [said[k][0].times() if k in said and said[k][0] else None for k in table.index]
        out[f"standing vs {label}"] = [said[k][1] if k in said else None for k in table.index]
        missing = sorted(set(table.index) - set(other.index))
        if missing:
            notes.append(info(f"{run.id} has no requests of kind {missing}."))
        if run.failure:
            notes.append(warning(f"{run.id} stopped halfway ({run.failure.get('reason')}): it has fewer requests."))
    return out, notes


def findings(df: pd.DataFrame, table: pd.DataFrame, study: Study, speculative: bool) -> list[Finding]:
    notes = []
    excluded = df[df["excluded"].notna()]
    if len(excluded):
        notes.append(warning(f"{len(excluded)} request(s) left out of the medians: "
                             + "; ".join(sorted(set(excluded["excluded"])))[:400]))
    bursts = df[df["burst"] & df["excluded"].isna()]
    if len(bursts):
        notes.append(info(f"{len(bursts)} answer(s) reached the client in bursts (first-to-last-token time more than "
                          f"{BURST:.0%} off the server's own), so they are counted at the server's time, as decode "
                          "counts them ('server-timed' per kind); their tokens per step come from the server's "
                          "counters either way.", tuple(sorted(set(bursts["kind"])))))
    if table.empty:
        return notes + [info("No clean measurement was taken.")]
    notes += _idle_draft(df, study, speculative) + drifts(df, "tok_s", "tok/s", by="kind")
    if not speculative and study.model.speculative:
        notes.append(warning(f"The model's params name speculative decoding ({study.model.speculative}), but the "
                             "server exposes no speculative-decoding counters: tokens per step are unknown."))
    elif not speculative:
        notes.append(info("This server does not run speculative decoding (its /metrics shows no speculative-decoding "
                          "counts), so every step yields one token; tokens per second is reported as it is. "
                          "Compare a speculative run of the same model against this one with `compare_with`."))
    fast, slow = table.iloc[0], table.iloc[-1]
    steps_seen = table["tokens/step"].dropna()
    per_step = (f"tokens per step from {steps_seen.min():.2f} to {steps_seen.max():.2f}" if len(steps_seen)
                else "tokens per step unknown")
    notes.append(info(f"Tokens per second range from {_num(slow['tok/s'])} ({table.index[-1]}) to {_num(fast['tok/s'])} "
                      f"({table.index[0]}), with {per_step}."))
    steps = table["ms/step"].dropna()
    if len(steps):
        spread = (steps.max() - steps.min()) / steps.median()
        notes.append(info(f"Time per step is {steps.min():.1f} to {steps.max():.1f} ms across kinds "
                          f"({100 * spread:.0f}% " + ("spread): nearly constant, so the speed follows tokens per step."
                                                     if spread < 0.2 else "spread): not constant, so something beyond "
                                                     "acceptance changes with the text.")))
    else:
        notes.append(info("Time per step is unknown: tokens per step could not be read from the server."))
    if FILLER in table.index:
        f = table.loc[FILLER]
        notes.append(info(f"Random filler gives {_num(f['tok/s'])} tok/s at {_num(f['tokens/step'], '.2f')} tokens/step: a "
                          "benchmark that only sends filler would report that and nothing of the range above."))
    short = list(table.index[table["short answer"]])
    if short:
        notes.append(info(f"Answers of {short} were shorter than {SHORT_ANSWER} tokens: those rows are less precise."))
    return notes


def _idle_draft(df: pd.DataFrame, study: Study, speculative: bool) -> list[Finding]:
    """A draft model loaded but never asked (its command line says so), or a server set to speculate that drafted
    nothing in any request: either way this run measured no speculative decoding."""
    why = study.endpoint.engine.idle_draft if study.endpoint else ""
    settings = (study.fingerprint.get("server") or {}).get("settings") or {}
    if settings.get("draft model") and settings.get("speculative type") in (None, "none"):
        return [warning(f"A draft model is loaded ({settings['draft model']}) but no speculative type is set, so it "
                        f"never drafts: every step made one token. {why}.")]
    drafts = df.loc[df["excluded"].isna(), "drafts"].dropna()
    if speculative and len(drafts) and drafts.sum() == 0:
        return [warning(f"The server is set to speculate, but drafted nothing in {len(drafts)} request(s): every "
                        "step made one token, so this run measured no speculative decoding. "
                        + (why + "." if why else "Check how the server was started."))]
    return []


def _median(values: pd.Series) -> float | None:
    values = values.dropna()
    return float(values.median()) if len(values) else None


def _num(value, fmt: str = ".1f") -> str:
    """A figure for a sentence; 'unknown' where it could not be read (never 'nan')."""
    return "unknown" if value is None or value != value else format(value, fmt)


def headline_rows(runs: Runs) -> list[Row]:
    """Per kind of prompt: tok/s (a verdict row) and tokens per step (context), on the kinds both runs sent. Speculation
    on one side only is what this study sets side by side: each row names its kind of text, so it carries no caveat
    for it (decode's rows do: its filler hides what speculation gains on real text)."""
    mine, frames = runs.frames("mtp", frame)
    frames = {s: f[f["excluded"].isna()] for s, f in frames.items()}
    if not frames:
        return []
    speeds = kind_rows(frames, runs.base, lambda s, kind: caveats(mine[s], kind), Plan.same(mine))
    rows = []
    for kind, speed in speeds.items():
        at = {s: f[f["kind"] == kind] for s, f in frames.items()}
        steps = {s: 1.0 if not speculative_run(mine[s]) else _median(g["tokens_per_step"]) for s, g in at.items()}
        rows += [Row("speculative decoding", f"tokens/step, {kind}", steps, role="context", better="none"), speed]
    return rows


def kind_rows(frames: dict[str, pd.DataFrame], base: str, doubts, apart: str = "") -> dict[str, Row]:
    """tok/s per kind of prompt every run sent (clean requests): each subject's median and its ratio to the base's
    with a 95% interval. The comparison report and a notebook's compare_with both judge mtp runs by these rows."""
    first = next(iter(frames.values()))["kind"]
    kinds = [k for k in dict.fromkeys(first) if all(k in set(f["kind"]) for f in frames.values())]
    return {kind: median_row("speculative decoding", f"tok/s, {kind}",
                             {s: f[f["kind"] == kind]["tok_s"].dropna().tolist() for s, f in frames.items()}, base,
                             caveats={s: doubts(s, kind) for s in frames}, not_comparable=apart) for kind in kinds}


def speculative_run(run: PastRun) -> bool:
    return bool((run.params.get("model") or {}).get("speculative"))


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


STUDY = Contract("mtp", Plan, sweep, summarize, findings, headline_rows, title="Speculative decoding", order=30)
