"""Guard: refuse to measure on a machine that is not quiet.

A benchmark that shares the GPU or the server with someone else measures the sharing, not the model,
and nothing in the numbers shows it afterwards. So before a run we look for other GPU processes,
requests already on the server and another sparknb run; any of them stops the run unless forced,
and a forced run says so in its record.

The server's own GPU processes are not someone else: the process listening on the endpoint's port
and every process below it (vLLM's engine, a worker) are the server's.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import tempfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from .. import engines
from ..errors import GuardError
from ..runs.strict_json import dumps
from ..serving import processes
from . import fingerprint

OVERRIDE_HINT = "pass force=True (papermill: -p force True) to measure anyway; the override is recorded"


class Server(Protocol):
    """What the guard needs of an endpoint (client.Endpoint): where it listens, which side doors it lacks."""

    url: str
    not_available: dict[str, str]


@dataclass
class GuardReport:
    findings: list[str]
    forced: bool
    gpu: str
    notes: list[str] = field(default_factory=list)  # facts that did not stop the run but belong in the record

    def as_dict(self) -> dict:
        return asdict(self)


def check(*, server_load: dict[str, float | None] | None, gpu: dict | None = None,
          server_process: str = engines.VLLM.process_name, allow_pids: Iterable[int] = (), force: bool = False,
          endpoint: Server | None = None) -> GuardReport:
    """Findings from the server's queue and the GPU's process list; raises GuardError unless forced.

    `server_load` None means there is no server to ask yet (a study that starts its own); a gauge
    that is None could not be read, which is a finding, never a zero, unless the server has no
    /metrics at all: then it is noted as not available from this server. `server_process` is a word of
    the server's GPU process's command line (its engine's process_name). `allow_pids`
    are processes known to be the server's (those a lifecycle started); with `endpoint`, so are
    the processes that listen on its port and their children.
    """
    gpu = fingerprint.nvml() if gpu is None else gpu
    notes: list[str] = []
    if endpoint is not None and "/metrics" in endpoint.not_available:
        notes.append("whether the server is busy is not available from this server (it has no /metrics): "
                     "requests in flight could not be checked")
        server_load = {}
    findings = _load_findings(server_load or {})
    servers = set(allow_pids) | (server_processes(endpoint.url) if endpoint is not None else set())
    gpu_summary, gpu_findings, gpu_notes = _gpu_findings(gpu, server_process, servers)
    findings += gpu_findings
    notes += gpu_notes
    if findings and not force:
        raise GuardError("Refusing to measure, the machine is not quiet:\n"
                         + "".join(f"  - {f}\n" for f in findings) + OVERRIDE_HINT[0].upper() + OVERRIDE_HINT[1:] + ".")
    return GuardReport(findings=findings, forced=bool(findings and force), gpu=gpu_summary, notes=notes)


def _load_findings(server_load: dict[str, float]) -> list[str]:
    findings = []
    for state, value in server_load.items():
        if value is None or (isinstance(value, float) and math.isnan(value)):
            findings.append(f"unchecked: could not read how many requests are {state} on the server (its /metrics "
                            f"has no gauge of requests {state}), so it may be busy")
        elif value != 0:
            findings.append(f"{value:g} request{'' if value == 1 else 's'} {state} on the server")
    return findings


def _gpu_findings(gpu: dict, server_process: str, allow_pids: set[int]) -> tuple[str, list[str], list[str]]:
    """Which compute processes are not the server; an unreadable lone process is taken as the server."""
    if not gpu.get("available"):
        return f"no NVIDIA GPU: {gpu.get('reason', 'unknown reason')}", [], []
    devices = gpu.get("devices") if isinstance(gpu.get("devices"), list) else []
    processes, notes = [], []
    for device in devices:
        listed = device.get("processes", [])
        if isinstance(listed, list):
            processes += listed
        else:
            notes.append(f"GPU {device.get('index', '?')} process list: {listed}")
    summary = f"{len(devices)} GPU(s), {len(processes)} compute process(es) seen"

    findings, unreadable = [], []
    for process in processes:
        pid = process["pid"]
        cmdline = _cmdline(pid)
        if pid in allow_pids:
            notes.append(f"GPU process {pid} ({_truncate(cmdline or 'command line not readable')}) using "
                         f"{_memory(process)}: the server's")
            continue
        if cmdline is None:
            unreadable.append(process)
        elif server_process.lower() not in cmdline.lower():  # vLLM's engine retitles itself VLLM::EngineCore
            findings.append(f"GPU process {pid} ({_truncate(cmdline)}) using {_memory(process)}")
    if len(unreadable) == 1 and len(processes) == 1:
        notes.append(f"GPU process {unreadable[0]['pid']} using {_memory(unreadable[0])}: command line not "
                     "readable (a host PID seen from a container?); the only one, so taken as the server")
    else:
        findings += [f"GPU process {p['pid']} (command line not readable) using {_memory(p)}" for p in unreadable]
    return summary, findings, notes


def server_processes(url: str) -> set[int]:
    """The processes listening on a local endpoint's port, and all their descendants; empty for a remote one."""
    parts = urlsplit(url)
    if parts.hostname not in processes.LOCAL_HOSTS and parts.hostname != os.uname().nodename:
        return set()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    listeners = processes.listeners(port)
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    found, todo = set(), list(listeners)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def _parents() -> dict[int, int]:
    parents = {}
    for pid in processes.pids():
        with contextlib.suppress(OSError, IndexError, ValueError):
            parents[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    return parents


def _cmdline(pid: int) -> str | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None  # empty for zombies and kernel threads


def _truncate(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _memory(process: dict) -> str:
    used = process.get("used_memory_bytes")
    return f"{used / 2**30:.1f} GiB" if isinstance(used, (int, float)) else "unknown memory"


# --- one measurement at a time ---------------------------------------------------------------------------

def default_lock_path() -> Path:
    """One lock per machine; $SPARKNB_LOCK_FILE moves it (the test suite's own servers need no other)."""
    return Path(os.environ.get("SPARKNB_LOCK_FILE") or Path(tempfile.gettempdir()) / "sparknb-run.lock")


class RunLock:
    """One sparknb measurement at a time on this machine.

    flock, not a pid file: the kernel drops the lock when the holder dies, so a crashed run never
    blocks the next one. The file only tells a waiting run who holds it.
    """

    def __init__(self, holder: dict, path: Path | None = None) -> None:
        self.holder = dict(holder)
        self.path = Path(path) if path is not None else default_lock_path()
        self.forced_over: dict | None = None
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, force: bool = False) -> None:
        """Take the lock, or with force note who held it and go on; a no-op if this object already did either."""
        if self.held or self.forced_over is not None:
            return
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = _read_holder(fd)
            os.close(fd)
            if not force:
                raise GuardError(f"another sparknb run holds the run lock ({_describe(other)}); "
                                 f"wait for it, or {OVERRIDE_HINT}") from None
            self.forced_over = other
            return
        started_at = self.holder.get("started_at") or datetime.now(timezone.utc).isoformat(timespec="seconds")
        record = {**self.holder, "pid": os.getpid(), "started_at": started_at}
        os.ftruncate(fd, 0)
        os.pwrite(fd, dumps(record).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        try:
            os.ftruncate(self._fd, 0)  # a stale holder must not be named to the next run
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    def _open(self) -> int:
        """Open without O_CREAT first: a lock file another user made in a sticky tmp dir refuses O_CREAT."""
        try:
            try:
                return os.open(self.path, os.O_RDWR)
            except FileNotFoundError:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                with contextlib.suppress(OSError):  # not ours if another user created it just now
                    os.fchmod(fd, 0o666)  # so that the next user on the box can take it too
                return fd
        except OSError as exc:
            raise GuardError(f"cannot open the run lock {self.path}: {exc}") from exc


def lock_holder(path: Path | None = None) -> dict | None:
    """Who holds this machine's run lock ({} while the holder is still writing itself in), None when it is free."""
    probe = RunLock({}, path)
    fd = probe._open()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(fd)
    finally:
        os.close(fd)  # closing drops the lock, if it was ours for this look
    return None


def _read_holder(fd: int) -> dict:
    try:
        raw = os.pread(fd, 65536, 0)
        holder = json.loads(raw) if raw.strip() else {}
    except (OSError, ValueError):
        holder = {}
    return holder if isinstance(holder, dict) else {}


def _describe(holder: dict) -> str:
    if not holder:
        return "holder not written yet; it may be starting"
    return ", ".join(f"{key} {value}" for key, value in holder.items())
