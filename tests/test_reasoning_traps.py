"""A reasoning model's two traps, through the real MMLU-Pro and HumanEval notebooks: the stop string that fires
inside the thinking, and the thinking that eats max_tokens (empty content, finish_reason length), each caught and
classified.

The server is a fake, and must be: no small reasoning model can be had here (the tiny models are random, the real
SmolLM2-135M does not think), and a real one could not be made to think through a stop string or past max_tokens
on purpose. The fake replays reasoning-shaped answers in both forms a client meets: the thinking in vLLM's
`reasoning_content` field (a server with a reasoning parser), or inline as `<think>...</think>` in the content (a
server without one). It applies stop strings inside the thinking as vLLM does (vLLM issues 52393, 53066) and counts
a token a word, max_tokens included.
"""

import json
import threading

from support import FakeHandler, run_notebook, serve

from sparknb.runs.run import read_records, verify
from sparknb.studies.mmlu_pro import rule_sets as rs
from sparknb.studies.batch.traps import CUT_BY_STOP, HIT_MAX_TOKENS
from sparknb.studies import humaneval as h
from sparknb.studies.mmlu_pro.grading import NO_ANSWER_LINE

RESTATED = "Let me restate it.\nQuestion: which option is right?\nWeighing each option, option B fits."
LONG = " ".join(f"step {n} weighs option {n % 4} against the others once more." for n in range(1, 60))
# Each question's replay: (thinking, answer, finish_reason when max_tokens does not cut it first).
REPLAYS = {
    "restates-field": (RESTATED, "So the answer is (B).", "stop"),
    "restates-inline": (RESTATED, "So the answer is (B).", "stop"),
    "eaten-field": (LONG, "So the answer is (B).", "stop"),
    "eaten-inline": (LONG, "So the answer is (B).", "stop"),
    "empty-field": ("Weighing each option, none fits well.", "", "stop"),
}
MAX_TOKENS = 120


class ReasoningReplay(FakeHandler):
    """Answers each question with its replay (by the question's own text), streamed as vLLM streams it."""

    lock = threading.Lock()
    asked = generated = 0
    coding = ("eaten-field", "eaten-inline")  # a HumanEval problem's replays, taken in turn

    def do_GET(self):
        cls = type(self)
        if self.path == "/v1/models":
            return self.send_body(200, json.dumps({"data": [{"id": "tiny-dense", "root": "fake",
                                                             "max_model_len": 100_000}]}))
        if self.path == "/version":
            return self.send_body(200, '{"version": "fake"}')
        label = '{model_name="tiny-dense"}'
        self.send_body(200, f"vllm:num_requests_running{label} 0\nvllm:num_requests_waiting{label} 0\n"
                            f"vllm:e2e_request_latency_seconds_count{label} {cls.asked}\n"
                            f"vllm:generation_tokens_total{label} {cls.generated}\n", "text/plain")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":  # one token a word: the fake's own tokenizer
            return self.send_body(200, json.dumps({"tokens": [1] * len(body["messages"][0]["content"].split())}))
        name = next((n for n in REPLAYS if n in body["messages"][-1]["content"]), None) or self._coding()
        thinking, answer, finish = REPLAYS[name]
        thinking, answer, finish = _stopped(thinking, answer, finish, body.get("stop") or [])
        thinking, answer, finish = _capped(thinking, answer, finish, body["max_tokens"])
        if name.endswith("inline"):
            self._stream([{"content": f"<think>{thinking}" + (f"</think>{answer}" if answer is not None else "")}],
                         finish, thinking, answer)
        else:
            self._stream([{"reasoning_content": thinking}, {"content": answer or ""}], finish, thinking, answer)

    def _coding(self):
        cls = type(self)
        with cls.lock:
            cls.asked_coding = getattr(cls, "asked_coding", 0) + 1
            return cls.coding[cls.asked_coding % len(cls.coding)]

    def _stream(self, deltas, finish, thinking, answer):
        cls = type(self)
        n = len(f"{thinking} {answer or ''}".split())
        self.start_stream()
        for delta in [{"role": "assistant", "content": ""}, *deltas]:
            self._chunk([{"index": 0, "delta": delta, "finish_reason": None}])
        self._chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
        with cls.lock:  # counted before the usage chunk, as vLLM counts a request once it is done
            cls.asked += 1
            cls.generated += n
        self._chunk([], {"prompt_tokens": 50, "completion_tokens": n, "total_tokens": 50 + n})
        self.wfile.write(b"data: [DONE]\n\n")

    def _chunk(self, choices, usage=None):
        self.event({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "tiny-dense",
                    "choices": choices, "usage": usage})


def _stopped(thinking, answer, finish, stop):
    """A stop string ends the answer wherever it fires, inside the thinking too (as vLLM does): nothing after it."""
    for s in stop:
        if s in thinking:
            return thinking[:thinking.index(s)], None, "stop"
    return thinking, answer, finish


def _capped(thinking, answer, finish, max_tokens):
    """max_tokens words in all: a long thinking leaves no answer (inline, the `<think>` is never closed)."""
    words = thinking.split()
    if len(words) + len((answer or "").split()) <= max_tokens:
        return thinking, answer, finish
    return " ".join(words[:max_tokens]), None, "length"


def suite(tmp_path):
    """One question per replay. Every answer the thinking ate is wrong under every rule set but `reference`, whose
    seeded random guess stands in for a missing answer: each such question's right letter is that guess, so the
    three sets grade it differently and the harness effect must say why."""
    guess = rs.reference  # the reference set's pick: its seeded guess where nothing matches
    lines = []
    for name in REPLAYS:
        answer = "B" if name.startswith("restates") else guess("", name, 10)[0]
        lines.append({"id": name, "question": f"Which option is right ({name})?", "options": list("qrstuvwxyz"),
                      "answer": answer, "category": name.split("-")[0]})
    path = tmp_path / "thinking.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def run(tmp_path, notebook="mmlu_pro", key="question_id", **params):
    handler = type("Replay", (ReasoningReplay,), {})
    with serve(handler) as url:
        _, folder = run_notebook(notebook, tmp_path, {"model": "tiny-dense", "endpoint": url, "max_tokens": MAX_TOKENS,
                                                      "concurrency": 2, **params})
    return {r[key]: r for r in read_records(folder) if r.get("finish_reason")}, folder


def test_the_harness_effect_classifies_each_reasoning_trap_in_both_forms(tmp_path):
    records, folder = run(tmp_path, suite=str(suite(tmp_path)))
    assert verify(folder) == []
    assert records["eaten-field"]["text"] == "" and records["eaten-field"]["finish_reason"] == "length"
    assert records["eaten-field"]["reasoning"].startswith("step 1")  # read from reasoning_content
    lm, robust = rs.RULE_SETS["lm-eval"], rs.RULE_SETS["robust"]
    reference = rs.RULE_SETS["reference"]
    assert rs.classify(records["restates-field"], robust, lm) == rs.STOP_IN_REASONING
    assert rs.classify(records["restates-inline"], robust, lm) == rs.STOP_IN_REASONING
    assert rs.classify(records["eaten-field"], robust, reference) == rs.CUT_IN_THINKING
    assert rs.classify(records["eaten-inline"], robust, reference) == rs.CUT_IN_THINKING
    assert rs.classify(records["empty-field"], robust, reference) == rs.EMPTY_AFTER_THINKING
    summary = json.loads((folder / "summary.json").read_text())
    differences = summary["traps"]["harness"]["differences"]
    assert differences["lm-eval"]["why"] == {rs.STOP_IN_REASONING: 2}
    assert differences["reference"]["why"] == {rs.CUT_IN_THINKING: 2, rs.EMPTY_AFTER_THINKING: 1}
    counts = summary["traps"]["counts"]
    assert counts[HIT_MAX_TOKENS] == 2 and counts[NO_ANSWER_LINE] == 1 and summary["suspect"] is True


def test_a_stop_string_sent_to_the_server_fires_inside_the_thinking_in_both_forms(tmp_path):
    records, folder = run(tmp_path, suite=str(suite(tmp_path)), stop=["Question:"])
    assert verify(folder) == []
    for name in ("restates-field", "restates-inline"):
        r = records[name]
        assert "answer is" not in r["text"] + r["reasoning"] and r["finish_reason"] == "stop", r
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["traps"]["counts"][CUT_BY_STOP] >= 2 and summary["suspect"] is True
    assert "Run with stop=[] to check" in summary["traps"]["headline"]


def test_humaneval_counts_an_answer_whose_thinking_ate_max_tokens_as_cut_and_shows_where_it_ended(tmp_path):
    records, folder = run(tmp_path, "humaneval", "problem", limit=2, isolation="rlimits")
    assert verify(folder) == []
    assert sorted(bool(r["reasoning"]) for r in records.values()) == [False, True]  # one in the field, one inline
    assert all(r["finish_reason"] == "length" and r["code"] is None and r["reason"] == h.CUT for r in records.values())
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["traps"]["counts"][HIT_MAX_TOKENS] == 2 and summary["suspect"] is True
    ends = [e["reasoning_end"] + e["content_end"] for e in summary["traps"]["examples"]]
    cut = " ".join(LONG.split()[:MAX_TOKENS])[-60:]  # where max_tokens ended the thinking: no answer after it
    assert len(ends) == 2 and all(end.endswith(cut) for end in ends), ends
