"""The middle level: `unshare` (util-linux) gives new mount, network, pid, IPC and UTS namespaces. The host's files
stay visible with the rights of the program's user, read-only (run as you, it appended to your files; as root, its
own uid wrote in any folder anyone may write), but the program gets a /proc of its own (the host's showed every
process's command line, an endpoint's password included) and a size-capped tmpfs over each place anyone may write
(/tmp, /var/tmp, /dev/shm, /run/lock), gone with its mount namespace."""

from __future__ import annotations

import os
import pwd

from .fence import PLACES
from .result import Launch

WHAT = ("no network, own pids, /proc and System V IPC, its own capped /tmp, /var/tmp, /dev/shm (unshare) and, run "
        "as you, your home hidden, but the host's other files with an unprivileged user's rights")
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
    mounts = [place for place in PLACES if os.path.isdir(place)] + (homes() if uid is None else [])
    setup = {"read_only": True, "mounts": mounts, "size": size, "uid": uid, "home": HOME}
    return Launch(argv + ["--"], None, setup, HOME)


def homes() -> list[str]:
    """Your home folders ($HOME and the account's), hidden behind a tmpfs of the program's own: run as you, it has
    your rights, and read your 0600 files and appended to ~/.bashrc and ~/.profile before (issue 38)."""
    found = {os.path.realpath(h) for h in (os.environ.get("HOME"), _account_home()) if h and os.path.isdir(h)}
    return sorted(h for h in found if h != "/" and not any(h == p or h.startswith(p + "/") for p in PLACES))


def _account_home() -> str | None:
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return None
