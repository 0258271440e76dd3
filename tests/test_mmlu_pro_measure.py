"""Asking: the stop-string trap, bounded concurrency with every answer on disk as it arrives, a failure
halfway then resume, the prompt-length check, and a server killed mid-run on the real test bed.

Most tests here use a fake server, because the tiny random-weight models cannot reason: only a model
that writes its own "**Question:**" heading while thinking can show a stop string cutting the
reasoning, and only a fake answers 500 on purpose. The fake does what vLLM does there (it applies
stop strings to the reasoning text too: vLLM issues 52393, 53066). The killed server is the real one.
"""

import json
import os
import signal
import threading
import time
from dataclasses import replace

import pytest
from support import FakeVllm, free_port, serve
from test_mmlu_pro_data import SHARED, needs_shared, synthetic

from sparknb.cli import main
from sparknb.endpoint import metrics
from sparknb.endpoint.client import Endpoint
from sparknb.errors import ParamsError, StudyError
from sparknb.runs.run import read_records, verify
from sparknb.runs.study import start
from sparknb.serving import testbed
from sparknb.studies import mmlu_pro as m


class FakeReasoner(FakeVllm):
    """Streams a reasoning text with a **Question:** heading, then "the answer is (A)", applying stop
    strings to the reasoning as vLLM does. Counts requests in flight, and how many answers the run had
    on disk when each request arrived."""

    lock = threading.Lock()
    in_flight = max_in_flight = asked = generated = tokenized = 0
    fail_on = "NEVER"
    records_path = None
    on_disk_at_arrival: list

    def do_POST(self):
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":  # one token a word: the fake's own tokenizer
            with cls.lock:
                cls.tokenized += 1
            return self.send_body(200, json.dumps({"tokens": [1] * len(body["messages"][0]["content"].split())}))
        question = body["messages"][0]["content"].rsplit("Question:\n", 1)[1].split("\n")[0]
        if cls.fail_on in question:
            return self.send_body(500, json.dumps({"error": {"message": "engine died"}}))
        with cls.lock:
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
            if cls.records_path is not None and cls.records_path.exists():
                cls.on_disk_at_arrival.append(len(cls.records_path.read_text().splitlines()))
            elif cls.records_path is not None:
                cls.on_disk_at_arrival.append(0)
        try:
            self._answer(body, question)
        finally:
            with cls.lock:
                cls.in_flight -= 1

    def _answer(self, body, question):
        cls = type(self)
        reasoning = f"Okay, let me restate it.\n\n**Question:** {question}\n\nOption A fits best."
        content = "Having checked each option, the answer is (A)."
        finish = "stop"
        for s in body.get("stop") or []:
            if s in reasoning:
                reasoning, content = reasoning[:reasoning.index(s)], ""
            elif s in content:
                content = content[:content.index(s)]
        words = (reasoning + " " + content).split()
        if len(words) > body["max_tokens"]:
            finish, content = "length", ""
            reasoning = " ".join(words[:body["max_tokens"]])
        n = min(len(words), body["max_tokens"])
        self.start_stream()
        pieces = [{"reasoning": reasoning[:20]}, {"reasoning": reasoning[20:]}, {"content": content}]
        for delta in [{"role": "assistant", "content": ""}] + pieces:
            time.sleep(0.03)
            self.chunk([{"index": 0, "delta": delta, "finish_reason": None}])
        self.chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
        self.done(n)


def fake_reasoner():
    """A fake with fresh counters, served for one test: (its handler class, its /v1 URL)."""
    handler = type("Fake", (FakeReasoner,), {"on_disk_at_arrival": []})
    with serve(handler) as url:
        yield handler, url


@pytest.fixture(name="fake")
def _fake():
    yield from fake_reasoner()


def work_on(dataset, outputs="", **plan) -> m.Work:
    return m.prepare(m.Plan.build(outputs=str(outputs), **plan), "tiny-dense", dataset)


def open_study(tmp_path, url, work):
    return start(m.NOTEBOOK, model="tiny-dense", endpoint=url, settings=work.settings(), outputs=str(tmp_path),
                 validate=work.check_server)


def finish(study, work, batch):
    records = study.records()
    df, t = m.frame(records, work.plan.stop), m.traps(records, work.plan.stop, work.plan.trap_share)
    s = m.scores(df, work) if len(df) else None
    study.finish(m.summary(df, work, t, s, batch, None, m.findings(df, work, t, s, batch)))


def quiet(_line):
    pass


def test_the_stop_string_trap_is_caught(tmp_path, fake):
    _, url = fake
    work = work_on(synthetic(per=2), per_category=2, stop=["Question:"], concurrency=3)
    study = open_study(tmp_path, url, work)
    m.ask(study, work, log=quiet)
    records = study.records()
    assert len(records) == 6
    assert all(r["text"] == "" and r["reasoning"].endswith("**") for r in records)  # cut inside the thinking
    t = m.traps(records, work.plan.stop, work.plan.trap_share)
    assert t.tripped and t.counts[m.CUT_BY_STOP] == 6 and t.unparsed == 6
    assert "Stop strings ['Question:']" in t.headline()
    assert t.examples[0]["reasoning_end"].endswith("Okay, let me restate it.\n\n**")
    df = m.frame(records, work.plan.stop)
    notes = m.findings(df, work, t, m.scores(df, work), None)
    assert notes[0].level == "warning" and notes[1].level == "suspect" and notes[1].text.startswith("Accuracy 0.0%")
    study.finish({})


def test_without_stop_strings_the_same_model_scores(tmp_path, fake):
    _, url = fake
    work = work_on(synthetic(per=2), per_category=2, concurrency=3)
    study = open_study(tmp_path, url, work)
    batch = m.ask(study, work, log=quiet)
    records = study.records()
    t = m.traps(records, (), work.plan.trap_share)
    assert not t.tripped and t.unparsed == 0
    assert all("**Question:**" in r["reasoning"] and r["pred"] == "A" and r["correct"] for r in records)
    s = m.scores(m.frame(records), work)
    assert s.headline.estimate == 1.0 and "macro average of an even draw" in s.headline_label
    assert batch.asked == 6 and batch.completion_tokens == sum(r["completion_tokens"] for r in records)
    assert batch.interference is None and batch.server_requests == 6
    assert 0 < batch.client_cpu_share < 1 and batch.tokens_per_s > 0
    finish(study, work, batch)


def test_concurrency_is_bounded_and_every_answer_is_recorded_as_it_arrives(tmp_path, fake):
    handler, url = fake
    work = work_on(synthetic(per=5), per_category=5, concurrency=4)
    study = open_study(tmp_path, url, work)
    handler.records_path = study.run.path / "records.jsonl"
    lines = []
    m.ask(study, work, log=lines.append)
    assert handler.max_in_flight == 4  # never more, and the bound was used
    assert len(study.records()) == 15 and handler.asked == 15
    # The k-th request (k > 4) is sent only once k - 4 answers have ended, and each of those is on disk
    # before it goes: a run that wrote its answers at the end would show 0 here every time.
    seen = handler.on_disk_at_arrival
    assert len(seen) == 15 and seen[:4] == [0, 0, 0, 0]
    assert all(seen[k] >= k - 3 for k in range(4, 15)), seen
    assert lines[-1].startswith("[15/15] 15 right so far")
    study.finish({})


def test_every_prompt_is_measured_by_the_server_and_a_too_long_one_is_refused_before_the_run_opens(tmp_path, fake):
    handler, url = fake
    d = synthetic(per=3)
    # The longest prompts by characters are not the longest in tokens: three long words against many short ones.
    test = [replace(q, question="x" * 400) for q in d.test[:3]] + [replace(d.test[3], question="a " * 60)]
    work = work_on(replace(d, test=tuple(test) + d.test[4:]), per_category=3, max_tokens=100)
    text = {q.id: work.prompts[q.id][0]["content"] for q in work.questions}
    words = {q.id: len(text[q.id].split()) for q in work.questions}  # the fake counts a token a word
    assert max(words, key=words.get) == d.test[3].id and max(text, key=lambda i: len(text[i])) != d.test[3].id
    handler.max_model_len = max(words.values()) + 100
    study = open_study(tmp_path, url, work)
    batch = m.ask(study, work, log=quiet)
    assert handler.tokenized == 9 and batch.longest_prompt_tokens == max(words.values())
    assert batch.longest_prompt_question == d.test[3].id
    study.finish({})

    handler.max_model_len -= 1  # one token short for the longest prompt
    with pytest.raises(ParamsError, match=f"The longest prompt \\(question {d.test[3].id}\\) is {max(words.values())} "
                                          "tokens .* so do 1 of the 9 prompts. Lower max_tokens to 99 or less"):
        open_study(tmp_path / "refused", url, work)
    assert handler.asked == 9 and not (tmp_path / "refused").exists()  # no question asked, no run opened


def test_a_failure_halfway_keeps_the_answers_and_resume_asks_only_the_rest(tmp_path, fake):
    handler, url = fake
    dataset = synthetic(per=3)
    work = work_on(dataset, per_category=3, concurrency=2)
    handler.fail_on = f"question {work.questions[4].id}?"
    first = open_study(tmp_path, url, work)
    with pytest.raises(StudyError, match=f"resume_from='{first.run.id}'"):
        m.ask(first, work, log=quiet)
    kept = read_records(first.run.path)
    answered = [r for r in kept if "error" not in r]
    assert any("error" in r for r in kept) and 4 <= len(answered) < 9
    assert verify(first.run.path) == [] and json.loads((first.run.path / "failure.json").read_text())["failed_halfway"]

    handler.fail_on, asked_before = "NEVER", handler.asked
    again = work_on(dataset, outputs=tmp_path, per_category=3, concurrency=2, resume_from=first.run.id)
    second = open_study(tmp_path, url, again)
    batch = m.ask(second, again, log=quiet)
    assert handler.asked - asked_before == 9 - len(answered) == batch.asked  # only the rest was asked
    records = second.records()
    assert sorted(r["question_id"] for r in records) == sorted(q.id for q in again.questions)
    assert sum(bool(r.get("resumed_from")) for r in records) == len(answered) == batch.reused
    finish(second, again, batch)


def test_a_suite_of_your_own_is_asked_zero_shot_and_scored_plainly(tmp_path, fake):
    _, url = fake
    suite = tmp_path / "mine.jsonl"
    suite.write_text("".join(json.dumps({"question": f"q{i}?", "options": ["x", "y"], "answer": "AB"[i % 2],
                                         "category": "mine"}) + "\n" for i in range(4)))
    work = m.prepare(m.Plan.build(suite=str(suite), per_category=0), "tiny-dense")
    asked = work.prompts[work.ids[0]][0]["content"]
    assert work.settings()["shots"] == 0 and asked.count("Question:\n") == 1  # no examples
    study = open_study(tmp_path, url, work)
    batch = m.ask(study, work, log=quiet)
    df = m.frame(study.records())
    s = m.scores(df, work)
    assert s.headline_label == "accuracy on suite mine.jsonl" and s.other is None
    assert (s.headline.estimate, s.n) == (0.5, 4)  # the fake always answers A
    finish(study, work, batch)


# -- a server killed mid-run, on the real test bed ---------------------------------------------------


def server_requests(url: str) -> float:
    """Requests the server finished, by its own counter."""
    ep = Endpoint(url, "tiny-dense")
    try:
        return ep.metrics()[metrics.E2E + "_count"]
    finally:
        ep.close()


@needs_shared
@pytest.mark.server
@pytest.mark.llamacpp
def test_a_server_killed_mid_run_keeps_every_answer_and_resume_asks_only_the_rest(tmp_path, tiny_dense):
    params = {"dataset": str(SHARED), "per_category": 2, "max_tokens": 64, "concurrency": 2}
    work = m.prepare(m.Plan.build(**params), "tiny-dense")
    # The server killed is a llama-server of the same model (started in a second, where vLLM takes a minute): what
    # is kept and resumed is the study's, whatever the engine.
    server = testbed.start("tiny-dense", free_port(), engine="llama.cpp", log_path=tmp_path / "first.log")
    study = None
    on_disk_at_kill = []

    def kill_after_three_answers() -> None:
        while study is None or not (study.run.path / "records.jsonl").exists() \
                or len(study.records()) < 3:
            time.sleep(0.05)
        on_disk_at_kill.append(len(study.records()))
        os.killpg(server.pid, signal.SIGKILL)

    try:
        study = open_study(tmp_path, server.url, work)
        killer = threading.Thread(target=kill_after_three_answers, daemon=True)
        killer.start()
        with pytest.raises(StudyError, match="request\\(s\\) failed"):
            m.ask(study, work, log=quiet)
        killer.join(timeout=5)
    finally:
        server.stop()
    folder = study.run.path
    records = read_records(folder)
    finished = m.answered(records)
    assert len(finished) >= on_disk_at_kill[0] >= 3 and any("error" in r for r in records)
    assert len(finished) < len(work.questions)
    failure = json.loads((folder / "failure.json").read_text())
    assert failure["failed_halfway"] and "request(s) failed" in failure["reason"]
    assert failure["records"] == len(records) and not (folder / "summary.json").exists()
    assert verify(folder) == [] and main(["verify", str(folder)]) == 0

    again = m.prepare(m.Plan.build(outputs=str(tmp_path), resume_from=folder.name, **params), "tiny-dense")
    assert {str(r["question_id"]) for r in again.reused} == set(finished)
    second = open_study(tmp_path, tiny_dense.url, again)  # resumed on the suite's own server: nothing else asks it now
    before = server_requests(tiny_dense.url)
    batch = m.ask(second, again, log=quiet)
    asked = server_requests(tiny_dense.url) - before
    finish(second, again, batch)
    assert asked == len(work.questions) - len(finished) == batch.asked  # by the server's own count
    records = read_records(second.run.path)
    assert set(m.answered(records)) == set(work.ids) and verify(second.run.path) == []
    summary = json.loads((second.run.path / "summary.json").read_text())
    assert summary["answered"] == len(work.questions) and summary["batch"]["reused"] == len(finished)
