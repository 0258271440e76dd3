"""A real test bed: the two tiny random-weight models, each served by the real vLLM CPU server on 127.0.0.1.

Serving one is launching its Target (tiny_models has the command and environment) as a
lifecycle.Server, like any other model; what is the test bed's own is the log folder, the one
retry over a broken compile cache, and `sparknb serve` in the foreground.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Sequence

from . import lifecycle
from .lifecycle import Server
from .processes import HOST, pick_port
from .targets import testbed_target
from .tiny_models import NAMES, cache_root, checkpoint, compile_cache, parameter_counts
from ..errors import ServerError

__all__ = ["HOST", "NAMES", "Server", "checkpoint", "launch", "parameter_counts", "pick_port", "serve_forever",
           "start"]


def launch(name: str, port: int, *, api_key: str | None = None, log_path: Path | None = None,
           extra_args: Sequence[str] = (), cpus: str | None = None, timeout: float = 900) -> Server:
    """Start without waiting, so several servers can compile side by side; see Server.wait_ready."""
    if log_path is None:
        log_path = cache_root() / "logs" / f"{name}-{port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    target = testbed_target(name, port, api_key=api_key, ready_timeout_s=timeout, extra_args=tuple(extra_args),
                            cpus=cpus)
    return lifecycle.launch(target, Path(log_path))


def start(name: str, port: int, *, api_key: str | None = None, log_path: Path | None = None,
          timeout: float = 900, extra_args: Sequence[str] = (), cpus: str | None = None) -> Server:
    """Start and wait until it serves; the first start takes minutes (torch.compile).

    If the model's compile cache turns out broken, it is cleared and the start tried once more.
    """
    for attempt in (1, 2):
        server = launch(name, port, api_key=api_key, log_path=log_path, extra_args=extra_args, cpus=cpus,
                        timeout=timeout)
        try:
            return server.wait_ready()
        except ServerError as e:
            if attempt == 2 or not any(sign in str(e) + server.log_tail(400) for sign in lifecycle.BROKEN_CACHE):
                raise
            shutil.rmtree(compile_cache(name), ignore_errors=True)
    raise AssertionError("unreachable")


def serve_forever(name: str, port: int, api_key: str | None = None) -> None:
    """For `sparknb serve NAME`: run one server in the foreground until Ctrl-C or SIGTERM."""
    stop_requested = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, _request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with start(name, port, api_key=api_key) as server:
            print(f"{name} listens on {server.url} (pid {server.pid}, log {server.log_path}); "
                  f"press Ctrl-C or send SIGTERM to {os.getpid()} to stop it", flush=True)
            while not stop_requested.wait(1.0):
                if not server.running:
                    raise ServerError(f"{name} exited unexpectedly.\n{server.log_tail()}", pid=server.pid)
            print(f"stopping {name} ...", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
