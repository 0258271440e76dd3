"""Running model-written code: every program in a child process that can reach nothing, never in this one.

Three levels of isolation, strongest first; a sandbox opens at the level asked for or not at all (what each
gives and cannot give is in its module and in the README's table of levels):
- bubblewrap: new user, network, pid, IPC and UTS namespaces and a read-only file system of its own.
- namespaces: the same namespaces, its own /proc and capped tmpfs where anyone may write, the host's other files.
- rlimits: the limits, the empty environment and the working folder only; the network is reachable.
At every level the program runs in a fence (fence.py: its own cgroup, killed whole, or where none can be made
its pid namespace and its own uid), with HOME, TMPDIR, PATH and LANG its whole environment, limits on CPU
time, memory, file size, open files and processes, a wall-clock timeout, and its output capped; `run` returns
only once nothing of it runs and the files it left where anyone may write are gone. Opening a sandbox runs a
probe inside it, which must pass and must not reach a socket this process listens on.

A pass is proven only by the checks running to their end: the trusted harness (harness.py) writes "checked"
on a pipe of its own once the program has returned, and echoes the random nonce this process draws only then.
An early exit (with any status), a killed interpreter, printed text, or anything the program can read of the
harness (the nonce is nowhere before the checks return) is never a pass. What no harness sharing an
interpreter with the program can rule out: a program written against this very harness could take that last
step itself, or make its answers compare equal to anything; the second is what `run(watch=...)` looks for
and marks as suspect (an object whose class the program gave its own __eq__, or a type the reference
solution never returns). That games the benchmark; it does not escape the sandbox.
"""

from .box import AS_YOU, LEVELS, NOBODY, PYTHON, WHAT, Sandbox, allowed
from .fence import UIDS
from .result import (ASSERTION, ERROR, EXITED, KILLED, MEMORY, OUTPUT, PASSED, STATUSES, TIMEOUT, Limits, Result)

__all__ = ["AS_YOU", "LEVELS", "NOBODY", "PYTHON", "UIDS", "WHAT", "Sandbox", "allowed", "Limits", "Result", "PASSED", "ASSERTION",
           "ERROR", "TIMEOUT", "MEMORY", "OUTPUT", "EXITED", "KILLED", "STATUSES"]
