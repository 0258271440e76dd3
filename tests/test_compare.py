"""The comparison over sealed runs: each verdict rule on crafted sealed runs (no server), then the notebook.

The runs are written here with the run-folder code, with figures chosen so the expected verdicts are known;
tests/test_campaign.py compares real runs of the tiny test bed.
"""

import json
import random

import pytest

from sparknb.errors import DataError, ParamsError
from sparknb.runs.run import Run, verify
from sparknb.studies import compare
from sparknb.verdicts import stats
from sparknb.verdicts.verdict import Row, decide
from support import outputs_text, run_notebook


def fingerprint(host="box-a", cpu="Grace", driver="580.159.03", server="0.32.0", speculative=None) -> dict:
    return {"taken_at": "2026-12-01T00:00:00+00:00", "host": {"hostname": host, "cpu_model": cpu, "cpu_count": 20,
            "memory_total_bytes": 128 * 2 ** 30}, "gpu": {"available": True, "driver_version": driver,
            "cuda_driver_version": "13.0", "devices": [{"name": "GB10", "memory_total_bytes": "unified"}]},
            "server": {"version": server, "root": "/models/x", "dtype": "bfloat16", "quantization": "none",
                       "speculative": {"declared": speculative, "server_counts_drafts": bool(speculative)}},
            "project": {"commit": "abc", "dirty": False}}


def decode_run(tmp_path, model: str, speed: float, fp: dict, spread=0.02, seed=0, lengths=(111, 5378), reps=5,
               findings=(), speculative=None, client_burst_at=None, table=None) -> Run:
    """A decode run as the decode notebook seals it; `client_burst_at`: a length whose answers the client saw
    at ten times the server's speed (a burst), the server's own time being the true one."""
    rng = random.Random(seed)
    run = Run.create("decode", {"notebook": "decode", "model": {"name": model, "speculative": speculative},
                                "settings": {"prompt_lengths": list(lengths), "repetitions": reps,
                                             "output_tokens": 150, "temperature": 0.0}},
                     outputs=tmp_path, label=model)
    run.write_json("fingerprint.json", fp)
    seq = 0
    for n in lengths:
        for rep in range(reps):
            seq += 1
            tps = speed * (1 - n / 100000) * (1 + rng.uniform(-spread, spread))
            client = 149 / tps / (10 if n == client_burst_at else 1)
            run.record({"seq": seq, "prompt_length": n, "rep": rep, "warmup": False, "prompt_tokens": n,
                        "completion_tokens": 150, "decode_tokens": 149, "ttft_s": 0.1, "decode_s": client,
                        "decode_tokens_per_s": 149 / client, "interference": None,
                        "server": {"decode_s": 149 / tps, "ttft_s": 0.09, "spec_decode": {"tokens_per_step": None},
                                   "unchecked": []}})
    run.write_json("summary.json", {"table": table or [{"prompt tokens": n, "% of limit": 90.0} for n in lengths],
                                    "findings": list(findings)})
    run.seal()
    return run


def prefill_run(tmp_path, model: str, overhead: float, per_token: float, seed=0, crossover: float | None = 500.0,
                lengths=(111, 2048, 10714)) -> Run:
    rng = random.Random(seed)
    run = Run.create("prefill", {"notebook": "prefill", "model": {"name": model},
                                 "settings": {"output_tokens": 1, "allow_cache_hits": False}},
                     outputs=tmp_path, label=model)
    run.write_json("fingerprint.json", fingerprint())
    for n in lengths:
        for rep in range(6):
            run.record({"prompt_length": n, "rep": rep, "warmup": False, "ttft_s": (overhead + per_token * n)
                        * (1 + rng.uniform(-0.02, 0.02)), "interference": None, "server": {}})
    fit = {"overhead_s": {"value": overhead, "low": overhead * 0.9, "high": overhead * 1.1},
           "crossover_tokens": None if crossover is None else {"value": crossover, "low": crossover * 0.8,
                                                                "high": crossover * 1.2}}
    run.write_json("summary.json", {"fit": fit, "findings": []})
    run.seal()
    return run


def headline_of(tmp_path, *runs):
    plan = compare.Plan.build(runs=[r.id for r in runs], outputs=str(tmp_path))
    return plan, compare.headline(plan.compared())


def row(h, figure):
    return next(r for r in h.rows if r.figure == figure)


def test_a_trusted_row_whose_interval_excludes_one_decides_and_one_that_holds_it_says_what_would_tell(tmp_path):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2)
    plan, h = headline_of(tmp_path, a, b)
    assert plan.models() == ["moe-35b", "dense-27b"] and compare.warnings(plan.past) == []
    r = row(h, "tok/s at 111 tokens")
    assert r.ratios["dense-27b"].estimate == pytest.approx(8.9 / 26.0, rel=0.03) and r.ratios["dense-27b"].high < 1
    d = decide(r, "dense-27b", "moe-35b")
    assert (d.outcome, d.winner, r.standing("dense-27b", "moe-35b")) == ("wins", "moe-35b", "trusted")
    text = compare.story(h)
    assert "**Decode: moe-35b is ahead**" in text and "behind on none" in text
    # The same model again, with a wide spread: nothing decides, and the row says what sample would tell.
    same = decode_run(tmp_path, "moe-35b-again", 26.4, fingerprint(), spread=0.2, seed=3)
    _, h = headline_of(tmp_path, a, same)
    r = row(h, "tok/s at 111 tokens")
    assert decide(r, "moe-35b-again", "moe-35b").outcome == "cannot tell"
    assert "cannot tell apart on tok/s at 111 tokens" in compare.story(h)
    assert r.needed["moe-35b-again"].startswith(("about", "no difference was seen"))


def test_a_difference_only_at_the_short_prompt_never_wins_prefill(tmp_path):
    # Apart at 111 tokens (one model's front end costs 60 ms more per request), alike where the tokens dominate.
    quick = prefill_run(tmp_path, "quick-front", 0.05, 0.002, seed=1, lengths=(111, 10714))
    slow = prefill_run(tmp_path, "slow-front", 0.11, 0.002, seed=2, lengths=(111, 10714))
    _, h = headline_of(tmp_path, quick, slow)
    short = row(h, "TTFT ms at 111 tokens")
    assert short.ratios["slow-front"].low > 1.1  # the interval excludes 1 by far: a naive benchmark's winner
    assert short.role == "trap" and decide(short, "slow-front", "quick-front").outcome == "trap"
    long_ = row(h, "TTFT ms at 10,714 tokens")
    assert long_.role == "verdict" and decide(long_, "slow-front", "quick-front").outcome != "wins"
    verdict = next(v for v in h.verdicts() if v.study == "prefill")
    assert verdict.winner is None
    text = compare.story(h)
    assert "Prefill: quick-front is ahead" not in text and "shown as the trap" in text


def test_prefill_is_judged_from_the_length_the_fits_give(tmp_path):
    # Both fits say the tokens outweigh the overhead only from 3,000 tokens: 2,048 is a trap too.
    a = prefill_run(tmp_path, "a", 0.3, 0.0001, seed=1, crossover=3000.0)
    b = prefill_run(tmp_path, "b", 0.3, 0.0003, seed=2, crossover=1000.0)
    _, h = headline_of(tmp_path, a, b)
    assert [r.role for r in h.rows] == ["trap", "trap", "verdict"]
    assert "3,000 tokens from which" in row(h, "TTFT ms at 2,048 tokens").note
    assert decide(row(h, "TTFT ms at 10,714 tokens"), "b", "a").winner == "a"


def test_a_caveated_row_never_decides_and_names_its_reason(tmp_path):
    burst = {"level": "warning", "text": "At 111 tokens decode ranged from 9.0 to 90.0 tok/s (10.0x) over 5 requests. "
             "More words.", "about": [111]}
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1, findings=[burst])
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2)
    _, h = headline_of(tmp_path, a, b)
    short, long_ = row(h, "tok/s at 111 tokens"), row(h, "tok/s at 5,378 tokens")
    assert short.ratios["dense-27b"].high < 1  # would decide, were it trusted
    d = decide(short, "dense-27b", "moe-35b")
    assert d.outcome == "caveated" and d.winner is None
    assert any("ranged from 9.0 to 90.0" in reason for reason in d.reasons)
    assert decide(long_, "dense-27b", "moe-35b").outcome == "wins"  # the warning names 111 only
    table = h.table()
    assert "caveated" in table.loc[0, "dense-27b: verdict"] and "ranged from 9.0" in table.loc[0, "why"]


def test_too_few_samples_and_speculation_on_one_side_only_are_caveats(tmp_path):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1, reps=3)
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2, reps=3)
    _, h = headline_of(tmp_path, a, b)
    d = decide(row(h, "tok/s at 111 tokens"), "dense-27b", "moe-35b")
    assert d.outcome == "caveated" and "too few measurements for an interval (moe-35b 3, dense-27b 3" in d.reasons[0]
    spec = decode_run(tmp_path, "moe-mtp", 26.0, fingerprint(speculative="mtp"), seed=1, speculative="mtp")
    plain = decode_run(tmp_path, "dense", 8.9, fingerprint(), seed=2)
    plan, h = headline_of(tmp_path, spec, plain)
    d = decide(row(h, "tok/s at 111 tokens"), "dense", "moe-mtp")
    assert d.outcome == "caveated" and any("speculative decoding (mtp) on this side only" in x for x in d.reasons)
    assert any("do not speculate alike" in w.text for w in compare.warnings(plan.past))
    assert "speculative decoding: speculative" in compare.fingerprint_table(plan.past).index


def test_a_burst_is_counted_at_the_servers_time_so_it_cannot_pose_as_speed(tmp_path):
    # The client saw tiny-dense's 111-token answers ten times faster than the server made them.
    a = decode_run(tmp_path, "a", 26.0, fingerprint(), seed=1)
    b = decode_run(tmp_path, "b", 8.9, fingerprint(), seed=2, client_burst_at=111)
    _, h = headline_of(tmp_path, a, b)
    r = row(h, "tok/s at 111 tokens")
    assert r.values["b"] == pytest.approx(8.9 * (1 - 111 / 100000), rel=0.03)  # the server's, not 89
    assert decide(r, "b", "a").winner == "a"


def test_every_warning_of_every_input_run_and_every_missing_study_reach_the_comparison(tmp_path):
    outputs = tmp_path / "outputs"
    w1 = {"level": "warning", "text": "this machine's load average reached 3.0 on 2 CPU threads.", "about": []}
    w2 = {"level": "marked", "text": "the client was loaded on purpose.", "about": [111]}
    a = decode_run(outputs, "moe-35b", 26.0, fingerprint(), seed=1, findings=[w1])
    b = decode_run(outputs, "dense-27b", 8.9, fingerprint(), seed=2, findings=[w2, {"level": "info", "text": "fine"}])
    record = Run.create("campaigns", {"notebook": "campaigns", "cells": []}, outputs=outputs, label="c")
    for run in (a, b):
        record.record({"cell": f"decode/{run.id}/1", "status": "done", "run": str(run.path)})
    record.record({"cell": "mmlu_pro/dense-27b/1", "status": "failed", "reason": "mmlu_pro did not start: no data"})
    plan = compare.Plan.build(campaign=record.id, outputs=str(outputs))
    found = compare.run_warnings(plan.past)
    assert found.count == 2
    h = compare.headline(plan.compared())
    cited = h.table(found.cite)
    assert "moe-35b: W1" in cited.loc[0, "why"] and "dense-27b: W2" in cited.loc[0, "why"]  # 111 tokens: both
    assert "dense-27b: W2" not in cited.loc[1, "why"]  # the second warning names 111 tokens only
    assert plan.missing() == ["mmlu_pro/dense-27b/1 failed: mmlu_pro did not start: no data"]
    nb, folder = run_notebook("compare", tmp_path, {"campaign": record.id})
    text = outputs_text(nb)
    assert "load average reached 3.0" in text and "the client was loaded on purpose" in text
    assert "Missing: mmlu_pro/dense-27b/1 failed" in text
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["missing"] and sum(len(v) for v in summary["run_warnings"].values()) == 2
    assert verify(folder) == []


def test_a_long_missing_reason_is_shortened_after_a_whole_word(tmp_path):
    outputs = tmp_path / "outputs"
    a = decode_run(outputs, "moe-35b", 26.0, fingerprint(), seed=1)
    record = Run.create("campaigns", {"notebook": "campaigns", "cells": []}, outputs=outputs, label="c")
    record.record({"cell": f"decode/{a.id}/1", "status": "done", "run": str(a.path)})
    reason = "decode failed halfway: EndpointError: " + " ".join(f"word{i:03d}" for i in range(80))
    record.record({"cell": "decode/dense-27b/1", "status": "failed", "reason": reason + "\nTraceback: more"})
    (shown,) = [m for m in compare.Plan.build(campaign=record.id, outputs=str(outputs)).missing() if "failed" in m]
    assert shown.endswith(" …") and len(shown) < len(reason)
    assert set(shown.removesuffix(" …").split()[-3:]) <= set(reason.split())  # whole words only, none cut


def test_a_comparison_of_runs_from_different_boxes_shows_the_warning_first(tmp_path):
    a = decode_run(tmp_path / "outputs", "moe-35b", 26.0, fingerprint())
    b = decode_run(tmp_path / "outputs", "dense-27b", 8.9, fingerprint(host="box-b", cpu="EPYC", driver="590.1"))
    nb, folder = run_notebook("compare", tmp_path, {"runs": [a.id, b.id]})
    assert "DIFFERENT BOXES" in outputs_text(nb) and "driver differs" in outputs_text(nb)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["findings"][0]["level"] == "warning" and "DIFFERENT BOXES" in summary["findings"][0]["text"]
    assert "image/png" in outputs_text(nb) and verify(folder) == []
    table = compare.fingerprint_table(compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path / "outputs")).past)
    assert list(table["differs"])[:4] == ["DIFFERS"] * 3 + [""] and "128.0 GiB" in table.to_string()


def test_a_tampered_run_is_refused_with_the_file_named(tmp_path):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint())
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint())
    for p in [b.path, *b.path.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (b.path / "summary.json").write_text("{}")
    with pytest.raises(DataError, match="changed: summary.json"):
        compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))


def test_with_nothing_given_the_newest_campaign_is_compared(tmp_path):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2)
    with pytest.raises(ParamsError, match="nothing to compare"):
        compare.Plan.build(outputs=str(tmp_path))
    record = Run.create("campaigns", {"notebook": "campaigns", "cells": []}, outputs=tmp_path, label="c")
    for run in (a, b):
        record.record({"cell": f"decode/{run.id}/1", "status": "done", "run": str(run.path)})
    plan = compare.Plan.build(outputs=str(tmp_path))
    assert plan.models() == ["moe-35b", "dense-27b"]


def mmlu_run(tmp_path, model: str, right: set[int], dataset="MMLU-Pro") -> Run:
    run = Run.create("mmlu_pro", {"notebook": "mmlu_pro", "model": {"name": model},
                                  "settings": {"stop": [], "dataset_name": dataset}}, outputs=tmp_path, label=model)
    run.write_json("fingerprint.json", fingerprint())
    for q in range(40):
        said = "A" if q in right else "B"
        run.record({"question_id": str(q), "category": "math", "answer": "A", "finish_reason": "stop",
                    "text": f"Reasoning first. The answer is ({said})."})
    run.write_json("summary.json", {"findings": []})
    run.seal()
    return run


def test_mmlu_pro_is_compared_on_the_shared_questions_with_a_paired_interval(tmp_path):
    a = mmlu_run(tmp_path, "moe-35b", set(range(30)))  # right on 0-29
    b = mmlu_run(tmp_path, "dense-27b", set(range(10, 35)))  # right on 10-34: 10 only A, 5 only B
    _, h = headline_of(tmp_path, a, b)
    accuracy, paired = [r for r in h.rows if r.study == "MMLU-Pro"]
    assert accuracy.values == {"moe-35b": 75.0, "dense-27b": 62.5} and accuracy.role == "context"
    expected = stats.paired_difference(stats.Pairs(both=20, a_only=5, b_only=10, neither=5))  # dense minus moe
    assert paired.ratios["dense-27b"] == expected and paired.kind == "difference"
    assert "McNemar p = " in paired.note and "15 discordant" in paired.note
    assert decide(paired, "dense-27b", "moe-35b").outcome == "cannot tell"  # [-35.6, +10.6] holds 0
    assert "questions would tell" in compare.story(h) or "questions" in paired.needed["dense-27b"]


def test_questions_that_are_not_mmlu_pros_are_never_called_mmlu_pro(tmp_path):
    a = mmlu_run(tmp_path, "a", set(range(30)), dataset="sparknb demo questions")
    b = mmlu_run(tmp_path, "b", set(range(10, 35)), dataset="sparknb demo questions")
    _, h = headline_of(tmp_path, a, b)
    assert {r.study for r in h.rows} == {"sparknb demo questions (not MMLU-Pro)"}
    assert "MMLU-Pro:" not in compare.story(h) and "MMLU-Pro" not in h.table()["figure"].str.cat()


def test_the_batch_ratio_is_context_never_a_verdict():
    r = Row("batch", "MMLU-Pro batch tok/s", {"a": 120.0, "b": 100.0}, {"a": 1, "b": 1},
            {"b": stats.Interval(100 / 120, float("nan"), float("nan"), 0.95, "one")}, role="context")
    assert decide(r, "b", "a").outcome == "context"


def test_the_chart_turns_lower_is_better_figures_so_better_is_always_right(tmp_path):
    quick = prefill_run(tmp_path, "quick", 0.05, 0.0001, seed=1)
    slow = prefill_run(tmp_path, "slow", 0.05, 0.0004, seed=2)
    _, h = headline_of(tmp_path, quick, slow)
    fig = compare.plot(h)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert all("inverted: lower is better" in label for label in labels)
    xs = [line.get_xdata()[0] for line in ax.lines if len(line.get_xdata()) == 1]
    assert xs and max(xs) < 1  # slow is slower: left of 1, the base's side
    assert "better ->" in ax.get_xlabel()


def humaneval_run(tmp_path, model: str, passed: set[int]) -> Run:
    run = Run.create("humaneval", {"notebook": "humaneval", "model": {"name": model},
                                   "settings": {"dataset_sha256": "abc", "dataset_size": 164, "style": "chat"}},
                     outputs=tmp_path, label=model)
    run.write_json("fingerprint.json", fingerprint())
    for p in range(164):
        ok = p in passed
        run.record({"problem": f"HumanEval/{p}", "sample": 0, "passed": ok,
                    "reason": "passed" if ok else "assertion failed"})
    run.write_json("summary.json", {"findings": []})
    run.seal()
    return run


def test_humaneval_decides_on_the_paired_difference_and_says_when_164_problems_cannot_tell(tmp_path):
    strong = humaneval_run(tmp_path, "dense-27b", set(range(120)))
    weak = humaneval_run(tmp_path, "moe-35b", set(range(60)))  # every problem the weak one solves, the strong too
    _, h = headline_of(tmp_path, strong, weak)
    rate, paired = [r for r in h.rows if r.study == "humaneval"]
    assert rate.role == "context" and rate.values["dense-27b"] == pytest.approx(100 * 120 / 164)
    assert decide(paired, "moe-35b", "dense-27b").winner == "dense-27b"  # -36.6 points, far from 0
    close = humaneval_run(tmp_path, "close", set(range(2, 122)))  # 2 won, 2 lost against the strong one
    _, h = headline_of(tmp_path, strong, close)
    paired = next(r for r in h.rows if r.figure.startswith("paired"))
    assert decide(paired, "close", "dense-27b").outcome == "cannot tell"
    assert "more than the 164 HumanEval holds" not in paired.needed["close"]  # a few discordant: 164 could narrow it
    noisy = humaneval_run(tmp_path, "noisy", set(range(40, 160)))  # 40 won, 40 lost: the interval stays wide
    _, h = headline_of(tmp_path, strong, noisy)
    paired = next(r for r in h.rows if r.figure.startswith("paired"))
    assert "more than the 164 HumanEval holds" in paired.needed["noisy"]


def boxed(box: str, **kw) -> dict:
    return fingerprint(host=f"host-{box}", **kw) | {"box": {"name": box, "ray_node_id": f"node-{box}"}}


def test_one_model_on_two_boxes_compares_the_boxes(tmp_path):
    a = decode_run(tmp_path, "moe-35b", 26.0, boxed("spark-a"), seed=1)
    b = decode_run(tmp_path, "moe-35b", 13.0, boxed("spark-b"), seed=2)  # the same model, a box half as fast
    plan = compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))
    assert plan.mode() == "boxes"
    ((title, runs),) = plan.comparisons()
    assert runs.subjects == ["spark-a", "spark-b"] and "on each box" in title
    h = compare.headline(runs)
    d = decide(row(h, "tok/s at 111 tokens"), "spark-b", "spark-a")
    assert d.outcome == "wins" and d.winner == "spark-a"  # the question, not a caveat
    (note,) = [w for w in compare.warnings(plan.past, plan.mode()) if "boxes" in w.text]
    assert note.level == "info" and "DIFFERENT BOXES" not in note.text


def test_two_models_on_two_boxes_keep_their_ratios_per_box(tmp_path):
    runs = [decode_run(tmp_path / "outputs", m, speed, boxed(box), seed=i)
            for i, (m, speed, box) in enumerate([("moe", 26.0, "spark-a"), ("dense", 8.9, "spark-a"),
                                                  ("moe", 13.0, "spark-b"), ("dense", 4.4, "spark-b")])]
    plan = compare.Plan.build(runs=[r.id for r in runs], outputs=str(tmp_path / "outputs"))
    assert plan.mode() == "models per box"
    by_box = {title: compare.headline(r) for title, r in plan.comparisons()}
    assert list(by_box) == ["on spark-a", "on spark-b"]
    for title, h in by_box.items():
        ratio = row(h, "tok/s at 111 tokens").ratios["dense"]
        assert ratio.estimate == pytest.approx(8.9 / 26.0 if title.endswith("a") else 4.4 / 13.0, rel=0.05)
    nb, folder = run_notebook("compare", tmp_path, {"runs": [r.id for r in runs]})
    summary = json.loads((folder / "summary.json").read_text())
    assert [h["title"] for h in summary["headlines"]] == ["on spark-a", "on spark-b"]
    assert "### on spark-b" in outputs_text(nb)


def test_an_input_sealed_again_after_the_comparison_fails_the_comparisons_verify(tmp_path, monkeypatch):
    from sparknb.studies.compare import record

    outputs = tmp_path / "outputs"
    a = decode_run(outputs, "moe-35b", 26.0, fingerprint(), seed=1)
    b = decode_run(outputs, "dense-27b", 8.9, fingerprint(), seed=2)
    comparison = record.open_run(compare.Plan.build(runs=[a.id, b.id], outputs=str(outputs)), outputs=str(outputs))
    comparison.seal()
    assert verify(comparison.path) == []
    for p in [b.path, *b.path.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (b.path / "manifest.json").unlink()
    (b.path / "manifest.sig").unlink()
    records = b.path / "records.jsonl"
    records.write_text(records.read_text().replace('"rep": 0', '"rep": 9', 1))
    monkeypatch.setenv("SPARKNB_CONFIG_DIR", str(tmp_path / "elsewhere"))  # signed again where no ledger knows b
    Run(b.path).seal()
    assert verify(b.path) == []  # b alone looks whole: only the comparison that read it knows better
    (problem,) = verify(comparison.path)
    assert problem.startswith(f"input sealed again: {b.path} no longer has the manifest this run read")


def test_an_input_whose_seal_this_box_cannot_vouch_for_is_refused_by_the_comparison(tmp_path, monkeypatch):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    monkeypatch.setenv("SPARKNB_SIGNING_KEY", str(tmp_path / "no-such-key"))  # b sealed where nothing could sign
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2)
    with pytest.raises(DataError) as e:
        compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))
    said = str(e.value)
    assert f"{b.id} is refused, as `sparknb verify {b.path}` says: UNSIGNED: its files match its manifest" in said
    assert f"Its manifest says: SPARKNB_SIGNING_KEY names {tmp_path / 'no-such-key'}, which is no file" in said
    assert a.id not in said
