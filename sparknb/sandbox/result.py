"""What one program may use (Limits), how a level starts it (Launch), and how it ended (Result)."""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field, replace

PASSED = "passed"
ASSERTION = "assertion failed"
ERROR = "error"
TIMEOUT = "timeout"
MEMORY = "out of memory"
OUTPUT = "output over the cap"
EXITED = "exited before the checks ended"
KILLED = "killed"
STATUSES = (PASSED, ASSERTION, ERROR, TIMEOUT, MEMORY, OUTPUT, EXITED, KILLED)


@dataclass(frozen=True)
class Limits:
    """What one program may use; the wall clock is the last word on time."""

    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 2048  # address space (RLIMIT_AS)
    file_mb: int = 16  # the largest file it may write, and the size of each tmpfs it is given
    inodes: int = 4096  # the files and folders each tmpfs it is given may hold (uncapped, 0.5-1.1 million in 10 s)
    open_files: int = 64
    processes: int = 32  # counted for its own uid, which owns nothing else (where sparknb runs as root)
    output_kb: int = 1024  # stdout and stderr together; more kills it

    def as_dict(self) -> dict:
        return asdict(self)

    def rlimits(self) -> dict:
        mb = 1024 * 1024
        return {"RLIMIT_CPU": (self.cpu_s, self.cpu_s + 1), "RLIMIT_AS": (self.memory_mb * mb,) * 2,
                "RLIMIT_FSIZE": (self.file_mb * mb,) * 2, "RLIMIT_NOFILE": (self.open_files,) * 2,
                "RLIMIT_NPROC": (self.processes,) * 2, "RLIMIT_CORE": (0, 0)}


@dataclass(frozen=True)
class Launch:
    """How a level starts one program: the launcher's words before the harness, who starts it, what the
    harness does first (tmpfs mounts, the uid to drop to), the program's HOME and the host places it can write."""

    argv: list[str]
    user: int | None  # the uid the launcher starts as; None: this process's
    setup: dict = field(default_factory=dict)
    home: str = ""
    sweep: tuple[str, ...] = ()  # host places the program could write, emptied of its files afterwards


@dataclass(frozen=True)
class Result:
    """How one program ended: its status (one of STATUSES), why, and the end of what it printed; where it was
    checked, the types its function returned to the checks and why the pass is suspect (None: nothing seen)."""

    status: str
    detail: str
    output: str  # the last few thousand characters the program printed
    wall_s: float
    cpu_s: float | None  # the whole process tree's CPU time, where it could be read
    returned: tuple[str, ...] | None = None
    suspect: str | None = None

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def as_dict(self) -> dict:
        return asdict(self)

    def against(self, expect: frozenset[str] | None) -> Result:
        """This result, suspect too where the checked function returned a type not in `expect` (the types a
        reference solution returns; None: unknown, nothing to hold it to)."""
        odd = sorted(set(self.returned or ()) - expect) if expect is not None and not self.suspect else []
        if not odd:
            return self
        why = f"it returned {', '.join(odd)}, a type the reference solution never returns ({', '.join(sorted(expect))})"
        return replace(self, suspect=why)


def ended(code: int | None) -> tuple[str, str]:
    """A program that ended without a report: by a signal (the launchers pass one on as 128 + its number)."""
    sig = -code if code is not None and code < 0 else code - 128 if code is not None and 128 < code < 160 else None
    if sig == signal.SIGXCPU:
        return TIMEOUT, "used up its CPU time (SIGXCPU)"
    if sig == signal.SIGKILL:
        return KILLED, "killed (SIGKILL): the CPU hard limit, or the kernel out of memory"
    if sig is not None:
        return EXITED, f"killed by {signal.Signals(sig).name}" if sig in signal.valid_signals() else f"signal {sig}"
    return EXITED, f"exited with status {code} before the checks ended"
