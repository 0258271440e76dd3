"""Swap cost: what a client waits when the box switches models, and which start-up stage it waits for.

A box that holds one large model at a time switches models many times a day. For each transition
this measures the eviction of the resident model, the start of the next one until its first
answer, and the sum, which is what a client waits; the server's own log says where the start's
time went (see startup_log). Whether the compile cache was cold or warm is recorded per start,
since it changes the answer. Every process started here is stopped, whatever fails, and each
finished step is on disk before the next one begins.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from ... import fingerprint, guard
from ...serving import lifecycle, startup_log
from ...client import Endpoint, EndpointError
from ...params import HardwareParams, ModelParams, load_hardware, load_model, project_root
from ...run import Run, read_records
from ...serving.startup_log import STAGES

EMPTY = "(empty)"
EVICT, FIRST_ANSWER = "evict", "first answer"
BAR_PARTS = (EVICT, *STAGES, FIRST_ANSWER)  # together: what a client waited
SINGLE_CAVEAT = ("These are single measurements, not distributions: treat them as the right order of magnitude, "
                 "not as precise constants. Raise `repetitions` for a spread.")


class SwapError(RuntimeError):
    """A step of the swap study failed; every process it started is stopped and the finished steps are kept."""


@dataclass(frozen=True)
class Plan:
    models: tuple[ModelParams, ...]  # the sequence to visit, one entry per visit
    repetitions: int
    clear_compile_cache: bool

    @classmethod
    def build(cls, models: list, repetitions: int, clear_compile_cache: bool) -> Plan:
        """Check the notebook's parameters and load every model's params before anything starts."""
        problems = []
        if not isinstance(models, (list, tuple)) or not models or not all(isinstance(m, str) and m for m in models):
            problems.append(f"models must be a list of model names or YAML paths, e.g. "
                            f"[tiny-dense, tiny-moe, tiny-dense]; got {models!r}")
        if not isinstance(repetitions, int) or isinstance(repetitions, bool) or repetitions < 1:
            problems.append(f"repetitions must be a whole number, 1 or more; got {repetitions!r}")
        if not isinstance(clear_compile_cache, bool):
            problems.append(f"clear_compile_cache must be true or false; got {clear_compile_cache!r}")
        if problems:
            raise ValueError("Bad swap parameters:\n  " + "\n  ".join(problems))
        loaded = tuple(load_model(m) for m in models)
        for m in loaded:
            if m.lifecycle.mode is None:
                lifecycle.resolve(m)  # raises with the fields to add
        modes = {m.lifecycle.mode == "sidecar" for m in loaded}
        if len(modes) > 1:
            raise ValueError("Mix of sidecar and started models: a proxy that swaps on request and models this "
                             "study starts itself would fight over the memory. Visit one kind per run.")
        hardware = {m.hardware for m in loaded}
        if len(hardware) > 1:
            raise ValueError(f"The models name different hardware ({', '.join(sorted(hardware))}); a swap "
                             "happens on one box, so give them the same `hardware`.")
        if clear_compile_cache:
            unknown = sorted({m.name for m in loaded if m.lifecycle.mode != "testbed" and not m.lifecycle.compile_cache})
            if unknown:
                raise ValueError(f"clear_compile_cache needs to know where the compiled graphs are: set "
                                 f"lifecycle.compile_cache for {', '.join(unknown)} (vLLM's default is "
                                 "~/.cache/vllm), or run with clear_compile_cache false.")
        return cls(loaded, repetitions, clear_compile_cache)

    @property
    def sidecar(self) -> bool:
        return self.models[0].lifecycle.mode == "sidecar"

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.models]

    def distinct(self) -> list[ModelParams]:
        seen: dict[str, ModelParams] = {}
        for m in self.models:
            seen.setdefault(m.name, m)
        return list(seen.values())


# --------------------------------------------------------------------------------------------------
# The study: checks, lock, run folder, fingerprint; no endpoint is needed at the outset
# --------------------------------------------------------------------------------------------------

_open: list[SwapStudy] = []  # not yet finished in this kernel; a rerun of the notebook ends them


@dataclass
class SwapStudy:
    notebook: str
    plan: Plan
    hardware: HardwareParams
    run: Run
    guard: guard.GuardReport
    fingerprint: dict
    lock: guard.RunLock
    finished: bool = field(default=False)

    def finish(self, summary: dict, seal: bool = True) -> None:
        """Write the summary, let go of the lock and, unless an outer runner will, seal the run."""
        self.run.write_json("summary.json", summary)
        self.lock.release()
        self.finished = True
        if seal:
            self.run.seal()
        if self in _open:
            _open.remove(self)

    def records(self) -> list[dict]:
        return read_records(self.run.path)

    def fingerprint_table(self) -> pd.DataFrame:
        from ...study import fingerprint_table

        table = fingerprint_table(self.fingerprint)
        servers = "started per step by this study; each start's vLLM version, weights and dtype are in its record"
        if self.plan.sidecar:
            servers = "behind a sidecar proxy that swaps on request; nothing is started or stopped here"
        table.loc["server", "value"] = servers
        return table.drop(index=[i for i in ("weights", "max_model_len") if i in table.index])


def open_study(plan: Plan, *, settings: dict, notebook: str = "swap", force: bool = False, run_id: str = "",
               outputs: str = "") -> SwapStudy:
    """Like study.start, but without a server to ask: a swap study starts its servers itself."""
    for old in list(_open):  # a rerun of the notebook in the same kernel
        old.lock.release()
        _open.remove(old)
    hardware = load_hardware(plan.models[0].hardware)
    if plan.sidecar:  # the proxy must be there before we time anything through it
        for m in plan.distinct():
            target = lifecycle.resolve(m)
            ep = Endpoint(target.endpoint, m.served_model_name, api_key=target.api_key)
            try:
                ep.info()
            finally:
                ep.close()
    lock = guard.RunLock({"notebook": notebook, "model": ", ".join(plan.names), "run_id": run_id or "(new)"})
    lock.acquire(force=force)
    try:
        report = guard.check(server_load={}, force=force)
        keys = tuple(k for k in (m.api_key() for m in plan.distinct()) if k)
        all_params = {"notebook": notebook, "settings": settings,
                      "models": {m.name: m.model_dump() for m in plan.distinct()},
                      "hardware": hardware.model_dump(),
                      "guard": report.as_dict() | {"lock_forced_over": lock.forced_over}}
        label = "-".join(dict.fromkeys(plan.names))
        run = Run.create(notebook, all_params, run_id=run_id, outputs=outputs, label=label, secrets=keys)
        server = {"url": "per step", "version": "per step", "model": ", ".join(dict.fromkeys(plan.names)),
                  "root": None, "max_model_len": None}
        fp = fingerprint.take(server=server, params=all_params, project_dir=project_root(), secrets=keys)
        run.write_json("fingerprint.json", fp)
    except BaseException:
        lock.release()
        raise
    study = SwapStudy(notebook, plan, hardware, run, report, fp, lock)
    _open.append(study)
    print(f"run {run.id}: swap {' -> '.join(plan.names)} x{plan.repetitions}"
          f"{' (compile caches cleared first)' if plan.clear_compile_cache else ''}; writing {run.path}", flush=True)
    return study


# --------------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------------


def memory(hardware: HardwareParams, started: lifecycle.Started | None = None) -> dict:
    """Memory in use now: NVML's figure where it reports and memory is not unified, else the system's."""
    meminfo = _meminfo()
    total, available = meminfo.get("MemTotal"), meminfo.get("MemAvailable")
    system_used = total - available if total is not None and available is not None else None
    gpu = fingerprint.nvml()
    devices = gpu.get("devices") if gpu.get("available") and isinstance(gpu.get("devices"), list) else []
    nvml_used = [d.get("memory_used_bytes") for d in devices]
    reported = bool(nvml_used) and all(isinstance(u, int) for u in nvml_used)
    if hardware.unified_memory:
        used, source = system_used, "system (unified memory: the GPU's memory is the system's)"
    elif reported:
        used, source = sum(nvml_used), "NVML"
    else:
        why = gpu.get("reason") if not gpu.get("available") else "NVML does not report it"
        used, source = system_used, f"system ({why})"
    return {
        "used_bytes": used, "source": source,
        "system_total_bytes": total, "system_available_bytes": available,
        "nvml_used_bytes": nvml_used if devices else gpu.get("reason", "no devices"),
        "server_bytes": started.memory_bytes() if started else None,
        "load_average_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "cpus": os.cpu_count(),
    }


def _meminfo() -> dict[str, int]:
    out = {}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[name] = int(parts[0]) * 1024
    except OSError:
        pass
    return out


def _graph_cache(root: Path | None) -> Path | None:
    """The compiled graphs proper: clearing only this sub-folder can never take a user's other caches."""
    if root is None:
        return None
    return root if root.name == "torch_compile_cache" else root / "torch_compile_cache"


def cache_state(root: Path | None) -> dict:
    folder = _graph_cache(root)
    if folder is None:
        return {"folder": None, "state": "unknown (no lifecycle.compile_cache)", "files": None, "bytes": None}
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    size = sum(p.stat().st_size for p in files)
    state = "empty" if not files else f"{len(files)} files, {size / 2**20:.1f} MiB"
    return {"folder": str(folder), "state": state, "files": len(files), "bytes": size}


def clear_cache(root: Path) -> dict:
    folder = _graph_cache(root)
    before = cache_state(root)
    if folder.is_dir():
        shutil.rmtree(folder)
    return {"folder": str(folder), "removed": before["state"]}


def run(study: SwapStudy) -> pd.DataFrame:
    """Visit the models in order, `repetitions` times, each time from an empty machine; returns the transitions."""
    plan = study.plan
    workdir = Path(tempfile.mkdtemp(prefix="sparknb-swap-"))
    state = {"resident": None, "outcome": {m.name: "never started" for m in plan.distinct()}, "pids": []}
    error: BaseException | None = None
    total = plan.repetitions * len(plan.models)
    step = 0
    try:
        if plan.clear_compile_cache:
            for m in plan.distinct():
                target = lifecycle.resolve(m)
                cleared = clear_cache(target.compile_cache)
                study.run.record({"kind": "clear", "model": m.name, **cleared})
                print(f"cleared the compile cache of {m.name} ({cleared['removed']})", flush=True)
        for rep in range(plan.repetitions):
            previous = EMPTY
            for model in plan.models:
                step += 1
                if plan.sidecar:
                    rec = _sidecar_step(study, model, step, rep, previous, workdir)
                else:
                    rec = _start_step(study, model, step, rep, previous, workdir, state)
                print(_progress(rec, step, total), flush=True)
                previous = model.name
            if state["resident"] is not None:  # each repetition starts from an empty machine
                _evict(study, state, step, rep, to=None)
    except BaseException as e:  # KeyboardInterrupt too: the servers must still be stopped
        error = e
    finally:
        try:
            if state["resident"] is not None:
                _evict(study, state, step, None, to=None, why="clean-up after a failure" if error else None)
        finally:
            _final_states(study, state)
            shutil.rmtree(workdir, ignore_errors=True)
    if error is not None:
        if isinstance(error, (lifecycle.StartError, lifecycle.LifecycleError, EndpointError)):
            raise SwapError(f"{error}\nNo process this study started is left running; the records of the finished "
                            f"steps are in {study.run.path / 'records.jsonl'}.") from None
        raise error
    return frame(study.records())


def _start_step(study: SwapStudy, model: ModelParams, step: int, rep: int, previous: str, workdir: Path,
                state: dict) -> dict:
    """Evict whatever is resident, start `model`, wait for its first answer; one record each."""
    evict = None
    if state["resident"] is not None:
        evict = _evict(study, state, step, rep, to=model.name)
    target = lifecycle.resolve(model)
    cache = cache_state(target.compile_cache)
    before = memory(study.hardware)
    rec: dict = {"kind": "start", "step": step, "rep": rep, "model": model.name, "from": previous,
                 "evict_s": evict["seconds"] if evict else 0.0, "target": target.describe(),
                 "compile_cache_before": cache, "memory_before": before}
    started = None
    try:
        started = lifecycle.start(target, workdir / f"server-{step:02d}-{model.name}.log")
        state["pids"].append(started.pid)
        rec |= {"pid": started.pid,
                "launched_at": datetime.fromtimestamp(started.launched_at, timezone.utc).isoformat(timespec="milliseconds")}
        state["resident"], state["resident_step"] = started, step
        state["outcome"][model.name] = "starting"
        ready_s = started.wait_ready()
        answer_s, answer = started.first_answer()
        rec |= {"ok": True, "ready_s": ready_s, "first_answer_s": answer_s, "answer": answer,
                "client_wait_s": rec["evict_s"] + answer_s, "server": _server_info(target)}
        state["outcome"][model.name] = "running"
    except BaseException as e:  # a failed start, or an interrupt while waiting: recorded either way
        known = isinstance(e, (lifecycle.StartError, lifecycle.LifecycleError))
        rec |= {"ok": False, "error": str(e) if known else f"{type(e).__name__}: {e}",
                "exit_code": getattr(e, "exit_code", None)}
        state["outcome"][model.name] = "failed to start" if known else "interrupted while starting"
        raise
    finally:
        if started is not None:
            text = started.log_text()
            rec["startup"] = startup_log.parse(text, launched_at=started.launched_at, ready_s=started.ready_s,
                                               observed_s=started.elapsed()).as_dict()
            rec["compile_cache"] = _cache_verdict(rec["startup"], cache)
            if not started.running and state["resident"] is started:  # a failed start stopped itself
                state["resident"] = None
                if not rec.get("ok"):
                    state["outcome"][model.name] += "; stopped"
                _save_log(study, started, step, model.name)
        rec["memory_after"] = memory(study.hardware, state["resident"])
        study.run.record(rec)
    return rec


def _evict(study: SwapStudy, state: dict, step: int, rep: int | None, to: str | None,
           why: str | None = None) -> dict:
    started: lifecycle.Started = state["resident"]
    before = memory(study.hardware, started)
    gone = started.stop()
    state["resident"] = None
    name = started.target.name
    outcome = state["outcome"][name]
    state["outcome"][name] = "stopped by the study" if outcome == "running" else f"{outcome}; stopped"
    _save_log(study, started, state.get("resident_step", step), name)
    rec = {"kind": "evict", "step": step, "rep": rep, "model": name, "for": to, "seconds": gone.seconds,
           "how": gone.how, "stop_command_exit": gone.stop_command_exit,
           "stop_command_output": gone.stop_command_output, "why": why or ("swap" if to else "end of sequence"),
           "memory_before": before, "memory_after": memory(study.hardware)}
    study.run.record(rec)
    return rec


def _sidecar_step(study: SwapStudy, model: ModelParams, step: int, rep: int, previous: str, workdir: Path) -> dict:
    """The proxy swaps inside the request: only the total wait can be timed, and the log read if named."""
    target = lifecycle.resolve(model)
    offset = target.log.stat().st_size if target.log and target.log.exists() else 0
    before = memory(study.hardware)
    sent_at = time.time()
    seconds, answer = lifecycle.ask(target, deadline=time.monotonic() + target.ready_timeout_s)
    rec: dict = {"kind": "request", "step": step, "rep": rep, "model": model.name, "from": previous,
                 "target": target.describe(), "ok": answer["ok"], "client_wait_s": seconds, "first_answer_s": seconds,
                 "evict_s": None, "answer": answer, "memory_before": before, "memory_after": memory(study.hardware)}
    if target.log and target.log.exists():
        with open(target.log, "rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
        rec["startup"] = startup_log.parse(text, launched_at=sent_at, ready_s=seconds if answer["ok"] else None,
                                           observed_s=seconds).as_dict()
        rec["compile_cache"] = _cache_verdict(rec["startup"], cache_state(target.compile_cache))
        study.run.write_text(f"server-{step:02d}-{model.name}.log", text)
    if not answer["ok"]:
        rec["error"] = answer["error"]
    study.run.record(rec)
    if not answer["ok"]:
        raise lifecycle.StartError(f"{model.name}: the sidecar at {target.endpoint} did not answer within "
                                   f"{target.ready_timeout_s:g} s: {answer['error']}")
    return rec


def _server_info(target: lifecycle.Target) -> dict:
    ep = Endpoint(target.endpoint, target.served_model_name, api_key=target.api_key)
    try:
        return ep.info().as_dict()
    except EndpointError as e:
        return {"error": str(e)}
    finally:
        ep.close()


def _cache_verdict(startup: dict, cache: dict) -> str:
    """vLLM's own word first; where the log says nothing, the folder's state before the start."""
    verdict = startup["compile_cache"]
    if verdict == startup_log.UNKNOWN and cache["files"] is not None:
        return startup_log.COLD if cache["files"] == 0 else "warm (not confirmed by the log)"
    return verdict


def _save_log(study: SwapStudy, started: lifecycle.Started, step: int, name: str) -> None:
    filename = f"server-{step:02d}-{name}.log"
    if not (study.run.path / filename).exists():
        study.run.write_text(filename, started.log_text())  # redacted on the way in


def _final_states(study: SwapStudy, state: dict) -> None:
    left = [pid for pid in state["pids"] if lifecycle.group_alive(pid)]
    outcome = state["outcome"]
    if study.plan.sidecar:
        outcome = {name: "not managed here (sidecar)" for name in outcome}
    study.run.record({"kind": "final", "models": outcome, "processes_left": left})
    if left:
        print(f"WARNING: process group(s) {left} outlived the study; stop them by hand (kill -- -PID).", flush=True)


def _progress(rec: dict, step: int, total: int) -> str:
    wait = rec.get("client_wait_s")
    head = f"[{step}/{total}] {rec['from']} -> {rec['model']}:"
    if rec["kind"] == "request":
        return f"{head} the sidecar answered after {wait:.1f} s"
    parts = [f"evicted in {rec['evict_s']:.1f} s" if rec["from"] != EMPTY else "from an empty machine",
             f"ready after {rec['ready_s']:.1f} s", f"first answer at {rec['first_answer_s']:.1f} s",
             f"a client waited {wait:.1f} s (compile cache {rec.get('compile_cache', '?')}"]
    largest = _largest(rec)
    tail = "; largest: " + ", ".join(f"{k} {v:.0f} s" for k, v in largest) if largest else ""
    return f"{head} " + "; ".join(parts) + tail + ")"


def _largest(rec: dict, n: int = 2) -> list[tuple[str, float]]:
    stages = (rec.get("startup") or {}).get("stages") or {}
    measured = [(k, v) for k, v in stages.items() if v is not None]
    return sorted(measured, key=lambda kv: kv[1], reverse=True)[:n]


# --------------------------------------------------------------------------------------------------
# Tables, chart, findings
# --------------------------------------------------------------------------------------------------


def frame(records: list[dict]) -> pd.DataFrame:
    """One row per transition: what the client waited, and what it waited for."""
    rows = []
    for r in records:
        if r.get("kind") not in ("start", "request"):
            continue
        largest = _largest(r)
        rows.append({
            "step": r["step"], "rep": r["rep"], "from": r["from"], "to": r["model"],
            "compile cache": r.get("compile_cache", "-" if r["kind"] == "request" else "unknown"),
            "evict s": r.get("evict_s"), "ready s": r.get("ready_s"), "first answer s": r.get("first_answer_s"),
            "client wait s": r.get("client_wait_s"),
            "largest stage": f"{largest[0][0]} ({largest[0][1]:.1f} s)" if largest else "-",
            "second stage": f"{largest[1][0]} ({largest[1][1]:.1f} s)" if len(largest) > 1 else "-",
            "load avg before": (r.get("memory_before") or {}).get("load_average_1m"),
            "memory after GiB": _gib((r.get("memory_after") or {}).get("used_bytes")),
            "server GiB": _gib((r.get("memory_after") or {}).get("server_bytes")),
            "status": "ok" if r.get("ok") else f"FAILED: {str(r.get('error', '')).splitlines()[0][:120]}",
        })
    return pd.DataFrame(rows).set_index("step") if rows else pd.DataFrame()


def stages(records: list[dict]) -> pd.DataFrame:
    """Seconds per part of each wait, from the eviction to the first answer; each row sums to the wait."""
    rows = {}
    for r in records:
        if r.get("kind") != "start" or not r.get("ok"):
            continue
        s = (r.get("startup") or {}).get("stages") or {}
        row = {EVICT: r.get("evict_s") or 0.0, **{k: s.get(k) for k in STAGES},
               FIRST_ANSWER: r["first_answer_s"] - r["ready_s"]}
        rows[f"{r['step']}: {r['model']} ({r.get('compile_cache', '?')})"] = row
    return pd.DataFrame.from_dict(rows, orient="index", columns=list(BAR_PARTS))


def reported(records: list[dict]) -> pd.DataFrame:
    """vLLM's own figures per start, to check the stages read from whole-second timestamps against."""
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
        rows.append({"step": r["step"], "action": what[r["kind"]], "before GiB": _gib(before.get("used_bytes")),
                     "after GiB": _gib(after.get("used_bytes")),
                     "change GiB": _gib(_minus(after.get("used_bytes"), before.get("used_bytes"))),
                     "server before GiB": _gib(before.get("server_bytes")),
                     "server after GiB": _gib(after.get("server_bytes")), "source": after.get("source")})
    return pd.DataFrame(rows)


def _gib(b) -> float | None:
    return round(b / 2**30, 2) if isinstance(b, (int, float)) else None


def _minus(a, b):
    return a - b if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None


def plot(table: pd.DataFrame, title: str = "Where a client's wait goes, per start"):
    """One stacked bar per start, in the order of the steps; each bar is the client's whole wait."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.6 * max(len(table), 2) + 1.8))
    if table.empty:
        ax.text(0.5, 0.5, "no finished start to show", ha="center", va="center")
        ax.set_axis_off()
        return fig
    data = table.fillna(0.0)[list(BAR_PARTS)]
    left = pd.Series(0.0, index=data.index)
    colors = plt.get_cmap("tab10")
    for i, part in enumerate(BAR_PARTS):
        if not data[part].any():
            continue
        ax.barh(data.index, data[part], left=left, color=colors(i % 10), label=part)
        left += data[part]
    ax.invert_yaxis()
    ax.set_xlabel("seconds (log timestamps are whole seconds: stages are good to about 1 s)")
    ax.set_title(title)
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.08), ncol=4, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def findings(records: list[dict]) -> list[str]:
    """Plain sentences: the totals, the stages that dominate, and every reason to doubt them."""
    notes: list[str] = []
    starts = [r for r in records if r.get("kind") in ("start", "request")]
    ok = [r for r in starts if r.get("ok")]
    failed = [r for r in starts if not r.get("ok")]
    for r in failed:
        notes.append(f"FAILED: step {r['step']} ({r['from']} -> {r['model']}): {str(r.get('error', '')).splitlines()[0]}")
    if not ok:
        return notes + ["No transition finished, so there is no figure to report."]

    groups: dict[tuple[str, str], list[dict]] = {}
    for r in ok:
        groups.setdefault((r["model"], r.get("compile_cache", "-")), []).append(r)
    if any(len(g) == 1 for g in groups.values()):
        notes.append(SINGLE_CAVEAT)
    for (model, cache), g in groups.items():
        waits = sorted(r["client_wait_s"] for r in g)
        spread = "" if len(g) == 1 else f" (median of {len(g)}, {waits[0]:.1f} to {waits[-1]:.1f} s)"
        median = waits[len(waits) // 2] if len(waits) % 2 else sum(waits[len(waits) // 2 - 1:len(waits) // 2 + 1]) / 2
        largest = _median_stages(g)
        if g[0]["kind"] == "request":
            notes.append(f"{model}: the sidecar answered after {median:.1f} s{spread}; the proxy evicts and starts "
                         "inside the request, so only the total can be timed.")
            continue
        stage_text = ", ".join(f"{k} {v:.1f} s" for k, v in largest[:2])
        notes.append(f"{model}, compile cache {cache}: a client waited {median:.1f} s{spread}; the two largest "
                     f"stages: {stage_text}.")

    for r in ok:
        if r["from"] == EMPTY and r.get("kind") == "start":
            notes.append(f"From an empty machine (the cold-load figure), {r['model']} answered after "
                         f"{r['first_answer_s']:.1f} s (step {r['step']}, compile cache {r.get('compile_cache')}).")
    evicts = [r["evict_s"] for r in ok if r.get("kind") == "start" and r["from"] != EMPTY]
    if evicts:
        longest_wait = max(r["client_wait_s"] for r in ok)
        share = max(evicts) / longest_wait if longest_wait else 0
        notes.append(f"Evicting the resident model took {min(evicts):.1f} to {max(evicts):.1f} s, at most "
                     f"{100 * share:.0f}% of the longest wait"
                     + (": the cost of a swap is the cost of starting what comes next." if share < 0.1 else "."))
    notes += _model_difference(ok)
    notes += _cache_effect(ok)
    recompiled = [r for r in ok if r.get("compile_cache") == startup_log.WARM_RECOMPILED]
    if recompiled:
        reason = (_first_event(recompiled[0], "aot_load_failed") or "").split("reason: ")[-1][:120]
        notes.append(f"In {len(recompiled)} start(s) the compile cache was warm but vLLM could not load the saved "
                     f"graphs and compiled again (reason: {reason}). A warm cache then only shortens compilation "
                     "through the caches underneath; it does not skip it.")
    busy = [r for r in starts if _busy(r.get("memory_before") or {})]
    if busy:
        worst = max(busy, key=lambda r: r["memory_before"]["load_average_1m"])
        notes.append(f"WARNING: the machine was busy before {len(busy)} start(s) (load average up to "
                     f"{worst['memory_before']['load_average_1m']:.1f} on {worst['memory_before']['cpus']} CPUs): "
                     "those starts also waited for CPU time, so their figures are upper bounds.")
    sources = {(r.get("memory_after") or {}).get("source") for r in starts} - {None}
    if sources:
        notes.append(f"Memory is read from: {'; '.join(sorted(sources))}. 'server GiB' is what the started "
                     "processes themselves hold (their proportional set size).")
    for r in ok:
        for note in (r.get("startup") or {}).get("notes", []):
            notes.append(f"step {r['step']} ({r['model']}): {note}")
    return notes


def _median_stages(group: list[dict]) -> list[tuple[str, float]]:
    values: dict[str, list[float]] = {}
    for r in group:
        for k, v in ((r.get("startup") or {}).get("stages") or {}).items():
            if v is not None:
                values.setdefault(k, []).append(v)
    med = {k: sorted(v)[len(v) // 2] for k, v in values.items()}
    return sorted(med.items(), key=lambda kv: kv[1], reverse=True)


def _model_difference(ok: list[dict]) -> list[str]:
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
            notes.append(f"With the compile cache {cache}, {a} and {b} became ready within {diff:.1f} s of each "
                         "other: too close to name a stage that accounts for it.")
            continue
        sa, sb = ra["startup"]["stages"], rb["startup"]["stages"]
        deltas = {k: (sb.get(k) or 0) - (sa.get(k) or 0) for k in STAGES}
        stage, d = max(deltas.items(), key=lambda kv: kv[1])
        busy = " WARNING: the machine was busy during one of these starts, so the difference may be the machine's, " \
               "not the model's." if _busy(ra["memory_before"]) or _busy(rb["memory_before"]) else ""
        notes.append(f"With the compile cache {cache}, {b} took {diff:.1f} s longer than {a} to become ready; the "
                     f"stage that accounts for most of it: {stage} ({d:+.1f} s).{busy}")
    return notes


def _cache_effect(ok: list[dict]) -> list[str]:
    notes = []
    models = dict.fromkeys(r["model"] for r in ok if r.get("kind") == "start")
    for model in models:
        cold = [r for r in ok if r["model"] == model and r.get("compile_cache") == startup_log.COLD]
        warm = [r for r in ok if r["model"] == model and str(r.get("compile_cache", "")).startswith("warm")]
        if cold and warm:
            c, w = cold[0], warm[0]
            cc, wc = c["startup"]["stages"].get("compilation"), w["startup"]["stages"].get("compilation")
            comp = f" (compilation {cc:.0f} -> {wc:.0f} s)" if cc is not None and wc is not None else ""
            notes.append(f"{model}: ready after {c['ready_s']:.1f} s with a cold compile cache and "
                         f"{w['ready_s']:.1f} s with a warm one{comp}.")
    return notes


def _first_event(rec: dict, name: str) -> str | None:
    return next((e["line"] for e in (rec.get("startup") or {}).get("events", []) if e["name"] == name), None)


def _busy(mem: dict) -> bool:
    load, cpus = mem.get("load_average_1m"), mem.get("cpus")
    return isinstance(load, (int, float)) and bool(cpus) and load > 0.5 * cpus


def summary(records: list[dict]) -> dict:
    """What summary.json keeps: the tables as records, and the findings."""
    transitions = frame(records)
    parts = stages(records)
    final = next((r for r in reversed(records) if r.get("kind") == "final"), {})
    return {"transitions": transitions.reset_index().to_dict(orient="records") if not transitions.empty else [],
            "stages": {k: v for k, v in parts.to_dict(orient="index").items()},
            "final_state": final.get("models", {}), "processes_left": final.get("processes_left", []),
            "findings": findings(records)}
