"""The strongest level: bubblewrap (`bwrap`) gives new user, network, pid, IPC and UTS namespaces and a file system
of its own: the interpreter's folders read-only, / and /dev read-only, and a size-capped tmpfs for each place a
program may write (its HOME, /tmp, /var/tmp, /dev/shm). bubblewrap's own /dev is a tmpfs of half the RAM with
only the per-file limit (1.6 GB written in 1 s here, memory the model server needs), so it is remounted read-only."""

from __future__ import annotations

import os

from .result import Launch

WHAT = "no network, own pids, and a file system of its own (bubblewrap)"
LAUNCHER = "bwrap"
INSTALL = "bubblewrap"
HOME = "/home/sandbox"
WRITABLE = (HOME, "/tmp", "/var/tmp")


def launch(launcher: str, prefixes: tuple[str, ...], uid: int | None, folder: str, size: int) -> Launch:
    argv = [launcher, "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for prefix in prefixes:
        if not prefix.startswith("/usr/") and prefix != "/usr":
            argv += ["--ro-bind", prefix, prefix]
    for file in ("/etc/ld.so.cache", "/etc/localtime"):
        argv += ["--ro-bind-try", file, file]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(size), "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    for place in WRITABLE:
        argv += ["--size", str(size), "--tmpfs", place]
    return Launch(argv + ["--remount-ro", "/", "--chdir", HOME, "--"], uid, {}, HOME)
