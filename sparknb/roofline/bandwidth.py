"""The memory-bandwidth limit: the fastest decode the hardware allows, a curve over context length.

Decode is bandwidth-bound: each step reads the weights a token needs (the census: every-token tensors, top-k
of n routed experts, one embedding row, the head) and the KV cache of every token before it. Counting the
weights alone, an H200's share of the limit fell from 43.9% to 36.3% between 111 and 10,714 prompt tokens;
with the KV read counted it held at 43.9-44.2%. With speculative decoding one step yields several tokens, so
the bytes per output token fall by the measured tokens per step.

The bandwidth divided by is the box's own where the fingerprint's probe ran on the device the hardware
params describe (an H200's probe read 4,297 GB/s against its nameplate 4,800; a DGX Spark's 231-234 against
273), else the nameplate; both are kept. A hardware file that gives no bandwidth draws no limit.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..runs.params import HardwareParams, ModelParams
from .census import KV, Census

IMPOSSIBLE = 1.0  # a share above this is physics broken: a burst, a cache, a wrong census, drafts miscounted
FAR_BELOW = 1 / 3  # a step taking three times its reading is not bandwidth-bound


@dataclass(frozen=True)
class Limit:
    bytes_per_step: float | None  # weights read per step; None where neither params nor a census say
    bandwidth_bytes_s: float | None  # the one divided by
    source: str
    kv: KV | None = None  # None: no census, so the KV read is not counted (said wherever the limit is)
    nameplate_gbs: float | None = None
    measured_gbs: float | None = None
    divides_by: str = "nameplate"  # or "measured"
    experts: dict | None = None  # the census's routed experts ({"bytes", "used", "of"}); None: no census
    head_bytes: float = 0.0  # the output head's read (the census's), once per prompt in prefill
    micro_batch: int | None = None  # the engine's prefill micro-batch (llama-server's --ubatch-size); None: unknown

    def kv_bytes(self, context: float = 0.0) -> float | None:
        """The KV read of one step at `context` tokens of context; None where it is not known."""
        return self.kv.bytes(context) if self.kv is not None else None

    def step_bytes(self, context: float = 0.0) -> float | None:
        if self.bytes_per_step is None:
            return None
        return self.bytes_per_step + (self.kv_bytes(context) or 0.0)

    def bytes_per_token(self, tokens_per_step: float = 1.0, context: float = 0.0) -> float | None:
        step = self.step_bytes(context)
        return None if step is None else step / _check_tps(tokens_per_step)

    def ms_per_token(self, tokens_per_step: float = 1.0, context: float = 0.0) -> float | None:
        """The least time one output token can take; None where the bandwidth or the bytes are unknown."""
        b = self.bytes_per_token(tokens_per_step, context)
        if self.bandwidth_bytes_s is None or b is None:
            return None
        return 1000.0 * b / self.bandwidth_bytes_s

    def tokens_per_s(self, tokens_per_step: float = 1.0, context: float = 0.0) -> float | None:
        ms = self.ms_per_token(tokens_per_step, context)
        return None if ms is None else 1000.0 / ms

    def prefill_bytes(self, n: int) -> float | None:
        """The least a prompt of `n` tokens reads and writes: per micro-batch of u tokens the weights every token
        reads and the routed experts those u tokens touch (of E with k routed per token, E(1-(1-k/E)^u) per layer,
        all of them beyond a few dozen tokens), the head once, and the prompt's KV written. Counting decode's k of
        E called an H100 MoE's 111-token prompt 8% of its floor where it was near 77%. One pass where the engine
        gives no micro-batch (the least it could read). None where the bytes are unknown."""
        if self.bytes_per_step is None:
            return None
        ex = self.experts or {"bytes": 0, "used": 0, "of": 0}
        share = ex["used"] / ex["of"] if ex["of"] else 1.0
        rest = self.bytes_per_step - ex["bytes"] * share * bool(ex["of"]) - self.head_bytes
        size = self.micro_batch or n
        batches = [size] * (n // size) + ([n % size] if n % size else [])
        touched = sum(1 - (1 - share) ** u if ex["of"] else 0.0 for u in batches)
        return self.head_bytes + len(batches) * rest + ex["bytes"] * touched + (self.kv_bytes(n) or 0.0)

    def describe(self) -> str:
        """What the limit divides, by what, and what it leaves out: shown wherever a share of it is."""
        bw = (f"{self.bandwidth_bytes_s / 1e9:,.0f} GB/s {self.divides_by}" if self.bandwidth_bytes_s else
              "no bandwidth")
        other = (f" (nameplate {self.nameplate_gbs:,.0f} GB/s)" if self.divides_by == "measured" and self.nameplate_gbs
                 else f" (measured {self.measured_gbs:,.0f} GB/s, another device)" if self.measured_gbs else "")
        kv = ("KV read counted at each length" if self.kv and self.kv.bytes_per_token else
              "KV cache NOT counted (no census: weights only, so the limit is too high at long context)")
        return f"{bw}{other}; {kv}; {self.source}"


def _check_tps(tokens_per_step: float) -> float:
    if not tokens_per_step >= 1.0:
        raise ValueError(f"tokens per step is {tokens_per_step}; it is at least 1 (one token per model step)")
    return tokens_per_step


def bytes_per_step(model: ModelParams) -> float | None:
    """Bytes read per forward pass from hand-written `weights`: dense parts plus active experts, at their width."""
    w = model.weights
    if w is None:
        return None
    if w.bytes_per_token:
        return w.bytes_per_token
    expert_width = w.expert_bytes_per_param or w.bytes_per_param
    return w.dense_params * w.bytes_per_param + w.active_expert_params * expert_width


def limit(model: ModelParams, hardware: HardwareParams, census: Census | None = None,
          probe: dict | None = None, micro_batch: int | None = None) -> Limit:
    """The limit from hand-written weights (they win, marked) or the census, over the measured bandwidth where
    the probe (the fingerprint's `bandwidth_probe`) ran on this hardware's device, else the nameplate;
    `micro_batch`: the engine's prefill micro-batch, where it says one (Limit.prefill_bytes)."""
    nameplate = hardware.memory_bandwidth_gbs
    measured = (probe or {}).get("gbs")
    same = measured is not None and same_device(probe, hardware)
    gbs = measured if same and nameplate else nameplate
    if model.weights is not None:
        weights, source = bytes_per_step(model), f"{model.name}: hand-written weights, {model.weights.source}"
    else:
        weights = census.bytes_per_token if census else None
        source = f"{model.name}: census of {census.checkpoint}" if census else f"{model.name}: no weights, no census"
    counted = census is not None and model.weights is None
    return Limit(weights, gbs * 1e9 if gbs else None, f"{source}; {hardware.name}: {hardware.source}",
                 census.kv if census else None, nameplate, measured, "measured" if same and nameplate else "nameplate",
                 census.experts if counted else None, census.head["per_token"] if counted else 0.0, micro_batch)


def same_device(probe: dict, hardware: HardwareParams) -> bool:
    """Whether the probe copied on the memory the hardware params describe: the GPU they name, or a CPU host's."""
    method, accelerator = (probe.get("method") or "").lower(), hardware.accelerator.lower()
    if "cpu" in method:
        return accelerator.startswith("cpu")
    return accelerator in method
