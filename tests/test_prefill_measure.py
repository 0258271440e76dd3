"""The prefix-cache check on its own: a hit stops the run with the counts; counters the server does not
expose are unknown, said as a warning, never counted as zero hits. (The real sweep against a real
server is in test_prefill_notebook.py; a real vLLM always exposes the counters, so their absence is
tested here on records.)"""

import pytest
from test_prefill_fit import record

from sparknb.errors import CacheHitError
from sparknb.studies import prefill

UNCHECKED = "prefix-cache hits could not be checked"


def test_a_cache_hit_is_caught_with_its_counts():
    prefill.check_no_cache_hits([record(300, 0.3), record(300, 0.3, rep=1)])  # none: fine
    repeated = [record(300, 0.3), record(300, 0.01, rep=1, hits=256), record(300, 0.01, rep=2, hits=256)]
    with pytest.raises(CacheHitError) as e:
        prefill.check_no_cache_hits(repeated)
    assert "2 request(s)" in str(e.value) and "256 of 300 prompt tokens" in str(e.value)
    assert "rep 2" in str(e.value) and "allow_cache_hits" in str(e.value)
    # A hit the per-request deltas missed still shows in the counters read around the whole sweep.
    with pytest.raises(CacheHitError, match="128 hits in 900"):
        prefill.check_no_cache_hits([record(300, 0.3)], prefill.CacheCount(900, 128))


def test_repeating_prompts_are_the_same_list_each_time():
    made = []
    prompts = prefill.repeating(lambda n: made.append(n) or list(range(n)))
    assert prompts(20) is prompts(20) and prompts(30) == list(range(30)) and made == [20, 30]


def _findings(records, cache):
    df = prefill.frame(records)
    return prefill.findings(df, prefill.summarize(df), None, prefill.Plan.build(), cache)


def test_a_server_without_cache_counters_is_unchecked_not_zero_hits():
    recs = [record(n, 0.1 + n / 1e4, rep=i) for n in (100, 300) for i in range(2)]
    for r in recs:
        r["server"] |= {"prefix_cache_queries": None, "prefix_cache_hits": None}
    cache = prefill.CacheCount(None, None)
    prefill.check_no_cache_hits(recs, cache)  # nothing seen, so nothing to stop; but not passed either:
    found = [f for f in _findings(recs, cache) if UNCHECKED in f.text]
    assert [f.level for f in found] == ["warning", "warning"]
    assert "over the whole sweep" in found[0].text and "for 4 of 4 measured request(s)" in found[1].text
    assert not cache.exposed and prefill.summarize(prefill.frame(recs))["cache hit %"].isna().all()
    summary = prefill.summary((100, 300), prefill.Plan.build(), cache, prefill.summarize(prefill.frame(recs)), None,
                              None, "", found)
    assert summary["cache"] == {"queries": None, "hits": None, "restarted": False, "exposed": False}


def test_counters_missing_for_some_requests_only_are_named_so():
    recs = [record(100, 0.1, rep=i) for i in range(3)]
    recs[1]["server"]["prefix_cache_hits"] = None
    found = [f for f in _findings(recs, prefill.CacheCount(300, 0)) if UNCHECKED in f.text]
    assert len(found) == 1 and found[0].level == "warning" and "for 1 of 3 measured request(s)" in found[0].text
    assert prefill.summarize(prefill.frame(recs)).loc[100, "cache hit %"] is None  # unknown, not 0 %
    counted = [f for f in _findings([record(100, 0.1)], prefill.CacheCount(100, 0)) if "Prefix cache" in f.text]
    assert counted[0].level == "info" and "100 prompt tokens looked up, 0 found" in counted[0].text


def test_a_request_without_a_first_token_time_is_counted_and_named_not_dropped_silently():
    recs = [record(n, 0.1 + n / 1e4, rep=i) | {"seq": k} for k, (n, i) in enumerate(
        (n, i) for n in (100, 300) for i in range(3))]
    recs[4] |= {"ttft_s": None}  # as 5 of 272 one-token answers on the H200 came back
    df = prefill.frame(recs)
    assert prefill.summarize(df).loc[300, "n"] == 2  # left out of the figures...
    (said,) = [f for f in _findings(recs, prefill.CacheCount(1, 0)) if "no first-token time" in f.text]
    assert said.level == "warning" and "1 request(s)" in said.text and said.about == (300,)
    assert "seq 4 (300 tokens, rep 1)" in said.text  # ...and named, as the tables show it
