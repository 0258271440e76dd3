"""The decode records as tables: one row per measured request, then one per prompt length (each request's speed
by the burst rule, study.timing)."""

from __future__ import annotations

import pandas as pd

from ...runs.run import measured
from ...runs.study import timing
from ...verdicts import benchy, stats

SPREAD = 1.5  # fastest over slowest request at one length: beyond this the box was not steady


def frame(records: list[dict]) -> pd.DataFrame:
    """Measured requests as a table, with the server's view beside the client's."""
    rows = []
    for r in measured(records):
        server = r.get("server") or {}
        spec = server.get("spec_decode") or {}
        rows.append({
            "seq": r.get("seq"),
            "prompt_length": r["prompt_length"],
            "rep": r.get("rep"),
            "prompt_tokens": r["prompt_tokens"],
            "completion_tokens": r["completion_tokens"],
            "decode_tokens": r["decode_tokens"],
            "ttft_s": r["ttft_s"],
            "decode_s": r["decode_s"],
            **timing(r),
            "server_ttft_s": server.get("ttft_s"),
            "server_prefill_s": server.get("prefill_s"),
            "tokens_per_step": spec.get("tokens_per_step"),
            "interference": r.get("interference"),
            "unchecked": ", ".join(server.get("unchecked") or []) or None,
        })
    return pd.DataFrame(rows)


def clean(df: pd.DataFrame) -> pd.DataFrame:
    """The requests no other client disturbed: the only ones any figure uses."""
    return df[df["interference"].isna()] if len(df) else df


def summarize(df: pd.DataFrame, study, stopped: dict[int, str] | None = None,
              alone: tuple[dict[int, float], str] | None = None) -> pd.DataFrame:
    """Per prompt length: the median decode speed with its 95% interval, its spread, the client's ms per
    token against the server's own, TTFT and the bandwidth limit; `stopped`: why each length has the
    requests it has (repetitions auto).

    `alone` (engine_alone.measure): the engine's own ms per token at each length, where it was measured: the
    step less it is the server's own.

    Tokens per step comes from the server's speculative-decoding counters; a server without them
    serves one token per step only if the model's params name no speculative method, else it is unknown
    and so is the limit.
    """
    out = []
    for length, g in clean(df).groupby("prompt_length"):
        speeds = g["decode_tok_s"].dropna()
        median = stats.median_interval(speeds.tolist())
        mine = g[~g["burst"]]  # the requests the client's own clock counted
        ms_client = 1000 * mine["decode_s"].sum() / mine["decode_tokens"].sum() if len(mine) else None
        timed = mine[mine["server_decode_s"].notna()]
        ms_server_mine = 1000 * timed["server_decode_s"].sum() / timed["decode_tokens"].sum() if len(timed) else None
        ms_client_timed = 1000 * timed["decode_s"].sum() / timed["decode_tokens"].sum() if len(timed) else None
        all_server = g["server_decode_s"].notna().all()
        ms_server = 1000 * g["server_decode_s"].sum() / g["decode_tokens"].sum() if all_server else None
        steps = g["tokens_per_step"].dropna()
        tps_step = float(steps.median()) if len(steps) else (None if study.model.speculative else 1.0)
        value = float(median.estimate) if len(speeds) else None
        curve = limit_at(study.limit, length + g["completion_tokens"].median() / 2, tps_step)
        out.append({
            "prompt tokens": int(length),
            "n": len(speeds),
            "decode tok/s (median)": value,
            "95% low": median.low if len(speeds) else None,
            "95% high": median.high if len(speeds) else None,
            "std": float(speeds.std(ddof=1)) if len(speeds) > 1 else None,
            "min": float(speeds.min()) if len(speeds) else None,
            "max": float(speeds.max()) if len(speeds) else None,
            "spread x": float(speeds.max() / speeds.min()) if len(speeds) and speeds.min() > 0 else None,
            "server-timed": int(g["burst"].sum()),
            "ms/token": ms_client,
            "server ms/token": ms_server,
            "client vs server %": (100 * (ms_client_timed / ms_server_mine - 1)
                                   if ms_client_timed and ms_server_mine else None),
            "TTFT ms (median)": 1000 * float(g["ttft_s"].median()),
            "tokens/step": tps_step,
            **curve,
            "% of limit": 100 * value / curve["limit tok/s"] if curve["limit tok/s"] and value else None,
            **split(curve, median if len(speeds) else None),
            **({"engine ms": (alone[0] or {}).get(int(length)),
                "server's own ms": _less(1000 / value if value else None, (alone[0] or {}).get(int(length)))}
               if alone is not None else {}),
            **({"stopped": stopped.get(int(length))} if stopped else {}),
        })
    return pd.DataFrame(out).set_index("prompt tokens") if out else pd.DataFrame()


def limit_at(limit, context: float, tokens_per_step: float | None) -> dict:
    """The limit at the mean context of a request's decode (its prompt and half its answer): the bytes one
    step reads, the KV cache's part of them, and the fastest decode they allow (None where unknown)."""
    step, kv = limit.step_bytes(context), limit.kv_bytes(context)
    return {"MB read/step": step / 1e6 if step else None, "KV MB/step": kv / 1e6 if kv is not None else None,
            "KV % of bytes": 100 * kv / step if step and kv is not None else None,
            "limit tok/s": limit.tokens_per_s(tokens_per_step, context) if tokens_per_step else None}


def _less(step: float | None, engine: float | None) -> float | None:
    """The server's own part of a step; None where the engine alone took longer (it ran otherwise: threads, load)."""
    return step - engine if step is not None and engine is not None and step >= engine else None


def split(curve: dict, median) -> dict:
    """The step split: the bytes' time at the box's bandwidth (the limit's own ms per token) and the rest, the
    median step less it, with the rest's 95% interval from the median's. On an H100 (llama-server, random F16) an
    MoE's 2.94 ms step was 1.11 ms of reading and 1.83 ms of something else, a dense model's 4.44 ms 2.66 and 1.78:
    a cost per step that hurts the model with fewer bytes most. None where the limit or the speed is unknown."""
    read = 1000 / curve["limit tok/s"] if curve["limit tok/s"] else None
    step = 1000 / median.estimate if median is not None and median.estimate > 0 else None

    def rest(speed: float | None) -> float | None:
        return 1000 / speed - read if read is not None and speed and speed > 0 else None

    return {"step ms": step, "read ms": read, "rest ms": rest(median.estimate) if median is not None else None,
            "rest 95% low": rest(median.high) if median is not None else None,
            "rest 95% high": rest(median.low) if median is not None else None}


def share(study, df: pd.DataFrame, plan) -> str:
    """The sweep as the rows Spark owners post (tg at each depth), written beside the run's own tables."""
    return benchy.write(study.run, benchy.generation_rows(study.model.name, clean(df), plan.output_tokens))
