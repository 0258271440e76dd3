"""Counter arithmetic on vLLM's Prometheus text: deltas, tokens per step, resets."""

import pytest

from sparknb.endpoint import metrics
from sparknb.endpoint.metrics import Snapshot, delta
from sparknb.engines import VLLM


def scrape(drafts, draft_tokens, accepted, per_pos, decode_sum, decode_count, model="m", other=100.0, generated=None):
    lines = [f'vllm:generation_tokens_total{{engine="0",model_name="{model}"}} {generated}'] if generated is not None else []
    lines += [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="{model}"}} {drafts}',
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="someone-else"}} {other}',
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter",
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="{model}"}} {draft_tokens}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter",
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="{model}"}} {accepted}',
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
    ]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="{model}",position="{i}"}} {v}'
              for i, v in enumerate(per_pos)]
    lines += [
        "# TYPE vllm:request_decode_time_seconds histogram",
        f'vllm:request_decode_time_seconds_bucket{{engine="0",le="1.0",model_name="{model}"}} {decode_count}',
        f'vllm:request_decode_time_seconds_bucket{{engine="0",le="+Inf",model_name="{model}"}} {decode_count}',
        f'vllm:request_decode_time_seconds_count{{engine="0",model_name="{model}"}} {decode_count}',
        f'vllm:request_decode_time_seconds_sum{{engine="0",model_name="{model}"}} {decode_sum}',
        "# TYPE vllm:num_requests_running gauge",
        f'vllm:num_requests_running{{engine="0",model_name="{model}"}} 1.0',
        f'vllm:num_requests_running{{engine="1",model_name="{model}"}} 2.0',
    ]
    return Snapshot.parse("\n".join(lines) + "\n", model, VLLM)


def test_spec_decode_from_the_difference_of_two_scrapes():
    # The 150-token greedy answer of the field notes: 39 drafts, 109 draft tokens, 106 accepted.
    before = scrape(10, 30, 20, [8, 7, 5], 1.0, 3, generated=1000)
    after = scrape(49, 139, 126, [8 + 38, 7 + 36, 5 + 32], 1.85, 4, generated=1150)
    spec = delta(before, after).spec_decode()
    assert (spec["drafts"], spec["draft_tokens"], spec["accepted_tokens"]) == (39, 109, 106)
    assert spec["tokens_per_step"] == pytest.approx(150 / (150 - 106))  # 44 steps of the target made 150 tokens
    assert spec["acceptance_rate"] == pytest.approx(106 / 109)
    assert spec["acceptance_rate"] == pytest.approx(106 / 109)
    assert spec["acceptance_per_position"] == pytest.approx([38 / 39, 36 / 39, 32 / 39])


def test_other_models_and_buckets_are_left_out_and_engines_summed():
    snap = scrape(5, 15, 9, [3], 0.5, 2)
    assert snap[metrics.DRAFTS] == 5  # not 105: the other model's counter is not ours
    assert not any("_bucket" in k for k in snap.values)
    assert snap.load()["running"] == 3.0


def test_a_gauge_the_server_does_not_expose_is_unknown_not_zero():
    # The scrape has a running gauge but no waiting one: a renamed or missing gauge must not read as idle.
    snap = scrape(5, 15, 9, [3], 0.5, 2)
    assert snap.load() == {"running": 3.0, "waiting": None}
    assert snap[metrics.PREFIX_HITS] is None


def test_counters_the_server_does_not_expose_are_unknown_and_named():
    before = Snapshot.parse("vllm:num_requests_running 0\n", "m", VLLM)
    after = Snapshot.parse("vllm:num_requests_running 0\n", "m", VLLM)
    d = delta(before, after)
    assert d[metrics.PREFIX_HITS] is None and d.requests() is None and d.mean(metrics.DECODE) is None
    assert d.spec_decode()["tokens_per_step"] is None  # unknown, not "one token per step"
    assert metrics.interference(d, 1, 10) is None  # nothing to judge by ...
    assert set(metrics.unchecked(d)) == {"whether another client used the server", "the tokens the server generated",
                                         "prefix-cache hits", "the server's own decode time"}  # ... and said so


def test_interference_is_judged_from_the_counters():
    d = delta(scrape(0, 0, 0, [], 1.0, 3), scrape(0, 0, 0, [], 1.85, 4))
    assert metrics.interference(d, 1, None) is None
    two = metrics.Delta({metrics.E2E + "_count": 2.0, metrics.GENERATED: 20.0})
    assert "finished 2 requests" in metrics.interference(two, 1, 10)
    more = metrics.Delta({metrics.E2E + "_count": 1.0, metrics.GENERATED: 25.0})
    assert "generated 25 tokens" in metrics.interference(more, 1, 10)


def test_histogram_delta_gives_this_requests_time():
    d = delta(scrape(0, 0, 0, [], 1.0, 3), scrape(0, 0, 0, [], 1.85, 4))
    total, count = d.histogram(metrics.DECODE)
    assert (total, count) == (pytest.approx(0.85), 1)


def test_steps_that_drafted_nothing_count_as_steps():
    """An n-gram lookup drafts only where the text repeats: 40 accepted in 8 drafting steps of a 200-token answer
    is 200 tokens in 160 steps (1.25 per step), not 1 + 40 / 8 = 6."""
    spec = delta(scrape(0, 0, 0, [], 0, 0, generated=0), scrape(8, 96, 40, [], 0, 0, generated=200)).spec_decode()
    assert spec["tokens_per_step"] == pytest.approx(1.25)
    unknown = delta(scrape(0, 0, 0, [], 0, 0), scrape(8, 96, 40, [], 0, 0)).spec_decode()
    assert unknown["tokens_per_step"] is None  # drafts without a count of generated tokens: unknown, not 6


def test_no_drafts_means_one_token_per_step_and_no_acceptance_rate():
    spec = delta(scrape(3, 9, 4, [2], 0, 0), scrape(3, 9, 4, [2], 0, 0)).spec_decode()
    assert spec["tokens_per_step"] == 1.0 and spec["acceptance_rate"] is None


def test_a_server_restart_between_scrapes_is_caught():
    # Counters start again from zero after a restart: the delta is what it counted since, marked.
    d = delta(scrape(500, 1500, 900, [300], 40.0, 100, generated=5000), scrape(7, 21, 12, [5], 0.6, 1, generated=30))
    assert metrics.DRAFTS in d.reset and d[metrics.DRAFTS] == 7
    assert d.spec_decode()["tokens_per_step"] == pytest.approx(30 / 18)
    assert metrics.RUNNING not in d.values  # gauges have no delta
