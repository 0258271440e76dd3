"""llama.cpp's llama-server start-up log, read into stages: model load, warm-up, a draft model, listening.

With `--log-prefix --log-timestamps` (the test bed starts it so) every line starts with the time since
llama-server's logger started, as minutes.seconds.milliseconds.microseconds, and a level letter:

    0.00.010.124 I srv    load_model: loading model '/path/tiny-moe.gguf'
    0.00.321.852 I cmn          init: llama threadpool init, n_threads = 1
    0.00.353.065 I common_speculative_init_result: loading draft model '/path/tiny-moe-q4_0.gguf'
    0.00.592.455 I srv    load_model: initializing, n_slots = 8, n_ctx_slot = 16384, kv_unified = 'false'
    0.00.628.401 I srv  llama_server: model loaded
    0.00.628.453 I srv  llama_server: listening on http://127.0.0.1:8134

That clock starts within milliseconds of the launch, so it is taken as the launch's. The threadpool
line comes once the model, its context and its KV cache are ready, just before the warm-up run; at
the default verbosity (-lv 3) nothing in between is logged. With -lv 4 the loader's own lines add
the model's file type, the build, the KV cache and buffer sizes and the warm-up's start. A log
without timestamps (a llama-server of your own started without those flags) still gives the
figures and the engine, but no stage can be placed.
"""

from __future__ import annotations

import re

NEVER_READY = "the server never answered its ready URL: the stages stop at its last log line"
STAGES = ("process start", "model load", "warm-up", "draft model", "API ready")
STAGE_HELP = {
    "process start": "launch until llama-server's first log line: loading the program and its backends",
    "model load": "reading the GGUF, fitting it to memory, creating the context and its KV cache",
    "warm-up": "the empty warm-up run llama-server makes before serving (--no-warmup skips it)",
    "draft model": "loading the speculative-decoding draft model and its context (absent without one)",
    "API ready": "slots and chat template set up, HTTP listening, until the ready URL answered: plus our polling",
}

_STAMPED = re.compile(r"^(?P<m>\d+)\.(?P<s>\d\d)\.(?P<ms>\d{3})\.(?P<us>\d{3}) (?P<level>[IWED]) (?P<msg>.*)$")
_PREFIXED = re.compile(r"^(?P<level>[IWED]) (?P<msg>.*)$")
_NUM = r"([0-9]+(?:\.[0-9]+)?)"
# What says a log is llama-server's, whatever its flags.
SIGNATURE = re.compile(r"llama_server: (?:initializing|model loaded|listening on)|load_model: loading model '")

EVENTS: tuple[tuple[str, re.Pattern], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("build", r"common_params_print_info: build (\d+) \((\w+)\)"),
    ("load_start", r"load_model: loading model '[^']*'"),
    ("fit", rf"fitting params to free memory took {_NUM} seconds"),
    ("file_type", r"print_info: file type\s+= \S+"),
    ("model_buffer", rf"load_tensors:\s+\S+ model buffer size =\s+{_NUM} MiB"),
    ("context", r"llama_context: constructing llama_context"),
    ("kv_cache", rf"llama_kv_cache: size =\s+{_NUM} MiB"),
    ("compute_buffer", rf"sched_reserve:\s+\S+ compute buffer size =\s+{_NUM} MiB"),
    ("threadpool", r"llama threadpool init"),
    ("warmup_start", r"warming up the model"),
    ("draft_start", r"loading draft model '[^']*'"),
    ("slots", rf"load_model: initializing, n_slots = {_NUM}, n_ctx_slot = {_NUM}"),
    ("model_loaded", r"llama_server: model loaded"),
    ("listening", r"listening on \S+"),
))


def is_llama_server(text: str) -> bool:
    return bool(SIGNATURE.search(text))


def read(text: str, ready_s: float | None) -> dict:
    """The fields of startup_log.Startup for a llama-server log (stages keyed by STAGES)."""
    events: list[dict] = []
    errors: list[str] = []
    stamped = 0
    for raw in text.splitlines():
        line = raw.rstrip()
        m = _STAMPED.match(line)
        t = None
        if m:
            stamped += 1
            t = int(m["m"]) * 60 + int(m["s"]) + int(m["ms"]) / 1e3 + int(m["us"]) / 1e6
        else:
            m = _PREFIXED.match(line)
        level, msg = (m["level"], m["msg"]) if m else ("", line)
        if level == "E" and (ready_s is None or t is None or t <= ready_s + 1):
            errors.append(msg[:300])
        if not events and t is not None:
            events.append({"name": "first_line", "t_s": round(t, 6), "figures": (), "line": msg[:300]})
        for name, pattern in EVENTS:
            found = pattern.search(msg)
            if found:
                figures = tuple(float(g) for g in found.groups() if g and re.fullmatch(_NUM, g))
                events.append({"name": name, "t_s": None if t is None else round(t, 6), "figures": figures,
                               "line": msg[:300]})
                break
    notes = [] if stamped else ["no time-stamped llama-server lines (start it with --log-prefix --log-timestamps): "
                                "no stage can be placed"]
    stages, stage_notes = _stages(events, ready_s) if stamped else ({s: None for s in STAGES}, [])
    return {"stages": stages, "reported": _reported(events), "engine": _engine(text, events), "events": events,
            "errors": errors[:8], "notes": notes + stage_notes}


def _at(events: list[dict], name: str) -> float | None:
    return next((e["t_s"] for e in events if e["name"] == name and e["t_s"] is not None), None)


def _stages(events: list[dict], ready_s: float | None) -> tuple[dict[str, float | None], list[str]]:
    first, model_ready = _at(events, "first_line"), _at(events, "threadpool")
    draft, slots = _at(events, "draft_start"), _at(events, "slots")
    ends = {"process start": first, "model load": model_ready, "warm-up": draft if draft is not None else slots,
            "draft model": slots if draft is not None else None, "API ready": ready_s}
    stages, _ = split([(name, ends[name]) for name in STAGES], ready_s, 6)
    notes = [f"{name}: not in the log; that time is counted in the next stage found"
             for name, length in stages.items() if length is None and name != "draft model"]
    return stages, notes + ([NEVER_READY] if ready_s is None else [])


def split(ends: list[tuple[str, float | None]], ready_s: float | None,
          digits: int) -> tuple[dict[str, float | None], dict[str, list[str]]]:
    """Stage lengths from the times at which each one ends, in order (a log line can be late, not early; nothing
    after the ready URL answered), and, per stage found, the stages before it the log does not show (None),
    whose time it holds. Both servers' start-up logs are cut into stages by it."""
    stages: dict[str, float | None] = {}
    took_in: dict[str, list[str]] = {}
    previous, pending = 0.0, []
    for name, end in ends:
        if end is None:
            stages[name] = None
            pending.append(name)
            continue
        end = max(end, previous) if ready_s is None else min(max(end, previous), ready_s)
        stages[name], took_in[name], pending, previous = round(end - previous, digits), pending, [], end
    return stages, took_in


def _reported(events: list[dict]) -> dict[str, float]:
    """llama-server's own figures (-lv 4 for most): memory in MiB, the fit step's seconds, the slots."""
    out: dict[str, float] = {}
    for e in events:
        f = e["figures"]
        if e["name"] == "model_buffer":  # one per buffer, the draft model's too
            out["model buffers MiB"] = round(out.get("model buffers MiB", 0.0) + f[0], 2)
        elif e["name"] == "kv_cache":
            out["KV cache MiB"] = out.get("KV cache MiB", 0.0) + f[0]
        elif e["name"] == "compute_buffer":
            out["compute buffers MiB"] = round(out.get("compute buffers MiB", 0.0) + f[0], 2)
        elif e["name"] == "fit":
            out["fit to memory s"] = out.get("fit to memory s", 0.0) + f[0]
        elif e["name"] == "slots":
            out["slots"], out["context per slot"] = f[0], f[1]
    return out


def _engine(text: str, events: list[dict]) -> dict[str, str]:
    out = {"name": "llama.cpp"}
    build = next((e for e in events if e["name"] == "build"), None)
    if build:
        out["version"] = re.search(r"build \d+ \(\w+\)", build["line"]).group(0)
    for name, key, pattern in (("load_start", "model", r"'([^']*)'"), ("draft_start", "draft model", r"'([^']*)'"),
                               ("file_type", "file type", r"= (\S+)"), ("listening", "listening on", r"on (\S+)")):
        event = next((e for e in events if e["name"] == name), None)
        if event:
            out[key] = re.search(pattern, event["line"]).group(1)
    return out
