"""MMLU-Pro: data, draw, prompt, extraction, the stop-string trap, resume, comparison, and the notebook.

The trap, concurrency and resume tests use a fake server, because the tiny random-weight models
cannot reason: only a model that writes its own "**Question:**" heading while thinking can show a
stop string cutting the reasoning. The fake does what vLLM does there (it applies stop strings to
the reasoning text too: vLLM issues 52393, 53066). The notebook itself runs against the real vLLM
CPU server at the end of this file.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import nbformat
import pandas as pd
import papermill
import pytest

from sparknb import mmlu_pro as m
from sparknb.client import Endpoint
from sparknb.params import project_root
from sparknb.run import Run, read_records, verify

SHARED = project_root().parent / "shared" / "data" / "mmlu_pro"
NOTEBOOK = project_root() / "notebooks" / "mmlu_pro.ipynb"
needs_shared = pytest.mark.skipif(not (SHARED / m.FILES["test"]).is_file(),
                                  reason=f"the MMLU-Pro copy is not at {SHARED}")


def synthetic(categories=("art", "bio", "chem"), per=6, answer="A") -> m.Dataset:
    test, val = [], []
    for c, cat in enumerate(categories):
        for i in range(per):
            qid = str(100 * c + i)
            test.append(m.Question(qid, cat, f"{cat} question {qid}?", ("yes", "no", "maybe"), answer))
        for i in range(2):
            val.append(m.Question(f"v{c}{i}", cat, f"{cat} example {i}?", ("one", "two"), "B",
                                  f"A: Let's think step by step. It is two. The answer is (B)."))
    return m.Dataset("synthetic", "memory", tuple(test), tuple(val))


# -- data ------------------------------------------------------------------------------------------


@needs_shared
def test_the_local_copy_loads_stripped_and_unpadded():
    d = m.load(str(SHARED))
    assert len(d.test) == 12032 and len(d.validation) == 70
    assert len(d.categories) == 14 and sum(d.sizes().values()) == 12032
    assert d.sizes()["history"] == 381 and d.sizes()["math"] == 1351
    # The old copy's leak: the right option alone carried a leading space in 524 questions.
    assert all(o == o.strip() for q in d.test for o in q.options)
    assert any("532 question(s)" in n for n in d.notes)
    # Validation rows are padded with "N/A" options; the worked examples must not show them.
    assert all("N/A" not in q.options for q in d.validation)
    assert all(len(d.examples(c, 5)) == 5 for c in d.categories)
    assert d.sha256[m.FILES["test"]].startswith("b8c790c6")


@needs_shared
def test_the_hub_download_fetches_both_files_once(tmp_path, monkeypatch):
    # A local HTTP server stands in for the dataset hub: this machine has no network.
    import functools
    from http.server import SimpleHTTPRequestHandler

    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(SHARED))
    handler.log_message = lambda *a: None
    hub = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=hub.serve_forever, daemon=True).start()
    try:
        monkeypatch.setattr(m, "HUB_URL", f"http://127.0.0.1:{hub.server_address[1]}/{{file}}")
        folder = m.download(tmp_path / "cache")
        assert sorted(p.name for p in folder.iterdir()) == sorted(m.FILES.values())
        assert m.load(str(folder)).sha256 == m.load(str(SHARED)).sha256
        monkeypatch.setattr(m, "HUB_URL", f"http://127.0.0.1:{hub.server_address[1]}/missing/{{file}}")
        assert m.download(tmp_path / "cache") == folder  # cached: nothing fetched again
        with pytest.raises(m.DataError, match="(?s)Cannot download.*404.*by hand"):
            m.download(tmp_path / "elsewhere")
        assert not any((tmp_path / "elsewhere").iterdir())  # no half-written file left behind
    finally:
        hub.shutdown()
        hub.server_close()


def test_a_folder_without_the_files_says_which(tmp_path):
    with pytest.raises(m.DataError, match="lacks test-00000-of-00001.parquet, validation"):
        m.load(str(tmp_path))
    with pytest.raises(m.DataError, match="No folder"):
        m.load(str(tmp_path / "nowhere"))


def test_a_file_without_the_columns_names_them(tmp_path):
    pd.DataFrame({"question_id": [1], "question": ["q"]}).to_parquet(tmp_path / m.FILES["test"])
    pd.DataFrame({"question_id": [1]}).to_parquet(tmp_path / m.FILES["validation"])
    with pytest.raises(m.DataError, match=r"lacks the column\(s\) \['options', 'answer', 'category'\]"):
        m.load(str(tmp_path))


def test_own_suite_loads_and_bad_lines_are_named(tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text('{"id": "m1", "question": "2+2?", "options": ["3", " 4 "], "answer": "b", "category": "math"}\n'
                     '\n{"question": "Capital of France?", "options": ["Paris", "Rome", "Oslo"], "answer": "A"}\n')
    d = m.load_suite(suite)
    assert [q.id for q in d.test] == ["m1", "suite:3"]
    assert d.test[0].options == ("3", "4") and d.test[0].answer == "B"
    assert d.test[1].category == "general knowledge"
    suite.write_text('{"question": "x", "options": ["a", "b"], "answer": "C"}\n')
    with pytest.raises(m.DataError, match="line 1: answer must be one of A, B"):
        m.load_suite(suite)
    suite.write_text('{"question": "x", "options": ["a", "b"]}\n')
    with pytest.raises(m.DataError, match=r"lacks \['answer'\]"):
        m.load_suite(suite)


# -- the draw --------------------------------------------------------------------------------------


def test_the_draw_is_even_seeded_and_interleaved():
    d = synthetic(per=10)
    one = m.draw(d, 4, seed=7)
    assert [q.category for q in one[:3]] == ["art", "bio", "chem"]  # interleaved: a half run stays even
    assert pd.Series([q.category for q in one]).value_counts().to_dict() == {"art": 4, "bio": 4, "chem": 4}
    assert [q.id for q in m.draw(d, 4, seed=7)] == [q.id for q in one]  # deterministic
    assert {q.id for q in m.draw(d, 4, seed=8)} != {q.id for q in one}
    # A category's draw does not depend on the others.
    alone = synthetic(categories=("bio",), per=10)
    assert [q.id for q in m.draw(alone, 4, seed=7)] == [str(int(q.id) - 100) for q in one if q.category == "bio"]
    assert len(m.draw(d, 0)) == 30  # the whole split


@needs_shared
def test_the_default_draw_is_280_and_pinned():
    d = m.load(str(SHARED))
    qs = m.draw(d, 20, seed=0)
    assert len(qs) == 280 and len({q.id for q in qs}) == 280
    assert set(pd.Series([q.category for q in qs]).value_counts()) == {20}
    assert [q.id for q in qs[:3]] == ["2821", "93", "3531"]  # the same questions on every machine, every time


def test_a_sample_larger_than_a_category_is_refused():
    d = synthetic(per=5)
    with pytest.raises(m.DataError, match="per_category=6 is more than 'art' holds \\(5 questions\\)"):
        m.draw(d, 6)


# -- the prompt ------------------------------------------------------------------------------------


def test_the_prompt_text_is_exactly_the_reference_harness():
    d = synthetic()
    q = d.test[0]
    expected = (
        'The following are multiple choice questions (with answers) about art. Think step by step and then '
        'finish your answer with "the answer is (X)" where X is the correct letter choice.\n'
        "Question:\nart example 0?\nOptions:\nA. one\nB. two\n"
        "Answer: Let's think step by step. It is two. The answer is (B).\n\n"
        "Question:\nart example 1?\nOptions:\nA. one\nB. two\n"
        "Answer: Let's think step by step. It is two. The answer is (B).\n\n"
        "Question:\nart question 0?\nOptions:\nA. yes\nB. no\nC. maybe\n"
        "Answer: Let's think step by step."
    )
    assert m.prompt(q, d.examples("art", 5)) == expected


@needs_shared
def test_a_real_prompt_has_five_worked_examples_of_its_category():
    d = m.load(str(SHARED))
    q = next(q for q in d.test if q.id == "70")
    text = m.prompt(q, d.examples(q.category, 5))
    assert text.startswith("The following are multiple choice questions (with answers) about business. ")
    assert text.count("Question:\n") == 6 and text.count("Answer: Let's think step by step.") == 6
    assert "A: Let's think step by step." not in text and "N/A" not in text
    assert text.endswith("I. Unsafe practices, Distress, Fear, Serious\nAnswer: Let's think step by step.")


# -- extraction ------------------------------------------------------------------------------------

QWEN_STYLE = """Okay, let me work through this.

**Question:** Which enzyme unwinds DNA at the replication fork?

Helicase breaks the hydrogen bonds; primase lays primers; ligase joins fragments. Option (B) is ligase, so not that.
So the answer is helicase, option C."""

CASES = [
    # (content, expected letter, rule)
    ("Helicase unwinds the helix, so **the answer is (C)**.", "C", "answer is"),
    ("At first the answer is (B). Wait, B is ligase. Rechecking: the answer is (D).", "D", "answer is"),
    ("The answer is C because helicase...", "C", "answer is"),
    ("Reasoning done.\n\n**Answer:** E", "E", "Answer:"),
    ("Final answer: G", "G", "Answer:"),
    ("Between (B) and (F) I pick F", "F", "last letter"),
    ("Helicase unwinds the double helix at the fork.", None, None),
    ("", None, None),
]


@pytest.mark.parametrize("content,letter,rule", CASES)
def test_extraction_follows_the_reference_rules_and_takes_the_last_match(content, letter, rule):
    assert m.extract(content) == m.Extraction(letter, rule)


def test_a_question_heading_in_the_reasoning_does_not_confuse_the_grade():
    # The answer is read from content; the reasoning, with its **Question:** heading, is kept but not graded.
    g = m.grade("C", "Therefore **the answer is (C)**.", "stop")
    assert g == m.Grade("C", "answer is", True, None)
    assert m.extract(QWEN_STYLE.replace("**", "")).letter == "C"


def test_cut_and_answerless_responses_are_flagged():
    assert m.grade("C", "", "stop", stop=["Question:"]).flag == m.CUT_BY_STOP  # the trap
    assert m.grade("C", "", "stop").flag == m.NO_ANSWER_LINE
    assert m.grade("C", "so it is C", "length").flag == m.HIT_MAX_TOKENS
    assert m.grade("C", "Answer: C", "stop").flag is None  # stated outright, in the other common form
    assert m.grade("C", "so (C), I guess", "stop").flag == m.NO_ANSWER_LINE  # only the last-letter fallback
    unparsed = m.grade("C", "no idea", "stop")
    assert unparsed.pred is None and unparsed.correct is False  # unparsed is wrong, never a guess


def test_traps_trip_above_the_share_and_keep_three_raw_examples():
    good = {"answer": "A", "category": "art", "finish_reason": "stop", "text": "the answer is (A)", "reasoning": "r"}
    cut = {"answer": "A", "category": "art", "finish_reason": "stop", "text": "", "reasoning": "Okay.\n\n"}
    records = [{**good, "question_id": i} for i in range(16)] + [{**cut, "question_id": 100 + i} for i in range(4)]
    t = m.traps(records, stop=["Question:"], share_limit=0.05)
    assert t.tripped and t.counts[m.CUT_BY_STOP] == 4 and t.unparsed == 4 and len(t.examples) == 3
    assert "WARNING: 4 of 20 answers" in t.headline() and "SUSPECT" in t.headline() and "stop=[]" in t.headline()
    assert not m.traps(records[:16] + records[16:17], share_limit=0.1).tripped  # 1 of 17 is within 10%
    assert "answer is (A)" not in m.examples_markdown(t) and "cut by a stop string" in m.examples_markdown(t)


# -- parameters ------------------------------------------------------------------------------------


def test_bad_parameters_are_all_named_at_once():
    with pytest.raises(ValueError) as e:
        m.Plan(concurrency=0, shots=7, stop=[""], max_tokens=0, trap_share=2)
    for word in ("concurrency must be a whole number, 1 or more", "shots must be 5 or fewer", "stop must be",
                 "max_tokens", "trap_share"):
        assert word in str(e.value)


# -- a fake reasoning server -----------------------------------------------------------------------


class FakeReasoner(BaseHTTPRequestHandler):
    """Streams a reasoning text with a **Question:** heading, then "the answer is (A)", applying stop
    strings to the reasoning as vLLM does. Counts requests in flight."""

    lock = threading.Lock()
    in_flight = max_in_flight = asked = generated = 0
    fail_on = "NEVER"

    def log_message(self, *args):
        pass

    def _send(self, status, body, kind="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.end_headers()
        self.wfile.write(body.encode())

    def do_GET(self):
        cls = type(self)
        self._send(200, f'vllm:e2e_request_latency_seconds_count{{model_name="fake"}} {cls.asked}\n'
                        f'vllm:e2e_request_latency_seconds_sum{{model_name="fake"}} {cls.asked * 0.1}\n'
                        f'vllm:generation_tokens_total{{model_name="fake"}} {cls.generated}\n', "text/plain")

    def do_POST(self):
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        question = body["messages"][0]["content"].rsplit("Question:\n", 1)[1].split("\n")[0]
        if cls.fail_on in question:
            return self._send(500, json.dumps({"error": {"message": "engine died"}}))
        with cls.lock:
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        try:
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
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            pieces = [{"reasoning": reasoning[:20]}, {"reasoning": reasoning[20:]}, {"content": content}]
            for delta in [{"role": "assistant", "content": ""}] + pieces:
                time.sleep(0.03)
                self._chunk([{"index": 0, "delta": delta, "finish_reason": None}])
            self._chunk([{"index": 0, "delta": {}, "finish_reason": finish}])
            self._chunk([], {"prompt_tokens": 50, "completion_tokens": n, "total_tokens": 50 + n})
            self.wfile.write(b"data: [DONE]\n\n")
            with cls.lock:
                cls.asked += 1
                cls.generated += n
        finally:
            with cls.lock:
                cls.in_flight -= 1

    def _chunk(self, choices, usage=None):
        chunk = {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "fake", "choices": choices,
                 "usage": usage}
        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.flush()


@pytest.fixture
def fake():
    handler = type("Fake", (FakeReasoner,), {})  # fresh counters for every test
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield handler, Endpoint(f"http://127.0.0.1:{server.server_address[1]}/v1", "fake")
    server.shutdown()
    server.server_close()


def work_on(dataset, plan, past=None, other=None) -> m.Work:
    qs = m.draw(dataset, plan.per_category, plan.seed)
    w = m.Work(plan, "fake", dataset, qs, {q.id: m.prompt(q, dataset.examples(q.category, plan.shots)) for q in qs})
    if past is not None:
        done = past.answered()
        w.resumed, w.reused = past, [done[q.id] for q in qs if q.id in done]
    w.other = other
    return w


def new_run(tmp_path, work) -> Run:
    return Run.create(m.NOTEBOOK, {"notebook": m.NOTEBOOK, "settings": work.settings(), "model": {"name": "fake"}},
                      outputs=tmp_path)


def quiet(_line):
    pass


def test_the_stop_string_trap_is_caught(tmp_path, fake):
    handler, endpoint = fake
    work = work_on(synthetic(per=2), m.Plan(per_category=2, stop=("Question:",), concurrency=3))
    run = new_run(tmp_path, work)
    m.ask(endpoint, run, work, log=quiet)
    records = read_records(run.path)
    assert len(records) == 6
    assert all(r["text"] == "" and r["reasoning"].endswith("**") for r in records)  # cut inside the thinking
    t = m.traps(records, work.plan.stop, work.plan.trap_share)
    assert t.tripped and t.counts[m.CUT_BY_STOP] == 6 and t.unparsed == 6
    assert "Stop strings ['Question:']" in t.headline()
    assert t.examples[0]["reasoning_end"].endswith("Okay, let me restate it.\n\n**")
    notes = m.findings(m.frame(records, work.plan.stop), work, t, m.scores(m.frame(records, work.plan.stop), work),
                       None)
    assert notes[0].startswith("WARNING") and notes[1].startswith("SUSPECT: Accuracy 0.0%")


def test_without_stop_strings_the_same_model_scores(tmp_path, fake):
    handler, endpoint = fake
    work = work_on(synthetic(per=2), m.Plan(per_category=2, concurrency=3))
    run = new_run(tmp_path, work)
    batch = m.ask(endpoint, run, work, log=quiet)
    records = read_records(run.path)
    t = m.traps(records, (), work.plan.trap_share)
    assert not t.tripped and t.unparsed == 0
    assert all("**Question:**" in r["reasoning"] and r["pred"] == "A" and r["correct"] for r in records)
    s = m.scores(m.frame(records), work)
    assert s.headline.estimate == 1.0 and "macro average of an even draw" in s.headline_label
    assert batch.asked == 6 and batch.completion_tokens == sum(r["completion_tokens"] for r in records)
    assert batch.interference is None and batch.server_requests == 6
    assert 0 < batch.client_cpu_share < 1 and batch.tokens_per_s > 0


def test_concurrency_is_bounded_and_every_answer_is_recorded_as_it_arrives(tmp_path, fake):
    handler, endpoint = fake
    work = work_on(synthetic(per=5), m.Plan(per_category=5, concurrency=4))
    run = new_run(tmp_path, work)
    lines = []
    m.ask(endpoint, run, work, log=lines.append)
    assert handler.max_in_flight == 4  # never more, and the bound was used
    assert len(read_records(run.path)) == 15 and handler.asked == 15
    assert lines[-1].startswith("[15/15] 15 right so far")


def test_a_failure_halfway_keeps_the_answers_and_resume_asks_only_the_rest(tmp_path, fake):
    handler, endpoint = fake
    plan = m.Plan(per_category=3, concurrency=2)
    dataset = synthetic(per=3)
    work = work_on(dataset, plan)
    handler.fail_on = f"question {work.questions[4].id}?"
    first = new_run(tmp_path, work)
    with pytest.raises(RuntimeError, match=f"resume_from='{first.id}'"):
        m.ask(endpoint, first, work, log=quiet)
    kept = read_records(first.path)
    answered = [r for r in kept if "error" not in r]
    assert any("error" in r for r in kept) and 4 <= len(answered) < 9
    first.seal()

    handler.fail_on, asked_before = "NEVER", handler.asked
    past = m.find_run(str(first.path), "resume_from")
    again = work_on(dataset, plan, past=past)
    second = new_run(tmp_path, again)
    batch = m.ask(endpoint, second, again, log=quiet)
    assert handler.asked - asked_before == 9 - len(answered)  # only the rest was asked
    records = read_records(second.path)
    assert sorted(r["question_id"] for r in records) == sorted(q.id for q in again.questions)
    assert sum(bool(r.get("resumed_from")) for r in records) == len(answered) == batch.reused


def _past(tmp_path, name, settings, records=()):
    folder = tmp_path / m.NOTEBOOK / name
    folder.mkdir(parents=True)
    (folder / "params.json").write_text(json.dumps({"notebook": m.NOTEBOOK, "settings": settings,
                                                    "model": {"name": "other-model"}}))
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


@needs_shared
def test_compare_and_resume_refuse_before_any_request(tmp_path):
    plan = m.Plan(dataset=str(SHARED), per_category=1, seed=0)
    work = m.prepare(plan, "tiny-dense")
    other = _past(tmp_path, "other-draw", work.settings() | {"questions": ["1", "2"], "seed": 5})
    with pytest.raises(m.DataError, match="asked other questions.*seed=5"):
        m.prepare(m.Plan(dataset=str(SHARED), per_category=1, compare_with=str(other)), "tiny-dense")
    half = _past(tmp_path, "half", work.settings(), [{"question_id": work.ids[0], "category": "x", "answer": "A",
                                                      "finish_reason": "stop", "text": ""}])
    with pytest.raises(m.DataError, match="no finished answer to 13 of the 14 questions.*resume_from='half'"):
        m.prepare(m.Plan(dataset=str(SHARED), per_category=1, compare_with=str(half)), "tiny-dense")
    hotter = _past(tmp_path, "hotter", work.settings() | {"temperature": 0.7})
    with pytest.raises(m.DataError, match="different temperature.*0.7 there, 0.0 here"):
        m.prepare(m.Plan(dataset=str(SHARED), per_category=1, resume_from=str(hotter)), "tiny-dense")
    with pytest.raises(m.DataError, match="not an mmlu_pro run folder"):
        m.prepare(m.Plan(dataset=str(SHARED), per_category=1, resume_from=str(tmp_path)), "tiny-dense")


def test_a_comparison_is_paired_and_graded_alike(tmp_path, fake):
    handler, endpoint = fake
    dataset = synthetic(per=4)
    plan = m.Plan(per_category=4, concurrency=4)
    work = work_on(dataset, plan)
    run_b = new_run(tmp_path, work)
    m.ask(endpoint, run_b, work, log=quiet)  # B: every answer "A"; the right one is "A" for every question
    other = m.find_run(str(run_b.path), "compare_with")
    flipped = synthetic(per=4, answer="B")  # now the same answers are all wrong for A's run
    work_a = work_on(flipped, plan, other=other)
    run_a = new_run(tmp_path, work_a)
    m.ask(endpoint, run_a, work_a, log=quiet)
    cmp = m.compare(m.frame(read_records(run_a.path)), work_a, "fake")
    assert (cmp.pairs.both, cmp.pairs.a_only, cmp.pairs.b_only, cmp.pairs.neither) == (0, 0, 12, 0)
    assert cmp.difference.high < 0 and cmp.test.pvalue < 0.001
    assert cmp.table().loc["fake wrong"].tolist() == [12, 0]
    assert cmp.needed > 0 and "dataset_name" not in cmp.settings_differ
    assert "would take about" in m.comparison_markdown(cmp)
    same = m.compare(m.frame(read_records(run_b.path)), work_on(dataset, plan, other=other), "fake")
    assert same.pairs.discordant == 0 and "cannot be estimated" in m.comparison_markdown(same)


@needs_shared
def test_the_command_line_refuses_bad_input_before_any_request(tmp_path, capsys):
    from sparknb.cli import main

    def refusal(*params):
        code = main(["run", "mmlu_pro", "--outputs", str(tmp_path), "-p", "model", "tiny-dense",
                     "-p", "endpoint", "http://127.0.0.1:9/v1", "-p", "dataset", str(SHARED), *params])
        assert code == 2 and not any((tmp_path / m.NOTEBOOK).iterdir()), "nothing is kept"
        return capsys.readouterr().err

    assert "concurrency must be a whole number, 1 or more; got 0" in refusal("-p", "concurrency", "0")
    assert "more than 'history' holds (381 questions)" in refusal("-p", "per_category", "400")


# -- the notebook against the real vLLM CPU server -------------------------------------------------


def outputs_text(nb) -> str:
    return "\n".join(str(o.get("text", "")) + json.dumps(o.get("data", {}))
                     for c in nb.cells for o in c.get("outputs", []))


def run_notebook(tmp_path, server, name, **params):
    out = tmp_path / f"{name}.ipynb"
    papermill.execute_notebook(str(NOTEBOOK), str(out), progress_bar=False, parameters={
        "model": "tiny-dense", "endpoint": server.url, "outputs": str(tmp_path / "outputs"),
        "dataset": str(SHARED), "per_category": 1, "max_tokens": 64, "concurrency": 4, **params})
    folder = max((tmp_path / "outputs" / m.NOTEBOOK).iterdir(), key=lambda p: p.stat().st_mtime)
    return nbformat.read(out, as_version=4), folder


@needs_shared
@pytest.mark.server
def test_notebook_on_tiny_dense_says_its_answers_are_noise_and_compares(tmp_path, tiny_dense):
    nb, first = run_notebook(tmp_path, tiny_dense, "first")
    records = read_records(first)
    assert len(records) == 14 and all("error" not in r for r in records)
    assert {r["category"] for r in records} == set(m.load(str(SHARED)).categories)
    assert all(r["completion_tokens"] <= 64 for r in records)
    summary = json.loads((first / "summary.json").read_text())
    assert summary["suspect"] is True and summary["traps"]["counts"][m.HIT_MAX_TOKENS] >= 10
    assert summary["batch"]["asked"] == 14 and summary["batch"]["tokens_per_s"] > 0
    assert verify(first) == []
    text = outputs_text(nb)
    assert "WARNING" in text and "SUSPECT" in text and "could not be parsed" in text
    assert "macro average of an even draw" in text and "image/png" in text
    assert "tqdm" not in text and "%|" not in text
    first_cell = next(c for c in nb.cells if c.cell_type == "code" and "parameters" not in c.metadata.get("tags", [])
                      and "injected-parameters" not in c.metadata.get("tags", []))
    assert "WARNING" in outputs_text(nbformat.v4.new_notebook(cells=[first_cell]))  # said at the top

    nb2, second = run_notebook(tmp_path, tiny_dense, "second", max_tokens=32, compare_with=str(first))
    summary2 = json.loads((second / "summary.json").read_text())
    cmp = summary2["comparison"]
    assert cmp["pairs"]["n"] == 14 and cmp["b"].startswith("tiny-dense")
    assert cmp["settings_differ"]["max_tokens"] == {"a": 32, "b": 64}
    text2 = outputs_text(nb2)
    assert "McNemar" in text2 and "Bonett-Price" in text2 and "batch tok/s" in text2
    assert "would take about" in text2 or "never disagreed" in text2
