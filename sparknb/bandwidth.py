"""The memory-bandwidth limit: the fastest decode the hardware allows, against which every figure is set.

Decode is bandwidth-bound: each step reads the dense weights plus the active experts once. With
speculative decoding one step yields several tokens, so the bytes per output token fall by the
measured tokens per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from .params import HardwareParams, ModelParams


@dataclass(frozen=True)
class Limit:
    bytes_per_step: float
    bandwidth_bytes_s: float | None
    source: str

    def bytes_per_token(self, tokens_per_step: float = 1.0) -> float:
        return self.bytes_per_step / _check_tps(tokens_per_step)

    def ms_per_token(self, tokens_per_step: float = 1.0) -> float | None:
        """The least time one output token can take; None where the bandwidth is unknown."""
        if self.bandwidth_bytes_s is None:
            return None
        return 1000.0 * self.bytes_per_token(tokens_per_step) / self.bandwidth_bytes_s

    def tokens_per_s(self, tokens_per_step: float = 1.0) -> float | None:
        ms = self.ms_per_token(tokens_per_step)
        return None if ms is None else 1000.0 / ms


def _check_tps(tokens_per_step: float) -> float:
    if not tokens_per_step >= 1.0:
        raise ValueError(f"tokens per step is {tokens_per_step}; it is at least 1 (one token per model step)")
    return tokens_per_step


def bytes_per_step(model: ModelParams) -> float:
    """Bytes read per forward pass: dense parts plus active experts, at their stored width."""
    w = model.weights
    if w.bytes_per_token:
        return w.bytes_per_token
    expert_width = w.expert_bytes_per_param or w.bytes_per_param
    return w.dense_params * w.bytes_per_param + w.active_expert_params * expert_width


def limit(model: ModelParams, hardware: HardwareParams) -> Limit:
    bw = hardware.memory_bandwidth_gbs
    return Limit(
        bytes_per_step=bytes_per_step(model),
        bandwidth_bytes_s=bw * 1e9 if bw else None,
        source=f"{model.name}: {model.weights.source}; {hardware.name}: {hardware.source}",
    )
