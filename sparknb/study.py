"""A study: one notebook's run from checks to seal, shared by every notebook.

The order is the point: params, endpoint and the caller's own checks all fail before the lock is
taken or a folder made; the guard runs before the first request; every request is recorded as it
ends, together with what the server's own counters say about it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from . import bandwidth, fingerprint, guard, metrics
from .client import Completion, Endpoint, ServerInfo
from .params import HardwareParams, ModelParams, load_hardware, load_model, project_root
from .run import Run, read_records

_open: list[Study] = []  # studies of this process not yet finished; a rerun in the same kernel ends them


@dataclass
class Study:
    notebook: str
    model: ModelParams
    hardware: HardwareParams
    endpoint: Endpoint
    server: ServerInfo
    run: Run
    guard: guard.GuardReport
    fingerprint: dict
    limit: bandwidth.Limit
    lock: guard.RunLock

    def request(self, tag: dict, call: Callable[[Endpoint], Completion], *, settle_s: float = 5.0) -> dict:
        """Send one request, read the server's counters around it, and record both at once.

        The counters tell whether anything else ran meanwhile: the record is marked if the server
        finished more than this one request or generated more tokens than it returned.
        """
        before = self.endpoint.metrics()
        try:
            done = call(self.endpoint)
        except Exception as e:
            self.run.record({**tag, "error": f"{type(e).__name__}: {e}"})
            raise
        delta = _settled_delta(self.endpoint, before, settle_s)
        rec = {**tag, **done.as_dict(), "server": _server_view(delta)}
        rec["interference"] = _interference(done, delta)
        self.run.record(rec)
        return rec

    def finish(self, summary: dict, seal: bool = True) -> None:
        """Write the summary, let go of the lock and, unless an outer runner will, seal the run."""
        self.run.write_json("summary.json", summary)
        self.lock.release()
        if seal:
            self.run.seal()
        if self in _open:
            _open.remove(self)

    def records(self) -> list[dict]:
        return read_records(self.run.path)

    def fingerprint_table(self) -> pd.DataFrame:
        return fingerprint_table(self.fingerprint)


def start(notebook: str, *, model: str, settings: dict, endpoint: str = "", force: bool = False,
          run_id: str = "", outputs: str = "", validate: Callable[[ServerInfo], None] | None = None) -> Study:
    """Check everything, then open the run. `settings` are the notebook's parameters, recorded as given."""
    for old in list(_open):  # a rerun of the notebook in the same kernel
        old.lock.release()
        _open.remove(old)
    model_params = load_model(model)
    hardware = load_hardware(model_params.hardware)
    key = model_params.api_key()
    ep = Endpoint(endpoint or model_params.endpoint, model_params.served_model_name, api_key=key)
    server = ep.info()
    if validate:
        validate(server)
    lock = guard.RunLock({"notebook": notebook, "model": model_params.name, "run_id": run_id or "(new)"})
    lock.acquire(force=force)
    try:
        report = guard.check(server_load=ep.metrics().load(), force=force)
        all_params = {"notebook": notebook, "settings": settings, "model": model_params.model_dump(),
                      "hardware": hardware.model_dump(), "endpoint": ep.url,
                      "guard": report.as_dict() | {"lock_forced_over": lock.forced_over}}
        secrets = (key,) if key else ()
        run = Run.create(notebook, all_params, run_id=run_id, outputs=outputs, label=model_params.name,
                         secrets=secrets)
        fp = fingerprint.take(server=server.as_dict(), params=all_params, project_dir=project_root(),
                              secrets=secrets)
        run.write_json("fingerprint.json", fp)
    except BaseException:
        lock.release()
        raise
    study = Study(notebook, model_params, hardware, ep, server, run, report, fp,
                  bandwidth.limit(model_params, hardware), lock)
    _open.append(study)
    print(f"run {run.id}: {model_params.name} at {ep.url} (vLLM {server.version}); writing {run.path}", flush=True)
    return study


def _settled_delta(ep: Endpoint, before: metrics.Snapshot, settle_s: float) -> metrics.Delta:
    """vLLM updates its counters just after the answer is sent: wait until the request is counted."""
    deadline = time.monotonic() + settle_s
    while True:
        delta = metrics.delta(before, ep.metrics())
        if delta[metrics.E2E + "_count"] >= 1 or time.monotonic() > deadline:
            return delta
        time.sleep(0.02)


def _server_view(d: metrics.Delta) -> dict:
    """What the server says about the request, in the client's units."""
    view = {"requests": d[metrics.E2E + "_count"], "generated_tokens": d[metrics.GENERATED],
            "prefix_cache_queries": d[metrics.PREFIX_QUERIES], "prefix_cache_hits": d[metrics.PREFIX_HITS],
            "counter_resets": d.reset}
    for name, hist in (("ttft_s", metrics.TTFT), ("prefill_s", metrics.PREFILL), ("decode_s", metrics.DECODE),
                       ("queue_s", metrics.QUEUE), ("e2e_s", metrics.E2E)):
        total, count = d.histogram(hist)
        view[name] = total / count if count else None
    return view | {"spec_decode": d.spec_decode()}


def _interference(done: Completion, d: metrics.Delta) -> str | None:
    """Why the server's counters cannot be this request's alone, or None."""
    if d.reset:
        return f"the server restarted during the request (counters went down: {', '.join(d.reset[:3])})"
    n = d[metrics.E2E + "_count"]
    if n != 1:
        return f"the server finished {n:g} requests while this one ran; another client was using it"
    if done.completion_tokens is not None and d[metrics.GENERATED] != done.completion_tokens:
        return (f"the server generated {d[metrics.GENERATED]:g} tokens while this request received "
                f"{done.completion_tokens}; another client was using it")
    return None


def fingerprint_table(fp: dict) -> pd.DataFrame:
    """The fingerprint as a two-column table a reader can scan; fingerprint.json has all of it."""
    host, gpu, server, project = fp["host"], fp["gpu"], fp["server"], fp["project"]
    os_name = host["os"].get("pretty_name") if isinstance(host["os"], dict) else host["os"]
    gib = 2 ** 30

    def memory(b):
        return f"{b / gib:.1f} GiB" if isinstance(b, (int, float)) else b

    devices = "; ".join(f"{d['name']} (cc {d['compute_capability']}, {memory(d['memory_total_bytes'])})"
                        for d in gpu.get("devices", []))
    rows = {
        "host": f"{host['hostname']}: {os_name}, kernel {host['kernel']}, {host['architecture']}",
        "cpu": f"{host['cpu_model']}, {host['cpu_count']} threads, {memory(host['memory_total_bytes'])}",
        "gpu": devices or f"none ({gpu.get('reason')})",
        "driver": f"{gpu.get('driver_version', '-')}, CUDA {gpu.get('cuda_driver_version', '-')}",
        "server": f"vLLM {server['version']} serving {server['model']} at {server['url']}",
        "weights": f"{server['root']} (dtype {server['dtype']}, quantization {server['quantization']})",
        "max_model_len": server["max_model_len"],
        "python": fp["python"]["version"],
        "project": f"{project['commit']}{' (dirty)' if project.get('dirty') else ''}",
        "guard": _guard_line(fp["params"].get("guard", {})),
        "taken_at": fp["taken_at"],
    }
    return pd.DataFrame({"value": [str(v) for v in rows.values()]}, index=list(rows))


def _guard_line(g: dict) -> str:
    if g.get("forced") or g.get("lock_forced_over"):
        return f"FORCED past: {'; '.join(g.get('findings', [])) or g.get('lock_forced_over')}"
    return "clear: " + g.get("gpu", "")
