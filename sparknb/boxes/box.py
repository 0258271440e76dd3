"""One box of a campaign spread over several: the Ray actor that runs that box's cells there, and how a box
joins the cluster and is seen in it.

A cell runs here exactly as a local cell does: the model's server is brought up by its lifecycle,
the notebook runs with this box's guard, run lock and fingerprint, and its folder is sealed here
(it stays in this box's outputs/). Only the sealed folder's bytes go back to the campaign; the API
key is read from this box's own environment, so it never travels. One actor per box, and its cells
one after another: the GPU is exclusive.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import ray
import yaml
from ray.exceptions import GetTimeoutError, RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..errors import ParamsError, SparknbError
from ..machine import fingerprint, guard
from ..machine.fingerprint import BOX_ENV, NODE_ENV
from ..runs.execute import ExecuteError, run_notebook
from ..runs.params import BOX_NAME, BoxParams, load_model, on_box, project_root
from ..runs.run import outputs_dir, pack
from . import campaign
from .campaign import Cell

RESOURCE = "box:{}"  # the custom resource a box's Ray node announces (sparknb cluster join)
STOP_S = 90.0  # how long a stop waits for the cell or server start it interrupts
CONNECT_S = 10.0  # for the cluster's head to answer at all
INTERRUPTED = "interrupted (Ctrl-C on the campaign)"
WORKER_MARK = "SPARKNB_BOX_WORKER"  # in the environment of everything a box's actor starts: its servers, kernels
# Runs beside the actor, in a session of its own: once the actor is gone (its node killed, the campaign
# ended), whatever it started and left running is stopped. vLLM's engine outlives a killed API server.
WATCHDOG = """
import os, signal, sys, time
owner, mark = int(sys.argv[1]), sys.argv[2].encode()
def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
def marked():
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if mark in open(f"/proc/{entry}/environ", "rb").read().split(b"\\0") and alive(entry):
                found.append(int(entry))
        except OSError:
            pass
    return found
while alive(owner):
    time.sleep(1.0)
for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
    for pid in marked():
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    deadline = time.monotonic() + wait
    while marked() and time.monotonic() < deadline:
        time.sleep(0.2)
"""


def resource(box: str) -> str:
    return RESOURCE.format(box)


def facts() -> dict:
    """What this machine is, for the campaign's record and `sparknb cluster status`."""
    gpu = fingerprint.nvml()
    devices = gpu.get("devices") if isinstance(gpu.get("devices"), list) else []
    return {"box": os.environ.get(BOX_ENV), "hostname": platform.node(), "pid": os.getpid(),
            "node_id": ray.get_runtime_context().get_node_id(), "sparknb": fingerprint.project(project_root()),
            "ray": ray.__version__, "python": platform.python_version(), "outputs": str(outputs_dir()),
            "gpu_names": [d.get("name") for d in devices] if gpu.get("available") else gpu.get("reason"),
            "run_lock": guard.lock_holder()}


class Notes:
    """What a local campaign would write into its record from here (server up and down, the server's log):
    kept until the next answer to the campaign carries it back."""

    def __init__(self) -> None:
        self.items: list[tuple] = []

    def record(self, obj: dict) -> None:
        self.items.append(("record", obj))

    def write_text(self, name: str, text: str) -> None:
        self.items.append(("text", name, text))

    def take(self) -> list[tuple]:
        items, self.items = self.items, []
        return items


@ray.remote(concurrency_groups={"control": 1})
class Box:
    """The campaign's hands on one box: open a model's server, run cells, close it; stop on Ctrl-C."""

    def __init__(self, name: str, params: dict) -> None:
        self.name = name
        self.params = BoxParams.model_validate(params)
        os.environ[BOX_ENV] = name  # the notebooks' kernels inherit both: each run says where it ran
        os.environ[NODE_ENV] = ray.get_runtime_context().get_node_id()
        os.chdir(project_root())  # relative paths in a campaign mean the project's, on every box
        mark = f"{os.getpid()}-{uuid.uuid4().hex}"
        subprocess.Popen([sys.executable, "-c", WATCHDOG, str(os.getpid()), f"{WORKER_MARK}={mark}"],
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, env={k: v for k, v in os.environ.items() if k != WORKER_MARK})
        os.environ[WORKER_MARK] = mark
        self._models = Path(tempfile.mkdtemp(prefix=f"sparknb-box-{name}-"))
        self._serving: contextlib.ExitStack | None = None
        self._notes = Notes()
        self._phase: str | None = None  # "serving" or "cell" while one runs
        self._thread: int | None = None
        self._stopping = False

    def facts(self, models: list[str]) -> dict:
        """This box, and every problem with the campaign's models here, before anything starts."""
        problems = []
        for model in models:
            try:
                self._model_ref(model)
            except SparknbError as e:
                problems.append(f"{model}: {' '.join(str(e).split())}")
        return facts() | {"problems": problems}

    def open(self, model: str | None) -> dict:
        """Bring the model's server up as its lifecycle says (or check it is the one served)."""
        t0 = time.monotonic()
        if self._stopping:
            return self._answer(t0, ok=False, reason=f"server: {INTERRUPTED}", interrupted=True)
        with self._busy("serving"):
            try:
                if model is not None:
                    stack = contextlib.ExitStack()
                    endpoint = stack.enter_context(campaign.serving(self._model_ref(model), self._notes))
                    self._serving = stack
                    return self._answer(t0, ok=True, endpoint=endpoint)
                return self._answer(t0, ok=True, endpoint=None)
            except SparknbError as e:
                return self._answer(t0, ok=False, reason=f"server: {e}")
            except KeyboardInterrupt:
                return self._answer(t0, ok=False, reason=f"server: {INTERRUPTED}", interrupted=True)

    @ray.method(num_returns=2)
    def run(self, cell: Cell, endpoint: str | None) -> tuple[dict, bytes]:
        """One cell into its own sealed folder here; the folder comes back as bytes (run.pack)."""
        t0 = time.monotonic()
        folder, reason, status = None, None, "done"
        if self._stopping:
            return self._answer(t0, status="interrupted", reason=INTERRUPTED, seconds=0.0, pack_s=0.0, box_run=None,
                                bytes=0), b""
        with self._busy("cell"):
            try:
                folder = run_notebook(cell.notebook, cell.notebook_parameters(endpoint, self._model_ref),
                                      outputs_dir())
            except ExecuteError as e:
                folder, reason, status = e.folder, str(e), "failed"
            except SparknbError as e:
                reason, status = str(e), "failed"
            except KeyboardInterrupt as e:
                folder, reason, status = getattr(e, "folder", None), INTERRUPTED, "interrupted"
        seconds = time.monotonic() - t0
        payload = pack(folder) if folder is not None else b""
        return self._answer(t0, status=status, reason=reason, seconds=seconds, pack_s=time.monotonic() - t0 - seconds,
                            box_run=str(folder) if folder else None, bytes=len(payload)), payload

    def close(self) -> dict:
        """Stop the server open() started, whatever happened meanwhile."""
        t0 = time.monotonic()
        stack, self._serving = self._serving, None
        if stack is not None:
            stack.close()
        return self._answer(t0, ok=True)

    @ray.method(concurrency_group="control")
    def stop(self) -> dict:
        """Ctrl-C on the campaign: interrupt the cell (its kernel, as Ctrl-C in JupyterLab does) or the server's start.

        The kernel is interrupted again after a while, since an interrupt between two notebook cells
        is ignored; a server start is interrupted once, so that its own cleanup stops the server.
        """
        self._stopping = True
        deadline, raised, again = time.monotonic() + STOP_S, False, 0.0
        while self._phase is not None and time.monotonic() < deadline:
            if self._phase == "cell" and time.monotonic() >= again:
                for pid in _kernels():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGINT)
                        again = time.monotonic() + 5.0  # time for the study to seal what it took
            elif self._phase == "serving" and not raised and self._thread is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._thread),
                                                           ctypes.py_object(KeyboardInterrupt))
                raised = True
            time.sleep(0.2)
        return {"stopped": self._phase is None}

    # --- inside --------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _busy(self, phase: str):
        # Ray's threads block SIGINT, and a child inherits the mask: a kernel started so could not be interrupted.
        blocked = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        self._phase, self._thread = phase, threading.get_ident()
        try:
            yield
        finally:
            self._phase = self._thread = None
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _answer(self, t0: float, **fields) -> dict:
        return fields | {"call_s": time.monotonic() - t0, "notes": self._notes.take()}

    def _model_ref(self, name: str) -> str:
        """The model as the notebook is to load it here: its name, or its params with this box's changes."""
        own = load_model(name)
        model = on_box(own, self.params)
        if model is own:
            return name
        path = self._models / f"{model.name}.yaml"  # the file name gives the run id its label
        if not path.exists():
            path.write_text(yaml.safe_dump(model.model_dump(mode="json"), sort_keys=False))
        return str(path)


def _kernels() -> list[int]:
    """This process's notebook kernels (jupyter starts each one in a session of its own, so it is signalled alone)."""
    me, found = os.getpid(), []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == me and b"ipykernel" in Path(f"/proc/{entry}/cmdline").read_bytes():
                found.append(int(entry))
    return found


# --- joining the cluster, and seeing its boxes ----------------------------------------------------------

class ClusterError(SparknbError, RuntimeError):
    """The cluster cannot be used as asked; the message names the box and what to run on it."""


def reachable(address: str) -> None:
    """Something answers at HOST:PORT (auto: Ray finds the cluster itself); Ray would retry for ever."""
    if address == "auto":
        return
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
    except (OSError, ValueError) as e:
        raise ClusterError(f"Nothing answers at {address!r} ({e}); give the head's HOST:PORT as `sparknb cluster "
                           "join --head` printed it, or auto on a box of the cluster.") from None


def token_auth() -> dict[str, str]:
    """Ray (2.60) guards a cluster with a token where its head box has one: where a token is here too (in
    ~/.ray/auth_token, $RAY_AUTH_TOKEN_PATH or $RAY_AUTH_TOKEN), send it; Ray does so itself only for `auto`."""
    if "RAY_AUTH_MODE" in os.environ:
        return {}
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or Path.home() / ".ray" / "auth_token")
    return {"RAY_AUTH_MODE": "token"} if os.environ.get("RAY_AUTH_TOKEN") or path.is_file() else {}


def connect(address: str) -> bool:
    """This process as a Ray driver of the cluster at `address` (host:port, or auto for the one on this machine);
    False where it already was one (and so stays one afterwards)."""
    if ray.is_initialized():
        return False
    reachable(address)
    if token_auth():  # what Ray does by itself for `auto` only (ray 2.60; its own function, so as Ray reads a token)
        from ray._private.authentication.authentication_token_setup import (
            maybe_enable_token_auth_if_token_available,
        )

        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    try:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise ClusterError(f"No Ray cluster at {address!r} ({' '.join(str(e).split())[:300]}). Start one on the "
                           "first box with `sparknb cluster join --box NAME --head`, then give its HEAD:6379 "
                           "(or auto, on a box of the cluster).") from None
    return True


def nodes_by_box() -> dict[str, list[dict]]:
    """Every node Ray knows of, alive or not, under the box it announced (via its box: resource or label)."""
    found: dict[str, list[dict]] = {}
    for node in ray.nodes():
        names = {r.split(":", 1)[1] for r in node.get("Resources", {}) if r.startswith("box:")}
        names |= {v for k, v in (node.get("Labels") or {}).items() if k == "sparknb-box"}
        for name in names or {""}:
            found.setdefault(name, []).append(node)
    return found


def join(box: str, *, address: str = "", head: bool = False, port: int = 6379, extra: list[str] = ()) -> int:
    """`ray start` for this box: its node announces box:NAME, and everything it runs knows the box's name."""
    if not re.match(BOX_NAME, box):
        raise ParamsError(f"--box {box!r}: a box name is letters, digits, '.', '_' and '-' (as in the campaign file)")
    if head == bool(address):
        raise ParamsError("give --address HEAD:6379 (the first box's) or --head (on the first box), not both")
    command = [str(Path(sys.executable).with_name("ray")), "start", "--resources", json.dumps({resource(box): 1}),
               "--labels", f"sparknb-box={box}"]
    command += ["--head", "--port", str(port)] if head else ["--address", address]
    command += list(extra)
    print(f"+ {shlex.join(command)}", flush=True)
    return subprocess.run(command, env=os.environ | token_auth() | {BOX_ENV: box}, stdin=subprocess.DEVNULL).returncode


def status(address: str) -> list[dict]:
    """The boxes Ray sees: alive or not, their hardware as Ray and NVML see it, whether the run lock is held."""
    connected = connect(address)
    try:
        rows = []
        for box, nodes in sorted(nodes_by_box().items()):
            for node in nodes:
                row = {"box": box or "(no box)", "alive": node.get("Alive"), "node_id": node.get("NodeID"),
                       "address": node.get("NodeManagerAddress"), "cpus": node["Resources"].get("CPU"),
                       "gpus": node["Resources"].get("GPU", 0), "memory_gb": node["Resources"].get("memory", 0) / 1e9}
                if node.get("Alive"):
                    where = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
                    try:
                        row |= ray.get(_facts.options(scheduling_strategy=where).remote(), timeout=60)
                    except (RayError, GetTimeoutError) as e:
                        row["problem"] = f"did not answer: {type(e).__name__}"
                rows.append(row)
        return rows
    finally:
        if connected:
            ray.shutdown()


@ray.remote(num_cpus=0)
def _facts() -> dict:
    return facts()


def print_status(rows: list[dict]) -> None:
    """Two lines a box: where it is and what it has; which code it runs and whether its run lock is held."""
    if not rows:
        print("no nodes in the cluster")
    for row in rows:
        if not row["alive"]:
            print(f"{row['box']}: GONE (node {row['node_id']}, last at {row['address']}); its cells cannot run "
                  "until it joins again")
            continue
        names = row.get("gpu_names", "unknown")
        print(f"{row['box']}: node {row['node_id'][:12]} at {row['address']}, host {row.get('hostname', 'unknown')}; "
              f"{row['cpus']:g} CPUs, {row['gpus']:g} GPUs ({', '.join(names) if isinstance(names, list) else names}),"
              f" {row['memory_gb']:.0f} GB memory for Ray")
        lock = row.get("run_lock", "unknown")
        held = ("free" if lock is None else "unknown" if lock == "unknown"
                else "HELD by " + (", ".join(f"{k} {v}" for k, v in lock.items()) or "a run that is starting"))
        commit = row.get("sparknb") or {}
        print(f"  sparknb {commit.get('commit', 'unknown')}{' (dirty)' if commit.get('dirty') else ''}, "
              f"ray {row.get('ray', 'unknown')}; run lock {held}" + (f"; {row['problem']}" if "problem" in row else ""))
