"""Speculative-decoding gain by prompt kind: real runs against the n-gram tiny-moe and the plain tiny-dense."""

import dataclasses
import json

import pytest

from sparknb.endpoint.client import Endpoint, ServerInfo
from sparknb.errors import ParamsError
from sparknb.roofline import bandwidth
from sparknb.runs.params import load_model
from sparknb.runs.run import read_records, verify
from sparknb.studies import mtp
from support import run_notebook

# Random weights write noise; n-gram lookup drafts from the prompt and the answer so far, so text that
# repeats itself is guessed more often than text that does not.
PROMPTS = """
name: test
prompts:
  repetitive: "one two three four one two three four one two three four one two three four one two three four"
  varied: "Explain how a hash table works, what a collision is, and when to use a tree instead."
"""


def run(tmp_path, server, model, **params):
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text(PROMPTS)
    return run_notebook("mtp", tmp_path, {"model": model, "endpoint": server.url, "prompt_set": str(prompts),
                                          "repetitions": 3, "temperature": 0.0, "output_tokens": 96, **params})


@pytest.mark.server
def test_speculative_and_plain_runs_and_their_comparison(tmp_path, tiny_moe, tiny_dense):
    _, spec_run = run(tmp_path, tiny_moe, "tiny-moe")
    records = [r for r in read_records(spec_run) if not r["warmup"]]
    assert {r["kind"] for r in records} == {"repetitive", "varied", mtp.FILLER}
    assert len(records) == 3 * 3
    summary = json.loads((spec_run / "summary.json").read_text())
    assert summary["speculative"] is True
    rows = {row["prompt"]: row for row in summary["table"]}
    for r in records:  # tokens per step comes from this request's own counters
        spec = r["server"]["spec_decode"]
        generated = r["server"]["generated_tokens"]  # every step yields one token plus those it accepted
        assert spec["tokens_per_step"] == pytest.approx(generated / (generated - spec["accepted_tokens"])
                                                        if spec["drafts"] else 1.0)
        assert spec["accepted_tokens"] <= r["completion_tokens"]
    assert rows["repetitive"]["tokens/step"] > 1.2
    step_bytes = bandwidth.bytes_per_step(load_model("tiny-moe"))
    for row in rows.values():  # bytes read per output token fall as tokens per step rise
        assert row["GB read/token"] == pytest.approx(step_bytes / row["tokens/step"] / 1e9)
    assert verify(spec_run) == []

    nb, plain_run = run(tmp_path, tiny_dense, "tiny-dense", compare_with=[spec_run.name], random_filler=False)
    summary = json.loads((plain_run / "summary.json").read_text())
    assert summary["speculative"] is False
    assert all(row["tokens/step"] == 1.0 for row in summary["table"])
    assert any("does not run speculative decoding" in n["text"] for n in summary["findings"])
    comparison = {row["prompt"]: row for row in summary["comparison"]}
    here = {row["prompt"]: row["tok/s"] for row in summary["table"]}
    there = {row["prompt"]: row["tok/s"] for row in rows.values()}
    both = sorted(set(here) & set(there))  # a kind whose every answer came in a burst has no median
    assert both, "no kind of prompt has clean requests in both runs"
    for kind in both:
        key = next(k for k in comparison[kind] if k.startswith("speed-up"))
        assert comparison[kind][key] == pytest.approx(here[kind] / there[kind])


def _plan(**kw):
    args = dict(prompt_set="reference", kinds=[], repetitions=3, temperature=0.7, output_tokens=256,
                random_filler=True) | kw
    return mtp.Plan.build(**args)


def test_the_reference_set_has_the_six_kinds_of_the_study():
    assert list(_plan().prompts) == ["json", "code", "rewrite", "explain", "story", "translate"]


def test_bad_prompt_sets_are_refused_before_any_request(tmp_path):
    with pytest.raises(ValueError, match="unknown prompt kind.*poetry"):
        _plan(kinds=["json", "poetry"])
    empty = tmp_path / "empty.yaml"
    empty.write_text("name: empty\nprompts: {}\n")
    with pytest.raises(ParamsError, match="prompts"):
        _plan(prompt_set=str(empty))
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nprompts: {json: 'unclosed\n")
    with pytest.raises(ParamsError, match="not valid YAML"):
        _plan(prompt_set=str(broken))
    with pytest.raises(ValueError, match="repetitions"):
        _plan(repetitions=0)
    with pytest.raises(ValueError, match="not a sparknb run folder"):
        _plan(compare_with=[str(tmp_path)])


@pytest.mark.server
def test_a_prompt_that_does_not_fit_is_refused_with_its_real_token_count(tiny_moe):
    # Counted by the server's own tokenizer with the chat template, not assumed to be 512 tokens.
    endpoint = Endpoint(tiny_moe.url, "tiny-moe")
    plan = _plan(output_tokens=100)
    counts = {kind: len(endpoint.tokenize_chat([{"role": "user", "content": text}]))
              for kind, text in plan.texts().items()}
    kind, longest = max(counts.items(), key=lambda kv: kv[1])
    assert longest != 512 and all(n > 10 for n in counts.values())
    server = ServerInfo(tiny_moe.url, "0.32.0", "tiny-moe", None, longest + 99, ["tiny-moe"])
    with pytest.raises(ParamsError, match=f"The {kind!r} prompt is {longest} tokens"):
        plan.check_server(server, endpoint)
    plan.check_server(dataclasses.replace(server, max_model_len=longest + 100), endpoint)  # just fits


def test_a_box_that_slows_down_during_the_sweep_is_named_by_kind_of_prompt():
    import pandas as pd

    from sparknb.runs.study import drifts

    sent = [("json", 52.0), ("story", 51.0)] * 2 + [("json", 51.6), ("story", 51.4), ("json", 38.0), ("story", 51.2)]
    df = pd.DataFrame([{"kind": k, "tok_s": v, "seq": i, "interference": None} for i, (k, v) in enumerate(sent)])
    (finding,) = drifts(df, "tok_s", "tok/s", by="kind")  # json slowed at its last request; story held
    assert finding.about == ("json",) and "json: 52.0 first, 38.0 last (-27%" in finding.text
    assert "at the same kind of prompt" in finding.text
