"""Running model-written code: every program in a child process that can reach nothing, never in this one.

Three levels of isolation, strongest first; a sandbox opens at the level asked for or not at all (what each
gives and cannot give is in its module and in the README's table of levels):
- bubblewrap: new user, network, pid, IPC and UTS namespaces and a read-only file system of its own.
- namespaces: the same namespaces, its own /proc and capped tmpfs where anyone may write (and, run as you, over
  your home), the host's other files read-only.
- rlimits: the limits, the empty environment and the working folder only; the network is reachable. Run by a user
  other than root, only when asked for as `rlimits-as-you` (AS_YOU): the program runs as you.
At every level the program runs in a fence (fence.py: its own cgroup, killed whole, or where none can be made
its pid namespace and its own uid), with HOME, TMPDIR, PATH and LANG its whole environment, limits on CPU
time, memory, file size, open files and processes, a wall-clock timeout, and its output capped; each tmpfs it is
given holds `inodes` files; System V IPC is its own, or removed after it (rlimits as root); `run` returns
only once nothing of it runs and the files it left where anyone may write are gone. Opening a sandbox runs a
probe inside it, which must pass and must not reach a socket this process listens on.

A verdict is the judge's alone (`Sandbox.check`): the harness forks, the program runs in the child, which
holds no descriptor, secret or byte of the tests, and the parent runs the tests against the child's function, getting
back only plain data that it rebuilds from the real builtins, and writes the verdict itself. The child cannot kill,
trace or read it (its pid namespace's init, or a uid of its own; not dumpable). A seccomp filter refuses the program
any namespace of its own. `Sandbox.run` (the probe, a program with no tests) tells only how the program ended, in its
own words.
"""

from .box import AS_YOU, LEVELS, NOBODY, PYTHON, WHAT, Sandbox, allowed
from .fence import UIDS
from .result import (ASSERTION, ERROR, EXITED, KILLED, MEMORY, OUTPUT, PASSED, STATUSES, TIMEOUT, Limits, Result)

__all__ = ["AS_YOU", "LEVELS", "NOBODY", "PYTHON", "UIDS", "WHAT", "Sandbox", "allowed", "Limits", "Result", "PASSED",
           "ASSERTION", "ERROR", "TIMEOUT", "MEMORY", "OUTPUT", "EXITED", "KILLED", "STATUSES"]
