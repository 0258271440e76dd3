"""On a real GPU: NVML's truth in the fingerprint, the probe, telemetry, and the guard against a real foreign process.

The tests marked gpu need an NVIDIA GPU and skip elsewhere, saying so; run them on the GPU machine
with `pytest -m gpu tests/test_gpu.py`. The first test needs none: it checks, with a real listening
process and its real child, how the guard tells the server's processes from anyone else's (NVML's
process list is given there, since this machine has no GPU to list them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from sparknb.endpoint.client import Endpoint
from sparknb.errors import GuardError
from sparknb.machine import fingerprint, guard, probe, telemetry
from sparknb.runs.params import load_hardware
from sparknb.runs.run import Run, read_records, verify
from sparknb.runs.study import start
from support import free_port
from test_other_servers import REPO_ID, transformers_model

NVML = fingerprint.nvml()
HARDWARE = os.environ.get("SPARKNB_GPU_HARDWARE", "h200")  # the params of the GPU machine the tests run on
QUIET = {"running": 0.0, "waiting": 0.0}
gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not NVML.get("available") or not NVML.get("devices"),
                               reason=f"needs an NVIDIA GPU: {NVML.get('reason', 'NVML lists no device')}")
# A foreign CUDA process: one GiB of GPU memory held by a plain torch allocation.
FOREIGN = ("import time, torch; x = torch.empty(2**30, dtype=torch.uint8, device='cuda'); "
           "print('ready', flush=True); time.sleep(300)")
BUSY = ("import time, torch; a = torch.randn(8192, 8192, device='cuda', dtype=torch.bfloat16); t = time.time()\n"
        "while time.time() - t < {s}: a @ a\ntorch.cuda.synchronize()")


def held(code: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready", "the process did not get its GPU memory"
    return process


def release(process: subprocess.Popen) -> None:
    """End it and wait until NVML no longer lists it, so the next guard check does not see it."""
    process.kill()
    process.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(p["pid"] == process.pid for d in fingerprint.nvml()["devices"]
                                              for p in d["processes"]):
        time.sleep(0.2)


def in_child(code: str) -> str:
    """What CUDA says, asked in a child process: this one must hold no GPU context, or the guard would see it."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_process_listening_on_the_endpoint_and_its_children_are_the_servers():
    port = free_port()
    listener = ("import socket, subprocess, sys, time; s = socket.socket(); s.bind(('127.0.0.1', %d)); s.listen(); "
                "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)']); "
                "print(c.pid, flush=True); time.sleep(300)" % port)
    server = subprocess.Popen([sys.executable, "-c", listener], stdout=subprocess.PIPE, text=True)
    try:
        child = int(server.stdout.readline())
        listed = {"available": True, "devices": [{"index": 0, "processes": [
            {"pid": child, "used_memory_bytes": 2**30}, {"pid": server.pid, "used_memory_bytes": 2**30}]}]}
        assert guard.server_processes(f"http://127.0.0.1:{port}/v1") == {server.pid, child}
        report = guard.check(server_load=QUIET, gpu=listed, endpoint=Endpoint(f"http://127.0.0.1:{port}/v1", "m"))
        assert not report.findings and sum("the server's" in note for note in report.notes) == 2
        with pytest.raises(GuardError, match=f"GPU process {child} \\(.*sleep.*\\) using 1.0 GiB"):
            guard.check(server_load=QUIET, gpu=listed)  # without the endpoint, nobody vouches for them
    finally:
        server.kill()
        server.wait()
        subprocess.run(["kill", str(child)], check=False)


@gpu
@needs_gpu
def test_nvml_in_the_fingerprint_agrees_with_cuda():
    name, capability, total = in_child(
        "import torch; p = torch.cuda.get_device_properties(0); print(p.name, f'{p.major}.{p.minor}', p.total_memory, "
        "sep='|')").split("|")
    (first, *_) = NVML["devices"]
    assert first["name"] == name and first["compute_capability"] == capability
    assert first["memory_total_bytes"] >= int(total)
    assert NVML["driver_version"] and NVML["cuda_driver_version"]
    print("fingerprint gpu:", {k: NVML[k] for k in ("driver_version", "cuda_driver_version")},
          {k: first[k] for k in ("name", "compute_capability", "memory_total_bytes", "memory_used_bytes")})


@gpu
@needs_gpu
def test_the_probe_measures_the_gpus_memory_not_the_cpus():
    found = probe.measure(load_hardware(HARDWARE), NVML)
    assert found.error is None and NVML["devices"][0]["name"] in found.method
    assert found.gbs > 1000  # no CPU copies at a terabyte a second; HBM does
    print("probe:", found.line())


@gpu
@needs_gpu
def test_telemetry_sees_a_busy_gpu_once_a_second(tmp_path):
    run = Run.create("telemetry-test", {}, outputs=tmp_path)
    sampler = telemetry.Sampler(run).start()
    subprocess.run([sys.executable, "-c", BUSY.format(s=4)], check=True, timeout=120)
    time.sleep(1.5)
    sampler.stop()
    samples = [s for s in telemetry.read_file(run.path) if s["index"] == 0]
    assert all(s["available"] for s in samples) and 4 <= len(samples) <= 30  # ~1 Hz over the torch start and 4 s
    (device,) = telemetry.summarize(samples).devices
    assert device.busy_samples >= 2 and device.sm_clock_busy_mhz[1] > 1000 and device.power_max_w > 0
    assert all(isinstance(s["clock_events"], list) for s in samples)
    print("telemetry:", "\n".join(str(f) for f in telemetry.summarize(samples).findings()))


@gpu
@needs_gpu
def test_a_foreign_cuda_process_is_refused_by_pid_command_and_memory():
    foreign = held(FOREIGN)
    try:
        with pytest.raises(GuardError) as caught:
            guard.check(server_load=QUIET)
        message = str(caught.value)
        assert f"GPU process {foreign.pid} (" in message and "torch.empty" in message
        assert " GiB" in message or "unknown memory" in message
        print("guard refusal:", message)
    finally:
        release(foreign)


@gpu
@needs_gpu
def test_a_server_on_the_gpu_passes_and_a_run_keeps_its_telemetry(tmp_path):
    with transformers_model(tmp_path, "cuda", HARDWARE) as (path, server):
        ep = Endpoint(server.url, REPO_ID)
        ep.info()
        report = guard.check(server_load=ep.metrics().load(), endpoint=ep)
        assert not report.findings and any(f"GPU process {server.pid} (" in n for n in report.notes)
        foreign = held(FOREIGN)
        try:  # the server beside a foreign process: only the foreign one is named
            with pytest.raises(GuardError) as caught:
                guard.check(server_load=QUIET, endpoint=ep)
            assert f"GPU process {foreign.pid} (" in str(caught.value) and f"process {server.pid} " not in str(caught.value)
        finally:
            release(foreign)
        study = start("decode", model=str(path), settings={}, outputs=str(tmp_path / "outputs"))
        study.request({"n": 1}, lambda e: e.complete("The GPU is", max_tokens=64, ignore_eos=True))
        time.sleep(1.5)
        study.finish({})
    assert verify(study.run.path) == [] and read_records(study.run.path)[0]["completion_tokens"] == 64
    samples = telemetry.read_file(study.run.path)
    assert len(samples) >= 2 and all(s["available"] and s["sm_clock_mhz"] for s in samples)
    watched = json.loads((study.run.path / "summary.json").read_text())["telemetry"]
    assert watched["devices"][0]["samples"] == len(samples) and watched["findings"]
    assert study.fingerprint["bandwidth_probe"]["gbs"] > 1000
    assert any(f"GPU process {server.pid} (" in n for n in study.guard.notes)
