"""Speed rows decide when their evidence decides, on crafted sealed prefill runs whose findings the study's own code
writes: two models 2x apart, each with a rough fit and lengths where repetitions auto missed its precision target
(the spread being llama-server's own prompt time), are decided at every length past the trap; a busy box or drift
still caveats."""

import random

from sparknb.engines.llamacpp import LLAMACPP
from sparknb.runs.report import as_records
from sparknb.runs.run import Run
from sparknb.studies import compare, prefill
from sparknb.studies.prefill.fit import fit
from sparknb.studies.prefill.measure import CacheCount
from sparknb.verdicts.verdict import decide
from test_compare import fingerprint, headline_of

LENGTHS = (111, 364, 1024, 2048, 5378, 10714)


def prefill_run(tmp_path, model, per_token, seed, load=0.5, drift=0.0):
    """A llama-server-like sweep: the server's own prompt time spreads by +/-8% (no +/-2% target is reached in
    12 requests), under 3.6 ms of each request lies outside it, and 2,048 tokens costs 30% over the line."""
    rng = random.Random(seed)
    records = []
    for rep in range(12):
        for n in LENGTHS:
            bump = 1.3 if n == 2048 else 1.0
            server = (0.004 + per_token * n * bump) * (1 + rng.uniform(-0.08, 0.08)) * (1 + drift * rep / 11)
            records.append({"seq": len(records) + 1, "prompt_length": n, "rep": rep, "warmup": False,
                            "prompt_tokens": n, "completion_tokens": 1, "ttft_s": server + rng.uniform(0.0015, 0.0036),
                            "server": {"prefill_s": server, "prefix_cache_queries": n, "prefix_cache_hits": 0},
                            "cache_hits_allowed": False, "load_1m": load, "interference": None})
    df = prefill.frame(records)
    stopped = {n: "stopped at the cap of 12 requests with +/-5.1% (target +/-2%): the requests spread wider "
                  "than the target allows at that count" for n in LENGTHS}
    table, fit_ = prefill.summarize(df, stopped), fit(df)
    notes = prefill.findings(df, table, fit_, prefill.Plan(), CacheCount(sum(LENGTHS) * 12.0, 0.0), None, stopped,
                             LLAMACPP)
    run = Run.create("prefill", {"notebook": "prefill", "model": {"name": model},
                                 "settings": {"output_tokens": 1, "allow_cache_hits": False}},
                     outputs=tmp_path, label=model)
    run.write_json("fingerprint.json", fingerprint())
    for r in records:
        run.record(r)
    run.write_json("summary.json", {"fit": fit_.as_dict(), "findings": as_records(notes)})
    run.seal()
    return run, notes


def test_ratios_far_from_one_decide_despite_a_rough_fit_and_a_missed_precision_target(tmp_path):
    (a, notes), (b, _) = prefill_run(tmp_path, "fast", 28e-6, 1), prefill_run(tmp_path, "slow", 56e-6, 2)
    text = " ".join(n.text for n in notes)
    assert "misses the median TTFT at 2,048 tokens" in text and "stopped at its cap" in text  # both were said
    assert "the server's own time" in text  # the spread is put where the server's own timings put it
    _, h = headline_of(tmp_path, a, b)
    rows = [r for r in h.rows if r.role == "verdict"]
    assert len(rows) >= 3
    for r in rows:
        d = decide(r, "slow", "fast")
        assert (d.outcome, d.winner) == ("wins", "fast"), (r.figure, d.reasons)
    sentences = compare.story(h).split("\n\n")
    ahead = next(i for i, s in enumerate(sentences) if "**Prefill: fast is ahead**" in s)
    trap = next(i for i, s in enumerate(sentences) if "shown as the trap" in s)
    assert ahead < trap  # the deciding rows first, the trap after


def test_a_busy_box_or_drift_still_caveats(tmp_path):
    (a, _), (busy, _) = prefill_run(tmp_path, "fast", 28e-6, 1), prefill_run(tmp_path, "busy", 56e-6, 2, load=64.0)
    _, h = headline_of(tmp_path, a, busy)
    for r in (r for r in h.rows if r.role == "verdict"):
        d = decide(r, "busy", "fast")
        assert d.outcome == "caveated" and any("load average" in x for x in d.reasons)
    drifting, notes = prefill_run(tmp_path, "drifting", 56e-6, 3, drift=0.5)
    assert any("drifted" in n.text for n in notes)
    _, h = headline_of(tmp_path, a, drifting)
    drifted = [r for r in h.rows if r.role == "verdict" and decide(r, "drifting", "fast").outcome == "caveated"]
    assert drifted and all(any("drifted" in x for x in decide(r, "drifting", "fast").reasons) for r in drifted)
