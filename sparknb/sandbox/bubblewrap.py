"""The strongest level: bubblewrap (`bwrap`) gives new user, network, pid, IPC and UTS namespaces and a file system
of its own: the interpreter's folders read-only, / and /dev read-only, and a size-capped tmpfs for each place a
program may write (its HOME, /tmp, /var/tmp, /dev/shm), mounted by the harness (bwrap's --tmpfs takes no inode cap:
100,000 files went into a 4 MB one), which holds CAP_SYS_ADMIN in bubblewrap's user namespace for that alone and
then enters one of its own, where it owns no mount. bubblewrap's --dev is a tmpfs of half the RAM with only the
per-file limit (1.6 GB written in 1 s here, memory the model server needs): its /dev is a read-only tmpfs of 64 KB
with five devices bound in."""

from __future__ import annotations

import os

from .result import Launch

WHAT = "no network, own pids, and a file system of its own (bubblewrap)"
LAUNCHER = "bwrap"
INSTALL = "bubblewrap"
HOME = "/home/sandbox"
WRITABLE = (HOME, "/tmp", "/var/tmp")
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")


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
    argv += ["--proc", "/proc", "--size", "65536", "--tmpfs", "/dev"]  # bwrap's --dev: no mount can be made after it
    for device in DEVICES:
        argv += ["--dev-bind", device, device]
    argv += ["--dir", "/dev/shm", "--remount-ro", "/dev", "--cap-add", "CAP_SYS_ADMIN"]
    for place in WRITABLE:
        argv += ["--dir", place]
    setup = {"mounts": [*WRITABLE, "/dev/shm"], "size": size, "uid": None, "home": HOME}
    return Launch(argv + ["--remount-ro", "/", "--chdir", HOME, "--"], uid, setup, HOME)
