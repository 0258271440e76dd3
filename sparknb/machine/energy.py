"""Energy: joules over each measured window, from NVML's energy counter, per token and tokens per joule.

A single power reading is a moment (on an H200 a 0.75 s burst of matmuls read 485 W once while the counter
integrated 583 W), so energy is the difference of nvmlDeviceGetTotalEnergyConsumption (millijoules since
the driver loaded) around a whole window: a sweep, a batch, a load level. The counter moves about every
100 ms, so a window of a few hundred milliseconds or less is coarse, and said to be. Where the counter
cannot be read (no GPU; a GB10 may not give it) every figure is unknown, never zero, with the reason. The
window's joules are divided by the work it was for: generated tokens where tokens were generated for their
own sake (decode, load, mtp, the question batches), prompt tokens for prefill (its one-token answers made a
prefill window read "83 J per generated token" on an H200), and starts for swap (it generates nothing worth
counting: "0 generated tokens per joule" was printed there).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import Any

from ..runs.report import Finding, info, warning

COARSE_S = 1.0  # a window shorter than this rests on a handful of counter steps
COUNTS = {"prefill": "prompt", "swap": "start"}  # what a study's window is for; every other study's: generated


@dataclass(frozen=True)
class Reading:
    """The counters of every GPU at one moment (millijoules), or why there are none."""

    at: float  # time.monotonic()
    millijoules: tuple[int, ...] | None
    reason: str | None = None


def read() -> Reading:
    """Every GPU's energy counter now; never raises: a box without one is a fact to record."""
    at = time.monotonic()
    try:
        import pynvml
    except ImportError as e:
        return Reading(at, None, f"pynvml not importable ({e}); install nvidia-ml-py")
    try:
        pynvml.nvmlInit()
    except Exception as e:  # NVMLError_LibraryNotFound, DriverNotLoaded: no GPU here
        return Reading(at, None, f"no NVIDIA GPU to ask (nvmlInit failed: {e})")
    try:
        values = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            values.append(int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)))
        return Reading(time.monotonic(), tuple(values)) if values else Reading(at, None, "NVML lists no GPU")
    except Exception as e:  # NVMLError_NotSupported on a GPU without the counter
        return Reading(at, None, f"the GPU gives no energy counter ({type(e).__name__}: {e})")
    finally:
        pynvml.nvmlShutdown()


@dataclass(frozen=True)
class Window:
    """What one measured window cost: joules over its wall time, and per token of the work it did."""

    name: str
    seconds: float
    joules: float | None
    generated_tokens: int
    prompt_tokens: int
    reason: str | None = None  # why joules are unknown, where they are
    counts: str = "generated"  # what the window was for: generated tokens, prompt tokens, or starts
    starts: int = 0

    @property
    def watts(self) -> float | None:
        return self.joules / self.seconds if self.joules is not None and self.seconds > 0 else None

    def per(self, tokens: int) -> float | None:
        return self.joules / tokens if self.joules is not None and tokens else None

    @property
    def j_per_generated_token(self) -> float | None:
        return self.per(self.generated_tokens) if self.counts == "generated" else None

    @property
    def j_per_prompt_token(self) -> float | None:
        return self.per(self.prompt_tokens) if self.counts != "start" else None

    @property
    def j_per_start(self) -> float | None:
        return self.per(self.starts) if self.counts == "start" else None

    @property
    def generated_tokens_per_j(self) -> float | None:
        return self.generated_tokens / self.joules if self.joules and self.counts == "generated" else None

    def as_dict(self) -> dict:
        return asdict(self) | {"watts": self.watts, "j_per_generated_token": self.j_per_generated_token,
                               "j_per_prompt_token": self.j_per_prompt_token, "j_per_start": self.j_per_start,
                               "generated_tokens_per_j": self.generated_tokens_per_j}

    def _work(self) -> str:
        if self.counts == "start":
            return f"{_j(self.j_per_start)} per start ({self.starts:,})"
        if self.counts == "prompt":
            return f"{_j(self.j_per_prompt_token)} per prompt token ({self.prompt_tokens:,})"
        return (f"{_j(self.j_per_generated_token)} per generated token ({self.generated_tokens:,}), "
                f"{_j(self.j_per_prompt_token)} per prompt token ({self.prompt_tokens:,}); "
                f"{_n(self.generated_tokens_per_j)} generated tokens per joule. Each figure charges the whole "
                "window's energy to one kind of token")

    def finding(self) -> Finding:
        if self.joules is None:
            return info(f"Energy over the {self.name}: unknown ({self.reason}); not zero, not measured.")
        text = (f"Energy over the {self.name} ({self.seconds:.1f} s): {self.joules:,.1f} J, {self.watts:,.0f} W on "
                f"average; {self._work()}.")
        if self.seconds < COARSE_S:
            return warning(text + f" The window is under {COARSE_S:g} s and NVML's counter moves about every 100 ms:"
                           " the figure is coarse.", ("energy",))
        return info(text)


def window(name: str, before: Reading, after: Reading, records: list[dict], counts: str = "generated") -> Window:
    """The window between two readings, with the work of the records taken in it (failed requests left out):
    tokens, and the starts (records with a start-up read from the server's log)."""
    done = [r for r in records if "error" not in r]
    work = dict(generated_tokens=sum(int(r.get("completion_tokens") or 0) for r in done),
                prompt_tokens=sum(int(r.get("prompt_tokens") or 0) for r in done), counts=counts,
                starts=sum(1 for r in done if r.get("startup")))
    seconds = max(0.0, after.at - before.at)
    if before.millijoules is None or after.millijoules is None:
        return Window(name, seconds, None, reason=before.reason or after.reason, **work)
    if len(before.millijoules) != len(after.millijoules):
        return Window(name, seconds, None, reason="the GPUs NVML lists changed during the window", **work)
    mj = sum(a - b for a, b in zip(after.millijoules, before.millijoules))
    if mj < 0:
        return Window(name, seconds, None, reason="the counter went down (the driver reloaded)", **work)
    return Window(name, seconds, mj / 1000.0, **work)


def _j(value: float | None) -> str:
    if value is None:
        return "unknown"
    return f"{value:.3g} J" if value >= 0.01 else f"{1000 * value:.3g} mJ"


def _n(value: float | None) -> str:
    return "unknown" if value is None or math.isnan(value) else f"{value:,.3g}"


def from_summary(summary: dict | None) -> list[dict]:
    """The windows a run's summary kept (none for a run taken before energy was measured)."""
    return list((summary or {}).get("energy") or [])


def headline_rows(runs: Any) -> list:
    """One row per study window that every subject measured: J per generated token, lower better. One window a
    run has no interval, so the row is context: shown beside the speeds, never deciding on its own."""
    from ..verdicts.stats import Interval
    from ..verdicts.verdict import Row

    rows = []
    for study, by_subject in runs.by_study.items():
        windows = {s: {w["name"]: w for w in from_summary(r.summary)} for s, r in by_subject.items()
                   if s in runs.subjects}
        names = [n for n in dict.fromkeys(n for ws in windows.values() for n in ws) if all(n in ws for ws in windows.values())]
        for name in names:
            values = {s: ws[name].get("j_per_generated_token") for s, ws in windows.items()}
            if len(values) < 2 or all(v is None for v in values.values()):  # prefill's and swap's windows
                continue
            unknown = {s: ws[name].get("reason") for s, ws in windows.items() if ws[name].get("joules") is None}
            note = ("unknown for " + "; ".join(f"{s} ({why})" for s, why in unknown.items())) if unknown else \
                "one window per run: no interval"
            base = values.get(runs.base)
            ratios = {s: Interval(v / base, math.nan, math.nan, 0.95, "one window each") for s, v in values.items()
                      if s != runs.base and v is not None and base}
            rows.append(Row(study, f"J per generated token, {name}", values, {s: 1 for s in values}, ratios,
                            role="context", better="lower", note=note))
    return rows
