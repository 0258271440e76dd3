"""The swap study's tables, read from its records: transitions, stages, the server's own figures, memory.

The stages are the server's own, as its engine's log reader names them (vLLM: serving.startup_log.STAGES;
llama-server: serving.llama_log.STAGES), in the order the records give them."""

from __future__ import annotations

import pandas as pd

from ...runs.study import Study
from ...serving import llama_log, startup_log

EMPTY = "(empty)"
EVICT, FIRST_ANSWER = "evict", "first answer"
ENDS = {EVICT: "stopping the resident model", FIRST_ANSWER: "from the ready URL's answer until the first request was "
        "answered"}


def stage_names(records: list[dict]) -> tuple[str, ...]:
    """The stages the starts' logs were read into, in their readers' order (one server family, or several)."""
    seen = {k for r in records if r.get("kind") == "start" for k in ((r.get("startup") or {}).get("stages") or {})}
    ordered = [k for k in (*startup_log.STAGES, *llama_log.STAGES) if k in seen]
    return tuple(dict.fromkeys(ordered)) or startup_log.STAGES


def caption(table: pd.DataFrame) -> str:
    """What each part of the wait is, for the parts the table has."""
    helps = ({**startup_log.STAGE_HELP, **llama_log.STAGE_HELP}
             if set(table.columns) & (set(llama_log.STAGES) - set(startup_log.STAGES)) else startup_log.STAGE_HELP)
    return "Seconds per part of each wait, adding up to it. " + "; ".join(
        f"{name}: {ENDS.get(name) or helps.get(name, '')}" for name in table.columns) + "."


def largest(rec: dict, n: int = 2) -> list[tuple[str, float]]:
    """The stages of one start that took longest, as read from its log."""
    stages = (rec.get("startup") or {}).get("stages") or {}
    measured = [(k, v) for k, v in stages.items() if v is not None]
    return sorted(measured, key=lambda kv: kv[1], reverse=True)[:n]


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per transition: what the client waited, and what it waited for."""
    rows = []
    for r in records:
        if r.get("kind") not in ("start", "request"):
            continue
        top = largest(r)
        rows.append({
            "step": r["step"], "rep": r["rep"], "from": r["from"], "to": r["model"],
            "compile cache": r.get("compile_cache", "-" if r["kind"] == "request" else "unknown"),
            "evict s": r.get("evict_s"), "ready s": r.get("ready_s"), "first answer s": r.get("first_answer_s"),
            "client wait s": r.get("client_wait_s"),
            "largest stage": f"{top[0][0]} ({top[0][1]:.1f} s)" if top else "-",
            "second stage": f"{top[1][0]} ({top[1][1]:.1f} s)" if len(top) > 1 else "-",
            "load avg before": (r.get("memory_before") or {}).get("load_average_1m"),
            "memory after GiB": gib((r.get("memory_after") or {}).get("used_bytes")),
            "server GiB": gib((r.get("memory_after") or {}).get("server_bytes")),
            "status": "ok" if r.get("ok") else f"FAILED: {str(r.get('error', '')).splitlines()[0][:120]}",
        })
    return pd.DataFrame(rows).set_index("step") if rows else pd.DataFrame()


def stages(records: list[dict]) -> pd.DataFrame:
    """Seconds per part of each wait, from the eviction to the first answer; each row sums to the wait."""
    rows, names = {}, stage_names(records)
    for r in records:
        if r.get("kind") != "start" or not r.get("ok"):
            continue
        s = (r.get("startup") or {}).get("stages") or {}
        row = {EVICT: r.get("evict_s") or 0.0, **{k: s.get(k) for k in names},
               FIRST_ANSWER: r["first_answer_s"] - r["ready_s"]}
        rows[f"{r['step']}: {r['model']} ({r.get('compile_cache', '?')})"] = row
    return pd.DataFrame.from_dict(rows, orient="index", columns=[EVICT, *names, FIRST_ANSWER])


def reported(records: list[dict]) -> pd.DataFrame:
    """The server's own figures per start (vLLM's "took N s", llama-server's buffer sizes), to check the stages against."""
    rows = {f"{r['step']}: {r['model']}": (r.get("startup") or {}).get("reported") or {}
            for r in records if r.get("kind") == "start" and r.get("startup")}
    return pd.DataFrame.from_dict(rows, orient="index")


def memory_table(records: list[dict]) -> pd.DataFrame:
    """Memory before and after every step, in GiB, with where the figure comes from."""
    rows = []
    for r in records:
        if r.get("kind") not in ("start", "evict", "request"):
            continue
        before, after = r.get("memory_before") or {}, r.get("memory_after") or {}
        what = {"start": f"start {r['model']}", "evict": f"evict {r['model']}", "request": f"ask {r['model']}"}
        rows.append({"step": r["step"], "action": what[r["kind"]], "before GiB": gib(before.get("used_bytes")),
                     "after GiB": gib(after.get("used_bytes")),
                     "change GiB": gib(_minus(after.get("used_bytes"), before.get("used_bytes"))),
                     "server before GiB": gib(before.get("server_bytes")),
                     "server after GiB": gib(after.get("server_bytes")), "source": after.get("source")})
    return pd.DataFrame(rows)


def fingerprint_table(study: Study, sidecar: bool) -> pd.DataFrame:
    """The study's fingerprint, with the server row saying who starts the servers and no weights row:
    each start's server version, weights and dtype are in its own record."""
    table = study.fingerprint_table()
    servers = "started per step by this study; each start's server version, weights and dtype are in its record"
    if sidecar:
        servers = "behind a sidecar proxy that swaps on request; nothing is started or stopped here"
    table.loc["server", "value"] = servers
    return table.drop(index=[i for i in ("weights", "max_model_len") if i in table.index])


def gib(b) -> float | None:
    return round(b / 2**30, 2) if isinstance(b, (int, float)) else None


def _minus(a, b):
    return a - b if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None
