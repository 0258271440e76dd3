"""The bandwidth limit, checked against the figures of the reference DGX Spark studies."""

import pytest

from sparknb.roofline import bandwidth
from sparknb.runs.params import load_hardware, load_model

GB10 = load_hardware("gb10")


def test_dense_27b_fp8_reads_30_6_gb_in_112_ms():
    # The reference study: about 30.6 GB per token, 112 ms at 273 GB/s (it then measured 118 ms, 95%).
    limit = bandwidth.limit(load_model("qwen3.8-27b"), GB10)
    assert limit.bytes_per_step == pytest.approx(30.6e9, rel=0.01)
    assert limit.ms_per_token() == pytest.approx(112.1, abs=0.1)
    assert limit.tokens_per_s() == pytest.approx(8.92, abs=0.01)  # 273 / 30.6: the study's 8.4 is 94% of it


def test_dense_reads_every_weight_at_its_width():
    limit = bandwidth.limit(load_model("qwen3.6-27b-fp8"), GB10)
    assert limit.bytes_per_step == 27e9
    assert limit.tokens_per_s() == pytest.approx(273 / 27, rel=1e-9)


def test_moe_reads_dense_parts_plus_active_experts():
    model = load_model("qwen3.6-35b-a3b")
    w = model.weights
    assert bandwidth.bytes_per_step(model) == (w.dense_params + w.active_expert_params) * 2
    assert bandwidth.bytes_per_step(model) > w.active_expert_params * 2  # "3B active" undercounts


def test_experts_may_be_stored_narrower_than_the_dense_parts():
    model = load_model("qwen3.6-35b-a3b").model_copy(update={"weights": load_model("qwen3.6-35b-a3b").weights.model_copy(
        update={"expert_bytes_per_param": 0.5})})
    assert bandwidth.bytes_per_step(model) == 1.0e9 * 2 + 3.0e9 * 0.5


def test_speculative_decoding_divides_by_tokens_per_step():
    limit = bandwidth.limit(load_model("flash-next"), GB10)
    assert limit.ms_per_token() == pytest.approx(21.98, abs=0.01)  # 6 GB at 273 GB/s: 23 ms in the study
    # JSON in the study: 3.42 tokens per step, so one token reads 6 / 3.42 = 1.754 GB: 6.43 ms.
    assert limit.bytes_per_token(3.42) == pytest.approx(1.754e9, rel=1e-3)
    assert limit.ms_per_token(3.42) == pytest.approx(6.43, abs=0.01)
    with pytest.raises(ValueError, match="at least 1"):
        limit.ms_per_token(0.5)


def test_unknown_bandwidth_gives_no_limit():
    limit = bandwidth.limit(load_model("qwen3.8-27b"), load_hardware("cpu-host"))
    assert limit.ms_per_token() is None and limit.tokens_per_s() is None
