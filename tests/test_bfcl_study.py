"""The bfcl study end to end through its notebook, against a replay server: a fake server by nature, since it
answers BFCL's own ground truth (or that truth with a known fault), which no real model does on purpose. Every
answer's grade is checked against bfcl-eval's own (tests/bfcl_reference.py), its decoder and checker run on the
recorded answer: native tool_calls streamed in pieces, and prompt mode's `[f(a=1)]` text."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter

import pytest
from bfcl_reference import graded, replayed
from support import FakeVllm, outputs_text, run_notebook, serve, strict

from sparknb.runs.run import read_past, read_records, verify
from sparknb.studies import bfcl as study
from sparknb.studies.batch import bfcl
from sparknb.studies.bfcl.findings import UNPARSED, UNWANTED
from sparknb.verdicts.verdict import Runs

PER_CATEGORY = 4


def _index() -> dict[str, tuple[str, dict, list]]:
    """Every item of the five categories by its user message: (category, entry, possible answer)."""
    out = {}
    for category in study.CATEGORIES:
        answers = bfcl.answers(category) if category != "irrelevance" else {}
        for e in bfcl.entries(category):
            out[e["question"][0][-1]["content"]] = (category, e, answers.get(e["id"], {}).get("ground_truth", []))
    return out


ITEMS = _index()


def _wrong_argument(calls):
    calls = copy.deepcopy(calls)
    args = next(iter(calls[0].values()))
    key = next(iter(args), None)
    if key is not None:
        args[key] = args[key] + "x" if isinstance(args[key], str) else "wrong"
    return calls


# A fault per item, by its position in the draw: each fails under BFCL, except a reversed order where BFCL's
# parallel matching is order free (and a one-call answer, which has no order)
FAULTS = {"wrong argument": _wrong_argument, "missing call": lambda c: c[:-1], "extra call": lambda c: c + c[:1],
          "wrong order": lambda c: c[::-1]}


class Replay(FakeVllm):
    """Answers each BFCL item with its ground truth (`fault` names a change made to it), natively as streamed
    tool_calls (each call's arguments in two pieces) where tools were sent, else as prompt mode's text."""

    lock = threading.Lock()
    asked = generated = 0
    fault = ""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        category, entry, answer = ITEMS[body["messages"][-1]["content"]]
        native = "tools" in body
        calls = [] if category == "irrelevance" else replayed(answer, entry["function"], native)
        if type(self).fault == "unwanted call" and category == "irrelevance":
            f = entry["function"][0]
            calls = [{f["name"]: {p: 1 for p in f["parameters"].get("required", [])}}]
        elif type(self).fault in FAULTS and calls:
            calls = FAULTS[type(self).fault](calls)
        self.start_stream()
        self._tool_calls(calls) if native and calls else self._text(calls, native)

    def _text(self, calls, native):
        text = "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})"
                               for c in calls for n, a in c.items()) + "]" if calls else "No function fits."
        self.chunk([{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}])
        # prompt mode: one token of reasoning, counted as a server with a reasoning parser counts it in its usage
        self.done(len(text.split()) + (not native), None if native else {"reasoning_tokens": 1})

    def _tool_calls(self, calls):
        for i, (name, args) in enumerate(next(iter(c.items())) for c in calls):
            text = json.dumps(args)
            self.chunk([{"index": 0, "delta": {"tool_calls": [{"index": i, "id": f"call_{i}", "type": "function",
                                                               "function": {"name": name, "arguments": text[:5]}}]}}])
            time.sleep(0.001)
            self.chunk([{"index": 0, "delta": {"tool_calls": [{"index": i, "function": {"arguments": text[5:]}}]}}])
        self.chunk([{"index": 0, "delta": {}, "finish_reason": "tool_calls"}])
        self.done(5 * len(calls))


def _run(tmp_path, fault: str, form: str, **more):
    Replay.fault = fault
    with serve(Replay) as url:
        nb, folder = run_notebook("bfcl", tmp_path, {"model": "tiny-dense", "endpoint": url, "format": form,
                                                     "per_category": PER_CATEGORY, "max_tokens": 256,
                                                     "concurrency": 4, **more})
    records = [r for r in read_records(folder) if "correct" in r]
    return nb, folder, records


def _agrees(records) -> Counter:
    """Each record's grade against bfcl-eval's own, from the raw answer through BFCL's own decoder and checker;
    passed per category."""
    passed = Counter()
    for r in records:
        theirs = graded(r)
        assert (r["correct"], r["error_type"] or "") == (theirs["valid"], theirs.get("error_type", "") if not
                                                         theirs["valid"] else ""), r["item"]
        passed[r["category"]] += r["correct"]
    return passed


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    return _run(tmp_path_factory.mktemp("native"), "", "native")


def test_the_ground_truth_replayed_natively_passes_every_item_and_seals(native):
    nb, folder, records = native
    assert verify(folder) == [] and len(records) == 5 * PER_CATEGORY
    assert sum(_agrees(records).values()) == len(records)
    assert all(r["tool_calls"] for r in records if r["category"] != "irrelevance")  # the calls came as tool_calls
    summary = strict(folder / "summary.json")
    assert summary["bfcl"] == summary["robust"] == len(records) and summary["traps"]["suspect"] == 0
    assert summary["cost"]["solved"] == len(records) and summary["cost"]["seconds"]["estimate"] > 0


@pytest.mark.parametrize("fault", ["wrong argument", "unwanted call"])
def test_a_fault_replayed_in_prompt_mode_is_graded_as_bfcl_grades_it(tmp_path, fault):
    """Two faults through the notebook (CI's time); every fault on every item is checked without one in
    test_bfcl_grading."""
    _, folder, records = _run(tmp_path, fault, "prompt")
    passed = _agrees(records)
    if fault == "unwanted call":
        assert passed["irrelevance"] == 0 and passed["simple_python"] == PER_CATEGORY
    else:
        assert sum(v for k, v in passed.items() if k != "irrelevance") == 0
    problems = strict(folder / "summary.json")["problems"]
    assert problems[UNWANTED] == (PER_CATEGORY if fault == "unwanted call" else 0)
    assert problems[UNPARSED] == 0  # prompt mode's text was read back into the same calls


def test_the_same_tasks_in_prompt_mode_give_the_formats_effect_paired(tmp_path, native):
    """The ground truth in prompt mode against the native run on the same tasks: the same grades, so the format's
    effect is nothing, paired task by task; the comparison's cost rows from both runs' records: seconds and tokens
    over the tasks solved, reasoning tokens apart where the server counted them (the prompt-mode replay does)."""
    _, theirs, _ = native
    nb, folder, records = _run(tmp_path, "", "prompt", compare_with=str(theirs))
    assert sum(_agrees(records).values()) == len(records)
    comparison = strict(folder / "summary.json")["comparison"]
    assert comparison["pairs"]["n"] == len(records) and comparison["difference"]["estimate"] == 0
    assert "The format's effect, prompt minus native on the same tasks: +0.0 points" in outputs_text(nb)
    past = {"native": read_past(str(theirs), "bfcl")[0], "prompt": read_past(str(folder), "bfcl")[0]}
    rows = {r.figure: r for r in study.headline_rows(Runs({"bfcl": past}, ["native", "prompt"]))}
    seconds, tokens = rows["seconds per task solved"], rows["tokens per task solved"]
    for name, run in past.items():
        done = [r for r in run.records if "correct" in r]
        assert tokens.values[name] == pytest.approx(sum(r["completion_tokens"] for r in done) / len(done))
        assert seconds.values[name] == pytest.approx(sum(r["total_s"] for r in done) / len(done))
    thought = sum(r["reasoning_tokens"] for r in past["prompt"].records if "correct" in r) / len(records)
    assert f"prompt {thought:,.0f} [" in tokens.note and "native unknown (the server did not count" in tokens.note
    assert tokens.role == "context" == seconds.role and tokens.better == "lower"

