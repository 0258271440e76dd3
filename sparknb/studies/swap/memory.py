"""What the machine holds around each step: memory in use, and the compile cache a start will find.

Memory comes from NVML where it reports and memory is not unified, else from the system; the
compile cache is counted before every start, because cold and warm starts are different answers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ...machine import fingerprint
from ...runs.params import HardwareParams
from ...serving.lifecycle import Server


def memory(hardware: HardwareParams, server: Server | None = None) -> dict:
    """Memory in use now; None wherever a figure cannot be read (unknown, never zero)."""
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
        "server_bytes": server.memory_bytes() if server else None,
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
    """How full a model's compiled-graph cache is; unknown where its params do not say where it is."""
    folder = _graph_cache(root)
    if folder is None:
        return {"folder": None, "state": "unknown (no lifecycle.compile_cache)", "files": None, "bytes": None}
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    size = sum(p.stat().st_size for p in files)
    state = "empty" if not files else f"{len(files)} files, {size / 2**20:.1f} MiB"
    return {"folder": str(folder), "state": state, "files": len(files), "bytes": size}


def clear_cache(root: Path) -> dict:
    """Empty the compiled graphs, so the next start is cold; says what was removed."""
    folder = _graph_cache(root)
    before = cache_state(root)
    if folder.is_dir():
        shutil.rmtree(folder)
    return {"folder": str(folder), "removed": before["state"]}
