"""Prefill runs side by side: the ratio table, the paragraph that may claim only what the intervals
allow, and the warnings about runs that differ. Synthetic requests and sealed folders; no server."""

from types import SimpleNamespace

import pandas as pd
import pytest
from test_prefill_fit import record, synthetic
from test_prefill_plan import sealed_run

from sparknb.errors import DataError
from sparknb.runs.run import read_past
from sparknb.studies import prefill

CLAIMS = ("The gap grows", "The gap shrinks", "closer than they are", "further apart", "The faster model changes")


def test_the_ratio_table_divides_medians_at_each_length():
    dense = prefill.frame(synthetic(lambda n: 0.05 + 2e-4 * n, noise=0))
    moe = prefill.frame(synthetic(lambda n: 0.05 + 1e-4 * n, noise=0))
    t = prefill.ratio_table({"moe": moe, "dense": dense}, base="moe")
    assert list(t.columns) == ["moe TTFT ms", "dense TTFT ms", "dense / moe", "dense / moe low", "dense / moe high",
                               "dense / moe (server)"]
    assert t.loc[111, "dense / moe"] == pytest.approx((0.05 + 0.0222) / (0.05 + 0.0111))
    assert t.loc[5378, "dense / moe"] == pytest.approx((0.05 + 1.0756) / (0.05 + 0.5378))
    assert t.loc[111, "dense / moe (server)"] == pytest.approx((0.05 + 0.0222 - 0.002) / (0.05 + 0.0111 - 0.002))
    # No noise, no spread: the interval closes on the ratio.
    assert t.loc[5378, "dense / moe low"] == pytest.approx(t.loc[5378, "dense / moe high"])
    short = prefill.frame(synthetic(lambda n: 0.1, lengths=(111, 364)))
    with pytest.raises(DataError, match="different prompt lengths"):
        prefill.ratio_table({"moe": moe, "dense": short}, base="moe")


def test_the_ratio_interval_holds_the_true_ratio_and_not_a_wrong_one():
    true = {n: (0.05 + 2e-4 * n) / (0.05 + 1e-4 * n) for n in (111, 364, 1024, 2048, 5378)}
    t = prefill.ratio_table({"moe": prefill.frame(synthetic(lambda n: 0.05 + 1e-4 * n, noise=0.05, seed=3)),
                             "dense": prefill.frame(synthetic(lambda n: 0.05 + 2e-4 * n, noise=0.05, seed=4))}, "moe")
    low, high = t["dense / moe low"], t["dense / moe high"]
    assert all(low[n] < r < high[n] for n, r in true.items())
    assert all(not low[n] <= 1.0 <= high[n] for n in true)  # dense is surely slower everywhere
    # and it leaves out a ratio a third off either way: five noisy requests a side still say something
    assert all(not low[n] <= w <= high[n] for n, r in true.items() for w in (r * 1.35, r / 1.35))


def _comparison(moe_ttft, dense_ttft, noise=0.02, reps=5):
    moe = prefill.frame(synthetic(moe_ttft, noise=noise, seed=5, reps=reps))
    dense = prefill.frame(synthetic(dense_ttft, noise=noise, seed=6, reps=reps))
    table = prefill.ratio_table({"moe": moe, "dense": dense}, "moe")
    return moe, prefill.Comparison("moe", ("dense",), ("run-1",), table, None, ())


def _table(cmp):
    """A stand-in table for story(): only its lengths and this run's medians are read."""
    t = cmp.table
    return pd.DataFrame({"TTFT ms (median)": t["moe TTFT ms"], "prefill tok/s": t.index / t["moe TTFT ms"] * 1000},
                        index=t.index)


def _ends(cmp):
    t = cmp.table
    return t["dense / moe low"].iloc[[0, -1]].tolist(), t["dense / moe high"].iloc[[0, -1]].tolist()


def test_the_paragraph_says_what_a_short_test_would_have_concluded():
    moe, cmp = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.05 + 2.2e-4 * n)
    r0, r1 = cmp.table["dense / moe"].iloc[0], cmp.table["dense / moe"].iloc[-1]
    (low0, low1), (high0, _) = _ends(cmp)
    assert high0 < low1 and low0 > 1  # the premise: the ends are told apart, and dense is surely slower
    text = prefill.story(prefill.summarize(moe), prefill.fit(moe), "moe", cmp)
    assert "A single short-prompt test (111 tokens)" in text
    assert f"dense takes {r0:.2f} [" in text and f"at 5,378 tokens it is {r1:.2f} [" in text
    assert r0 == pytest.approx(1.22, abs=0.03) and r1 == pytest.approx(2.1, abs=0.1)
    assert "The gap grows" in text and "closer than they are" in text
    assert "cannot be told apart" not in text and "overlap" not in text


def test_the_paragraph_claims_no_more_than_the_intervals_allow():
    _, alike = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.05 + 1.02e-4 * n, noise=0.2)
    (low0, low1), (high0, high1) = _ends(alike)
    assert low0 <= 1 <= high0 and not (high0 < low1 or high1 < low0)  # the premise: nothing to tell apart
    text = prefill.story(_table(alike), None, "moe", alike)
    assert "At 111 tokens the two cannot be told apart" in text and "intervals at the two ends overlap" in text
    assert not [claim for claim in CLAIMS if claim in text]
    # One request per length gives no interval at all: then nothing is claimed either.
    _, single = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.05 + 2.2e-4 * n, reps=1)
    text = prefill.story(_table(single), None, "moe", single)
    assert "there is no interval" in text and not [claim for claim in CLAIMS if claim in text]


def test_the_paragraph_says_the_faster_model_changes_only_where_the_intervals_cross_one():
    _, flips = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.02 + 1.5e-4 * n, noise=0.01)
    low, high = flips.table["dense / moe low"], flips.table["dense / moe high"]
    assert (high < 1).any() and (low > 1).any()  # the premise: surely faster at one end, surely slower at the other
    assert "The faster model changes with the prompt length" in prefill.story(_table(flips), None, "moe", flips)
    _, closer = _comparison(lambda n: 0.05 + 1e-4 * n, lambda n: 0.05 + 2.2e-4 * n)
    assert "The faster model changes" not in prefill.story(_table(closer), None, "moe", closer)


def test_compare_warns_of_another_box_a_run_that_failed_halfway_and_cache_hits_on_one_side(tmp_path):
    other = sealed_run(tmp_path, "p1", lengths=(100, 300), seal=False)
    other.write_json("failure.json", {"failed_halfway": True, "reason": "KeyboardInterrupt: "})
    other.seal()
    (past,) = read_past("p1", "prefill", outputs=tmp_path)
    mine = {"host": {"hostname": "spark"}, "server": {"version": "0.32.0"}}
    study = SimpleNamespace(model=SimpleNamespace(name="tiny-dense"), run=SimpleNamespace(id="now"), fingerprint=mine)
    df = prefill.frame([record(n, 0.2, rep=i) for n in (100, 300) for i in range(2)])
    cmp = prefill.compare(df, study, [past], allow_cache_hits=True)
    warned = [w.text for w in cmp.warnings if w.level == "warning"]
    assert any(w.startswith("other ran elsewhere: host differs: hostname 'spark' vs 'box'") for w in warned)
    assert any("failed halfway (KeyboardInterrupt: )" in w for w in warned)
    assert any(w.startswith("tiny-dense allowed prefix-cache hits on purpose") for w in warned)
    assert cmp.table.loc[100, "other / tiny-dense"] == pytest.approx(0.1 / 0.2)
    assert "**WARNING:**" in cmp.warnings_markdown() and cmp.as_dict()["warnings"][0]["level"] == "warning"
    assert prefill.compare(df, study, [], allow_cache_hits=False) is None
