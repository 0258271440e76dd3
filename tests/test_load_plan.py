"""The load study without a server: its parameters, its levels, its arrivals, its prompts and its formulas.

The formulas are checked on small hand-made records whose figures can be worked out on paper; what a
real server does under load is tested against the tiny test bed in test_load.py.
"""

from __future__ import annotations

import asyncio
import statistics

import pandas as pd
import pytest

from sparknb import engines
from sparknb.errors import ParamsError
from sparknb.studies import load
from sparknb.studies.load.findings import window_check
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
    capacity = engines.VLLM.kv_capacity(CACHE_INFO.decode(), 512 + 128)
    assert capacity == 524288 // 640
    kept, note = plan.levels(20)
    assert [lv.value for lv in kept] == [1, 2, 4, 8, 16] and "32, 64" in note and "holds 20" in note
    assert plan.levels(None) == (plan.wanted(), None)  # a server that does not say caps nothing
    assert engines.VLLM.kv_capacity("vllm:num_requests_running 0\n", 640) is None


def test_warmup_is_one_wave_of_the_level():
    waves = load.Plan.build(concurrency=[8], warmup=2).wanted()
    assert [(lv.name, lv.warmup) for lv in waves] == [("8 in flight", 16)]
    rates = load.Plan.build(request_rates=[2.5], warmup=1).wanted()
    assert [(lv.name, lv.warmup, lv.mode) for lv in rates] == [("2.5 req/s", 3, "rate")]


def test_arrivals_are_seeded_poisson_at_the_levels_rate():
    level = load.Level("rate", 4.0, warmup=2, requests=3000)
    first, again = load.arrivals(level, seed=1), load.arrivals(level, seed=1)
    assert first == again != load.arrivals(level, seed=2)
    assert len(first) == 3002 and first == sorted(first)
    gaps = [b - a for a, b in zip(first, first[1:])]
    assert statistics.mean(gaps) == pytest.approx(0.25, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.25, rel=0.1)  # exponential: the spread equals the mean


def test_arrivals_for_a_duration_stop_after_it():
    timed = load.arrivals(load.Level("rate", 10.0, warmup=5, requests=0, duration_s=3.0), seed=0)
    assert timed[-1] - timed[5] <= 3.0 and len(timed) > 5 + 15


def test_a_minimum_count_keeps_a_level_sending_past_its_duration():
    short = load.Level("rate", 10.0, warmup=5, requests=0, duration_s=1.0, min_requests=40)
    timed = load.arrivals(short, seed=0)
    assert len(timed) == 5 + 40 and timed[-1] - timed[5] > 1.0  # 40 arrivals at 10/s take about 4 s
    assert short.count_rule == "1 s of sending, at least 40 requests"
    assert short.done(45, 1.2) and not short.done(44, 9.0) and not short.done(45, 0.5)


def test_a_count_per_level_follows_the_levels_as_given():
    plan = load.Plan.build(concurrency=[8, 1, 4], requests_per_level=[80, 10, 40])
    assert [(lv.value, lv.requests, lv.count_rule) for lv in plan.wanted()] == [
        (1, 10, "10 requests"), (4, 40, "40 requests"), (8, 80, "80 requests")]
    with pytest.raises(ParamsError, match="2 counts for 3 levels"):
        load.Plan.build(concurrency=[1, 2, 4], requests_per_level=[10, 20])
    with pytest.raises(ParamsError, match="7 levels"):  # the standard levels, when none are given
        load.Plan.build(requests_per_level=[10, 20])


def test_percentiles_are_a_parameter_checked_before_anything_runs():
    assert load.Plan.build().percentiles == [50, 90, 99]
    with pytest.raises(ParamsError, match="percentiles"):
        load.Plan.build(percentiles=[50, 150])
    with pytest.raises(ParamsError, match="repeats"):
        load.Plan.build(percentiles=[90, 90])


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
            "last_token_s": total, "total_s": total, "completion_tokens": tokens, "chunk_times": chunk_times,
            "chunk_tokens": [1] * tokens, "decode_s": total - ttft, "decode_tokens": tokens - 1,
            "decode_tokens_per_s": (tokens - 1) / (total - ttft), "server": server}


def _level(share=0.1, lag=0.001, samples=()):
    return {"kind": "level", "level_name": "2 in flight", "mode": "concurrency", "level": 2,
            "count_rule": "3 requests", "client": {"loop_cpu_share": share, "lags_s": {"p99": lag}},
            "samples": list(samples), "server": {"ttft_s": None, "decode_s": None, "e2e_s": None}}


# A warmup request, then three measured ones: chunks every 0.1 s, ten tokens each.
REQUESTS = [_request(0.0, 0.55, 1.45, warmup=True),  # its last five chunks arrive inside the steady window
            _request(1.0, 0.2, 1.1), _request(1.0, 0.4, 1.3), _request(2.1, 3.0, 3.9)]
# [seconds, running, waiting, KV use, preemptions, generated tokens]: the server's readings at the windows' edges.
SAMPLES = [[0.0, 0, 0, 0.0, 0, 0], [1.0, 2, 0, 0.1, 0, 5], [2.0, 2, 1, 0.3, 0, 20], [3.0, 1, 0, 0.2, 1, 30],
           [6.0, 0, 0, 0.0, 1, 40]]


def test_the_level_formulas_on_requests_worked_out_by_hand():
    row = load.level_row(_level(samples=SAMPLES), REQUESTS, slo_ttft_s=2.0, slo_tpot_s=0.15)
    assert row["requests"] == 3 and row["count rule"] == "3 requests"
    # steady: from the first measured sending (1.0) to the last measured answer's end (2.1 + 3.9); the
    # warmup's five chunks inside it count. all: from 0.0, every token.
    assert row["window s (steady)"] == pytest.approx(5.0) and row["window s (all)"] == pytest.approx(6.0)
    assert row["aggregate tok/s (steady)"] == pytest.approx(35 / 5)
    assert row["aggregate tok/s (all)"] == pytest.approx(40 / 6)
    assert row["tok/s vs server % (steady)"] == pytest.approx(0) and row["tok/s vs server % (all)"] == pytest.approx(0)
    assert row["server count ± % (steady)"] == pytest.approx(0)  # a reading at each edge: no room either way
    assert row["TTFT mean ms"] == pytest.approx(1200) and row["TTFT p50 ms"] == pytest.approx(400)
    assert row["TPOT mean ms"] == pytest.approx(100) and row["ITL p90 ms"] == pytest.approx(100)  # 0.9 s / 9 tokens
    assert row["E2E mean ms"] == pytest.approx(2100) and row["E2E p50 ms"] == pytest.approx(1300)
    assert row["goodput req/s (steady)"] == pytest.approx(2 / 5)  # the third missed the TTFT target
    assert row["goodput req/s (all)"] == pytest.approx(3 / 6)  # the warmup request met it
    assert (row["running max"], row["waiting max"], row["KV use max %"], row["preemptions"]) == (2, 1, 30, 1)
    assert row["server truth"] is None and not row["saturated"]
    line = load.measure.level_line(_level(samples=SAMPLES), REQUESTS, 2.0, 0.15)
    assert "steady window (warmup wave left out, 5.0 s): 7.0 tok/s" in line and "all requests (6.0 s): 6.7" in line


def test_tpot_and_itl_part_where_chunks_hold_several_tokens_and_the_percentiles_are_chosen():
    """Speculative decoding: three tokens a chunk; TPOT counts tokens, ITL the gaps between chunks."""
    r = _request(0.0, 0.1, 1.0, tokens=10) | {"completion_tokens": 28, "decode_tokens": 27,
                                             "chunk_tokens": [1] + [3] * 9}
    row = load.level_row(_level(), [r], 2.0, 0.2, percentiles=[25, 75, 99.9])
    assert row["TPOT mean ms"] == pytest.approx(900 / 27) and row["ITL mean ms"] == pytest.approx(100)
    assert row["tokens/chunk"] == pytest.approx(2.8)
    assert {"TTFT p25 ms", "TTFT p75 ms", "TTFT p99.9 ms"} <= set(row) and "TTFT p50 ms" not in row
    columns = load.throughput_columns([25, 75, 99.9])
    assert "ITL p99.9 ms" in columns and all(c in row for c in columns)


def test_a_window_edge_between_readings_bounds_the_servers_figure():
    """The reading before the steady window's start says 5, the one after 15: the server made 25 to 35
    tokens inside it, 30 by interpolation; the client's 35 is the most it can have, so not flagged."""
    samples = [[0.0, 0, 0, 0, 0, 0], [0.5, 2, 0, 0, 0, 5], [1.5, 2, 0, 0, 0, 15], [6.0, 0, 0, 0, 0, 40]]
    row = load.level_row(_level(samples=samples), REQUESTS, 2.0, 0.15)
    assert row["tok/s vs server % (steady)"] == pytest.approx(100 * (35 / 30 - 1))
    assert row["server count ± % (steady)"] == pytest.approx(100 * 5 / 30)
    table = pd.DataFrame([row], index=["2 in flight"])
    (said,) = window_check(table)
    assert said.level == "info"
    late = [REQUESTS[0], REQUESTS[1], REQUESTS[2], REQUESTS[3] | {"sent_s": 2.1}]
    moved = [[0.0, 0, 0, 0, 0, 0], [1.0, 2, 0, 0, 0, 5], [6.0, 0, 0, 0, 0, 50]]  # the server made ten more
    off = pd.DataFrame([load.level_row(_level(samples=moved), late, 2.0, 0.15)], index=["2 in flight"])
    (warned,) = window_check(off)
    assert warned.level == "warning" and "-22.2%" in warned.text  # 35 against 45


def test_no_window_figure_is_guessed_where_the_server_gives_no_tokens_per_chunk():
    straddling = [r | {"chunk_tokens": [None] * 10} for r in REQUESTS]
    row = load.level_row(_level(samples=SAMPLES), straddling, 2.0, 0.15)
    assert row["aggregate tok/s (steady)"] is None  # the warmup straddles its start: unknown, not guessed
    assert row["aggregate tok/s (all)"] == pytest.approx(40 / 6)  # every request wholly inside: usage suffices
    old = load.level_row(_level(samples=[s[:5] for s in SAMPLES]), REQUESTS, 2.0, 0.15)  # an earlier run's readings
    assert old["tok/s vs server % (steady)"] is None and old["aggregate tok/s (steady)"] == pytest.approx(7.0)


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
    table = pd.DataFrame(rows.values(), index=list(rows))
    assert table.loc["2", "goodput req/s (steady)"] > table.loc["1", "goodput req/s (steady)"]
    assert load.knee(table) == "1"
