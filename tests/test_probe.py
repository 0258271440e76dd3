"""Box health: the bandwidth probe measures, sets the figure against the hardware params, and is loud when low.

The GPU half (torch on a real GPU, against 4,800 GB/s) is in test_gpu.py.
"""

from __future__ import annotations

import pytest

from sparknb.machine import fingerprint, probe
from sparknb.runs.params import load_hardware, project_root

H200 = load_hardware("h200")


def test_the_cpu_probe_measures_this_machine():
    found = probe.measure(load_hardware("cpu-host"), {"available": False, "reason": "no GPU here"})
    assert found.method == "numpy copy on the CPU" and found.error is None
    assert 0.1 < found.gbs < 2000  # a CPU copies at a few GB/s to a few hundred, never zero, never HBM speed
    assert found.share is None  # cpu-host's params give no bandwidth
    assert found.finding().level == "info" and "give no bandwidth to compare" in found.finding().text
    assert found.line().endswith("cpu-host gives no figure to compare")


def test_far_below_the_params_is_a_loud_warning_and_near_it_is_not():
    slow = probe.Probe("torch copy on NVIDIA H200", 1200.0, 4800.0, "h200")
    assert slow.share == pytest.approx(0.25)
    assert slow.finding().level == "warning" and slow.finding().text.startswith("BOX BELOW ITS BANDWIDTH")
    assert "25% of the 4,800 GB/s in h200's params" in slow.finding().text
    assert slow.line().startswith("WARNING, UNDER 70%: 25% of h200's 4,800 GB/s")
    healthy = probe.Probe("torch copy on NVIDIA H200", 4300.0, 4800.0, "h200")
    assert healthy.finding().level == "info" and healthy.line().startswith("90% of h200's 4,800 GB/s: 4,300 GB/s")


def test_a_probe_that_cannot_run_is_unknown_never_zero():
    # NVML claims a GPU, but torch here sees none: the child process says so, and the figure stays unknown.
    gpu = {"available": True, "devices": [{"index": 0, "name": "claimed"}]}
    found = probe.measure(H200, gpu)
    if found.gbs is not None:
        pytest.skip("this machine's torch has a GPU: test_gpu.py covers it")
    assert found.error and found.share is None
    assert found.finding().level == "warning" and "could not run" in found.finding().text
    assert found.line().startswith("WARNING, not measured:")


def test_the_probe_is_in_the_fingerprint_and_its_table():
    found = probe.Probe("torch copy on NVIDIA H200", 1200.0, 4800.0, "h200")
    server = {"url": "http://127.0.0.1:8000/v1", "version": "0.32.0", "model": "m", "root": None, "max_model_len": None}
    fp = fingerprint.take(server=server, params={"guard": {"gpu": "1 GPU(s)"}}, project_dir=project_root(),
                          packages=(), probe=found.as_dict())
    assert fp["bandwidth_probe"]["gbs"] == 1200.0 and fp["bandwidth_probe"]["level"] == "warning"
    assert fingerprint.table(fp)["value"]["bandwidth probe"].startswith("WARNING, UNDER 70%")

