"""A sandbox at one isolation level: opened (probed) before any program runs, then one program at a time, each
inside its fence, each graded only once nothing of it runs and every file it wrote is gone."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import SandboxError
from . import bubblewrap, fence, namespaces, rlimits
from .result import ERROR, Launch, Limits, Result
from .watch import Watch

MODULES = {"bubblewrap": bubblewrap, "namespaces": namespaces, "rlimits": rlimits}
LEVELS = tuple(MODULES)  # strongest first
AS_YOU = "rlimits-as-you"  # rlimits run by a user other than root, had only by this name: the program runs as you
BESIDE_YOU = ("at rlimits-as-you the program ran as you, beside this process and the run's folder: it could have "
              "written the verdict's record itself")
WHAT = {level: module.WHAT for level, module in MODULES.items()}
NOBODY = 65534
PYTHON = "/usr/bin/python3"  # readable by any user, unlike a virtualenv under /root
HARNESS = (Path(__file__).parent / "harness.py").read_text()  # the trusted program that runs the model's
GATE = ["/bin/sh", "-c", 'read -r _ && exec "$@"', "sh"]  # holds the launcher until it is in its cgroup

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

    def __init__(self, level: str, interpreter: Interpreter, limits: Limits, launcher: str, cgroups: Path | None):
        self.level, self.interpreter, self.limits, self.launcher = level, interpreter, limits, launcher
        self.cgroups, self.root = cgroups, os.geteuid() == 0
        self.places: tuple[str, ...] | None = None  # the folders a program could leave files in, found once

    @classmethod
    def open(cls, level: str = "bubblewrap", python: str = PYTHON, limits: Limits = Limits(),
             cgroup: bool = True) -> Sandbox:
        """A sandbox at exactly `level`, probed; refused (SandboxError, naming why and the fix) if the
        machine cannot give it. A weaker level is had only by asking for it. `cgroup=False` fences each
        program as on a machine where no cgroup can be made."""
        if level == AS_YOU:  # as root, rlimits itself: each program has a uid of its own
            level = "rlimits"
        elif level == "rlimits" and os.geteuid() != 0:
            raise SandboxError(f"isolation 'rlimits' run as uid {os.geteuid()}, not root, runs each program as you: it "
                               "can kill, trace and read every process of yours (this Jupyter kernel, a model server, "
                               "the API key in their environment), as one did. Ask for "
                               f"isolation='bubblewrap' or 'namespaces', run sparknb as root, or take that risk by "
                               f"name: isolation={AS_YOU!r}.")
        if level not in LEVELS:
            raise SandboxError(f"isolation {level!r} is not one of {', '.join(LEVELS)} (strongest first).")
        launcher = MODULES[level].LAUNCHER
        found = shutil.which(launcher) if launcher else ""
        if launcher and not found:
            raise SandboxError(f"isolation {level!r} needs {launcher}, which is not installed. Install it "
                               f"(apt-get install {MODULES[level].INSTALL}), or ask for a weaker level: {_weaker(level)}.")
        user = NOBODY if os.geteuid() == 0 else None
        cgroups = fence.cgroup_root() if cgroup else None
        if cgroups:
            fence.clear_stale(cgroups)
        box = cls(level, _interpreter(python, user), limits, found or "", cgroups)
        box._probe()
        return box

    def describe(self) -> str:
        who = "a uid of its own that owns nothing else" if self.root else f"uid {os.geteuid()}"
        fenced = "its own cgroup, killed whole" if self.cgroups else "no cgroup of its own (none can be made here)"
        return f"{self.level}: {WHAT[self.level]}; each program runs as {who}, in {fenced}, under " \
               f"{self.interpreter.path} (Python {self.interpreter.version})"

    def as_dict(self) -> dict:
        return {"level": self.level, "what": WHAT[self.level], "launcher": self.launcher,
                "uid": None if self.root else os.geteuid(), "own_uid": self.root, "cgroup": self.cgroups is not None,
                "python": self.interpreter.path, "python_version": self.interpreter.version,
                "limits": self.limits.as_dict()}

    def _probe(self) -> None:
        with socket.socket() as listener:
            listener.bind(("127.0.0.1", 0))
            listener.listen(1)
            listener.setblocking(False)
            result = self._run_with(PROBE.format(port=listener.getsockname()[1]).encode(), {}, self._probe_limits())
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

    def run(self, program: str) -> Result:
        """Run one program to its end, its timeout, or its output cap, and return once nothing of it runs and
        its files are gone; it never raises for what the program does. A pass here is the program's own word
        (it ran in the harness's process): grade with `check`."""
        return self._run_with(program.encode(), {}, self.limits)

    def check(self, program: str, checks: str, name: str) -> Result:
        """Grade `program` by `checks` (source defining `check(candidate)`, as HumanEval's tests do): the program
        runs in a process of its own, and the checks in the harness's, which it cannot read, trace or kill, with
        `candidate` calling the program's function `name` and getting back only plain data (real builtins). The
        verdict is the harness's word: nothing the program can write or read carries it (Result.returned: the
        types the function returned to the checks)."""
        frames = b"".join(len(b).to_bytes(8, "big") + b for b in (program.encode(), checks.encode()))
        result = self._run_with(frames, {"checks": name}, self.limits)
        if result.passed and self.level == "rlimits" and not self.root and not result.suspect:
            return replace(result, suspect=BESIDE_YOU)
        return result

    def _probe_limits(self) -> Limits:
        """The probe tests the level, not the limits: a wall clock of a second can pass on a loaded machine before a
        launcher has started at all."""
        return replace(self.limits, wall_s=max(self.limits.wall_s, 60.0), cpu_s=max(self.limits.cpu_s, 10))

    def _run_with(self, source: bytes, setup: dict, limits: Limits) -> Result:
        t0 = time.perf_counter()
        uid = fence.fresh_uid() if self.root else None
        judge = fence.fresh_uid() if uid is not None and self.level == "rlimits" and setup.get("checks") else None
        try:
            with self._folder(uid) as folder:
                launch = MODULES[self.level].launch(self.launcher, self.interpreter.prefixes, uid, folder,
                                                    limits.file_mb * 1024 * 1024)
                setup = setup | {"inodes": limits.inodes} | ({"judge": judge} if judge else {})
                return self._run(launch, uid, folder, source, setup, t0, limits)
        finally:
            fence.release(uid)
            fence.release(judge)

    def _run(self, launch: Launch, uid: int | None, folder: str, source: bytes, setup: dict, t0: float,
             limits: Limits) -> Result:
        cgroup = fence.Cgroup.make(self.cgroups) if self.cgroups else None
        try:
            proc, report, nonce = self._start(launch, folder, setup, cgroup, limits)
        except OSError as e:
            if cgroup:
                cgroup.remove()
            return Result(ERROR, f"the sandbox did not start ({type(e).__name__}: {e})", "", time.perf_counter() - t0, None)
        watcher = Watch(proc, report, nonce, (b"\n" if cgroup else b"") + source, limits)
        try:
            watcher.follow(t0 + limits.wall_s)
        finally:
            cpu = self._end(proc, cgroup, uid)
            watcher.close()
        if launch.sweep:
            self.places = self.places or fence.writable_places(launch.sweep)
            fence.sweep(uid, self.places)
            fence.sweep_ipc(uid)
        return watcher.result(time.perf_counter() - t0, cpu, setup)

    def _start(self, launch: Launch, folder: str, setup: dict, cgroup: fence.Cgroup | None, limits: Limits):
        """The launcher started (held at the gate until it is in its cgroup) with the harness's two pipes."""
        report_r, report_w = os.pipe()
        nonce_r, nonce_w = os.pipe()
        setup = launch.setup | setup
        harness = [self.interpreter.path, "-I", "-B", "-u", "-c", HARNESS, str(report_w), str(nonce_r),
                   json.dumps(limits.rlimits()), json.dumps(setup)]
        env = {"HOME": launch.home, "TMPDIR": launch.home, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        try:
            proc = subprocess.Popen((GATE if cgroup else []) + launch.argv + harness, stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, pass_fds=(report_w, nonce_r),
                                    env=env, cwd=folder, start_new_session=True, **_as(launch.user))
            if cgroup:
                _enter(cgroup, proc)
        except OSError:
            for fd in (report_r, nonce_w):
                os.close(fd)
            raise
        finally:
            os.close(report_w)
            os.close(nonce_r)
        return proc, report_r, nonce_w

    def _end(self, proc: subprocess.Popen, cgroup: fence.Cgroup | None, uid: int | None) -> float | None:
        """Kill everything of the program and reap the launcher; return its CPU time once nothing of it runs."""
        if cgroup:
            try:
                cgroup.kill()
                _reap(proc)
                cgroup.wait_empty()
                return cgroup.cpu_s()
            finally:
                cgroup.remove()
        inits = fence.children(proc.pid)  # a pid namespace's init: gone only once everything in it is
        for fd in inits:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        cpu = _reap(proc)
        fence.wait_gone(inits)
        if uid is not None:
            fence.kill_uid(uid, self.interpreter.path)
        return cpu

    @contextmanager
    def _folder(self, uid: int | None) -> Iterator[str]:
        """An empty working folder the program's user owns (at the levels with a tmpfs of their own, unused)."""
        folder = tempfile.mkdtemp(prefix="sparknb-sandbox-")
        try:
            if uid is not None:
                os.chown(folder, uid, uid)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _enter(cgroup: fence.Cgroup, proc: subprocess.Popen) -> None:
    """The launcher into its cgroup while it waits at the gate; one that cannot be moved is killed there, having
    run nothing."""
    try:
        cgroup.enter(proc.pid)
    except OSError:
        proc.kill()
        proc.communicate()
        raise


def _reap(proc: subprocess.Popen) -> float | None:
    """Wait for the launcher (killed or ended) and return its process tree's CPU time, as it reaped it."""
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
