"""The steps of a swap: evict the resident model, start the next, wait for its first answer; one record each.

Every step is on disk before the next one begins, and every process started here is stopped
whatever fails (Ctrl-C too); the final record says what became of each model.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from ...endpoint.client import Endpoint
from ...errors import EndpointError, LifecycleError, ServerError, StudyError
from ...runs.params import ModelParams
from ...runs.study import Study
from ...serving import lifecycle, startup_log, targets
from ...serving.processes import group_alive
from .memory import cache_state, clear_cache, memory
from .plan import Plan
from .tables import EMPTY, frame, largest

KNOWN = (ServerError, LifecycleError, EndpointError)  # failures with a message for the user, not a traceback


@dataclass
class Machine:
    """What this study has started, and what became of each model: all the clean-up needs to know."""

    outcome: dict[str, str]
    resident: lifecycle.Server | None = None
    resident_step: int = 0
    step: int = 0
    pids: list[int] = field(default_factory=list)


def run(study: Study, plan: Plan) -> pd.DataFrame:
    """Visit the models in order, `repetitions` times, each time from an empty machine; returns the transitions."""
    print(f"swap {' -> '.join(plan.names)} x{plan.repetitions}"
          f"{' (compile caches cleared first)' if plan.clear_compile_cache else ''}", flush=True)
    machine = Machine({m.name: "never started" for m in plan.distinct()})
    with study.measuring():
        try:
            _visit_all(study, plan, machine)
        except KNOWN as e:
            left = [pid for pid in machine.pids if group_alive(pid)]
            gone = (f"Process group(s) {left} are still running: stop them by hand (kill -- -PID)." if left
                    else "No process this study started is left running;")
            raise StudyError(f"{e}\n{gone} the records of the finished steps are in "
                             f"{study.run.path / 'records.jsonl'}.") from None
    return frame(study.records())


def _visit_all(study: Study, plan: Plan, machine: Machine) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="sparknb-swap-"))
    total = plan.repetitions * len(plan.visits)
    failed = True
    try:
        if plan.clear_compile_cache:
            for m in plan.distinct():
                cleared = clear_cache(targets.resolve(m).compile_cache)
                study.run.record({"kind": "clear", "model": m.name, **cleared})
                print(f"cleared the compile cache of {m.name} ({cleared['removed']})", flush=True)
        for rep in range(plan.repetitions):
            previous = EMPTY
            for model in plan.visits:
                machine.step += 1
                if plan.sidecar:
                    rec = _sidecar_step(study, model, machine.step, rep, previous)
                else:
                    rec = _start_step(study, model, rep, previous, workdir, machine)
                print(_progress(rec, machine.step, total), flush=True)
                previous = model.name
            if machine.resident is not None:  # each repetition starts from an empty machine
                _evict(study, machine, rep, to=None)
        failed = False
    finally:  # KeyboardInterrupt too: the servers must still be stopped
        try:
            if machine.resident is not None:
                _evict(study, machine, None, to=None, why="clean-up after a failure" if failed else None)
        finally:
            _final_states(study, plan, machine)
            shutil.rmtree(workdir, ignore_errors=True)


def _start_step(study: Study, model: ModelParams, rep: int, previous: str, workdir: Path, machine: Machine) -> dict:
    """Evict whatever is resident, start `model`, wait for its first answer; one record each."""
    step = machine.step
    evict = _evict(study, machine, rep, to=model.name) if machine.resident is not None else None
    target = targets.resolve(model)
    cache = cache_state(target.compile_cache)
    rec: dict = {"kind": "start", "step": step, "rep": rep, "model": model.name, "from": previous,
                 "evict_s": evict["seconds"] if evict else 0.0, "target": target.describe(),
                 "compile_cache_before": cache, "memory_before": memory(study.hardware)}
    server = None
    try:
        server = lifecycle.launch(target, workdir / f"server-{step:02d}-{model.name}.log")
        machine.pids.append(server.pid)
        rec |= {"pid": server.pid,
                "launched_at": datetime.fromtimestamp(server.launched_at, timezone.utc).isoformat(timespec="milliseconds")}
        machine.resident, machine.resident_step = server, step
        machine.outcome[model.name] = "starting"
        server.wait_ready()
        answer_s, answer = server.first_answer()
        rec |= {"ok": True, "ready_s": server.ready_s, "first_answer_s": answer_s, "answer": answer,
                "client_wait_s": rec["evict_s"] + answer_s, "server": _server_info(target)}
        machine.outcome[model.name] = "running"
    except BaseException as e:  # a failed start, or an interrupt while waiting: recorded either way
        known = isinstance(e, KNOWN)
        rec |= {"ok": False, "error": str(e) if known else f"{type(e).__name__}: {e}",
                "exit_code": getattr(e, "exit_code", None)}
        machine.outcome[model.name] = "failed to start" if known else "interrupted while starting"
        raise
    finally:
        if server is not None:
            rec["startup"] = startup_log.parse(server.log_text(), launched_at=server.launched_at,
                                               ready_s=server.ready_s, observed_s=server.elapsed()).as_dict()
            rec["compile_cache"] = _cache_verdict(rec["startup"], cache)
            if not server.running and machine.resident is server:  # a failed start stopped itself
                machine.resident = None
                if not rec.get("ok"):
                    machine.outcome[model.name] += "; stopped"
                _save_log(study, server, step, model.name)
        rec["memory_after"] = memory(study.hardware, machine.resident)
        study.run.record(rec)
    return rec


def _evict(study: Study, machine: Machine, rep: int | None, to: str | None, why: str | None = None) -> dict:
    server = machine.resident
    before = memory(study.hardware, server)
    gone = server.stop()
    machine.resident = None
    name = server.name
    outcome = machine.outcome[name]
    machine.outcome[name] = "stopped by the study" if outcome == "running" else f"{outcome}; stopped"
    _save_log(study, server, machine.resident_step or machine.step, name)
    rec = {"kind": "evict", "step": machine.step, "rep": rep, "model": name, "for": to, "seconds": gone.seconds,
           "how": gone.how, "stop_command_exit": gone.stop_command_exit,
           "stop_command_output": gone.stop_command_output, "why": why or ("swap" if to else "end of sequence"),
           "memory_before": before, "memory_after": memory(study.hardware)}
    study.run.record(rec)
    return rec


def _sidecar_step(study: Study, model: ModelParams, step: int, rep: int, previous: str) -> dict:
    """The proxy swaps inside the request: only the total wait can be timed, and the log read if named."""
    target = targets.resolve(model)
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
        raise ServerError(f"{model.name}: the sidecar at {target.endpoint} did not answer within "
                          f"{target.ready_timeout_s:g} s: {answer['error']}")
    return rec


def _server_info(target: targets.Target) -> dict:
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


def _save_log(study: Study, server: lifecycle.Server, step: int, name: str) -> None:
    filename = f"server-{step:02d}-{name}.log"
    if not (study.run.path / filename).exists():
        study.run.write_text(filename, server.log_text())  # redacted on the way in


def _final_states(study: Study, plan: Plan, machine: Machine) -> None:
    left = [pid for pid in machine.pids if group_alive(pid)]
    outcome = machine.outcome
    if plan.sidecar:
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
    top = largest(rec)
    tail = "; largest: " + ", ".join(f"{k} {v:.0f} s" for k, v in top) if top else ""
    return f"{head} " + "; ".join(parts) + tail + ")"
