"""Box health: a short memory-bandwidth probe before measuring, set against the hardware's own figure.

A box that reaches far less than its params say (clocks stuck low after a bad power negotiation,
a thermal limit, a neighbour on the memory bus) makes every decode figure look like the model's
fault. A few seconds of copying tell: torch on the GPU where there is one (in a child process, so
the notebook holds no GPU memory afterwards), numpy on the CPU otherwise. Bytes count once read
and once written. Under 70% of the params' figure is a loud warning in every report of the run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..runs.params import HardwareParams
from ..runs.report import Finding, info, warning

WARN_SHARE = 0.70
GPU_SIZES = (2**31, 2**28)  # 2 GiB a buffer, or 256 MiB where a server holds most of the memory: both far past L2
CPU_SIZE = 2**28  # 256 MiB, far past any CPU cache
ROUNDS, COPIES = 3, 10  # the best of three rounds of ten copies
TIMEOUT_S = 180


@dataclass(frozen=True)
class Probe:
    """What the probe reached; gbs None where it could not run (error says why), never zero."""

    method: str
    gbs: float | None
    expected_gbs: float | None
    hardware: str
    buffer_bytes: int | None = None
    error: str | None = None

    @property
    def share(self) -> float | None:
        return self.gbs / self.expected_gbs if self.gbs and self.expected_gbs else None

    def finding(self) -> Finding:
        if self.gbs is None:
            return warning(f"Box health unknown: the bandwidth probe ({self.method}) could not run: {self.error}.")
        reached = f"The bandwidth probe ({self.method}) reached {self.gbs:,.0f} GB/s"
        if self.expected_gbs is None:
            return info(f"{reached}; {self.hardware}'s params give no bandwidth to compare it with.")
        text = f"{reached}, {self.share:.0%} of the {self.expected_gbs:,.0f} GB/s in {self.hardware}'s params"
        if self.share < WARN_SHARE:
            return warning(f"BOX BELOW ITS BANDWIDTH: {text}, under {WARN_SHARE:.0%}. Something holds this box "
                           "back (low clocks, a power or thermal limit, another process on the memory); every "
                           "figure of this run set against the limit is suspect.")
        return info(text + ".")

    def line(self) -> str:
        """The fingerprint table's row: short, the verdict first, since a table cell may be cut."""
        if self.gbs is None:
            return f"WARNING, not measured: {self.error}"
        reached = f"{self.gbs:,.0f} GB/s ({self.method})"
        if self.share is None:
            return f"{reached}; {self.hardware} gives no figure to compare"
        verdict = f"WARNING, UNDER {WARN_SHARE:.0%}: " if self.share < WARN_SHARE else ""
        return f"{verdict}{self.share:.0%} of {self.hardware}'s {self.expected_gbs:,.0f} GB/s: {reached}"

    def as_dict(self) -> dict:
        found = self.finding()
        return asdict(self) | {"share": self.share, "level": found.level, "text": found.text, "line": self.line()}


def measure(hardware: HardwareParams, gpu: dict) -> Probe:
    """Probe the GPU where NVML sees one (`gpu` as fingerprint.nvml() gives it), else the CPU."""
    expected = hardware.memory_bandwidth_gbs
    if gpu.get("available") and gpu.get("devices"):
        method = "torch copy on the first visible GPU"
        try:
            raw = _in_child()
        except (OSError, subprocess.SubprocessError, ValueError) as e:
            return Probe(method, None, expected, hardware.name, error=f"{type(e).__name__}: {e}")
    else:
        method = "numpy copy on the CPU"
        raw = _numpy_copy()
    return Probe(raw.get("method", method), raw.get("gbs"), expected, hardware.name, raw.get("buffer_bytes"),
                 raw.get("error"))


def _in_child() -> dict:
    """The torch probe in a process of its own: CUDA memory and context are gone when it ends."""
    package_root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, {package_root!r}); "
                           "from sparknb.machine.probe import _torch_copy; import json; "
                           "print(json.dumps(_torch_copy()))"],
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return {"error": tail[0]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _torch_copy() -> dict:
    try:
        import torch
    except ImportError as e:
        return {"error": f"torch not importable ({e})"}
    if not torch.cuda.is_available():
        return {"error": "torch sees no CUDA device"}
    name = torch.cuda.get_device_name(0)
    for size in GPU_SIZES:
        try:
            src = torch.ones(size, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            break
        except torch.OutOfMemoryError:
            continue
    else:
        return {"error": f"no room on {name} for two buffers of {GPU_SIZES[-1] / 2**20:.0f} MiB"}
    dst.copy_(src)
    best = float("inf")
    for _ in range(ROUNDS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(COPIES):
            dst.copy_(src)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1000)
    return {"method": f"torch copy on {name}", "gbs": 2 * size * COPIES / best / 1e9, "buffer_bytes": size}


def _numpy_copy() -> dict:
    import numpy as np

    src = np.ones(CPU_SIZE // 8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return {"method": "numpy copy on the CPU", "gbs": 2 * CPU_SIZE / best / 1e9, "buffer_bytes": CPU_SIZE}
