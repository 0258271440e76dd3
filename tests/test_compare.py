"""The comparison notebook over sealed runs: the boxes first, every ratio with its interval, a paragraph
generated from the numbers. These runs are written here with the run-folder code (no server), with figures
chosen so the expected verdicts are known; the campaign test compares real runs."""

import json
import random

import pytest

from sparknb import stats
from sparknb.errors import DataError, ParamsError
from sparknb.run import Run, verify
from sparknb.studies import compare
from support import outputs_text, run_notebook


def fingerprint(host="box-a", cpu="Grace", driver="580.159.03", server="0.32.0") -> dict:
    return {"taken_at": "2026-12-01T00:00:00+00:00", "host": {"hostname": host, "cpu_model": cpu, "cpu_count": 20,
            "memory_total_bytes": 128e9}, "gpu": {"available": True, "driver_version": driver,
            "cuda_driver_version": "13.0", "devices": [{"name": "GB10", "memory_total_bytes": "unified"}]},
            "server": {"version": server, "root": "/models/x", "dtype": "bfloat16", "quantization": "none"},
            "project": {"commit": "abc", "dirty": False}}


def decode_run(tmp_path, model: str, speed: float, fp: dict, spread=0.02, seed=0) -> Run:
    rng = random.Random(seed)
    run = Run.create("decode", {"notebook": "decode", "model": {"name": model},
                                "settings": {"prompt_lengths": [111, 5378], "repetitions": 5}}, outputs=tmp_path,
                     label=model)
    run.write_json("fingerprint.json", fp)
    seq = 0
    for n in (111, 5378):
        for rep in range(5):
            seq += 1
            tps = speed * (1 - n / 100000) * (1 + rng.uniform(-spread, spread))
            run.record({"seq": seq, "prompt_length": n, "rep": rep, "warmup": False, "prompt_tokens": n,
                        "completion_tokens": 150, "decode_tokens": 149, "ttft_s": 0.1, "decode_s": 149 / tps,
                        "decode_tokens_per_s": tps, "interference": None,
                        "server": {"decode_s": 149 / tps, "ttft_s": 0.09, "spec_decode": {"tokens_per_step": None},
                                   "unchecked": []}})
    run.write_json("summary.json", {"table": [{"prompt tokens": 111, "% of limit": 90.0},
                                              {"prompt tokens": 5378, "% of limit": 88.0}]})
    run.seal()
    return run


def test_ratios_have_intervals_and_the_paragraph_says_who_wins_and_where_it_cannot_tell(tmp_path):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2)
    plan = compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))
    assert plan.models() == ["moe-35b", "dense-27b"] and compare.warnings(plan.past) == []
    h = compare.headline(plan.by_study(), plan.models())
    row = next(r for r in h.rows if r.measure == "tok/s at 111 tokens")
    ratio = row.ratios["dense-27b"]
    assert ratio.estimate == pytest.approx(8.9 / 26.0, rel=0.03) and ratio.high < 1  # surely slower
    text = compare.story(h)
    assert "moe-35b is ahead on tok/s at 111 tokens" in text and "moe-35b wins decode" in text
    same = decode_run(tmp_path, "moe-35b-again", 26.0, fingerprint(), spread=0.2, seed=3)
    plan = compare.Plan.build(runs=[a.id, same.id], outputs=str(tmp_path))
    h = compare.headline(plan.by_study(), plan.models())
    assert "cannot tell them apart" in compare.story(h)


def test_a_comparison_of_runs_from_different_boxes_shows_the_warning_first(tmp_path):
    a = decode_run(tmp_path / "outputs", "moe-35b", 26.0, fingerprint())
    b = decode_run(tmp_path / "outputs", "dense-27b", 8.9, fingerprint(host="box-b", cpu="EPYC", driver="590.1"))
    nb, folder = run_notebook("compare", tmp_path, {"runs": [a.id, b.id]})
    first_output = next(o for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
                        for o in c.get("outputs", []) if o.get("data", {}).get("text/markdown"))
    assert "DIFFERENT BOXES" in first_output["data"]["text/markdown"]
    assert "driver differs" in outputs_text(nb)
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["findings"][0]["level"] == "warning" and "DIFFERENT BOXES" in summary["findings"][0]["text"]
    assert "image/png" in outputs_text(nb) and verify(folder) == []


def test_a_tampered_run_is_refused_with_the_file_named(tmp_path):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint())
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint())
    for p in [b.path, *b.path.iterdir()]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    (b.path / "summary.json").write_text("{}")
    with pytest.raises(DataError, match="changed: summary.json"):
        compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))


def test_the_batch_ratio_is_computed_from_the_runs_beside_the_single_stream_one():
    h = compare.Headline("a", ["a", "b"], [
        compare.headline.__globals__["Row"]("batch", "MMLU-Pro batch tok/s", {"a": 120.0, "b": 100.0},
                                             {"b": stats.Interval(100 / 120, float("nan"), float("nan"), 0.95, "one")},
                                             note="generated tokens: a 70,000, b 71,000"),
        compare.headline.__globals__["Row"]("batch", "single-stream", {"a": 26.0, "b": 8.9},
                                             {"b": stats.median_ratio([8.9, 9.0, 8.8], [26.0, 25.8, 26.2])}),
    ])
    text = compare.story(h)
    assert "b ran at 0.83x a's throughput, where single-stream decode gave 0.34x" in text


def prefill_run(tmp_path, model: str, overhead: float, per_token: float, seed=0) -> Run:
    rng = random.Random(seed)
    run = Run.create("prefill", {"notebook": "prefill", "model": {"name": model}, "settings": {}}, outputs=tmp_path,
                     label=model)
    run.write_json("fingerprint.json", fingerprint())
    for n in (111, 10714):
        for rep in range(5):
            run.record({"prompt_length": n, "rep": rep, "warmup": False, "ttft_s": (overhead + per_token * n)
                        * (1 + rng.uniform(-0.02, 0.02)), "interference": None, "server": {}})
    run.seal()
    return run


def test_the_short_prompt_trap_is_spelled_out_from_the_prefill_runs(tmp_path):
    # The reference study's shape: alike at 111 tokens (overhead), 2.2x apart at 10,714.
    moe = prefill_run(tmp_path, "moe-35b", 0.25, 0.000267, seed=1)
    dense = prefill_run(tmp_path, "dense-27b", 0.28, 0.000600, seed=2)
    plan = compare.Plan.build(runs=[moe.id, dense.id], outputs=str(tmp_path))
    h = compare.headline(plan.by_study(), plan.models())
    short, long_ = [r for r in h.rows if r.study == "prefill"]
    assert short.ratios["dense-27b"].estimate == pytest.approx((0.28 + 0.0666) / (0.25 + 0.0296), rel=0.05)
    assert long_.ratios["dense-27b"].estimate == pytest.approx(6.71 / 3.11, rel=0.05)
    text = compare.story(h)
    assert "a single short-prompt test (111 tokens) would report dense-27b at 1.2" in text
    assert "moe-35b is ahead on TTFT ms at 111 tokens" in text and "TTFT ms at 10,714 tokens (2.1" in text


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


def mmlu_run(tmp_path, model: str, right: set[int]) -> Run:
    run = Run.create("mmlu_pro", {"notebook": "mmlu_pro", "model": {"name": model}, "settings": {"stop": []}},
                     outputs=tmp_path, label=model)
    run.write_json("fingerprint.json", fingerprint())
    for q in range(40):
        said = "A" if q in right else "B"
        run.record({"question_id": str(q), "category": "math", "answer": "A", "finish_reason": "stop",
                    "text": f"Reasoning first. The answer is ({said})."})
    run.seal()
    return run


def test_mmlu_pro_is_compared_on_the_shared_questions_with_a_paired_interval(tmp_path):
    a = mmlu_run(tmp_path, "moe-35b", set(range(30)))  # right on 0-29
    b = mmlu_run(tmp_path, "dense-27b", set(range(10, 35)))  # right on 10-34: 10 only A, 5 only B
    plan = compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))
    h = compare.headline(plan.by_study(), plan.models())
    accuracy, paired = [r for r in h.rows if r.study == "MMLU-Pro"]
    assert accuracy.values == {"moe-35b": 75.0, "dense-27b": 62.5}
    expected = stats.paired_difference(stats.Pairs(both=20, a_only=5, b_only=10, neither=5))  # dense minus moe
    assert paired.ratios["dense-27b"] == expected and paired.kind == "difference"
    assert "McNemar p = " in paired.note and "15 discordant" in paired.note and "questions" in paired.note
    assert "data cannot tell them apart on paired difference" in compare.story(h)  # [-35.6, +10.6] holds 0



def test_a_run_whose_box_slowed_down_during_its_sweep_is_named(tmp_path):
    steady = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    slowing = Run.create("decode", {"notebook": "decode", "model": {"name": "dense-27b"},
                                    "settings": {"prompt_lengths": [111, 5378], "repetitions": 5}},
                         outputs=tmp_path, label="dense-27b")
    slowing.write_json("fingerprint.json", fingerprint())
    for seq, tps in enumerate([8.9, 8.8, 8.9, 8.85, 6.0], 1):  # the last request at the length: a third slower
        slowing.record({"seq": seq, "prompt_length": 111, "rep": seq - 1, "warmup": False, "prompt_tokens": 111,
                        "completion_tokens": 150, "decode_tokens": 149, "ttft_s": 0.1, "decode_s": 149 / tps,
                        "decode_tokens_per_s": tps, "interference": None, "server": {}})
    slowing.seal()
    plan = compare.Plan.build(runs=[steady.id, slowing.id], outputs=str(tmp_path))
    (warned,) = compare.warnings(plan.past)
    assert warned.level == "warning" and f"decode run {slowing.id} (dense-27b)" in warned.text
    assert "8.9 first, 6.0 last" in warned.text
