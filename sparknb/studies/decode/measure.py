"""The sweep: one request at a time, each prompt unique and exactly as long as asked."""

from __future__ import annotations

import pandas as pd

from ...endpoint.prompts import PromptMaker
from ...runs import resume
from ...runs.schedule import Schedule
from ...runs.study import Study, rep_label, seen_by_client, timing
from .plan import Plan
from .tables import frame


def schedule_of(plan: Plan) -> Schedule:
    return Schedule(plan.prompt_lengths, plan.warmup, plan.repetitions, plan.order, plan.seed, plan.target_width,
                    plan.max_repetitions)


def finished(records: list[dict]) -> list[dict]:
    """The measured requests of a run that came back whole: what a resumed run reuses."""
    return [r for r in records if "prompt_length" in r and not r.get("warmup") and "error" not in r]


def reusable(plan: Plan, model: str) -> list[dict]:
    """The finished requests of plan.resume_from, checked against this run's settings before anything starts."""
    return resume.reusable(plan, model, finished)


def sweep(study: Study, plan: Plan, reused: list[dict] = ()) -> tuple[pd.DataFrame, dict[int, str]]:
    """All requests of the plan, one at a time (as many as `repetitions auto` asks for), but those `reused` from
    the run it resumes: one row per measured request, and per length why it stopped. The progress line of an
    answer that reached the client in a burst says so, with both clocks."""
    maker = PromptMaker(study.endpoint.tokenize)
    order = schedule_of(plan)
    order.resume(_done(reused))
    resume.copy(study, plan, list(reused))
    first = max((r.get("seq") or 0 for r in reused), default=0)  # new requests follow the reused ones
    k = 0
    with study.measuring():
        for k, (length, rep) in enumerate(order, 1):
            prompt = maker.make(length)
            rec = study.request(
                {"prompt_length": length, "rep": rep, "warmup": rep < 0, "seq": first + k},
                lambda ep: ep.complete(prompt, max_tokens=plan.output_tokens, temperature=plan.temperature),
            )
            t = timing(rec)
            if rep >= 0:
                order.add(length, None if rec["interference"] else t["decode_tok_s"])
            print(f"[{k}/{order.planned}] {length} tokens, {rep_label(rep)}: "
                  f"TTFT {_ms(rec['ttft_s'])}, decode {_speed(t)}"
                  + (f"  !! {rec['interference']}" if rec["interference"] else ""), flush=True)
    stopped = order.stopped()
    print(f"{k} requests done. " + "; ".join(f"{n:,} tokens: {why}" for n, why in stopped.items()), flush=True)
    return frame(study.records()), stopped


def _done(reused: list[dict]) -> dict[int, dict[int, float | None]]:
    """Length -> rep -> the figure each reused request counts with (None where another client meddled)."""
    done: dict[int, dict[int, float | None]] = {}
    for r in reused:
        done.setdefault(r["prompt_length"], {})[r["rep"]] = None if r.get("interference") else timing(r)["decode_tok_s"]
    return done


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1000 * seconds:.0f} ms"


def _speed(t: dict) -> str:
    if t["decode_tok_s"] is None:
        return "n/a tok/s"
    if not t["burst"]:
        return f"{t['decode_tok_s']:.1f} tok/s"
    return f"{t['decode_tok_s']:.1f} tok/s by the server's clock  !! BURST: {seen_by_client(t['client_tok_s'])}"
