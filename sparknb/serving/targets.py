"""What a server will be: a model's `lifecycle` with every template filled in, or a tiny test-bed model.

Filled in before anything starts, so a bad template fails with the field named, and so the record
can say exactly what ran (without the key: it reaches a server through its environment only).
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import BuildError, LifecycleError
from ..runs.params import ModelParams
from . import dequantized, gguf_models, llama_server, real_models, tiny_models
from .processes import HOST, free_port


@dataclass(frozen=True)
class Target:
    """One server with every template filled in: what will run, where it will answer."""

    name: str
    served_model_name: str
    mode: str  # testbed, command or sidecar
    endpoint: str
    ready_url: str
    ready_timeout_s: float
    start: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()
    log: Path | None = None
    compile_cache: Path | None = None
    env: dict[str, str] = field(default_factory=dict)  # only what is set on top of ours, for the record
    api_key: str | None = field(default=None, repr=False)
    engine: str | None = None  # the server family where it is known: vllm or llama.cpp for the test bed
    binary: str | None = None  # llama-server: which binary, and where it came from (see llama_server)

    def describe(self) -> dict:
        """For the record: the command lines and URLs, without the key."""
        return {"name": self.name, "mode": self.mode, "endpoint": self.endpoint, "ready_url": self.ready_url,
                "ready_timeout_s": self.ready_timeout_s, "start": list(self.start), "stop": list(self.stop),
                "log": str(self.log) if self.log else None,
                "compile_cache": str(self.compile_cache) if self.compile_cache else None,
                "env": dict(self.env), "api_key_set": self.api_key is not None, "engine": self.engine,
                "binary": self.binary}


def testbed_target(name: str, port: int, *, engine: str = "vllm", api_key: str | None = None,
                   ready_timeout_s: float = 900, extra_args: tuple[str, ...] = (), cpus: str | None = None,
                   compile_cache: Path | None = None, env: dict[str, str] | None = None, prompt_cache: bool = False,
                   binary: str | os.PathLike | None = None) -> Target:
    """A test-bed model on this machine, served by vLLM's CPU build or by llama.cpp's llama-server: a tiny one, or
    the real SmolLM2 (its GGUF as shipped on llama-server, the checkpoint written from it on vLLM: dequantized).

    vLLM: each model has a compile cache of its own, so no two servers write the same files.
    llama.cpp: the model's GGUF form; ready when /health answers 200 (503 while it loads); the
    binary by llama_server's precedence (`binary`, $SPARKNB_LLAMA_SERVER, PATH, the pinned build).
    `prompt_cache` keeps llama-server's default host-memory prompt cache on (see gguf_models).
    """
    endpoint = f"http://{HOST}:{port}/v1"
    if engine == "llama.cpp":
        found = llama_server.find(binary)
        if found is None:
            raise BuildError(llama_server.missing_reason())
        command = real_models.server_command if name in real_models.NAMES else gguf_models.server_command
        start = command(name, port, found.path, prompt_cache=prompt_cache, extra_args=extra_args)
        return Target(name=name, served_model_name=_served(name), mode="testbed", endpoint=endpoint,
                      ready_url=f"http://{HOST}:{port}/health", ready_timeout_s=ready_timeout_s, start=tuple(start),
                      env=dict(env or {}), api_key=api_key, engine=engine, binary=f"{found.path} ({found.origin})")
    if engine != "vllm":
        raise LifecycleError(f"unknown test-bed engine {engine!r}; choose vllm or llama.cpp")
    cache = compile_cache or tiny_models.compile_cache(name)
    return Target(name=name, served_model_name=_served(name), mode="testbed", endpoint=endpoint,
                  ready_url=f"{endpoint}/models", ready_timeout_s=ready_timeout_s,
                  start=tuple(_vllm(name, port, extra_args)),
                  compile_cache=cache, env=_with_defaults({**(env or {}), **tiny_models.server_env(cpus)}, cache),
                  api_key=api_key, engine=engine)


def _served(name: str) -> str:
    return real_models.SERVED if name in real_models.NAMES else name


def _vllm(name: str, port: int, extra_args: tuple[str, ...]) -> list[str]:
    """vLLM's command: a tiny model's, or the real model's dequantized checkpoint with its serving's options
    (smollm2-tools: the tool template and parser, real_models.VLLM_SERVINGS)."""
    if check_vllm(name) in real_models.VLLM_SERVINGS:
        return dequantized.server_command(port, (*real_models.VLLM_SERVINGS[name], *extra_args))
    return tiny_models.server_command(name, port, extra_args)


def check_vllm(name: str) -> str:
    """The name, if vLLM's test bed serves it: the real model's speculative servings are llama-server's only."""
    if name in real_models.NAMES and name not in real_models.VLLM_SERVINGS:
        raise LifecycleError(f"{name} is served by llama-server only (its speculation is llama-server's): use "
                             f"engine llama.cpp, or {real_models.SERVED} for the same weights on vLLM")
    return name


def resolve(model: ModelParams) -> Target:
    """Fill the templates now; a test-bed model gets a free port, since its usual one may be taken."""
    lc = model.lifecycle
    if lc.mode is None:
        raise LifecycleError(
            f"Model {model.name!r} has no lifecycle, so it cannot be started or swapped. Add to its params "
            "either `lifecycle: {start: \"vllm serve ... --port {port}\"}` (a command this study runs), or "
            "`lifecycle: {sidecar: true}` (a proxy such as llama-swap that swaps on request).")
    compile_cache = Path(os.path.expanduser(lc.compile_cache)) if lc.compile_cache else None
    if lc.mode == "testbed":  # not the usual port: test servers of other sessions like to sit there
        target = testbed_target(lc.testbed, free_port(), engine=lc.engine or "vllm", api_key=model.api_key(),
                                ready_timeout_s=lc.ready_timeout_s, compile_cache=compile_cache, env=dict(lc.env))
        return dataclasses.replace(target, name=model.name)  # the params' name (tiny-dense-llamacpp), as a study keys it
    parts = urlsplit(model.endpoint)
    host, port = parts.hostname or HOST, parts.port or (443 if parts.scheme == "https" else 80)
    endpoint = model.endpoint.rstrip("/")
    values = {"python": sys.executable, "port": port, "host": host, "model": model.served_model_name,
              "name": model.name, "endpoint": endpoint,
              "compile_cache": str(compile_cache) if compile_cache else None}

    def fill(what: str, template: str | None, split: bool) -> tuple[str, ...] | str | None:
        if template is None:
            return None
        if "{compile_cache}" in template and compile_cache is None:
            raise LifecycleError(f"lifecycle.{what} of {model.name!r} uses {{compile_cache}}, but no "
                                 "lifecycle.compile_cache is set; name the folder")
        if not split:
            return os.path.expanduser(template.format(**values))
        return tuple(word.format(**values) for word in shlex.split(template))

    log = fill("log", lc.log, False)
    return Target(name=model.name, served_model_name=model.served_model_name, mode=lc.mode, endpoint=endpoint,
                  ready_url=fill("ready_url", lc.ready_url, False) or f"{endpoint}/models",
                  ready_timeout_s=lc.ready_timeout_s, start=fill("start", lc.start, True) or (),
                  stop=fill("stop", lc.stop, True) or (), log=Path(log) if log else None,
                  compile_cache=compile_cache, env=_with_defaults(dict(lc.env), compile_cache), api_key=model.api_key())


def _with_defaults(env: dict[str, str], compile_cache: Path | None) -> dict[str, str]:
    """The compile cache where vLLM looks for it, and no colour: the log goes to a file (a kernel may force colour)."""
    if compile_cache is not None:
        env.setdefault("VLLM_CACHE_ROOT", str(compile_cache))
    env.setdefault("VLLM_LOGGING_COLOR", "0")
    return env
