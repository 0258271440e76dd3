"""Asking and grading HumanEval through the real sandbox: the canonical solutions score 164 of 164 and a wrong
body 0, hostile answers are graded failed with their reasons while the run goes on, the stop-string trap is
caught, a failure halfway keeps every graded answer and resume asks only the rest, and pass@k for samples.

The server here is a fake, and must be: no tiny model can write correct code, and only a fake answers a
problem with its canonical solution, a hostile program or a 500 on purpose. It streams as vLLM does, and
applies stop strings to the reasoning too (vLLM issues 52393, 53066). Every program runs in the real sandbox.
"""

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from support import FakeVllm, serve
from test_sandbox import attack

from sparknb import sandbox as sb
from sparknb.errors import StudyError
from sparknb.runs.run import read_records, verify
from sparknb.runs.study import start
from sparknb.studies import humaneval as h

PROBLEMS = {p.id: p for p in h.load().problems}
BY_PROMPT = {p.prompt.rstrip(): p for p in PROBLEMS.values()}
WRONG = "    return None\n"


class FakeCoder(FakeVllm):
    """Answers each problem with `bodies[id]` (else `default`: a body, or None for the canonical solution), in
    the style asked; `reasoning` is streamed as thinking first. Counts requests, per problem too."""

    lock = threading.Lock()
    asked = generated = 0
    default: str | None = None
    reasoning = ""
    fail_on = "NEVER"
    served = "tiny-dense"  # the model it says it serves
    bodies: dict
    seen: dict

    def do_POST(self):
        cls = type(self)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/tokenize":  # one token a word: the fake's own tokenizer
            text = body["messages"][0]["content"] if "messages" in body else body["prompt"]
            return self.send_body(200, json.dumps({"tokens": [1] * len(text.split())}))
        chat = self.path.endswith("/chat/completions")
        if chat:
            problem = BY_PROMPT[body["messages"][0]["content"].rsplit("```python\n", 1)[1].removesuffix("\n```")]
        else:
            problem = BY_PROMPT[body["prompt"].rstrip()]
        if problem.id == cls.fail_on:
            return self.send_body(500, json.dumps({"error": {"message": "engine died"}}))
        with cls.lock:
            cls.seen[problem.id] = cls.seen.get(problem.id, 0) + 1
            turn = cls.seen[problem.id]
        answer = cls.bodies.get(problem.id, cls.default)
        answer = answer(turn) if callable(answer) else answer
        answer = problem.canonical if answer is None else answer
        reasoning = cls.reasoning if chat else ""
        content = f"Here it is.\n```python\n{problem.prompt}{answer}```\n" if chat else answer
        self._stream(body, chat, reasoning, content)

    def _stream(self, body, chat, reasoning, content):
        cls, finish = type(self), "stop"
        for s in body.get("stop") or []:
            if s in reasoning:
                reasoning, content = reasoning[:reasoning.index(s)], ""
            elif s in content:
                content = content[:content.index(s)]
        n = len((reasoning + " " + content).split())
        self.start_stream()
        pieces = ([{"reasoning": reasoning}] if reasoning else []) + [{"content": content}]
        for piece in pieces:
            time.sleep(0.002)
            choice = {"index": 0, "delta": piece} if chat else {"index": 0, "text": piece["content"]}
            self.chunk([choice | {"finish_reason": None}])
        self.chunk([{"index": 0, "delta": {}, "finish_reason": finish} if chat else
                     {"index": 0, "text": "", "finish_reason": finish}])
        self.done(n)


def fake_coder(**attributes):
    """A fake with fresh counters, served for one test: (its handler class, its /v1 URL)."""
    handler = type("Fake", (FakeCoder,), {"bodies": {}, "seen": {}, **attributes})
    with serve(handler) as url:
        yield handler, url


@pytest.fixture(name="fake")
def _fake():
    yield from fake_coder()


def work_on(outputs="", **plan) -> h.Work:
    return h.prepare(h.Plan.build(outputs=str(outputs), **plan), "tiny-dense")


def open_study(tmp_path, url, work):
    return start(h.NOTEBOOK, model="tiny-dense", endpoint=url, settings=work.settings(), outputs=str(tmp_path),
                 validate=work.check_server)


def finish(study, work, asked):
    records = study.records()
    df, t = h.frame(records), h.traps(records, work.plan.stop, work.plan.trap_share)
    s = h.scores(df, work.dataset.size) if len(df) else None
    study.finish(h.summary(df, work, t, s, asked, None, h.findings(df, work, t, s, asked)))
    return json.loads((study.run.path / "summary.json").read_text())


def quiet(_line):
    pass


def test_the_canonical_solutions_score_164_of_164_through_the_real_sandbox(tmp_path, fake):
    handler, url = fake
    work = work_on(concurrency=8)
    study = open_study(tmp_path, url, work)
    lines = []
    asked = h.ask(study, work, log=lines.append)
    records = study.records()
    assert len(records) == 164 and handler.asked == 164 and lines[-1].startswith("[164/164] 164 passed so far")
    assert all(r["passed"] and r["reason"] == sb.PASSED and r["code"].startswith(PROBLEMS[r["problem"]].prompt)
               for r in records)
    summary = finish(study, work, asked)
    assert summary["pass_at_1"]["estimate"] == 1.0 and summary["pass_at_1"]["method"] == "Wilson score"
    assert summary["pass_at_1"]["low"] == pytest.approx(0.977, abs=0.001)  # 164 of 164 is not "certainly 100%"
    assert summary["suspect"] is False and summary["graded"] == 164
    cost = summary["sandbox"]["cost"]
    assert summary["sandbox"]["level"] == "bubblewrap" and cost["programs"] == 164 and cost["wall_median_s"] > 0
    assert json.loads((study.run.path / "params.json").read_text())["settings"]["sandbox"]["level"] == "bubblewrap"
    assert verify(study.run.path) == []


def test_a_wrong_body_scores_0_in_completion_style(tmp_path):
    for handler, url in fake_coder(default=WRONG):
        work = work_on(style="completion", concurrency=8)
        study = open_study(tmp_path, url, work)
        asked = h.ask(study, work, log=quiet)
        summary = finish(study, work, asked)
    assert summary["graded"] == 164 and summary["pass_at_1"]["estimate"] == 0.0
    reasons = summary["scores"]["reasons"]
    assert reasons[sb.ASSERTION] + reasons[sb.ERROR] == 164 and reasons[sb.ASSERTION] > 150


def test_hostile_answers_are_contained_graded_failed_with_their_reason_and_the_run_goes_on(tmp_path, monkeypatch):
    key = "sk-hostile-test-5e1c7b90a2d34f68"
    monkeypatch.setenv("SPARKNB_API_KEY", key)
    secret = Path("/tmp") / f"sparknb-secret-{os.getpid()}"
    secret.write_text("the secret")
    secret.chmod(0o600)
    escaped = tmp_path / "escaped"
    for handler, url in fake_coder():
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        hostile = {
            "key": ("import os\nassert 'sk-hostile' in str(os.environ), 'no key in reach'", sb.ASSERTION),
            "read": (f"print(open({str(secret)!r}).read())", sb.ERROR),
            "write": (f"open({str(escaped)!r}, 'w').write('out')", sb.ERROR),
            "socket": (f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=5).sendall("
                       "b'POST /v1/completions HTTP/1.1\\r\\n\\r\\n')", sb.ERROR),
            "fork": ("import os\nwhile True:\n    os.fork()", sb.ERROR),
            "memory": ("block = bytearray(50 * 2**30)", sb.MEMORY),
            "sleep": ("import time\ntime.sleep(10**9)", sb.TIMEOUT),
            "print": ("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 2**20)", sb.OUTPUT),
            "exit": ("import sys\nsys.exit(0)", sb.EXITED),
        }
        ids = list(PROBLEMS)[:12]
        for pid, (name, (code, _)) in zip(ids, hostile.items()):
            handler.bodies[pid] = attack(code, then=PROBLEMS[pid].canonical)  # right bodies behind each attack
        work = work_on(problems=ids, concurrency=4, timeout_s=3.0)
        study = open_study(tmp_path, url, work)
        asked_before = handler.asked
        asked = h.ask(study, work, log=quiet)
        records = {r["problem"]: r for r in study.records()}
        summary = finish(study, work, asked)
    secret.unlink()
    assert handler.asked - asked_before == 12  # no request came from a sandbox: each was asked once, from here
    for pid, (name, (_, reason)) in zip(ids, hostile.items()):
        assert not records[pid]["passed"] and records[pid]["reason"] == reason, (name, records[pid]["detail"])
    assert all(records[pid]["passed"] for pid in ids[9:])  # the answers after them still pass
    assert not escaped.exists() and "the secret" not in json.dumps(records) and key not in json.dumps(records)
    assert summary["graded"] == 12 and summary["scores"]["reasons"][sb.PASSED] == 3


def test_stop_strings_cut_a_reasoning_models_answer_inside_its_thinking(tmp_path):
    thinking = "Plan:\nif two numbers are close, return True.\nprint nothing.\nNow the code."
    for handler, url in fake_coder(reasoning=thinking):
        ids = list(PROBLEMS)[:4]
        cut = work_on(problems=ids, stop=list(h.CLASSIC_STOPS))
        study = open_study(tmp_path, url, cut)
        summary = finish(study, cut, h.ask(study, cut, log=quiet))
        assert summary["suspect"] is True and summary["traps"]["counts"][h.CUT_BY_STOP] == 4
        assert summary["scores"]["reasons"][h.CUT] == 4 and summary["pass_at_1"]["estimate"] == 0
        assert "Run with stop=[] to check" in summary["traps"]["headline"]
        plain = work_on(problems=ids)
        study = open_study(tmp_path, url, plain)
        summary = finish(study, plain, h.ask(study, plain, log=quiet))
        assert summary["suspect"] is False and summary["pass_at_1"]["estimate"] == 1.0  # the same model, not cut


def test_a_failure_halfway_keeps_every_graded_answer_and_resume_asks_only_the_rest(tmp_path):
    ids = list(PROBLEMS)[:8]
    for handler, url in fake_coder(fail_on=ids[5]):
        work = work_on(problems=ids, concurrency=2)
        first = open_study(tmp_path, url, work)
        with pytest.raises(StudyError, match=f"resume_from='{first.run.id}'"):
            h.ask(first, work, log=quiet)
        kept = read_records(first.run.path)
        graded = [r for r in kept if r.get("reason")]
        assert any("error" in r for r in kept) and 4 <= len(graded) < 8 and all(r["passed"] for r in graded)
        assert verify(first.run.path) == [] and json.loads((first.run.path / "failure.json").read_text())

        handler.fail_on, before = "NEVER", handler.asked
        again = work_on(outputs=tmp_path, problems=ids, concurrency=2, resume_from=first.run.id)
        second = open_study(tmp_path, url, again)
        asked = h.ask(second, again, log=quiet)
        assert handler.asked - before == 8 - len(graded) == asked.batch.asked
        summary = finish(second, again, asked)
    records = read_records(second.run.path)
    assert sorted(r["problem"] for r in records) == sorted(ids)
    assert sum(bool(r.get("resumed_from")) for r in records) == len(graded) == asked.batch.reused
    assert summary["pass_at_1"]["estimate"] == 1.0 and asked.cost.programs == 8 - len(graded)


def test_samples_give_pass_at_k_by_the_unbiased_estimator(tmp_path):
    ids = list(PROBLEMS)[:3]
    every_other = {pid: (lambda turn, pid=pid: None if turn % 2 else WRONG) for pid in ids}
    for handler, url in fake_coder(bodies=every_other):
        work = work_on(problems=ids, samples=10, temperature=0.8, concurrency=4)
        study = open_study(tmp_path, url, work)
        summary = finish(study, work, h.ask(study, work, log=quiet))
    assert handler.asked == 30 and summary["scores"]["samples"] == 10
    at = summary["scores"]["pass_at"]
    assert at["1"]["estimate"] == pytest.approx(0.5) and at["10"]["estimate"] == pytest.approx(1.0)
    assert set(at) == {"1", "10"}  # no pass@100 from 10 samples
    assert summary["pass_at_1"]["method"].startswith("unbiased estimator")


def _status(pid: str) -> str:
    try:
        return open(f"/proc/{pid}/status").read()
    except OSError:
        return ""


def _ours(status: str) -> bool:
    """A process below this one: another test process's sandboxed program on the same machine is not ours to wait on."""
    while status:
        parent = status.split("PPid:\t")[1].split()[0]
        if int(parent) == os.getpid():
            return True
        status = _status(parent) if int(parent) > 1 else ""
    return False


def _interrupt_once_a_program_runs(deadline_s: float = 120.0) -> None:
    """Ctrl-C to this process once a sandboxed program (running as a uid of its own) has been alive a moment: on a busy
    machine a fixed delay can fire before the first program starts, and then there is nothing to interrupt."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        for entry in os.listdir("/proc"):
            status = _status(entry) if entry.isdigit() else ""
            if status and int(status.split("Uid:\t")[1].split()[0]) in sb.UIDS and _ours(status):
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGINT)
                return
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)  # none ever ran: the test then fails on what it finds, not by hanging


def test_ctrl_c_while_programs_run_keeps_every_answer_graded_or_not_and_resume_asks_the_ungraded(tmp_path):
    ids = list(PROBLEMS)[:5]
    slow = {pid: attack("import time\ntime.sleep(100)", then=PROBLEMS[pid].canonical) for pid in ids}
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C, also where the shell disabled it
    try:
        for handler, url in fake_coder(bodies=slow):
            work = work_on(problems=ids, concurrency=5, sandboxes=1, timeout_s=3.0)
            study = open_study(tmp_path, url, work)
            threading.Thread(target=_interrupt_once_a_program_runs, daemon=True).start()
            with pytest.raises(KeyboardInterrupt):
                h.ask(study, work, log=quiet)
    finally:
        signal.signal(signal.SIGINT, previous)
    records = read_records(study.run.path)
    graded = [r for r in records if r["reason"]]
    assert sorted(r["problem"] for r in records) == sorted(ids)  # the running program's verdict too, awaited
    assert 1 <= len(graded) < 5 and all(r["reason"] == sb.TIMEOUT for r in graded)
    assert all(r["text"] and r["detail"] == "not graded: the run stopped" for r in records if not r["reason"])
    assert json.loads((study.run.path / "failure.json").read_text())["reason"] == "interrupted (Ctrl-C)"
    again = work_on(outputs=tmp_path, problems=ids, concurrency=5, sandboxes=1, timeout_s=3.0,
                    resume_from=study.run.id)
    assert len(again.reused) == len(graded) and len(again.todo()) == 5 - len(graded)
