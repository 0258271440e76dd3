"""The weakest level: the limits, an empty environment and a working folder only; the NETWORK IS REACHABLE and the
host's /proc is visible. Run as root, sparknb gives each program a uid that owns nothing else, so that kill(-1)
reaches only the program and every file it leaves in a place anyone may write is found by its owner and removed."""

from __future__ import annotations

from .fence import PLACES
from .result import Launch

WHAT = "limits, an empty environment and an unprivileged user only: the NETWORK IS REACHABLE"
LAUNCHER = ""
INSTALL = ""


def launch(launcher: str, prefixes: tuple[str, ...], uid: int | None, folder: str, size: int) -> Launch:
    """As root, the harness starts as root and drops to `uid` (its judge, where one grades, to a uid of its own)."""
    if uid is None:
        return Launch([], None, {}, folder)
    return Launch([], None, {"uid": uid, "home": folder}, folder, PLACES)
