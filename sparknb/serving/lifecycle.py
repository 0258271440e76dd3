"""Start, stop and wait for one server (a Target): the part of a swap a client waits through, and the test bed.

Everything started here runs in its own process group, so that stopping it stops the engine and
worker processes vLLM forks too, and nothing is left behind whatever fails. Commands run without a
shell; the API key reaches a server through its environment, never its command line.
"""

from __future__ import annotations

import atexit
import os
import shlex
import signal
import subprocess
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from . import cpu_repack
from .processes import LOCAL_HOSTS, die_with_parent, group_alive, group_memory, port_in_use, signal_group, wait_gone
from .targets import Target
from .. import engines
from ..errors import LifecycleError, PortInUseError, ServerError

# Lines after which vLLM's API process may linger although its engine is gone: waiting longer is pointless.
ENGINE_FAILED = ("Engine core initialization failed", "Worker failed with error", "InductorError")
# Signs of a compile cache cut short by a killed start: every later start fails until it is cleared.
BROKEN_CACHE = ("file too short", "InductorError", "Compile cache file corrupted")
# vLLM hangs on SIGTERM while it is still starting, so a server that never got ready gets only this long.
STARTING_GRACE_S = 5.0
# Where each server reads its API key from its environment (its engine's api_key_variable): whatever the
# command starts gets the key under every name, and nothing else under any.
API_KEY_VARIABLES = tuple(e.api_key_variable for e in engines.ENGINES.values() if e.api_key_variable)
STOP_TIMEOUT_S = 60.0
POLL_S = 0.25
ANSWER_TOKENS = 4


@dataclass
class Eviction:
    """How a server was stopped and how long the client would have waited for it."""

    seconds: float
    how: str
    stop_command_exit: int | None = None
    stop_command_output: str = ""


class Server:
    """A server this process started; stop() it, or use it as a context manager.

    The log anchor is the wall clock at launch (launched_at); the log is the start command's
    captured output, or the new part of the target's own log file.
    """

    def __init__(self, target: Target, process: subprocess.Popen, capture: Path, launched_at: float,
                 log_offset: int) -> None:
        self.target = target
        self.name = target.name
        self.url = target.endpoint
        self.port = urlsplit(target.endpoint).port
        self.pid = process.pid
        self.capture = capture
        self.launched_at = launched_at  # time.time() just before the process was made
        self.ready_s: float | None = None
        self.detached = False  # the start command handed the server to something else (docker start)
        self._process = process
        self._t0 = time.monotonic()
        self._log_offset = log_offset
        self._stopped: Eviction | None = None
        self._lock = threading.Lock()
        atexit.register(self._stop_quietly)

    def __repr__(self) -> str:
        return f"Server({self.name!r}, url={self.url!r}, pid={self.pid}, ready_s={self.ready_s})"

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def log_path(self) -> Path:
        return self.target.log or self.capture

    @property
    def api_key(self) -> str | None:
        return self.target.api_key

    @property
    def running(self) -> bool:
        """Whether anything of it is left: its leader, or any process of its group."""
        return self._process.poll() is None or group_alive(self.pid)

    @property
    def stopped(self) -> bool:
        return self._stopped is not None

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def wait_ready(self, timeout: float | None = None) -> Server:
        """Until the ready URL answers 200 for our model (ready_s is then set); a dead or late server is stopped and reported."""
        t = self.target
        timeout = t.ready_timeout_s if timeout is None else timeout
        last = "no answer yet"
        with httpx.Client(timeout=5.0, headers=_auth(t.api_key)) as http:
            while True:
                code = self._process.poll()
                if code is not None and not self.detached:
                    if code == 0 and t.stop:
                        self.detached = True  # e.g. `docker start NAME`: the server lives on elsewhere
                    else:
                        cause = cpu_repack.crash_cause(t.start, code)
                        self._fail(f"exited with code {code} before it was ready" + (f", {cause}" if cause else ""),
                                   exit_code=code)
                if any(line in self.log_tail(400) for line in ENGINE_FAILED):
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
                    self.ready_s = self.ready_s if self.ready_s is not None else self.elapsed()
                    return self
                if status == 401:
                    self._fail(f"refused the API key at {t.ready_url} (401); set the variable named by "
                               "api_key_env to the server's key (or another server, with another key, took the port)")
                if status is not None:
                    last = f"HTTP {status}"
                if self.elapsed() > timeout:
                    self._fail(f"was not ready after {timeout:g} s (lifecycle.ready_timeout_s; "
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
        """The stop command if there is one, then SIGTERM and, past the grace time, SIGKILL to the group.

        A server that never got ready gets only STARTING_GRACE_S: vLLM hangs on SIGTERM while starting.
        """
        with self._lock:
            if self._stopped is None:
                atexit.unregister(self._stop_quietly)
                self._stopped = self._stop(timeout)
            return self._stopped

    def _stop(self, timeout: float) -> Eviction:
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
            if not wait_gone(self.pid, self._process, grace):
                signal_group(self.pid, signal.SIGKILL)
                how.append(f"SIGKILL after {grace:g} s")
                wait_gone(self.pid, self._process, 30)
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            how.append("the leader did not exit")
        if group_alive(self.pid):
            how.append("PROCESSES LEFT RUNNING")
        return Eviction(time.monotonic() - t0, ", ".join(how) or "had already exited", rc, output)

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
        raise ServerError(f"{self.name} at {self.url} ({_short(self.target.start)}) {why}.{hint}\n"
                          f"Last lines of {self.log_path}:\n{tail}", pid=self.pid, exit_code=exit_code, log_tail=tail)


def launch(target: Target, capture: Path) -> Server:
    """Start without waiting (see Server.wait_ready), so several servers can compile side by side; output goes to `capture`."""
    if target.mode not in ("testbed", "command"):
        raise LifecycleError(f"{target.name} is a {target.mode} model: nothing to start here")
    host, port = urlsplit(target.endpoint).hostname or "", urlsplit(target.endpoint).port
    if host in LOCAL_HOSTS and port and port_in_use(port, host):
        raise PortInUseError(f"port {port} on {host} is already in use, where {target.name} is to answer. It is "
                             "not a process started here, so timing it would time the wrong server: stop it, or "
                             "pick another port (in the model's endpoint and start command).")
    offset = target.log.stat().st_size if target.log and target.log.exists() else 0
    env = dict(os.environ) | target.env
    for variable in API_KEY_VARIABLES:
        env.pop(variable, None)
        if target.api_key is not None:
            env[variable] = target.api_key  # the environment only: every user can read a command line
    capture.parent.mkdir(parents=True, exist_ok=True)
    launched_at = time.time()
    try:
        with open(capture, "ab") as out:
            process = subprocess.Popen(target.start, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True, preexec_fn=die_with_parent)
    except OSError as e:
        raise ServerError(f"{target.name}: cannot run {shlex.join(target.start)}: {e}. Check lifecycle.start "
                          "in the model's params (the program must be on PATH or given with its full path).") from None
    return Server(target, process, capture, launched_at, offset)


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


def _auth(key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def _short(argv: tuple[str, ...], limit: int = 140) -> str:
    text = shlex.join(argv)
    return text if len(text) <= limit else text[: limit - 3] + "..."
