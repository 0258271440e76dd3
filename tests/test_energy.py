"""Energy windows: the counter's difference around a window, per token, and unknown (never zero) without one."""

import pytest

from sparknb.machine import energy, fingerprint

NVML = fingerprint.nvml()
RECORDS = [{"completion_tokens": 150, "prompt_tokens": 1000}, {"completion_tokens": 150, "prompt_tokens": 3000},
           {"error": "EndpointError: refused", "completion_tokens": 99, "prompt_tokens": 99}]  # a failed one: no work


def test_a_window_charges_the_counters_difference_to_the_tokens_it_handled():
    w = energy.window("decode requests", energy.Reading(10.0, (5_000_000, 1_000)), energy.Reading(20.0, (5_600_000, 1_000)),
                      RECORDS)
    assert w.joules == pytest.approx(600.0) and w.seconds == pytest.approx(10.0) and w.watts == pytest.approx(60.0)
    assert (w.generated_tokens, w.prompt_tokens) == (300, 4000)
    assert w.j_per_generated_token == pytest.approx(2.0) and w.j_per_prompt_token == pytest.approx(0.15)
    assert w.generated_tokens_per_j == pytest.approx(0.5)
    assert w.finding().level == "info" and "600.0 J" in w.finding().text and "2 J per generated token" in w.finding().text
    short = energy.window("a blink", energy.Reading(0.0, (0,)), energy.Reading(0.3, (9_000,)), RECORDS)
    assert short.finding().level == "warning" and "coarse" in short.finding().text


def test_prefill_is_charged_per_prompt_token_and_swap_per_start():
    """Prefill's one-token answers made an H200 window read "83 J per generated token", swap's none "0 generated
    tokens per joule": each window is charged to the work it was for."""
    before, after = energy.Reading(0.0, (0,)), energy.Reading(10.0, (800_000,))
    prefill = energy.window("prefill requests", before, after, RECORDS, energy.COUNTS["prefill"])
    assert prefill.j_per_prompt_token == pytest.approx(0.2) and prefill.j_per_generated_token is None
    assert "per prompt token (4,000)" in prefill.finding().text and "generated" not in prefill.finding().text
    starts = [{"kind": "request", "startup": {"ready_s": 9.0}}, {"kind": "evict"}, {"kind": "request", "startup": {}},
              {"kind": "request", "startup": {"ready_s": 8.0}}]
    swap = energy.window("swap requests", before, after, starts, energy.COUNTS["swap"])
    assert swap.starts == 2 and swap.j_per_start == pytest.approx(400.0)  # the empty start-up read counts no start
    assert swap.generated_tokens_per_j is None and "400 J per start (2)" in swap.finding().text
    assert "generated" not in swap.finding().text


def test_a_counter_that_cannot_be_read_is_unknown_never_zero():
    gone = energy.Reading(0.0, None, "the GPU gives no energy counter (NVMLError_NotSupported)")
    w = energy.window("decode requests", gone, energy.Reading(5.0, None, "same"), RECORDS)
    assert w.joules is None and w.j_per_generated_token is None and w.generated_tokens_per_j is None
    assert "unknown (the GPU gives no energy counter" in w.finding().text
    reloaded = energy.window("x", energy.Reading(0.0, (9_000,)), energy.Reading(1.0, (10,)), RECORDS)
    assert reloaded.joules is None and "went down" in reloaded.reason


@pytest.mark.skipif(NVML.get("available"), reason="this machine has a GPU: the unknown case is for one without")
def test_without_a_gpu_a_reading_says_why():
    r = energy.read()
    assert r.millijoules is None and r.reason


@pytest.mark.gpu
@pytest.mark.skipif(not NVML.get("available"), reason="no NVIDIA GPU here")
def test_a_busy_gpu_spends_joules_a_reading_sees():
    torch = pytest.importorskip("torch")
    before = energy.read()
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(200):
        a @ a
    torch.cuda.synchronize()
    w = energy.window("matmuls", before, energy.read(), [{"completion_tokens": 1, "prompt_tokens": 1}])
    print(f"energy: {w.joules:.1f} J over {w.seconds:.2f} s, {w.watts:.0f} W")
    assert w.joules is not None and w.joules > 10 and 30 < w.watts < 2000
