"""The server's own start-up log, read into stages: where the minutes of a model swap go.

A llama-server log is recognised by its own lines and read by llama_log (its stages are
llama_log.STAGES; llama-server compiles nothing). What follows is about vLLM's.

vLLM stamps its lines with month, day and whole seconds only, in the server's local time, and
says how long some steps took ("Loading weights took 0.09 seconds", "init engine ... took 31.22 s").
So the clock here is the wall time at which we launched the process; each line is placed at the middle
of its second (stage lengths are good to about one second), a server clock hours off ours (a
container in UTC) is recognised, and vLLM's own figures are kept beside the stages to check them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime

from . import llama_log

# The stages of a start, in order; the first six from the log, the last from our own clock.
STAGES = ("process start", "engine start", "weight loading", "compilation", "profiling and KV cache",
          "graph capture", "API ready")
STAGE_HELP = {
    "process start": "launch until vLLM's first log line: the interpreter, torch and vLLM being imported",
    "engine start": "until the weights start loading: config, model inspection, engine and worker processes, devices",
    "weight loading": "reading the weights (and a draft model), until compilation starts",
    "compilation": "torch.compile, or loading its cached result",
    "profiling and KV cache": "profiling run, memory profiling, allocating the KV cache",
    "graph capture": "CUDA graph capture and the warm-up after it (absent on CPU)",
    "API ready": "engine ready until the ready URL answered: the API server starting, plus our polling",
}
COLD, WARM_LOADED, WARM_RECOMPILED, NO_COMPILE, UNKNOWN = (
    "cold", "warm-loaded", "warm-recompiled", "no-compile", "unknown")

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DOCKER_TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s+")
_LINE = re.compile(
    r"^(?:\((?P<proc>[^)]*)\)\s+)?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<month>\d\d)-(?P<day>\d\d)\s+(?P<hms>\d\d:\d\d:\d\d)(?P<frac>[.,]\d+)?\s+\[[^\]]*\]\s?(?P<msg>.*)$")
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"

# event name -> pattern on the message; the groups are vLLM's own figures.
EVENTS: tuple[tuple[str, re.Pattern], ...] = tuple((name, re.compile(pattern)) for name, pattern in (
    ("args", r"non-default args:"),
    ("engine_config", r"Initializing a V1 LLM engine \(v(?P<version>[^)]+)\) with config"),
    ("load_start", r"Starting to load model"),
    ("init_model", rf"Initializing model took {_NUM} s"),
    ("weights", rf"Loading weights took {_NUM} s"),
    ("drafter", r"Loading drafter model"),
    ("model_loading", rf"Model loading took {_NUM} GiB(?: memory)? and {_NUM} s"),
    ("compile_start", r"Warming up model for the compilation|Starting torch\.compile"),
    ("aot_load_failed", r"Compiling model again due to a load failure(?: from \S+)?(?:, reason: (?P<reason>.*))?"),
    ("aot_loaded", r"Directly load AOT compilation from path"),
    ("graph_loaded", rf"Directly load the compiled graph\(s\) for .* took {_NUM} s"),
    ("dynamo", rf"Dynamo bytecode transform time: {_NUM} s"),
    ("graph_compiled", rf"Compiling a graph for .* takes {_NUM} s"),
    ("aot_saved", r"saved AOT compiled function to"),
    ("compile_total", rf"torch\.compile (?:and initial profiling/warmup run together )?(?:took|takes) {_NUM} s in total"),
    ("warmup_run", rf"Initial profiling/warmup run took {_NUM} s"),
    ("warmup_done", r"Warming up done"),
    ("memory_profiling", rf"Memory profiling takes {_NUM} s"),
    ("kv_memory", rf"Available KV cache memory: {_NUM} GiB|Explicitly set \({_NUM}/{_NUM}\) GiB for KV cache"),
    ("kv_tokens", rf"KV cache size: {_NUM} tokens"),
    ("graph_capture", rf"Graph capturing finished in {_NUM} secs?(?:, took {_NUM} GiB)?"),
    ("engine_ready", rf"init engine \(profile, create kv cache, warmup model\) took {_NUM} s(?:econds)?"
                     rf"(?: \(compilation: {_NUM} s)?"),
    ("api_start", r"Starting vLLM server on|Available routes are"),
))
_COMPILED = ("compile_start", "aot_saved", "compile_total", "graph_compiled", "dynamo")


@dataclass
class Event:
    name: str
    t_s: float | None  # seconds after launch (vLLM: the middle of the logged second); None: the line has no time
    figures: tuple[float, ...]
    line: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Startup:
    """One start read from its log. Stages are seconds, None where the log shows no such stage."""

    stages: dict[str, float | None]
    reported: dict[str, float]  # vLLM's own "took N s" figures (and memory in GiB)
    compile_cache: str
    compile_cache_evidence: str
    engine: dict[str, str]
    events: list[Event]
    errors: list[str]
    clock_shift_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def largest(self, n: int = 2) -> list[tuple[str, float]]:
        measured = [(k, v) for k, v in self.stages.items() if v is not None]
        return sorted(measured, key=lambda kv: kv[1], reverse=True)[:n]

    def as_dict(self) -> dict:
        d = asdict(self)
        d["events"] = [e.as_dict() for e in self.events]
        return d


def parse(text: str, *, launched_at: float, ready_s: float | None = None,
          observed_s: float | None = None) -> Startup:
    """Read a start-up log. `launched_at` is time.time() at launch; `ready_s` when the ready URL answered.

    `observed_s` is how long after launch the log was read; a line stamped later than that (or
    before the launch) can only come from a clock in another time zone, and is moved by whole
    quarter hours.
    """
    if llama_log.is_llama_server(text):
        fields = llama_log.read(text, ready_s)
        return Startup(stages=fields["stages"], reported=fields["reported"], compile_cache=NO_COMPILE,
                       compile_cache_evidence="llama-server compiles nothing: ggml's kernels are built in",
                       engine=fields["engine"], events=[Event(**e) for e in fields["events"]],
                       errors=fields["errors"], notes=fields["notes"])
    anchor = datetime.fromtimestamp(launched_at)
    raw: list[tuple[float, bool, str, str]] = []  # (t, has_fraction, level, message)
    for line in text.splitlines():
        line = _DOCKER_TS.sub("", _ANSI.sub("", line)).rstrip()
        m = _LINE.match(line)
        if not m:
            continue
        stamp = _stamp(anchor, int(m["month"]), int(m["day"]), m["hms"], m["frac"])
        if stamp is None:
            continue
        raw.append((stamp.timestamp() - launched_at, bool(m["frac"]), m["level"], m["msg"]))

    notes: list[str] = []
    shift = _clock_shift(raw[0][0] if raw else 0.0, observed_s)
    if shift:
        notes.append(f"the log's clock is {shift / 3600:+g} h from ours (a server in another time zone?); "
                     "its times were moved by that much")
    events, errors = [], []
    for i, (t, has_fraction, level, msg) in enumerate(raw):
        t = max(0.0, t - shift + (0.0 if has_fraction else 0.5))
        if i == 0:
            events.append(Event("first_line", round(t, 3), (), _clip(msg)))
        if level in ("ERROR", "CRITICAL") and (ready_s is None or t <= ready_s + 1):
            errors.append(_clip(msg))
        for name, pattern in EVENTS:
            m = pattern.search(msg)
            if m:
                figures = tuple(float(g.replace(",", "")) for g in m.groups() if g and _is_number(g))
                events.append(Event(name, round(t, 3), figures, _clip(msg)))
                break
    if not raw:
        notes.append("no time-stamped vLLM lines in the log: no stage can be named")
    stages, stage_notes = _stages(events, ready_s)
    cache, evidence = _compile_cache(events, text)
    return Startup(stages=stages, reported=_reported(events), compile_cache=cache,
                   compile_cache_evidence=evidence, engine=_engine(events, text), events=events,
                   errors=errors[:8], clock_shift_s=shift, notes=notes + stage_notes)


def _clip(msg: str, limit: int = 300) -> str:
    """Long lines keep both ends: a path in the middle matters less than the reason at the end."""
    return msg if len(msg) <= limit else msg[: limit // 2] + " ... " + msg[-(limit // 2 - 5):]


def _is_number(s: str) -> bool:
    return bool(re.fullmatch(r"[0-9][0-9,]*(?:\.[0-9]+)?", s))


def _stamp(anchor: datetime, month: int, day: int, hms: str, frac: str | None) -> datetime | None:
    """The year is not logged: take the one that puts the line nearest the launch (a start over New Year)."""
    h, mi, s = (int(x) for x in hms.split(":"))
    micro = int(round(float("0" + frac.replace(",", ".")) * 1e6)) if frac else 0
    best = None
    for year in (anchor.year - 1, anchor.year, anchor.year + 1):
        try:
            candidate = datetime(year, month, day, h, mi, s, min(micro, 999999))
        except ValueError:  # 29 February of a year without one
            continue
        if best is None or abs(candidate - anchor) < abs(best - anchor):
            best = candidate
    return best


def _clock_shift(first_t: float, observed_s: float | None) -> float:
    """Zero unless the first line falls outside [launch, end of watching]; then whole quarter hours."""
    upper = observed_s if observed_s is not None else 6 * 3600.0
    if -2.0 <= first_t <= upper + 2.0:
        return 0.0
    quarters = round(first_t / 900.0)
    for k in sorted(range(quarters - 2, quarters + 3), key=lambda q: abs(q - first_t / 900.0)):
        if -2.0 <= first_t - 900.0 * k <= upper + 2.0:
            return 900.0 * k
    return 0.0  # no time-zone shift explains it; leave the times as they are


def _first(events: list[Event], *names: str) -> Event | None:
    return next((e for e in events if e.name in names), None)


def _last(events: list[Event], *names: str) -> Event | None:
    return next((e for e in reversed(events) if e.name in names), None)


def _stages(events: list[Event], ready_s: float | None) -> tuple[dict[str, float | None], list[str]]:
    """Stage lengths from the times at which each one ends; a stage the log does not show is None."""
    first_line = _first(events, "first_line")
    load = _first(events, "load_start")
    if load is None:  # no start marker: vLLM's own loading time, counted back from its line
        own = _first(events, "model_loading", "weights")
        if own is not None:
            load = Event("load_start", max(0.0, own.t_s - own.figures[-1]), (), "(counted back from: " + own.line + ")")
    compile_start = _first(events, "compile_start")
    loaded = _last(events, "model_loading", "weights", "init_model", "drafter")
    compile_end = _last(events, "aot_saved", "aot_loaded", "graph_loaded", "compile_total")
    capture = _last(events, "graph_capture")
    engine_ready = _first(events, "engine_ready") or _first(events, "api_start")

    compile_begins = compile_start or loaded
    ends: list[tuple[str, float | None]] = [
        ("process start", first_line.t_s if first_line else None),
        ("engine start", load.t_s if load else None),
        ("weight loading", compile_begins.t_s if compile_begins else None),
        ("compilation", compile_end.t_s if compile_end else None),
        ("profiling and KV cache", (capture.t_s - capture.figures[0]) if capture else
         (engine_ready.t_s if engine_ready else None)),
        ("graph capture", engine_ready.t_s if (capture and engine_ready) else (capture.t_s if capture else None)),
        ("API ready", ready_s),
    ]
    stages, took_in = llama_log.split(ends, ready_s, 3)
    notes = [f"{', '.join(missed)}: not in the log; that time is counted in {name}" for name, missed in
             took_in.items() if [m for m in missed if m != "graph capture"]]  # no graph capture is normal (CPU, eager)
    return stages, notes + ([llama_log.NEVER_READY] if ready_s is None else [])


def _reported(events: list[Event]) -> dict[str, float]:
    """vLLM's own figures, under names that say what they time."""
    out: dict[str, float] = {}
    for e in events:
        f = e.figures
        if e.name == "init_model":
            out["initializing model s"] = f[0]
        elif e.name == "weights":
            out["loading weights s"] = out.get("loading weights s", 0.0) + f[0]  # the drafter's too
        elif e.name == "model_loading":
            out["model memory GiB"], out["model loading s"] = f[0], f[1]
        elif e.name == "graph_loaded":
            out["compiled graph load s"] = out.get("compiled graph load s", 0.0) + f[0]
        elif e.name == "dynamo":
            out["dynamo transform s"] = out.get("dynamo transform s", 0.0) + f[0]
        elif e.name == "graph_compiled":
            out["graph compile s"] = out.get("graph compile s", 0.0) + f[0]
        elif e.name == "compile_total":
            out["torch.compile s"] = out.get("torch.compile s", 0.0) + f[0]
        elif e.name == "warmup_run":
            out["profiling/warmup run s"] = out.get("profiling/warmup run s", 0.0) + f[0]
        elif e.name == "memory_profiling":
            out["memory profiling s"] = f[0]
        elif e.name == "kv_memory":
            out["KV cache GiB"] = f[0]
        elif e.name == "kv_tokens":
            out["KV cache tokens"] = f[0]
        elif e.name == "graph_capture":
            out["graph capture s"] = f[0]
            if len(f) > 1:
                out["graph capture GiB"] = f[1]
        elif e.name == "engine_ready":
            out["init engine s"] = f[0]
            if len(f) > 1:
                out["init engine compilation s"] = f[1]
    return out


def _compile_cache(events: list[Event], text: str) -> tuple[str, str]:
    """Whether compiled graphs came from the cache, from what vLLM itself says about it."""
    hit = _first(events, "aot_loaded", "graph_loaded")
    if hit:
        return WARM_LOADED, hit.line
    failed = _first(events, "aot_load_failed")
    if failed:
        return WARM_RECOMPILED, failed.line
    compiled = _first(events, *_COMPILED)
    if compiled:
        return COLD, f"compiled with nothing to load: {compiled.line}"
    if re.search(r"enforce_eager=True|'mode': <CompilationMode\.NONE", text):
        return NO_COMPILE, "enforce_eager or compilation mode NONE: nothing is compiled"
    return UNKNOWN, "the log says nothing about compilation"


def _engine(events: list[Event], text: str) -> dict[str, str]:
    """What the engine says it runs: the version, dtype and quantization, whatever the served name claims."""
    config = _first(events, "engine_config")
    line = next((ln for ln in text.splitlines() if "Initializing a V1 LLM engine" in ln), "")
    out: dict[str, str] = {}
    if config:
        out["version"] = config.line.split("(v", 1)[1].split(")", 1)[0]
    for key, pattern in (("model", r"\bmodel='([^']*)'"), ("dtype", r", dtype=([^,]+)"),
                         ("quantization", r", quantization=([^,]+)"), ("enforce_eager", r"enforce_eager=(\w+)"),
                         ("served_model_name", r"served_model_name=([^,]+)")):
        m = re.search(pattern, line)
        if m:
            out[key] = m.group(1)
    return out
