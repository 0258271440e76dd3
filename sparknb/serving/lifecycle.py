"""Start, stop and wait for one model, as its params' `lifecycle` says: the part of a swap a client waits through.

Everything started here runs in its own process group, so that stopping it stops the engine and
worker processes vLLM forks too, and nothing is left behind whatever fails. Commands run without a
shell; the API key reaches a server through its environment, never its command line.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from . import testbed
from .testbed import group_alive, group_members, signal_group  # one copy, shared with the test bed
from ..params import ModelParams

# Lines after which vLLM's API process may linger although its engine is gone: waiting longer is pointless.
ENGINE_FAILED = ("Engine core initialization failed", "Worker failed with error")
# Signs of a compile cache cut short by a killed start: every later start fails until it is cleared.
BROKEN_CACHE = ("file too short", "InductorError", "Compile cache file corrupted")
# vLLM hangs on SIGTERM while it is still starting, so a server that never got ready gets only this long.
STARTING_GRACE_S = 5.0
STOP_TIMEOUT_S = 60.0
POLL_S = 0.25
ANSWER_TOKENS = 4
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1")


class LifecycleError(ValueError):
    """A model's params do not say how to start it; the message names the field to add."""


class StartError(RuntimeError):
    """A start failed or never got ready; the message carries the last lines of the server's log."""

    def __init__(self, message: str, *, pid: int | None = None, exit_code: int | None = None,
                 log_tail: str = "") -> None:
        super().__init__(message)
        self.pid = pid
        self.exit_code = exit_code
        self.log_tail = log_tail


@dataclass(frozen=True)
class Target:
    """One model's lifecycle with every template filled in: what will run, where it will answer."""

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

    def describe(self) -> dict:
        """For the record: the command lines and URLs, without the key."""
        return {"name": self.name, "mode": self.mode, "endpoint": self.endpoint, "ready_url": self.ready_url,
                "ready_timeout_s": self.ready_timeout_s, "start": list(self.start), "stop": list(self.stop),
                "log": str(self.log) if self.log else None,
                "compile_cache": str(self.compile_cache) if self.compile_cache else None,
                "env": dict(self.env), "api_key_set": self.api_key is not None}


def resolve(model: ModelParams) -> Target:
    """Fill the templates now; a test-bed model gets a free port, since its usual one may be taken."""
    lc = model.lifecycle
    if lc.mode is None:
        raise LifecycleError(
            f"Model {model.name!r} has no lifecycle, so it cannot be started or swapped. Add to its params "
            "either `lifecycle: {start: \"vllm serve ... --port {port}\"}` (a command this study runs), or "
            "`lifecycle: {sidecar: true}` (a proxy such as llama-swap that swaps on request).")
    key = model.api_key()
    parts = urlsplit(model.endpoint)
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
    endpoint = model.endpoint.rstrip("/")
    compile_cache = Path(os.path.expanduser(lc.compile_cache)) if lc.compile_cache else None
    env: dict[str, str] = dict(lc.env)
    if lc.mode == "testbed":
        port = _free_port()  # not the usual one: test servers of other sessions like to sit there
        host, endpoint = testbed.HOST, f"http://{testbed.HOST}:{port}/v1"
        compile_cache = compile_cache or testbed.compile_cache(lc.testbed)
        env |= testbed.server_env()
    if compile_cache is not None:
        env.setdefault("VLLM_CACHE_ROOT", str(compile_cache))
    env.setdefault("VLLM_LOGGING_COLOR", "0")  # the log goes to a file; a notebook's kernel may force colour
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

    if lc.mode == "testbed":
        start = tuple(testbed.server_command(lc.testbed, port))
    else:
        start = fill("start", lc.start, True) or ()
    ready = fill("ready_url", lc.ready_url, False) or f"{endpoint}/models"
    log = fill("log", lc.log, False)
    return Target(name=model.name, served_model_name=model.served_model_name, mode=lc.mode, endpoint=endpoint,
                  ready_url=ready, ready_timeout_s=lc.ready_timeout_s, start=start,
                  stop=fill("stop", lc.stop, True) or (), log=Path(log) if log else None,
                  compile_cache=compile_cache, env=env, api_key=key)


# --------------------------------------------------------------------------------------------------
# A started model
# --------------------------------------------------------------------------------------------------


@dataclass
class Eviction:
    """How a model was stopped and how long the client would have waited for it."""

    seconds: float
    how: str
    stop_command_exit: int | None = None
    stop_command_output: str = ""


class Started:
    """A model this process started; stop() it. The log anchor is the wall clock at launch."""

    def __init__(self, target: Target, process: subprocess.Popen, capture: Path, launched_at: float,
                 t0: float, log_offset: int) -> None:
        self.target = target
        self.pid = process.pid
        self.capture = capture
        self.launched_at = launched_at  # time.time() just before the process was made
        self.ready_s: float | None = None
        self.detached = False  # the start command handed the server to something else (docker start)
        self._process = process
        self._t0 = t0
        self._log_offset = log_offset
        self._stopped: Eviction | None = None
        atexit.register(self._stop_quietly)

    def __repr__(self) -> str:
        return f"Started({self.target.name!r}, pid={self.pid}, ready_s={self.ready_s})"

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    @property
    def running(self) -> bool:
        return group_alive(self.pid)

    def wait_ready(self) -> float:
        """Seconds from launch until the ready URL answers 200; a dead or late server is stopped and reported."""
        t = self.target
        last = "no answer yet"
        with httpx.Client(timeout=5.0, headers=_auth(t.api_key)) as http:
            while True:
                code = self._process.poll()
                if code is not None and not self.detached:
                    if code == 0 and t.stop:
                        self.detached = True  # e.g. `docker start NAME`: the server lives on elsewhere
                    else:
                        self._fail(f"exited with code {code} before it was ready", exit_code=code)
                tail = self.log_tail(400)
                if any(line in tail for line in ENGINE_FAILED):
                    self._fail("lost its engine while starting")
                try:
                    response = http.get(t.ready_url)
                    status = response.status_code
                except httpx.HTTPError as e:
                    response, status, last = None, None, type(e).__name__
                if status == 200 and not self._ours(response):
                    self._fail(f"is not what answers at {t.ready_url}: that server does not serve "
                               f"{t.served_model_name!r}. Another server took the port; stop it or pick another port")
                if status == 200:
                    self.ready_s = self.elapsed()
                    return self.ready_s
                if status == 401:
                    self._fail(f"refused the API key at {t.ready_url} (401); set the variable named by "
                               "api_key_env to the server's key (or another server, with another key, took the port)")
                if status is not None:
                    last = f"HTTP {status}"
                if self.elapsed() > t.ready_timeout_s:
                    self._fail(f"was not ready after {t.ready_timeout_s:g} s (lifecycle.ready_timeout_s; "
                               f"{t.ready_url} last gave: {last})")
                time.sleep(POLL_S)

    def _ours(self, response: httpx.Response) -> bool:
        """At the default ready URL (/v1/models), the answer must list our model: a stray server's does not."""
        if self.target.ready_url != f"{self.target.endpoint}/models":
            return True
        try:
            return self.target.served_model_name in [m.get("id") for m in response.json().get("data", [])]
        except (ValueError, AttributeError):
            return False

    def first_answer(self) -> tuple[float, dict]:
        """Seconds from launch to the first answered request, retried until the ready deadline."""
        deadline = self._t0 + self.target.ready_timeout_s
        seconds, answer = ask(self.target, deadline=deadline, since=self._t0)
        if not answer["ok"]:
            self._fail(f"answered its ready URL but not a request: {answer['error']}")
        return seconds, answer

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> Eviction:
        """The stop command if there is one, then SIGTERM and, past the grace time, SIGKILL to the group."""
        if self._stopped is not None:
            return self._stopped
        atexit.unregister(self._stop_quietly)
        t0 = time.monotonic()
        how: list[str] = []
        rc, output = None, ""
        if self.target.stop:
            try:
                done = subprocess.run(self.target.stop, capture_output=True, text=True, timeout=timeout,
                                      stdin=subprocess.DEVNULL)
                rc, output = done.returncode, (done.stdout + done.stderr)[-2000:]
                how.append(f"stop command (exit {rc})")
            except (OSError, subprocess.TimeoutExpired) as e:
                how.append(f"stop command failed: {type(e).__name__}: {e}")
        if group_alive(self.pid):
            grace = timeout if self.ready_s is not None else min(timeout, STARTING_GRACE_S)
            signal_group(self.pid, signal.SIGTERM)
            how.append("SIGTERM")
            if not _wait_gone(self.pid, self._process, grace):
                signal_group(self.pid, signal.SIGKILL)
                how.append(f"SIGKILL after {grace:g} s")
                _wait_gone(self.pid, self._process, 30)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            how.append("the leader did not exit")
        if group_alive(self.pid):
            how.append("PROCESSES LEFT RUNNING")
        self._stopped = Eviction(time.monotonic() - t0, ", ".join(how) or "had already exited", rc, output)
        return self._stopped

    def _stop_quietly(self) -> None:
        try:
            self.stop()
        except Exception:
            pass

    def log_text(self) -> str:
        """What the server logged since launch: its captured output, or the new part of lifecycle.log."""
        path, offset = (self.target.log, self._log_offset) if self.target.log else (self.capture, 0)
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read().decode(errors="replace")
        except OSError as e:
            return f"(log unreadable: {e})"

    def log_tail(self, lines: int = 30) -> str:
        return "".join(deque(self.log_text().splitlines(keepends=True), maxlen=lines))

    def memory_bytes(self) -> int | None:
        """What our processes hold (proportional set size, so forked pages count once); None once gone."""
        return group_memory(self.pid)

    def _fail(self, why: str, exit_code: int | None = None) -> None:
        tail, long_tail = self.log_tail(), self.log_tail(400)  # as it stood, before the stop adds its own noise
        self.stop()
        hint = ""
        if any(sign in long_tail for sign in BROKEN_CACHE):
            hint = (f"\nThe compile cache looks broken (a start was killed while writing it); clear "
                    f"{self.target.compile_cache or 'the compile cache'} (clear_compile_cache=True) and run again.")
        where = self.target.log or "its output"
        raise StartError(f"{self.target.name} ({_short(self.target.start)}) {why}.{hint}\n"
                         f"Last lines of {where}:\n{tail}", pid=self.pid, exit_code=exit_code, log_tail=tail)


def start(target: Target, capture: Path) -> Started:
    """Launch without waiting (see Started.wait_ready); the output goes to `capture`."""
    if target.mode not in ("testbed", "command"):
        raise LifecycleError(f"{target.name} is a {target.mode} model: nothing to start here")
    host = urlsplit(target.endpoint).hostname or ""
    port = urlsplit(target.endpoint).port
    if host in LOCAL_HOSTS and port and _port_in_use(host, port):
        raise StartError(f"Something already listens on {host}:{port}, where {target.name} is to answer. It is "
                         "not a process this study started, so timing it would time the wrong server: stop "
                         "it, or change the port in the model's endpoint and start command.")
    offset = target.log.stat().st_size if target.log and target.log.exists() else 0
    env = dict(os.environ) | target.env
    env.pop("VLLM_API_KEY", None)
    if target.api_key is not None:
        env["VLLM_API_KEY"] = target.api_key  # the environment only: every user can read a command line
    capture.parent.mkdir(parents=True, exist_ok=True)
    launched_at = time.time()
    t0 = time.monotonic()
    try:
        with open(capture, "ab") as out:
            process = subprocess.Popen(target.start, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True, preexec_fn=_die_with_parent)
    except OSError as e:
        raise StartError(f"{target.name}: cannot run {shlex.join(target.start)}: {e}. Check lifecycle.start "
                         "in the model's params (the program must be on PATH or given with its full path).") from None
    return Started(target, process, capture, launched_at, t0, offset)


def ask(target: Target, *, deadline: float, since: float | None = None) -> tuple[float, dict]:
    """One short request, retried while the server is not there yet: the first answer a client gets.

    Returns seconds from `since` (default: now) until the answer, and what came back. For a sidecar
    this is the whole swap: the proxy stops one model and starts the other inside the request.
    """
    t0 = time.monotonic() if since is None else since
    body = {"model": target.served_model_name, "messages": [{"role": "user", "content": "Say hello."}],
            "max_tokens": ANSWER_TOKENS, "temperature": 0}
    attempts, last = 0, "no attempt"
    with httpx.Client(headers=_auth(target.api_key)) as http:
        while True:
            attempts += 1
            try:
                r = http.post(f"{target.endpoint}/chat/completions", json=body,
                              timeout=max(5.0, deadline - time.monotonic()))
                if r.status_code == 200 and r.json().get("choices"):
                    usage = r.json().get("usage") or {}
                    return time.monotonic() - t0, {"ok": True, "attempts": attempts,
                                                   "completion_tokens": usage.get("completion_tokens")}
                last = f"HTTP {r.status_code}: {r.text[:200]}"
                if r.status_code in (400, 401, 403, 404):  # asking again cannot help
                    break
            except (httpx.HTTPError, ValueError) as e:
                last = f"{type(e).__name__}: {e}"
            if time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
    return time.monotonic() - t0, {"ok": False, "attempts": attempts, "error": last}


# --------------------------------------------------------------------------------------------------
# Process groups
# --------------------------------------------------------------------------------------------------


def _die_with_parent() -> None:
    """In the child: if the kernel that started the server is killed, the server's leader dies too."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


try:
    _PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _PRCTL = None


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((testbed.HOST, 0))
        return sock.getsockname()[1]


def _port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        return sock.connect_ex(("127.0.0.1" if host in ("0.0.0.0", "localhost") else host, port)) == 0


def group_memory(pgid: int) -> int | None:
    total, seen = 0, False
    for pid in group_members(pgid):
        try:
            text = Path(f"/proc/{pid}/smaps_rollup").read_text()
            total += next(int(line.split()[1]) * 1024 for line in text.splitlines() if line.startswith("Pss:"))
            seen = True
        except (OSError, StopIteration, ValueError):
            continue
    return total if seen else None


def _wait_gone(pgid: int, process: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while group_alive(pgid):
        process.poll()  # reap the leader as soon as it exits
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _short(argv: tuple[str, ...], limit: int = 140) -> str:
    text = shlex.join(argv)
    return text if len(text) <= limit else text[: limit - 3] + "..."
