"""The middle level: `unshare` (util-linux) gives new mount, network, pid, IPC and UTS namespaces. The host's files
stay visible with the rights of the program's user, but the program gets a /proc of its own (the host's showed every
process's command line, an endpoint's password included) and a size-capped tmpfs over each place anyone may write
(/tmp, /var/tmp, /dev/shm, /run/lock), gone with its mount namespace."""

from __future__ import annotations

import os

from .fence import PLACES
from .result import Launch

WHAT = ("no network, own pids and /proc, its own capped /tmp, /var/tmp, /dev/shm (unshare), but the host's other "
        "files with an unprivileged user's rights")
LAUNCHER = "unshare"
INSTALL = "util-linux"
HOME = "/tmp"


def launch(launcher: str, prefixes: tuple[str, ...], uid: int | None, folder: str, size: int) -> Launch:
    """As root, the harness mounts the tmpfs then drops to `uid`; otherwise it does so as root of a user namespace
    of its own (you, outside), then enters one more, where it is nobody, with no power over its mounts."""
    argv = [launcher, "--mount", "--propagation", "private", "--mount-proc", "--net", "--pid", "--ipc", "--uts",
            "--fork", "--kill-child"]
    if uid is None:
        argv += ["--user", "--map-root-user"]
    mounts = [place for place in PLACES if os.path.isdir(place)]
    return Launch(argv + ["--"], None, {"mounts": mounts, "size": size, "uid": uid, "home": HOME}, HOME)
