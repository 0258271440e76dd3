"""The load study without a server: its parameters, its levels, its arrivals, its prompts and its formulas.

The formulas are checked on small hand-made records whose figures can be worked out on paper; what a
real server does under load is tested against the tiny test bed in test_load.py.
"""

from __future__ import annotations

import asyncio
import statistics

import pytest

from sparknb.errors import ParamsError
from sparknb.studies import load
from sparknb.studies.load.prompts import OPENING, Prompts

# One line of a real vLLM 0.32 /metrics answer (tiny-dense, 1 GiB of KV cache), labels shortened.
CACHE_INFO = (b'vllm:cache_config_info{block_size="128",cache_dtype="auto",engine="0",kv_cache_max_concurrency="32.0",'
              b'kv_cache_memory_bytes="1073741824",kv_cache_size_tokens="524288",num_gpu_blocks="4096"} 1.0\n')


def test_every_bad_parameter_is_named_at_once():
    with pytest.raises(ParamsError) as e:
        load.Plan.build(prompt_tokens=4, output_tokens=1, concurrency=[0])
    text = str(e.value)
    assert "prompt_tokens" in text and "output_tokens" in text and "concurrency" in text


def test_concurrency_and_rates_together_are_refused_with_the_choice_named():
    with pytest.raises(ParamsError, match="concurrency or request_rates, not both"):
        load.Plan.build(concurrency=[1, 2], request_rates=[0.5])


def test_a_repeated_level_is_refused():
    with pytest.raises(ParamsError, match="repeats"):
        load.Plan.build(concurrency=[1, 4, 4])


def test_mmlu_pro_prompts_need_their_source():
    with pytest.raises(ParamsError, match="mmlu_pro:hub"):
        load.Plan.build(prompts="mmlu_pro")


def test_the_kv_cache_caps_the_standard_levels_with_a_note():
    plan = load.Plan.build()
    capacity = load.kv_capacity(CACHE_INFO, 512 + 128)
    assert capacity == 524288 // 640
    kept, note = plan.levels(20)
    assert [lv.value for lv in kept] == [1, 2, 4, 8, 16] and "32, 64" in note and "holds 20" in note
    assert plan.levels(None) == (plan.wanted(), None)  # a server that does not say caps nothing
    assert load.kv_capacity(b"vllm:num_requests_running 0\n", 640) is None


def test_warmup_is_one_wave_of_the_level():
    waves = load.Plan.build(concurrency=[8], warmup=2).wanted()
    assert [(lv.name, lv.warmup) for lv in waves] == [("8 in flight", 16)]
    rates = load.Plan.build(request_rates=[2.5], warmup=1).wanted()
    assert [(lv.name, lv.warmup, lv.mode) for lv in rates] == [("2.5 req/s", 3, "rate")]


def test_arrivals_are_seeded_poisson_at_the_levels_rate():
    level = load.Level("rate", 4.0, warmup=2, requests=3000)
    first, again = load.arrivals(level, 30, seed=1), load.arrivals(level, 30, seed=1)
    assert first == again != load.arrivals(level, 30, seed=2)
    assert len(first) == 3002 and first == sorted(first)
    gaps = [b - a for a, b in zip(first, first[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.1)  # exponential: the spread equals the mean


def test_arrivals_for_a_duration_stop_after_it():
    timed = load.arrivals(load.Level("rate", 10.0, warmup=5, requests=0), 3.0, seed=0)
    assert timed[-1] - timed[5] <= 3.0 and len(timed) > 5 + 15


class _Echo:
    """Stands where the endpoint would: gives back what the request would send."""

    async def complete(self, ids, **kw):
        return ids

    async def chat(self, messages, **kw):
        return messages[0]["content"]


def test_exact_prompts_are_unique_from_their_opening_and_exactly_as_long():
    base = tuple(range(100, 164))
    prompts = Prompts("exact", base, (), (64,), 1, max_tokens=8, temperature=0.0, seed=0)
    sent = [asyncio.run(prompts.call(i)(_Echo())) for i in range(50)]
    assert {len(p) for p in sent} == {64}
    assert len({tuple(p[:1 + OPENING]) for p in sent}) == 50  # no two share the opening block
    assert all(p[0] == 100 and p[1 + OPENING:] == list(base[1 + OPENING:]) for p in sent)  # BOS kept, rest as made


def test_a_prompt_set_is_sent_in_a_seeded_order_each_text_unique():
    prompts = Prompts("prompt set x", (), ("alpha", "beta", "gamma"), (5, 5, 5), 0, 8, 0.0, seed=3)
    sent = [asyncio.run(prompts.call(i)(_Echo())) for i in range(6)]
    assert sorted(s.split(": ", 1)[1] for s in sent[:3]) == ["alpha", "beta", "gamma"]
    assert len(set(sent)) == 6


def _request(sent_s, ttft, total, tokens=10, warmup=False, server=None, level="2 in flight"):
    chunk_times = [ttft + i * (total - ttft) / (tokens - 1) for i in range(tokens)]
    return {"kind": "request", "level_name": level, "warmup": warmup, "sent_s": sent_s, "ttft_s": ttft,
            "total_s": total, "completion_tokens": tokens, "chunk_times": chunk_times, "decode_s": total - ttft,
            "decode_tokens": tokens - 1, "decode_tokens_per_s": (tokens - 1) / (total - ttft), "server": server}


def _level(share=0.1, lag=0.001, samples=()):
    return {"kind": "level", "level_name": "2 in flight", "mode": "concurrency", "level": 2,
            "client": {"loop_cpu_share": share, "lags_s": {"p99": lag}}, "samples": list(samples),
            "server": {"ttft_s": None, "decode_s": None, "e2e_s": None}}


def test_the_level_formulas_on_requests_worked_out_by_hand():
    requests = [_request(0.0, 0.1, 1.0, warmup=True),  # left out
                _request(1.0, 0.2, 1.1), _request(1.0, 0.4, 1.3), _request(2.1, 3.0, 3.9)]
    row = load.level_row(_level(samples=[[0.5, 2, 0, 0.1, 0], [1.5, 2, 1, 0.3, 0], [2.5, 1, 0, 0.2, 1]]),
                         requests, slo_ttft_s=2.0, slo_tpot_s=0.15)
    window = 6.0 - 1.0  # first measured sent at 1.0, last measured answer ends at 2.1 + 3.9
    assert row["requests"] == 3 and row["window s"] == pytest.approx(window)
    assert row["aggregate tok/s"] == pytest.approx(30 / window)
    assert row["ITL p50 ms"] == pytest.approx(100)  # 0.9 s over 9 tokens
    assert row["goodput req/s"] == pytest.approx(2 / window)  # the third missed the TTFT target
    assert (row["running max"], row["waiting max"], row["KV use max %"], row["preemptions"]) == (2, 1, 30, 1)
    assert row["server truth"] is None and not row["saturated"]


def test_the_servers_own_timings_check_the_clients_clock():
    server = {"queue_s": 0.05, "ttft_s": 0.1, "decode_s": 0.8}
    requests = [_request(0.0, 0.2, 1.0, server=server), _request(0.0, 0.2, 1.0, server=server)]
    level = _level() | {"server": {"ttft_s": 0.19, "e2e_s": 0.99, "decode_s": 0.8}}
    row = load.level_row(level, requests, 2.0, 0.2)
    assert row["server truth"] == "per-request metrics + histograms"
    assert row["decode vs server %"] == pytest.approx(0.0, abs=1e-9)
    assert row["E2E vs server %"] == pytest.approx(100 * (1.0 / 0.99 - 1))
    assert row["TTFT beyond server ms"] == pytest.approx(10)  # HTTP: the client's 200 ms against 190
    assert row["API server ms"] == pytest.approx(40)  # arrival to the engine's queue: 190 against 150
    bare = load.level_row(_level(), [_request(0.0, 0.2, 1.0), _request(0.0, 0.2, 1.0)], 2.0, 0.2)
    assert bare["server truth"] is None and bare["E2E vs server %"] is None  # unknown, never 0


def test_a_busy_or_late_event_loop_marks_the_level_and_leaves_it_out_of_the_knee():
    assert load.saturation(_level(share=0.2, lag=0.002)) is None
    assert "busy 80%" in load.saturation(_level(share=0.8))
    assert "12.0 ms late" in load.saturation(_level(lag=0.012))
    agree = {"server truth": "per-request metrics", "decode vs server %": 0.4, "E2E vs server %": -1.1}
    assert load.saturation(_level(lag=0.012), agree) is None  # a stall of the whole machine, in both clocks
    assert "differ" in load.saturation(_level(lag=0.012), agree | {"E2E vs server %": 7.0})
    assert "busy 80%" in load.saturation(_level(share=0.8), agree)  # a busy client is never excused
    fast = [_request(0.0, 0.1, 0.5, level="x"), _request(0.0, 0.1, 0.5, level="x")]
    rows = {"1": load.level_row(_level(), fast, 2.0, 0.1),
            "2": load.level_row(_level(share=0.9), fast + fast, 2.0, 0.1)}
    import pandas as pd

    table = pd.DataFrame(rows.values(), index=list(rows))
    assert table.loc["2", "goodput req/s"] > table.loc["1", "goodput req/s"]
    assert load.knee(table) == "1"
