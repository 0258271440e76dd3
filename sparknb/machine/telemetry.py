"""GPU telemetry during a run: clocks, power, temperature, utilization and throttling, once a second.

A GPU that drops its clocks halfway (a power cap, heat, a bad power negotiation on a DGX Spark)
makes the later requests slower for reasons that are not the model's, and nvidia-smi afterwards
shows nothing. So a background thread asks NVML about once a second for as long as the run is
open, each call on its own (a GB10 answers some with NOT_SUPPORTED: those stay unknown, not zero),
and the run keeps every sample in telemetry.jsonl. With no GPU the sampler records why and stops.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..endpoint.client import now
from ..errors import RunError
from ..runs.report import Finding, info, warning
from ..runs.run import Run
from .fingerprint import nvml_call

FILE = "telemetry.jsonl"
INTERVAL_S = 1.0
# NVML's clock-event reason bits; the last five slow the GPU down, the first four are ordinary states.
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x10: "sync_boost", 0x100: "display_clock_setting",
           0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown"}
THROTTLING = ("sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
# A sample counts as busy from this utilization on (idle clocks are low on purpose): a launch-bound decode,
# as transformers serve's on an H200, keeps the GPU only 10 to 40% busy.
BUSY_PCT = 10
DROP = 0.90  # an SM clock under 90% of the highest busy one (or, under a throttle reason, of the maximum) is a drop


class Sampler:
    """The background sampler of one run; each sample is on disk in telemetry.jsonl as soon as it is taken,
    so a kernel killed halfway keeps the telemetry up to then."""

    def __init__(self, run: Run | None, interval_s: float = INTERVAL_S) -> None:
        self.run = run
        self.interval_s = interval_s
        self._samples: list[dict] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sparknb-telemetry", daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def samples(self) -> list[dict]:
        with self._lock:
            return list(self._samples)

    def summary(self) -> Summary:
        """Over the samples so far: a study may take it before it writes its own summary."""
        return summarize(self.samples())

    def stop(self) -> None:
        """Stop sampling, before the run is sealed; a second call does nothing."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10 * self.interval_s + 5)

    def _keep(self, sample: dict) -> None:
        with self._lock:
            if self._stopping.is_set() and self._samples:  # stopped: the run may be sealed already
                return
            self._samples.append(sample)
            if self.run is not None:
                try:
                    self.run.append(FILE, sample)
                except RunError:  # sealed under it: nothing may be added, so sampling ends
                    self._stopping.set()

    def _loop(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except Exception as e:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded: no GPU to watch
            self._keep({"time": now(), "available": False, "reason": f"NVML not usable ({type(e).__name__}: {e})"})
            return
        try:
            t0 = time.monotonic()
            while True:
                count = nvml_call(pynvml, pynvml.nvmlDeviceGetCount)
                for index in range(count if isinstance(count, int) else 0):
                    self._keep({"time": now(), "t_s": round(time.monotonic() - t0, 3), "index": index,
                                **read(pynvml, index)})
                if self._stopping.wait(self.interval_s):
                    return
        finally:
            pynvml.nvmlShutdown()


def read(pynvml: Any, index: int) -> dict:
    """One device, every figure asked on its own; None where NVML does not say."""
    handle = nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetHandleByIndex(index))
    if isinstance(handle, str):
        return {"available": False, "reason": handle}

    def ask(call, scale: float = 1.0) -> float | None:
        value = nvml_call(pynvml, call)
        return value * scale if isinstance(value, (int, float)) else None

    util = nvml_call(pynvml, lambda: pynvml.nvmlDeviceGetUtilizationRates(handle))
    reasons_call = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
        pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = nvml_call(pynvml, lambda: reasons_call(handle))
    return {
        "available": True,
        "sm_clock_mhz": ask(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "sm_clock_max_mhz": ask(lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM)),
        "mem_clock_mhz": ask(lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM)),
        "power_w": ask(lambda: pynvml.nvmlDeviceGetPowerUsage(handle), 1e-3),
        "power_limit_w": ask(lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle), 1e-3),
        "temperature_c": ask(lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU)),
        "gpu_util_pct": None if isinstance(util, str) else util.gpu,
        "mem_util_pct": None if isinstance(util, str) else util.memory,
        "clock_events": None if isinstance(mask, str) else [n for bit, n in sorted(REASONS.items()) if mask & bit],
    }


def read_file(folder: str | Path) -> list[dict]:
    """The samples a run kept; none for a run taken before telemetry existed."""
    path = Path(folder) / FILE
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


@dataclass(frozen=True)
class Device:
    """One GPU over the run; every figure None where NVML never said."""

    index: int
    samples: int
    busy_samples: int
    sm_clock_busy_mhz: tuple[float, float] | None  # lowest and highest while busy
    sm_clock_max_mhz: float | None
    mem_clock_mhz: tuple[float, float] | None
    power_max_w: float | None
    power_limit_w: float | None
    temperature_max_c: float | None
    gpu_util_mean_pct: float | None
    throttled: dict[str, int] = field(default_factory=dict)  # reason -> samples that named it
    throttled_sm_clock_mhz: tuple[float, float] | None = None  # lowest and highest SM clock while a reason held

    @property
    def clocks_dropped(self) -> bool:
        low, high = self.sm_clock_busy_mhz or (None, None)
        return bool(high) and low < DROP * high

    @property
    def held_back(self) -> bool:
        """A throttle reason that cost real speed: the SM clock under it fell below 90% of the maximum (or is unknown).

        On an H200 NVML names sw_power_cap now and then at 1965 of 1980 MHz: said, but not a slowdown."""
        if not self.throttled:
            return False
        if self.throttled_sm_clock_mhz is None or not self.sm_clock_max_mhz:
            return True
        return self.throttled_sm_clock_mhz[0] < DROP * self.sm_clock_max_mhz

    def findings(self) -> list[Finding]:
        gpu = f"GPU {self.index}"
        notes = []
        reasons = ", ".join(f"{r} in {n} of {self.samples} samples" for r, n in self.throttled.items())
        if self.held_back:
            notes.append(warning(f"{gpu} was held back during the run ({reasons}; SM clock then "
                                 f"{_range(self.throttled_sm_clock_mhz)} MHz of {_num(self.sm_clock_max_mhz)}): figures "
                                 "taken then are slower than the hardware allows; see telemetry.jsonl for when."))
        if self.clocks_dropped:
            low, high = self.sm_clock_busy_mhz
            notes.append(warning(f"{gpu}'s SM clock dropped to {low:.0f} MHz while busy (highest busy {high:.0f} MHz, "
                                 f"under {DROP:.0%}): the run did not see one steady speed."))
        clocks = (f"SM {_range(self.sm_clock_busy_mhz)} MHz while busy (max {_num(self.sm_clock_max_mhz)})"
                  if self.busy_samples else "never busy enough to judge its clocks")
        notes.append(info(
            f"{gpu} telemetry, {self.samples} samples ({self.busy_samples} busy): {clocks}, memory "
            f"{_range(self.mem_clock_mhz)} MHz, power up to {_num(self.power_max_w)} of {_num(self.power_limit_w)} W, "
            f"up to {_num(self.temperature_max_c)} C, mean utilization {_num(self.gpu_util_mean_pct)}%; "
            + ("see the warnings above." if notes else "clocks held steady" + (
                f"; NVML named {reasons}, at {_range(self.throttled_sm_clock_mhz)} MHz, not a slowdown." if reasons
                else ", no throttling reported."))))
        return notes


@dataclass(frozen=True)
class Summary:
    devices: list[Device]
    reason: str | None = None  # why there is no telemetry

    @property
    def throttled(self) -> bool:
        """Whether any GPU lost real speed during the run: a throttle that cost clock, or a busy clock drop."""
        return any(d.held_back or d.clocks_dropped for d in self.devices)

    def findings(self) -> list[Finding]:
        if not self.devices:
            return [info(f"No GPU telemetry: {self.reason or 'no sample was taken'}.")]
        return [f for d in self.devices for f in d.findings()]

    def as_dict(self) -> dict:
        return asdict(self) | {"throttled": self.throttled, "findings": [f.as_dict() for f in self.findings()]}


def summarize(samples: list[dict]) -> Summary:
    kept = [s for s in samples if s.get("available")]
    if not kept:
        return Summary([], next((s.get("reason") for s in samples if s.get("reason")), None))
    return Summary([_device(i, [s for s in kept if s["index"] == i]) for i in sorted({s["index"] for s in kept})])


def _device(index: int, samples: list[dict]) -> Device:
    busy = [s for s in samples if (s.get("gpu_util_pct") or 0) >= BUSY_PCT
            and "gpu_idle" not in (s.get("clock_events") or [])]
    throttled: dict[str, int] = {}
    held = [s for s in samples if set(s.get("clock_events") or []) & set(THROTTLING)]
    for s in held:
        for reason in set(s["clock_events"]) & set(THROTTLING):
            throttled[reason] = throttled.get(reason, 0) + 1
    utils = _values(samples, "gpu_util_pct")
    return Device(index, len(samples), len(busy), _span(busy, "sm_clock_mhz"), _top(samples, "sm_clock_max_mhz"),
                  _span(busy or samples, "mem_clock_mhz"), _top(samples, "power_w"), _top(samples, "power_limit_w"),
                  _top(samples, "temperature_c"), statistics.fmean(utils) if utils else None,
                  {r: throttled[r] for r in THROTTLING if r in throttled}, _span(held, "sm_clock_mhz"))


def _values(samples: list[dict], key: str) -> list[float]:
    return [s[key] for s in samples if isinstance(s.get(key), (int, float))]


def _span(samples: list[dict], key: str) -> tuple[float, float] | None:
    values = _values(samples, key)
    return (min(values), max(values)) if values else None


def _top(samples: list[dict], key: str) -> float | None:
    values = _values(samples, key)
    return max(values) if values else None


def _num(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.0f}"


def _range(span: tuple[float, float] | None) -> str:
    if span is None:
        return "unknown"
    return _num(span[0]) if span[0] == span[1] else f"{span[0]:.0f}-{span[1]:.0f}"
