"""What the swap numbers say: the totals, the stages that dominate, and every reason to doubt them."""

from __future__ import annotations

from ...runs.report import Finding, as_records, info, warning
from ...serving import startup_log
from .tables import EMPTY, frame, stages

SINGLE_CAVEAT = ("These are single measurements, not distributions: treat them as the right order of magnitude, "
                 "not as precise constants. Raise `repetitions` for a spread.")


def findings(records: list[dict]) -> list[Finding]:
    """Plain sentences, one Finding each; anything that weakens a figure is a warning or worse."""
    notes: list[Finding] = []
    starts = [r for r in records if r.get("kind") in ("start", "request")]
    ok = [r for r in starts if r.get("ok")]
    for r in starts:
        if not r.get("ok"):
            notes.append(Finding("failed", f"step {r['step']} ({r['from']} -> {r['model']}): "
                                           f"{str(r.get('error', '')).splitlines()[0]}"))
    notes += _left_running(records)
    if not ok:
        return notes + [warning("No transition finished, so there is no figure to report.")]
    notes += _waits(ok)
    for r in ok:
        if r["from"] == EMPTY and r.get("kind") == "start":
            notes.append(info(f"From an empty machine (the cold-load figure), {r['model']} answered after "
                              f"{r['first_answer_s']:.1f} s (step {r['step']}, compile cache {r.get('compile_cache')})."))
    evicts = [r["evict_s"] for r in ok if r.get("kind") == "start" and r["from"] != EMPTY]
    if evicts:
        longest_wait = max(r["client_wait_s"] for r in ok)
        share = max(evicts) / longest_wait if longest_wait else 0
        notes.append(info(f"Evicting the resident model took {min(evicts):.1f} to {max(evicts):.1f} s, at most "
                          f"{100 * share:.0f}% of the longest wait"
                          + (": the cost of a swap is the cost of starting what comes next." if share < 0.1 else ".")))
    notes += _model_difference(ok) + _cache_effect(ok) + _recompiled(ok) + _machine(starts)
    for r in ok:
        for note in (r.get("startup") or {}).get("notes", []):
            notes.append(info(f"step {r['step']} ({r['model']}): {note}"))
    return notes


def summary(records: list[dict], notes: list[Finding]) -> dict:
    """What summary.json keeps: the tables as records, and the findings."""
    transitions = frame(records)
    parts = stages(records)
    final = next((r for r in reversed(records) if r.get("kind") == "final"), {})
    return {"transitions": transitions.reset_index().to_dict(orient="records") if not transitions.empty else [],
            "stages": parts.astype(object).where(parts.notna(), None).to_dict(orient="index"),  # unknown: null
            "final_state": final.get("models", {}), "processes_left": final.get("processes_left", []),
            "findings": as_records(notes)}


def _waits(ok: list[dict]) -> list[Finding]:
    """The client's wait per model and cache state: the median where there are several, and its two largest stages."""
    notes = []
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in ok:
        groups.setdefault((r["model"], r.get("compile_cache", "-")), []).append(r)
    if any(len(g) == 1 for g in groups.values()):
        notes.append(info(SINGLE_CAVEAT))
    for (model, cache), g in groups.items():
        waits = sorted(r["client_wait_s"] for r in g)
        spread = "" if len(g) == 1 else f" (median of {len(g)}, {waits[0]:.1f} to {waits[-1]:.1f} s)"
        median = waits[len(waits) // 2] if len(waits) % 2 else sum(waits[len(waits) // 2 - 1:len(waits) // 2 + 1]) / 2
        if g[0]["kind"] == "request":
            notes.append(info(f"{model}: the sidecar answered after {median:.1f} s{spread}; the proxy evicts and "
                              "starts inside the request, so only the total can be timed."))
            continue
        stage_text = ", ".join(f"{k} {v:.1f} s" for k, v in _median_stages(g)[:2])
        notes.append(info(f"{model}, compile cache {cache}: a client waited {median:.1f} s{spread}; the two largest "
                          f"stages: {stage_text}."))
    return notes


def _median_stages(group: list[dict]) -> list[tuple[str, float]]:
    values: dict[str, list[float]] = {}
    for r in group:
        for k, v in ((r.get("startup") or {}).get("stages") or {}).items():
            if v is not None:
                values.setdefault(k, []).append(v)
    med = {k: sorted(v)[len(v) // 2] for k, v in values.items()}
    return sorted(med.items(), key=lambda kv: kv[1], reverse=True)


def _model_difference(ok: list[dict]) -> list[Finding]:
    """The seed's open question: which stage makes one model slower to become servable than another."""
    notes = []
    by_cache: dict[str, dict[str, dict]] = {}
    for r in ok:
        if r.get("kind") == "start":
            by_cache.setdefault(r.get("compile_cache", "?"), {}).setdefault(r["model"], r)
    for cache, firsts in by_cache.items():
        if len(firsts) < 2:
            continue
        (a, ra), (b, rb) = sorted(firsts.items(), key=lambda kv: kv[1]["ready_s"])[:2]
        diff = rb["ready_s"] - ra["ready_s"]
        if diff < max(5.0, 0.1 * ra["ready_s"]):
            notes.append(info(f"With the compile cache {cache}, {a} and {b} became ready within {diff:.1f} s of each "
                              "other: too close to name a stage that accounts for it."))
            continue
        sa, sb = ra["startup"]["stages"], rb["startup"]["stages"]
        deltas = {k: sb[k] - sa[k] for k in sa if sa.get(k) is not None and sb.get(k) is not None}
        if not deltas:
            notes.append(warning(f"With the compile cache {cache}, {b} took {diff:.1f} s longer than {a} to become "
                                 "ready, but their logs share no stage to compare (unknown, not zero)."))
            continue
        stage, d = max(deltas.items(), key=lambda kv: kv[1])
        text = (f"With the compile cache {cache}, {b} took {diff:.1f} s longer than {a} to become ready; the "
                f"stage that accounts for most of it: {stage} ({d:+.1f} s).")
        if _busy(ra["memory_before"]) or _busy(rb["memory_before"]):
            notes.append(warning(text + " The machine was busy during one of these starts, so the difference may "
                                        "be the machine's, not the model's."))
        else:
            notes.append(info(text))
    return notes


def _cache_effect(ok: list[dict]) -> list[Finding]:
    notes = []
    for model in dict.fromkeys(r["model"] for r in ok if r.get("kind") == "start"):
        cold = [r for r in ok if r["model"] == model and r.get("compile_cache") == startup_log.COLD]
        warm = [r for r in ok if r["model"] == model and str(r.get("compile_cache", "")).startswith("warm")]
        if cold and warm:
            c, w = cold[0], warm[0]
            cc, wc = c["startup"]["stages"].get("compilation"), w["startup"]["stages"].get("compilation")
            comp = f" (compilation {cc:.0f} -> {wc:.0f} s)" if cc is not None and wc is not None else ""
            notes.append(info(f"{model}: ready after {c['ready_s']:.1f} s with a cold compile cache and "
                              f"{w['ready_s']:.1f} s with a warm one{comp}."))
    return notes


def _recompiled(ok: list[dict]) -> list[Finding]:
    recompiled = [r for r in ok if r.get("compile_cache") == startup_log.WARM_RECOMPILED]
    if not recompiled:
        return []
    line = next((e["line"] for e in (recompiled[0].get("startup") or {}).get("events", [])
                 if e["name"] == "aot_load_failed"), None)
    reason = (line or "").split("reason: ")[-1][:120]
    return [info(f"In {len(recompiled)} start(s) the compile cache was warm but vLLM could not load the saved "
                 f"graphs and compiled again (reason: {reason}). A warm cache then only shortens compilation "
                 "through the caches underneath; it does not skip it.")]


def _machine(starts: list[dict]) -> list[Finding]:
    """How busy the machine was, and where its memory figures come from (or that they could not be read)."""
    notes = []
    busy = [r for r in starts if _busy(r.get("memory_before") or {})]
    if busy:
        worst = max(busy, key=lambda r: r["memory_before"]["load_average_1m"])
        notes.append(warning(f"the machine was busy before {len(busy)} start(s) (load average up to "
                             f"{worst['memory_before']['load_average_1m']:.1f} on {worst['memory_before']['cpus']} "
                             "CPUs): those starts also waited for CPU time, so their figures are upper bounds."))
    sources = {(r.get("memory_after") or {}).get("source") for r in starts} - {None}
    if sources:
        notes.append(info(f"Memory is read from: {'; '.join(sorted(sources))}. 'server GiB' is what the started "
                          "processes themselves hold (their proportional set size)."))
    unread = [r["step"] for r in starts if (r.get("memory_after") or {}).get("used_bytes") is None]
    if unread:
        notes.append(warning(f"Memory in use could not be read after step(s) {unread}: those figures are unknown "
                             "(shown as -), not zero."))
    return notes


def _left_running(records: list[dict]) -> list[Finding]:
    final = next((r for r in reversed(records) if r.get("kind") == "final"), {})
    left = final.get("processes_left") or []
    return [Finding("failed", f"process group(s) {left} outlived the study; stop them by hand (kill -- -PID).")] \
        if left else []


def _busy(mem: dict) -> bool:
    load, cpus = mem.get("load_average_1m"), mem.get("cpus")
    return isinstance(load, (int, float)) and bool(cpus) and load > 0.5 * cpus
