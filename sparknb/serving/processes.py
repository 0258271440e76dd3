"""Process groups and ports: what a started server is made of, and where it may listen.

vLLM forks an engine and workers, so a server is a process group, not a process: it is started in
a group of its own, counted and signalled as a group, and stopped only once no live member is
left. A port is checked before anything starts, so a stray server is never mistaken for ours.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"  # where this machine's own servers listen
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1", "::")
LISTEN = "0A"  # the state of a listening socket in /proc/net/tcp


# --- process groups -------------------------------------------------------------------------------


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group: what a start made and a stop must end."""
    return [pid for pid in pids() if _is_live_member(pid, pgid)]


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in the group."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return bool(group_members(pgid))
    except OSError:  # no /proc: trust killpg, zombies included
        return True


def signal_group(pgid: int, sig: int) -> None:
    """Signal every process of the group; a group already gone is not an error."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def wait_gone(pgid: int, process: subprocess.Popen, timeout: float) -> bool:
    """Wait until no live member is left, reaping the leader as soon as it exits; False on timeout."""
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        process.poll()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def group_memory(pgid: int) -> int | None:
    """Bytes the group holds (proportional set size, so forked pages count once); None once gone or unreadable."""
    total, seen = 0, False
    for pid in group_members(pgid):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
            total += next(int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("Pss:"))
            seen = True
        except (OSError, StopIteration, ValueError):
            continue
    return total if seen else None


def die_with_parent() -> None:
    """For preexec_fn: if the process that started the server is killed, the server's leader dies too."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _is_live_member(pid: int, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[2]) == pgid


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _PRCTL = None


# --- ports ----------------------------------------------------------------------------------------


def port_in_use(port: int, host: str = HOST) -> bool:
    """True when something holds host:port (a TIME_WAIT leftover does not count)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST if host == "localhost" else host, port))
        except OSError as e:
            return e.errno == errno.EADDRINUSE
    return False


def free_port(host: str = HOST) -> int:
    """A port nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def pick_port(preferred: int | None) -> int:
    """The preferred port if it is free, else any free one (good enough for a local server)."""
    return preferred if preferred and not port_in_use(preferred) else free_port()


# --- who listens on a port ---------------------------------------------------------------------------


def listener_command(port: int) -> list[str] | None:
    """The command line of the process on this machine listening on `port` (a server's own settings, which no
    HTTP route of it gives), or None where none is found or it cannot be read (another user's, no /proc)."""
    for pid in sorted(listeners(port)):
        with contextlib.suppress(OSError):
            if argv := Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]:
                return argv
    return None


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def listeners(port: int) -> set[int]:
    """The processes on this machine listening on `port`; only our own are readable unless we are root."""
    return _socket_owners(_listening_inodes(port))


def _socket_owners(inodes: set[str]) -> set[int]:
    wanted, owners = {f"socket:[{i}]" for i in inodes}, set()
    for pid in pids() if wanted else []:
        with contextlib.suppress(OSError):
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in wanted for fd in os.listdir(f"/proc/{pid}/fd")):
                owners.add(pid)
    return owners


def pids() -> list[int]:
    """Every process this machine shows in /proc (none where it cannot be read)."""
    try:
        return [int(e) for e in os.listdir("/proc") if e.isdigit()]
    except OSError:
        return []
