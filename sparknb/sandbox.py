"""Running model-written code: every program in a child process that can reach nothing, never in this one.

Three levels of isolation, strongest first; a sandbox opens at the level asked for or not at all:
- bubblewrap: `bwrap` gives new user, network, pid, IPC and UTS namespaces and a file system of its
  own (the interpreter's folders read-only; a small empty tmpfs as working folder, HOME and /tmp).
- namespaces: `unshare` gives the same namespaces, but the host's files stay visible with the rights
  of the user the program runs as.
- rlimits: the limits, the empty environment and the working folder only; the network is reachable.
At every level the program runs as an unprivileged user (root drops to nobody first: root ignores the
process limit), with HOME, TMPDIR, PATH and LANG its whole environment, an empty temporary working
folder, limits on CPU time, memory, file size, open files and processes, a wall-clock timeout that
kills its process group (its pid namespace, where it has one), and its output capped. Opening a
sandbox runs a probe inside it, which must pass and must not reach a socket this process listens on.

A pass is proven only by the checks running to their end: the trusted harness (harness.py) writes
"checked" on a pipe of its own once the program has returned, and echoes the random nonce this
process draws only then. An early exit (with any status), a killed interpreter, printed text, or
anything the program can read of the harness (the nonce is nowhere before the checks return) is never
a pass. What no harness sharing an interpreter with the program can rule out: a program written
against this very harness could take that last step itself, as it could make its answers compare
equal to anything. That games the benchmark; it does not escape the sandbox.
"""

from __future__ import annotations

import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import SandboxError

LEVELS = ("bubblewrap", "namespaces", "rlimits")  # strongest first
WHAT = {
    "bubblewrap": "no network, own pids, and a file system of its own (bubblewrap)",
    "namespaces": "no network and own pids (unshare), but the host's files with an unprivileged user's rights",
    "rlimits": "limits, an empty environment and an unprivileged user only: the NETWORK IS REACHABLE",
}
NOBODY = 65534
PYTHON = "/usr/bin/python3"  # readable by nobody, unlike a virtualenv under /root
HOME = "/home/sandbox"  # the program's working folder and HOME inside bubblewrap
HARNESS = (Path(__file__).parent / "harness.py").read_text()  # the trusted program that runs the model's

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
    file_mb: int = 16  # the largest file it may write, and the size of its tmpfs folders under bubblewrap
    open_files: int = 64
    processes: int = 32  # in its own user namespace, counted apart from every other program's
    output_kb: int = 1024  # stdout and stderr together; more kills it

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Result:
    """How one program ended: its status (one of STATUSES), why, and the end of what it printed."""

    status: str
    detail: str
    output: str  # the last few thousand characters the program printed
    wall_s: float
    cpu_s: float | None  # the process tree's CPU time, where the launcher reaped it

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def as_dict(self) -> dict:
        return asdict(self)


# The probe opening a sandbox runs: it must pass, and must not reach the port given.
PROBE = '''
import socket, sys
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=2).close()
except OSError:
    pass
else:
    print("REACHED the host")
'''


def _rlimits(limits: Limits) -> dict:
    mb = 1024 * 1024
    return {"RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1), "RLIMIT_AS": (limits.memory_mb * mb,) * 2,
            "RLIMIT_FSIZE": (limits.file_mb * mb,) * 2, "RLIMIT_NOFILE": (limits.open_files,) * 2,
            "RLIMIT_NPROC": (limits.processes,) * 2, "RLIMIT_CORE": (0, 0)}


@dataclass(frozen=True)
class Interpreter:
    path: str
    version: str
    prefixes: tuple[str, ...]  # the folders it reads its standard library from


def _interpreter(python: str, user: int | None) -> Interpreter:
    """The interpreter as the sandbox's user sees it: it must exist and be readable by that user."""
    if not Path(python).is_absolute() or not Path(python).is_file():
        raise SandboxError(f"No interpreter at {python!r}: give the absolute path of a Python 3 that an "
                           f"unprivileged user can read, such as {PYTHON}.")
    query = "import json, sys; print(json.dumps([sys.version.split()[0], sys.base_prefix, sys.prefix]))"
    try:
        done = subprocess.run([python, "-I", "-c", query], capture_output=True, text=True, env={}, cwd="/",
                              timeout=60, **_as(user))
        version, *prefixes = json.loads(done.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        who = f"uid {user} (nobody)" if user == NOBODY else "this user"
        raise SandboxError(f"The interpreter {python} cannot be run by {who} ({type(e).__name__}: "
                           f"{getattr(e, 'stderr', '') or e}). A virtualenv under /root is not readable by nobody: "
                           f"use {PYTHON}.") from None
    real = str(Path(python).resolve().parent.parent)
    return Interpreter(python, version, tuple(dict.fromkeys([real, *prefixes])))


def _as(user: int | None) -> dict:
    return {} if user is None else {"user": user, "group": user, "extra_groups": []}


class Sandbox:
    """Programs run at one isolation level; `open` checks that the level can be had before any runs."""

    def __init__(self, level: str, interpreter: Interpreter, limits: Limits, user: int | None, launcher: str):
        self.level, self.interpreter, self.limits, self.user, self.launcher = level, interpreter, limits, user, launcher

    @classmethod
    def open(cls, level: str = "bubblewrap", python: str = PYTHON, limits: Limits = Limits()) -> Sandbox:
        """A sandbox at exactly `level`, probed; refused (SandboxError, naming why and the fix) if the
        machine cannot give it. A weaker level is had only by asking for it."""
        if level not in LEVELS:
            raise SandboxError(f"isolation {level!r} is not one of {', '.join(LEVELS)} (strongest first).")
        user = NOBODY if os.geteuid() == 0 else None
        launcher = {"bubblewrap": "bwrap", "namespaces": "unshare", "rlimits": ""}[level]
        found = shutil.which(launcher) if launcher else ""
        if launcher and not found:
            install = "bubblewrap" if launcher == "bwrap" else "util-linux"
            raise SandboxError(f"isolation {level!r} needs {launcher}, which is not installed. Install it "
                               f"(apt-get install {install}), or ask for a weaker level: {_weaker(level)}.")
        box = cls(level, _interpreter(python, user), limits, user, found or "")
        box._probe()
        return box

    def describe(self) -> str:
        who = "nobody (uid 65534)" if self.user == NOBODY else f"uid {os.geteuid()}"
        return f"{self.level}: {WHAT[self.level]}; programs run as {who} under {self.interpreter.path} " \
               f"(Python {self.interpreter.version})"

    def as_dict(self) -> dict:
        return {"level": self.level, "what": WHAT[self.level], "launcher": self.launcher,
                "uid": NOBODY if self.user == NOBODY else os.geteuid(), "python": self.interpreter.path,
                "python_version": self.interpreter.version, "limits": self.limits.as_dict()}

    def _probe(self) -> None:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.setblocking(False)
            result = self.run(PROBE.format(port=listener.getsockname()[1]))
            try:
                reached = listener.accept()[0]
            except BlockingIOError:
                reached = None
        if reached is not None:
            reached.close()
        if self.level != "rlimits" and (reached is not None or "REACHED" in result.output):
            raise SandboxError(f"isolation {self.level!r} let the probe reach a socket on 127.0.0.1 outside it; "
                               "this machine does not isolate the network as expected, so nothing is run.")
        if not result.passed:
            raise SandboxError(f"isolation {self.level!r} cannot be had here: the probe ended with {result.status} "
                               f"({result.detail}; it printed {result.output[-500:]!r}). Where unprivileged user "
                               "namespaces are off (kernel.unprivileged_userns_clone=0, or Ubuntu's "
                               "kernel.apparmor_restrict_unprivileged_userns=1), allow them, or ask for a weaker "
                               f"level: {_weaker(self.level)}.")

    # -- one program ----------------------------------------------------------------------------------

    def _command(self, report: int, nonce: int, home: str) -> list[str]:
        harness = [self.interpreter.path, "-I", "-B", "-u", "-c", HARNESS, str(report), str(nonce),
                   json.dumps(_rlimits(self.limits))]
        if self.level == "rlimits":
            return harness
        if self.level == "namespaces":
            uid, gid = os.geteuid() if self.user is None else self.user, os.getegid() if self.user is None else self.user
            return [self.launcher, f"--map-user={uid}", f"--map-group={gid}", "--net", "--pid", "--ipc", "--uts",
                    "--fork", "--kill-child", "--", *harness]
        size = str(self.limits.file_mb * 1024 * 1024)
        command = [self.launcher, "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                command += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                command += ["--ro-bind", top, top]
        for prefix in self.interpreter.prefixes:
            if not prefix.startswith("/usr/") and prefix != "/usr":
                command += ["--ro-bind", prefix, prefix]
        for file in ("/etc/ld.so.cache", "/etc/localtime"):
            command += ["--ro-bind-try", file, file]
        return command + ["--proc", "/proc", "--dev", "/dev", "--size", size, "--tmpfs", "/tmp", "--size", size,
                          "--tmpfs", home, "--chdir", home, "--", *harness]

    def run(self, program: str) -> Result:
        """Run one program to its end, its timeout, or its output cap; it never raises for what the program does."""
        t0 = time.perf_counter()
        with self._folder() as folder:
            home = HOME if self.level == "bubblewrap" else folder
            env = {"HOME": home, "TMPDIR": "/tmp" if self.level == "bubblewrap" else folder,
                   "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
            report_r, report_w = os.pipe()
            nonce_r, nonce_w = os.pipe()
            try:
                proc = subprocess.Popen(self._command(report_w, nonce_r, home), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(report_w, nonce_r),
                                        env=env, cwd=folder, start_new_session=True, **_as(self.user))
            except OSError as e:
                for fd in (report_r, report_w, nonce_r, nonce_w):
                    os.close(fd)
                return Result(ERROR, f"the sandbox did not start ({type(e).__name__}: {e})", "",
                              time.perf_counter() - t0, None)
            os.close(report_w)
            os.close(nonce_r)
            watch = _Watch(proc, report_r, nonce_w, program.encode(), self.limits)
            try:
                watch.follow(t0 + self.limits.wall_s)
            finally:
                cpu = _end(proc)
                watch.close()
        return watch.result(proc.returncode, time.perf_counter() - t0, cpu)

    @contextmanager
    def _folder(self) -> Iterator[str]:
        """An empty working folder the program's user owns (inside bubblewrap it lies under a tmpfs instead)."""
        folder = tempfile.mkdtemp(prefix="sparknb-sandbox-")
        try:
            if self.user is not None:
                os.chown(folder, self.user, self.user)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


class _Watch:
    """One running program seen from outside: its output (capped), its report pipe, and the clock."""

    def __init__(self, proc: subprocess.Popen, report: int, nonce: int, source: bytes, limits: Limits):
        self.proc, self.report_fd, self.nonce_fd, self.source = proc, report, nonce, source
        self.cap, self.tail, self.printed = limits.output_kb * 1024, bytearray(), 0
        self.report, self.nonce = b"", secrets.token_hex(16).encode() + b"\n"
        self.timed_out = self.over_cap = False
        self.wall_s = limits.wall_s

    def follow(self, deadline: float) -> None:
        """Feed the program, read its pipes and answer its report until the launcher ends, the output
        passes its cap, or the deadline; then take what is left in the pipes without waiting on anyone."""
        exited = os.pidfd_open(self.proc.pid)  # readable once the launcher has ended; it is not reaped here
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdin, selectors.EVENT_WRITE, "in")
        sel.register(self.proc.stdout, selectors.EVENT_READ, "out")
        sel.register(self.report_fd, selectors.EVENT_READ, "report")
        sel.register(exited, selectors.EVENT_READ, "exit")
        os.set_blocking(self.proc.stdin.fileno(), False)
        try:
            while not self.over_cap:
                left = deadline - time.perf_counter()
                if left <= 0:
                    self.timed_out = True
                    return
                events = sel.select(left)
                if any(key.data == "exit" for key, _ in events):
                    break
                for key, _ in events:
                    self._step(sel, key)
            for key in list(sel.get_map().values()):
                if key.data in ("out", "report"):
                    os.set_blocking(key.fd, False)
                    while key.fd in sel.get_map() and not self.over_cap:
                        try:
                            self._step(sel, key)
                        except BlockingIOError:
                            break
        finally:
            sel.close()
            os.close(exited)

    def _step(self, sel: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        if key.data == "in":
            try:
                self.source = self.source[os.write(key.fd, self.source[:65536]):]
            except BrokenPipeError:  # the program will not read its source: it has ended
                self.source = b""
            if not self.source:
                sel.unregister(key.fileobj)
                _close(self.proc.stdin)
            return
        data = os.read(key.fd, 65536)
        if not data:
            sel.unregister(key.fileobj)
        elif key.data == "out":
            self.printed += len(data)
            self.tail = (self.tail + data)[-4000:]
            self.over_cap = self.printed > self.cap
        else:
            self.report += data
            self._answer()

    def _answer(self) -> None:
        """Send the nonce once the report says the checks returned; anything else on the report pipe
        closes the nonce pipe unanswered, so a harness waiting on it ends at once instead of at the timeout."""
        if self.nonce_fd is None:
            return
        if self.report == b"checked\n":
            try:
                os.write(self.nonce_fd, self.nonce)
            except BrokenPipeError:
                pass
        elif b"checked\n".startswith(self.report):
            return
        os.close(self.nonce_fd)
        self.nonce_fd = None

    def close(self) -> None:
        for fd in (self.report_fd, self.nonce_fd):
            if fd is not None:
                os.close(fd)
        self.proc.stdout.close()
        _close(self.proc.stdin)

    def result(self, code: int | None, wall: float, cpu: float | None) -> Result:
        out = self.tail.decode(errors="replace")
        if self.report == b"checked\n" + self.nonce:
            return Result(PASSED, "the checks ran to their end", out, wall, cpu)
        if self.over_cap:
            return Result(OUTPUT, f"printed more than {self.cap // 1024} KB; killed", out, wall, cpu)
        if self.timed_out:
            return Result(TIMEOUT, f"still running after {self.wall_s:g} s (wall clock); killed", out, wall, cpu)
        try:
            told = json.loads(self.report.split(b"\n", 1)[0])
        except ValueError:
            told = None
        if isinstance(told, dict) and told.get("status") in STATUSES and told["status"] != PASSED:
            return Result(told["status"], str(told.get("detail", "")), out, wall, cpu)
        if self.report.startswith(b"checked\n"):
            return Result(EXITED, "the report pipe did not carry the proof (something else wrote on it)", out, wall, cpu)
        return Result(*_ended(code), out, wall, cpu)


def _close(pipe) -> None:
    try:
        pipe.close()
    except BrokenPipeError:
        pass


def _ended(code: int | None) -> tuple[str, str]:
    """A program that ended without a report: by a signal (the launchers pass one on as 128 + its number)."""
    sig = -code if code is not None and code < 0 else code - 128 if code is not None and 128 < code < 160 else None
    if sig == signal.SIGXCPU:
        return TIMEOUT, "used up its CPU time (SIGXCPU)"
    if sig == signal.SIGKILL:
        return KILLED, "killed (SIGKILL): the CPU hard limit, or the kernel out of memory"
    if sig is not None:
        return EXITED, f"killed by {signal.Signals(sig).name}" if sig in signal.valid_signals() else f"signal {sig}"
    return EXITED, f"exited with status {code} before the checks ended"


def _end(proc: subprocess.Popen) -> float | None:
    """Kill what is left of the program's process group, then reap the launcher with its CPU time.

    The group is killed while the launcher is still unreaped (a zombie keeps its pid, so the group id
    cannot have been reused by anyone else). Inside namespaces, the launcher's end ends them all.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def _weaker(level: str) -> str:
    lower = LEVELS[LEVELS.index(level) + 1:]
    return (" or ".join(f"isolation={w!r} ({WHAT[w]})" for w in lower)) if lower else "there is none"


def allowed(python: str = PYTHON) -> dict[str, str | None]:
    """Which levels this machine gives: None for a level that opened and passed its probe, else why not."""
    out = {}
    for level in LEVELS:
        try:
            Sandbox.open(level, python)
            out[level] = None
        except SandboxError as e:
            out[level] = str(e)
    return out

