"""A real test bed: the two tiny random-weight models, served on 127.0.0.1 by the real vLLM CPU server
or by llama.cpp's llama-server.

Serving one is launching its Target (tiny_models has vLLM's command and environment, gguf_models
llama-server's) as a lifecycle.Server, like any other model; what is the test bed's own is the log
folder, the one retry over a broken vLLM compile cache, and `sparknb serve` in the foreground.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Sequence

from . import lifecycle, llama_server, real_models, tiny_models
from .lifecycle import Server
from .processes import HOST, pick_port
from .targets import check_vllm, testbed_target
from .tiny_models import NAMES, cache_root, checkpoint, compile_cache, parameter_counts
from ..errors import LifecycleError, ServerError

__all__ = ["HOST", "NAMES", "Server", "checkpoint", "launch", "parameter_counts", "pick_port", "ready",
           "serve_forever", "start"]


def launch(name: str, port: int, *, engine: str = "vllm", api_key: str | None = None, log_path: Path | None = None,
           extra_args: Sequence[str] = (), cpus: str | None = None, timeout: float = 900, prompt_cache: bool = False,
           binary: str | os.PathLike | None = None) -> Server:
    """Start without waiting, so several servers can compile side by side; see Server.wait_ready.

    `engine` is vllm or llama.cpp; `prompt_cache` and `binary` are llama.cpp's (see targets.testbed_target).
    """
    if log_path is None:
        tag = "" if engine == "vllm" else "-llamacpp"
        log_path = cache_root() / "logs" / f"{name}{tag}-{port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    target = testbed_target(name, port, engine=engine, api_key=api_key, ready_timeout_s=timeout,
                            extra_args=tuple(extra_args), cpus=cpus, prompt_cache=prompt_cache, binary=binary)
    return lifecycle.launch(target, Path(log_path))


def start(name: str, port: int, **options) -> Server:
    """Start and wait until it serves (see `ready`); a first vLLM start takes minutes (torch.compile), llama-server
    seconds. `options` are launch's."""
    return ready(launch(name, port, **options), name, port, **options)


def ready(server: Server, name: str, port: int, **options) -> Server:
    """A launched server, once it serves. Several can be launched first and waited for after, so that they start side
    by side. If a vLLM model's compile cache turns out broken, it is cleared and the start tried once more."""
    try:
        return server.wait_ready()
    except ServerError as e:
        if options.get("engine", "vllm") != "vllm" or not any(sign in str(e) + server.log_tail(400)
                                                              for sign in lifecycle.BROKEN_CACHE):
            raise
        shutil.rmtree(compile_cache(name), ignore_errors=True)
        return launch(name, port, **options).wait_ready()


def params_name(name: str, engine: str) -> str:
    """The params file of a test-bed model on an engine: tiny-dense, tiny-dense-llamacpp, smollm2-vllm, ..."""
    if engine == "llama.cpp":
        return f"{name}-llamacpp"
    return f"{name}-vllm" if check_vllm(name) in real_models.VLLM_SERVINGS else name


def serving_args(name: str, engine: str, slots: int | None = None, prompt_cache: bool = True) -> tuple[str, ...]:
    """`sparknb serve`'s --slots and --prompt-cache off as llama-server's options: each slot keeps the context it
    has by default. The prompt cache off makes greedy answers repeatable (SmolLM2 gave two identical requests
    different answers with it on)."""
    if slots is not None and slots < 1:
        raise LifecycleError(f"--slots {slots}: give 1 or more")
    if engine != "llama.cpp" and (slots is not None or not prompt_cache):
        raise LifecycleError("--slots and --prompt-cache off are llama-server's options: add --engine llama.cpp")
    per_slot = real_models.SLOT_CONTEXT if name in real_models.NAMES else tiny_models.MAX_MODEL_LEN
    sized = ("--parallel", str(slots), "--ctx-size", str(slots * per_slot)) if slots is not None else ()
    return (*sized, *(() if prompt_cache else ("--no-cache-prompt",)))


def serve_forever(name: str, port: int, api_key: str | None = None, engine: str = "vllm",
                  extra_args: tuple[str, ...] = ()) -> None:
    """For `sparknb serve NAME [--engine llama.cpp]`: one server in the foreground until Ctrl-C or SIGTERM.

    With llama.cpp and no llama-server anywhere, the pinned one is built first (minutes, once).
    """
    if engine == "llama.cpp":
        llama_server.ensure(log=lambda m: print(m, flush=True))  # found again by start(), with where it came from
    stop_requested = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, _request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with start(name, port, engine=engine, api_key=api_key, extra_args=extra_args) as server:
            print(f"{name} ({engine}) listens on {server.url} (pid {server.pid}, log {server.log_path}); "
                  f"press Ctrl-C or send SIGTERM to {os.getpid()} to stop it", flush=True)
            while not stop_requested.wait(1.0):
                if not server.running:
                    raise ServerError(f"{name} exited unexpectedly.\n{server.log_tail()}", pid=server.pid)
            print(f"stopping {name} ...", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
