"""The agent study's live sessions asked sequentially against another run (batch.sequence through agent.work): the
base run's graded sessions in its seeded order, one at a time, each graded as it ends, stopped once the paired
confidence sequence decides, said in the findings, the plot and the comparison's row; resumed where it stopped.

The server is a replay server, a fake by nature: it answers each of BFCL's multi-turn sessions with BFCL's own
ground truth (every session passes), or, for the other run, with a fault (no call at all, so every session fails),
which no real model does on purpose. Everything else is real: the notebook, BFCL's backends executing the calls,
the grading, the seals."""

from __future__ import annotations

import ast
import json
import threading

import pytest
from support import FakeVllm, outputs_text, run_notebook, serve, strict

from sparknb.endpoint.tools import prompted
from sparknb.errors import DataError, ParamsError
from sparknb.runs.run import read_past, read_records, verify
from sparknb.runs.study import start
from sparknb.studies import agent
from sparknb.studies.agent import plan as agent_plan
from sparknb.studies.batch import bfcl
from sparknb.verdicts import sequential
from sparknb.verdicts.verdict import Runs

SESSIONS = 14  # all discordant, the sequence decides "worse" after 10: 4 are never asked
BASE = {"model": "tiny-dense", "mode": "prompt", "max_steps": 2, "max_tokens": 64}


def _chosen() -> dict[str, tuple[str, list]]:
    """BFCL sessions whose ground truth prompt mode can write (every argument named, a call in every turn), the
    fewest turns first: first user message -> (id, ground truth)."""
    answers, out = bfcl.answers("multi_turn_base"), {}
    entries = sorted(bfcl.entries("multi_turn_base"), key=lambda e: len(e["question"]))
    for e in entries:
        truth = answers[e["id"]]["ground_truth"]
        first = e["question"][0][0]["content"]
        if bfcl.refusal(e["involved_classes"]) or first in out or not all(truth) or not _writable(truth):
            continue
        out[first] = (e["id"], truth)
        if len(out) == SESSIONS:
            return out
    raise AssertionError("BFCL's multi_turn_base has too few sessions prompt mode can write")


def _writable(truth: list) -> bool:
    """Every call's arguments named: BFCL's prompt-mode decoder (and so sparknb's) drops positional ones, so
    `get_zipcode_based_on_city('San Francisco')` (multi_turn_base_69) would run without its city."""
    calls = [ast.parse(call, mode="eval").body for turn in truth for call in turn]
    try:
        return all(isinstance(c, ast.Call) and not c.args for c in calls) and all(
            prompted("[" + ", ".join(turn) + "]") for turn in truth)
    except ValueError:
        return False


CHOSEN = _chosen()


class Truth(FakeVllm):
    """A session's turn answered at its first step with the ground truth's calls (prompt mode's text), then an
    answer without a call; `faulty`: never a call."""

    lock = threading.Lock()
    asked = generated = 0
    faulty = False

    def do_POST(self):
        messages = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["messages"]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        _, truth = CHOSEN[messages[users[0]]["content"]]
        step = sum(m["role"] == "assistant" for m in messages[users[-1]:])
        text = "Done." if type(self).faulty or step else "[" + ", ".join(truth[len(users) - 1]) + "]"
        self.start_stream()
        self.chunk([{"index": 0, "delta": {"content": text}, "finish_reason": "stop"}])
        self.done(len(text.split()))


def _run(tmp, faulty: bool, **more) -> tuple:
    """A notebook run against the replay server: the notebook, its folder, its records, the requests it sent."""
    Truth.faulty, Truth.asked = faulty, 0
    with serve(Truth) as url:
        nb, folder = run_notebook("agent", tmp, {**BASE, "endpoint": url, **more})
    return nb, folder, read_records(folder), Truth.asked


def _in_process(tmp, faulty: bool, **more):
    """A run as the notebook makes it, in this process (a kernel's start costs seconds, more on a loaded box): its
    sealed folder and its records."""
    Truth.faulty, outputs = faulty, str(tmp / "outputs")
    plan = agent_plan.Plan.build(**{k: v for k, v in BASE.items() if k != "model"}, **more, outputs=outputs)
    work = agent.prepare(plan, BASE["model"])
    with serve(Truth) as url:
        study = start("agent", model=BASE["model"], endpoint=url, outputs=outputs, settings=work.settings())
        records = agent.measure(study, work)
        study.finish({"graded": agent.grade_summary(records), "sequential": agent.held(work, records)})
    return study.run.path, records


def _asked(records: list[dict]) -> list[str]:
    """The sessions a run asked itself, in order (not those it reused)."""
    return [r["session"] for r in records if r.get("kind") == "session" and "resumed_from" not in r]


def test_what_cannot_be_asked_sequentially_is_refused_before_any_request(tmp_path):
    with pytest.raises(ParamsError, match="never sequential.*Fix: sequential=false"):
        agent_plan.Plan.build(sequential=True, replay_from="any")
    with pytest.raises(ParamsError, match="one session at a time"):
        agent_plan.Plan.build(sequential=True, in_flight=2)
    entry = next(e for e in bfcl.entries("multi_turn_base") if not bfcl.refusal(e["involved_classes"]))
    own = tmp_path / "sessions.jsonl"  # a session of one's own without a ground truth: nothing to decide on
    own.write_text(json.dumps({k: entry[k] for k in agent_plan.SHAPE}) + "\n")
    with pytest.raises(DataError, match="carry no ground_truth"):
        agent.prepare(agent_plan.Plan.build(sequential=True, sessions_file=str(own)), "tiny-dense")


def test_sessions_asked_sequentially_stop_when_decided_and_resume_where_they_stopped(tmp_path):
    ids = [i for i, _ in CHOSEN.values()]
    base, records = _in_process(tmp_path, False, session_ids=ids)
    assert agent.grade_table(records)["bfcl"].tolist() == [True] * SESSIONS  # BFCL's own truth passes everywhere
    order = sequential.a_order(read_past(str(base), "agent")[0], dict.fromkeys(ids, True), agent.Plan.drawn)

    # Cut by its budget first: the sequence cannot tell after 4 sessions, all of them failed
    sequential_run = {"session_ids": ids, "sequential": True, "compare_with": [str(base)]}
    cut, records = _in_process(tmp_path, True, budget=4, **sequential_run)
    assert _asked(records) == order[:4]
    states = [r["sequence"] for r in records if r.get("kind") == "graded"]
    assert [s["sessions"] for s in states] == [1, 2, 3, 4] and states[-1]["outcome"] == "cannot tell"

    # Resumed: the 4 reused feed the sequence first, the rest asked in the base's order until it decides
    nb, done, records, requests = _run(tmp_path, True, resume_from=str(cut), **sequential_run)
    assert verify(done) == []
    stop = strict(done / "summary.json")["sequential"]
    assert stop["outcome"] == "worse" and stop["stopped_at"] == 10 < SESSIONS
    assert _asked(records) == order[4:10] and requests == 6 * 2  # two steps a session: nothing asked twice
    text = outputs_text(nb)
    assert "The confidence sequence stopped after 10 sessions" in text and "4 were not asked, on purpose" in text
    assert "4 graded sessions were reused" in text and "image/png" in text  # the sequence's plot

    # The comparison's row carries the same sequence, replayed from both runs' records
    runs = Runs({"agent": {"truth": read_past(str(base), "agent")[0], "fault": read_past(str(done), "agent")[0]}},
                ["truth", "fault"])
    row = next(r for r in agent.headline_rows(runs) if r.figure.startswith("paired difference"))
    assert row.sequences["fault"]["outcome"] == "worse" and row.n["fault"] == 10
    assert "stopped after 10 of 14 sessions" in row.note

    # Resumed once decided: the sequence is fed the 10 sessions it kept and has nothing left to ask
    plan = agent_plan.Plan.build(resume_from=str(done), **sequential_run, **{k: v for k, v in BASE.items()
                                                                             if k != "model"})
    work = agent.prepare(plan, "tiny-dense")
    assert work.live.decided and len(work.reused) == 10 and list(work.live.until_decided(work.todo())) == []
