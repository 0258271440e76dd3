"""GPU telemetry: the sampler keeps what NVML says, says why when it cannot, and the summary names throttling.

The real NVML of a real GPU is in test_gpu.py. Here: the sampler on a machine without a GPU, the
summary over given samples, and each NVML call failing on its own (a GB10 answers some calls with
NOT_SUPPORTED; no GPU here can be made to do that, so a stand-in module raises it).
"""

from __future__ import annotations

import json
import time
import types

import pytest

from sparknb.machine import fingerprint, telemetry
from sparknb.runs.run import Run, verify

NO_GPU = not fingerprint.nvml().get("available")


def sample(sm: float | None, util: float | None, events: list[str] | None = None, **extra) -> dict:
    """One sample as the sampler writes it."""
    return {"available": True, "index": 0, "sm_clock_mhz": sm, "sm_clock_max_mhz": 1980, "mem_clock_mhz": 3201,
            "power_w": 300.0, "power_limit_w": 700.0, "temperature_c": 40, "gpu_util_pct": util,
            "mem_util_pct": 10, "clock_events": events if events is not None else [], **extra}


@pytest.mark.skipif(not NO_GPU, reason="this machine has a GPU: test_gpu.py samples it")
def test_without_a_gpu_the_sampler_records_why_and_stops_by_itself(tmp_path):
    run = Run.create("telemetry-test", {}, outputs=tmp_path)
    sampler = telemetry.Sampler(run, interval_s=0.05).start()
    time.sleep(0.5)
    kept = sampler.samples()
    assert len(kept) == 1 and kept[0]["available"] is False and kept[0]["reason"].startswith("NVML not usable (")
    sampler.stop()
    sampler.stop()  # a second stop neither writes nor fails
    assert [json.loads(line) for line in (run.path / telemetry.FILE).read_text().splitlines()] == kept
    (finding,) = telemetry.summarize(kept).findings()
    assert finding.level == "info" and finding.text.startswith("No GPU telemetry: NVML not usable (")


def test_a_sealed_run_gets_no_late_telemetry(tmp_path):
    run = Run.create("telemetry-test", {}, outputs=tmp_path)
    sampler = telemetry.Sampler(run, interval_s=0.05).start()
    time.sleep(0.2)
    run.seal()
    time.sleep(0.2)
    sampler.stop()  # must not raise on the read-only folder
    assert verify(run.path) == []  # what was taken before the seal is sealed with it; nothing came after


def test_throttling_and_a_busy_clock_drop_are_warnings_that_name_them():
    samples = [sample(1980, 95), sample(1980, 90), sample(1500, 92, ["sw_power_cap"]),
               sample(1500, 91, ["sw_power_cap", "hw_thermal_slowdown"])]
    summary = telemetry.summarize(samples)
    (gpu,) = summary.devices
    assert gpu.throttled == {"sw_power_cap": 2, "hw_thermal_slowdown": 1} and gpu.held_back
    assert gpu.clocks_dropped and gpu.sm_clock_busy_mhz == (1500, 1980) and summary.throttled
    warned = [f.text for f in summary.findings() if f.level == "warning"]
    assert len(warned) == 2
    assert "sw_power_cap in 2 of 4 samples" in warned[0] and "hw_thermal_slowdown in 1 of 4" in warned[0]
    assert "dropped to 1500 MHz" in warned[1] and "1980 MHz" in warned[1]
    assert summary.as_dict()["throttled"] is True


def test_a_throttle_reason_at_full_clock_is_said_but_not_a_slowdown():
    # As an H200 did during a decode run: sw_power_cap named now and then, at 1965 of 1980 MHz and 300 W of 700.
    samples = [sample(1980, 30), sample(1965, 35, ["sw_power_cap"]), sample(1980, 20), sample(1965, 25, ["sw_power_cap"])]
    summary = telemetry.summarize(samples)
    (gpu,) = summary.devices
    assert gpu.throttled == {"sw_power_cap": 2} and not gpu.held_back and not summary.throttled
    (finding,) = summary.findings()
    assert finding.level == "info" and "NVML named sw_power_cap in 2 of 4 samples, at 1965 MHz, not a slowdown" in finding.text


def test_low_clocks_while_idle_are_not_a_drop():
    # An idle GPU parks its clocks low on purpose (345 MHz on an idle H200); only busy samples count.
    samples = [sample(345, 0, ["gpu_idle"]), sample(1980, 88), sample(1965, 93), sample(345, 2, ["gpu_idle"])]
    summary = telemetry.summarize(samples)
    (gpu,) = summary.devices
    assert gpu.busy_samples == 2 and not gpu.clocks_dropped and not gpu.throttled and not summary.throttled
    (finding,) = summary.findings()
    assert finding.level == "info" and "SM 1965-1980 MHz while busy" in finding.text and "held steady" in finding.text
    assert "mean utilization 46%" in finding.text


def test_figures_nvml_never_gave_are_unknown_not_zero():
    samples = [sample(1980, 90, None, power_w=None, power_limit_w=None, temperature_c=None)]
    (finding,) = telemetry.summarize(samples).findings()
    assert "power up to unknown of unknown W" in finding.text and "up to unknown C" in finding.text


def test_each_nvml_call_is_asked_on_its_own():
    # A stand-in for NVML on a GB10: power and clock reasons answer NOT_SUPPORTED, the rest answer.
    class NVMLError(Exception):
        pass

    class NotSupported(NVMLError):
        pass

    def unsupported(*_):
        raise NotSupported()

    nvml = types.SimpleNamespace(
        NVMLError=NVMLError, NVMLError_NotSupported=NotSupported, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2,
        NVML_TEMPERATURE_GPU=0,
        nvmlDeviceGetHandleByIndex=lambda i: types.SimpleNamespace(index=i),
        nvmlDeviceGetClockInfo=lambda h, kind: {1: 2418, 2: 4266}[kind],
        nvmlDeviceGetMaxClockInfo=lambda h, kind: 3003,
        nvmlDeviceGetPowerUsage=unsupported, nvmlDeviceGetEnforcedPowerLimit=unsupported,
        nvmlDeviceGetTemperature=lambda h, kind: 51,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetCurrentClocksEventReasons=unsupported,
    )
    read = telemetry.read(nvml, 0)
    assert read["sm_clock_mhz"] == 2418 and read["mem_clock_mhz"] == 4266 and read["temperature_c"] == 51
    assert read["power_w"] is None and read["power_limit_w"] is None and read["clock_events"] is None
    assert read["gpu_util_pct"] == 97
