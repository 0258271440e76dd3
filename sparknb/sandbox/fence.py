"""The fence around one program: the cgroup it cannot leave, the uid that owns nothing else, killed whole.

A program that double-forks and calls setsid() leaves its process group and, at a level without a pid
namespace, its parent: killpg never reaches it (one wrote a file 13 s after its wall clock had "killed"
it). What reaches every process it made, the way trusted sandboxes do it:
- a cgroup (v2) of its own, made before its first instruction: `cgroup.kill` ends all of it at once, and
  `cgroup.events` says when nothing of it runs any more;
- where no cgroup can be made here, its own pid namespace (its init's end waits for every process in it),
  and at `rlimits` a fresh uid that owns nothing else, killed with kill(-1) from that uid until none is left.
"""

from __future__ import annotations

import os
import pwd
import random
import select
import shutil
import stat
import subprocess
import threading
import time
from pathlib import Path

from ..errors import SandboxError

PLACES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")  # where anyone may write on a usual Linux host
UIDS = range(1_900_000_000, 1_900_000_000 + 2**24)  # far above any account's uid
_taken: set[int] = set()
_lock = threading.Lock()
_count = iter(range(10**12))
EMPTY_WITHIN_S = 10.0  # an unkillable process (stuck in the kernel) stops grading with this message


def cgroup_root() -> Path | None:
    """The cgroup (v2) this process is in, where it may make cgroups of its own; None where it may not."""
    try:
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
        own = next(line.split("::", 1)[1] for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if line.startswith("0::"))
    except (OSError, StopIteration):
        return None
    for line in mounts:
        fields = line.split(" - ", 1)
        if len(fields) == 2 and fields[1].split()[0] == "cgroup2":
            folder = Path(fields[0].split()[4]) / own.strip().lstrip("/")
            if os.access(folder, os.W_OK) and os.access(folder / "cgroup.procs", os.W_OK):
                return folder
    return None


def clear_stale(root: Path) -> None:
    """Kill and remove the cgroups a sparknb process left when it died mid-run (a sleeping program that lost its
    grader would otherwise sleep on: it uses no CPU time)."""
    for folder in root.glob("sparknb-sandbox-*-*"):
        if not Path(f"/proc/{folder.name.split('-')[2]}").exists():
            stale = Cgroup(folder)
            try:
                stale.kill()
                stale.wait_empty()
            except (OSError, SandboxError):
                continue
            stale.remove()


class Cgroup:
    """One program's cgroup: made empty, the launcher moved in before it runs anything, killed whole."""

    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def make(cls, root: Path) -> Cgroup:
        """A new, empty cgroup under `root`, named for this process (clear_stale knows it by that name)."""
        path = root / f"sparknb-sandbox-{os.getpid()}-{next(_count)}"
        path.mkdir()
        return cls(path)

    def enter(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def kill(self) -> None:
        (self.path / "cgroup.kill").write_text("1")

    def cpu_s(self) -> float | None:
        for line in (self.path / "cpu.stat").read_text().splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
        return None

    def wait_empty(self) -> None:
        """Return once no process of the program is left (the kernel says so on cgroup.events)."""
        deadline = time.monotonic() + EMPTY_WITHIN_S
        with open(self.path / "cgroup.events", "rb", buffering=0) as events:
            poll = select.poll()
            poll.register(events, select.POLLPRI)
            while b"populated 1" in os.pread(events.fileno(), 4096, 0):
                if time.monotonic() > deadline:
                    raise SandboxError(f"a sandboxed program's processes were still alive {EMPTY_WITHIN_S:g} s after "
                                       f"{self.path}/cgroup.kill; nothing more is run.")
                poll.poll(50)

    def remove(self) -> None:
        try:
            self.path.rmdir()
        except OSError:
            pass


def fresh_uid() -> int:
    """A uid no account has and no process runs as: the program's alone (given back with `release`)."""
    running = _uids_running()
    with _lock:
        while True:
            uid = random.choice(UIDS)
            if uid not in _taken and uid not in running and not _account(uid):
                _taken.add(uid)
                return uid


def release(uid: int | None) -> None:
    with _lock:
        _taken.discard(uid)


def _account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def _uids_running() -> set[int]:
    """The uids of every process not yet ended (a zombie has ended: it waits only for its parent to read it)."""
    found = set()
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
                found.add(proc.stat().st_uid)
        except (OSError, IndexError):
            pass
    return found


def kill_uid(uid: int, python: str) -> None:
    """Every process of `uid` killed by kill(-1) from a child that takes that uid, until /proc shows none."""
    deadline = time.monotonic() + EMPTY_WITHIN_S
    while uid in _uids_running():
        if time.monotonic() > deadline:
            raise SandboxError(f"processes of uid {uid} outlived {EMPTY_WITHIN_S:g} s of kill(-1); nothing more is run.")
        subprocess.run([python, "-I", "-S", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"], env={},
                       user=uid, group=uid, extra_groups=[], check=False, capture_output=True, timeout=10)
        time.sleep(0.005)


def wait_gone(pidfds: list[int]) -> None:
    """Return once each process ends; a pid namespace's init ends only after every process in it."""
    deadline = time.monotonic() + EMPTY_WITHIN_S
    for fd in pidfds:
        try:
            if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                raise SandboxError(f"a sandboxed program's pid namespace outlived {EMPTY_WITHIN_S:g} s after its kill.")
        finally:
            os.close(fd)


def children(pid: int) -> list[int]:
    """Pidfds of the launcher's children (at the pid-namespace levels, the namespace's init)."""
    fds = []
    try:
        pids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return fds
    for child in pids:
        try:
            fds.append(os.pidfd_open(int(child)))
        except OSError:
            pass
    return fds


def writable_places(places: tuple[str, ...]) -> tuple[str, ...]:
    """The folders under `places` that anyone may write in (where a program's files can land), the places first."""
    found = []
    for place in places:
        for folder, subfolders, _ in os.walk(place):
            if os.stat(folder).st_mode & stat.S_IWOTH:
                found.append(folder)
            subfolders[:] = [s for s in subfolders if not os.path.islink(os.path.join(folder, s))]
    return tuple(found)


def sweep(uid: int, folders: tuple[str, ...]) -> None:
    """Remove everything `uid` owns directly in each folder (a folder it made, whole): with a uid that
    owned nothing before, what it wrote and nothing else."""
    for folder in folders:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
            except OSError:
                pass


def sweep_ipc(uid: int) -> None:
    """Remove the System V shared memory, message queues and semaphores `uid` made: at a level without an IPC
    namespace they outlive the program (6 x 256 MB of shared memory were left in RAM per program, issue 38)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for kind, remove in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        for ident in _ipc_of(kind, uid):
            remove(ident, 0, None) if kind != "sem" else remove(ident, 0, 0)  # IPC_RMID


def _ipc_of(kind: str, uid: int) -> list[int]:
    """The ids of the `kind` objects whose creator or owner is `uid`, from /proc/sysvipc (this IPC namespace's)."""
    try:
        lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
    except OSError:
        return []
    head, found = lines[0].split() if lines else [], []
    for line in lines[1:]:
        row = dict(zip(head, line.split()))
        if str(uid) in (row.get("uid"), row.get("cuid")):
            found.append(int(row[{"shm": "shmid", "msg": "msqid", "sem": "semid"}[kind]]))
    return found
