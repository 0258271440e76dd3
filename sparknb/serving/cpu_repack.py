"""Whether llama.cpp may repack a model's weights on this machine: probed once per binary and model, remembered.

llama.cpp built for the machine's CPU (GGML_NATIVE) repacks quantized weights for the instruction sets the CPU
advertises. A virtual machine can advertise AMX (amx_tile in /proc/cpuinfo) without granting its tile state:
then the first matrix product on repacked weights dies with SIGSEGV in ggml_backend_amx_mul_mat, at
llama-server's warm-up, with nothing in its log. Measured here: the Q4_1 SmolLM2 crashed llama-bench
(exit 139) in under a second, `--repack 0` ran it (pp8 58 tok/s); tiny-moe's Q4_0 draft died with SIGILL the
same way. The bf16 tiny models never take that path.
The build is left as it is; the server gets `--no-repack` where a one-second llama-bench shows the crash.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from .llama_server import bench_beside
from .tiny_models import cache_root, file_key, keep

PROBE_S = 120
FLAG = "--no-repack"


def flags(binary: Path, *models: Path) -> list[str]:
    """[FLAG] where repacking crashes this binary on any of these models (a server's and its draft's), else [];
    each probed once (a second or two)."""
    return [FLAG] if any(probe(binary, model)["crashes"] for model in models) else []


def probe(binary: Path, model: Path) -> dict:
    """{"crashes": bool, "how": str}: llama-bench beside the binary, with repacking and without, remembered."""
    memory = cache_root() / "llama.cpp" / "repack-probes.json"
    key = _key(binary, model)
    seen = _read(memory)
    if key not in seen:
        seen[key] = _bench(bench_beside(binary), binary, model)
        keep(memory, json.dumps(_read(memory) | {key: seen[key]}, indent=1) + "\n")
    return seen[key]


def _key(binary: Path, model: Path) -> str:
    """A rebuilt binary or another file is probed anew."""
    return f"{file_key(binary)}|{file_key(model)}"


def _read(memory: Path) -> dict:
    try:
        return json.loads(memory.read_text())
    except (OSError, ValueError):
        return {}


def _bench(bench: Path | None, server: Path, model: Path) -> dict:
    if bench is None:
        return {"crashes": False, "how": f"not probed: no llama-bench beside the server ({server})"}
    default, off = _run(bench, model, []), _run(bench, model, ["--repack", "0"])
    crashes = default != 0 and off == 0
    return {"crashes": crashes, "how": f"llama-bench exit {describe_exit(default)} with repacking, "
                                       f"{describe_exit(off)} with --repack 0"}


def _run(bench: Path, model: Path, extra: list[str]) -> int:
    argv = [str(bench), "-m", str(model), "-p", "8", "-n", "2", "-r", "1", "-t", "1", *extra]
    try:
        return subprocess.run(argv, capture_output=True, timeout=PROBE_S, stdin=subprocess.DEVNULL).returncode
    except (OSError, subprocess.TimeoutExpired):
        return 0  # no crash seen: the server's own start will say what is wrong


def describe_exit(code: int) -> str:
    """-11 (subprocess's way of saying a signal ended it) -> '-11 (killed by SIGSEGV)'; others as they are."""
    name = _signal(code)
    return f"{code} (killed by {name})" if name else str(code)


def _signal(code: int) -> str | None:
    """The name of the signal a negative return code says ended the process; None where none did."""
    try:
        return signal.Signals(-code).name if code < 0 else None
    except ValueError:
        return None


def crash_cause(start: tuple[str, ...] | list[str], code: int) -> str:
    """Why a server died at start-up by a signal, and the fix, where its command tells; '' where not a signal."""
    if code >= 0:
        return ""
    how = f"killed by {_signal(code) or code}"
    llama = bool(start) and Path(start[0]).name.startswith("llama-")
    if code in (-signal.SIGSEGV, -signal.SIGILL) and llama and FLAG not in start:
        return (f"{how}: llama.cpp repacks quantized weights for the instruction sets the CPU advertises, and a "
                "virtual machine may advertise AMX (amx_tile in /proc/cpuinfo) without granting it, which crashes "
                f"the first matrix product at warm-up. Start it with {FLAG} (llama-bench: --repack 0); if it still "
                "crashes, the binary was built for another CPU: build it here")
    if code == -signal.SIGILL:
        return (f"{how}: the binary uses an instruction this CPU does not run (built for another CPU); build it "
                "here (`python -m sparknb.serving.llama_server build`) or use one built for this machine")
    if code == -signal.SIGKILL:
        return f"{how}: killed from outside, most often by the kernel's out-of-memory killer (see dmesg)"
    return how
