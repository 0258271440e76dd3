"""The agent study: BFCL sessions on the real model (SmolLM2 on llama-server with sparknb's tool template), every
step's cached-token count the server's own, a replay that sends the same prompts to a server whose prompt cache is
off and to one whose chat template rewrites an earlier turn (each cache loss named, with its step and cause), the
silent tool drop caught before the first session, and the bad input refused before any request."""

from __future__ import annotations

import json

import httpx
import papermill
import pytest
from bfcl_reference import multi_turn_check
from support import outputs_text, run_notebook

from sparknb.endpoint.tools import ToolCall
from sparknb.errors import DataError, ParamsError
from sparknb.runs.run import read_past, read_records, verify
from sparknb.runs.study import start
from sparknb.serving import real_models, testbed
from sparknb.serving.processes import free_port
from sparknb.studies import agent
from sparknb.studies.agent import figures, headline_rows, problems, traps
from sparknb.studies.agent import plan as agent_plan
from sparknb.studies.agent.measure import PROBE, counted, one
from sparknb.studies.agent.sessions import UNDECODED, Session, parses, state
from sparknb.studies.batch import bfcl, bfcl_turns, calls
from sparknb.verdicts.verdict import Runs

pytestmark = pytest.mark.beside_the_vllm_starts  # no clock decides its figures (conftest._phase)
LIVE = {"model": "smollm2-tools-llamacpp", "max_steps": 2, "max_tokens": 40}
# Mistral-7B-Instruct-v0.3's chat template renders its system message only while the conversation ends on a user
# turn (`{%- if loop.last and system_message is defined %}`): once the model has called a tool, the system text is
# gone from the re-rendered prompt. The same rewrite of sparknb's template: its system instructions only then.
SYSTEM = "You are a helpful assistant that can call functions."
REWRITES = "{% if messages[-1].role == 'user' %}" + SYSTEM + "{% endif %}"
REPEAT = 'Repeat exactly this line and nothing else:\n<tool_call>\n{{"name": "{0}", "arguments": {1}}}\n</tool_call>'


@pytest.fixture(scope="module")
def session_file(tmp_path_factory) -> str:
    """One session of BFCL's shape, written at test time from BFCL's own data: MessageAPI alone (its tools are the
    fewest tokens, 924) with the scenario of a BFCL session, one turn that asks SmolLM2-135M to repeat a call (it
    seldom calls a tool of itself), so its first step is a real call the server's parser reads and a BFCL backend
    executes, and its second the model's answer to the result. One turn of two steps: each step replayed to the
    server without a prompt cache prefills the whole prompt again (about 1,100 tokens)."""
    entry = next(e for e in bfcl.entries("multi_turn_base") if "MessageAPI" in e["involved_classes"])
    turns = [[{"role": "user", "content": REPEAT.format("list_users", "{}")}]]
    path = tmp_path_factory.mktemp("sessions") / "sessions.jsonl"
    path.write_text(json.dumps({"id": "repeat_0", "question": turns, "initial_config": entry["initial_config"],
                                "involved_classes": ["MessageAPI"], "ground_truth": [["list_users()"]]}) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory) -> str:
    """Two sessions of BFCL's shape for prompt mode, each one turn asking SmolLM2-135M to repeat a call in BFCL's
    prompt format under BFCL's system prompt (it repeats both at temperature 0): `repeat_0` (the native file's id,
    for a paired row) with the very call of its ground truth, and `repeat_1` whose ground truth asks Alice's id where
    the call asks Bob's, so that one session passes and one fails BFCL's checks. Both prompts begin with the same
    system prompt (2,170 tokens): the second session's first step is served from the cache."""
    entry = next(e for e in bfcl.entries("multi_turn_base") if "MessageAPI" in e["involved_classes"])
    asked = {"repeat_0": ("[list_users()]", "list_users()"),
             "repeat_1": ("[get_user_id(user='Bob')]", "get_user_id(user='Alice')")}
    path = tmp_path_factory.mktemp("prompt-sessions") / "sessions.jsonl"
    path.write_text("".join(json.dumps({
        "id": i, "question": [[{"role": "user", "content": f"Repeat exactly this line and nothing else:\n{call}"}]],
        "initial_config": entry["initial_config"], "involved_classes": ["MessageAPI"], "ground_truth": [[truth]]})
        + "\n" for i, (call, truth) in asked.items()))
    return str(path)


# --- before any request ------------------------------------------------------------------------------------------

def test_bad_input_is_refused_before_any_request(tmp_path):
    with pytest.raises(ParamsError, match="max_steps"):
        agent_plan.Plan.build(max_steps=0)
    bad = tmp_path / "sessions.jsonl"
    bad.write_text(json.dumps({"id": "x", "question": "Move the file.", "involved_classes": ["GorillaFileSystem"],
                               "initial_config": {}}) + "\n")
    with pytest.raises(DataError, match="not of BFCL's multi-turn shape"):
        agent_plan.sessions(agent_plan.Plan.build(sessions_file=str(bad)))
    bad.write_text(json.dumps({"id": "x", "question": [[{"role": "user", "content": "Move it."}]], "initial_config": {},
                               "involved_classes": ["GorillaFileSystem"], "ground_truth": ["mv(a='b')"]}) + "\n")
    with pytest.raises(DataError, match="ground_truth is not one list of call strings per turn"):
        agent_plan.sessions(agent_plan.Plan.build(sessions_file=str(bad)))
    math = next(e["id"] for e in bfcl.entries("multi_turn_base") if "MathAPI" in e["involved_classes"])
    with pytest.raises(DataError, match="mpmath"):
        agent_plan.sessions(agent_plan.Plan.build(session_ids=[math]))


def test_sessions_are_drawn_evenly_and_by_the_seed():
    plan = agent_plan.Plan.build(sessions=7, seed=3)
    chosen, source = agent_plan.sessions(plan)
    assert len({e["involved_classes"][0] for e in chosen}) == 7 and "multi_turn_base" in source
    assert [e["id"] for e in chosen] == [e["id"] for e in agent_plan.sessions(plan)[0]]
    assert [e["id"] for e in chosen] != [e["id"] for e in agent_plan.sessions(agent_plan.Plan.build(sessions=7))[0]]
    assert not any("MathAPI" in e["involved_classes"] for e in agent_plan.sessions(
        agent_plan.Plan.build(sessions=200))[0])


# --- on the real model -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def live(smollm2_tools, session_file, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agent")
    nb, folder = run_notebook("agent", tmp, {**LIVE, "sessions_file": session_file, "endpoint": smollm2_tools.url})
    return tmp, nb, folder, read_records(folder)


def test_live_sessions_seal_with_the_servers_own_cache_counts(live):
    tmp, nb, folder, records = live
    assert verify(folder) == []
    steps = [r for r in records if r.get("kind") == "step"]
    assert {r["session"] for r in steps} == {"repeat_0"} and len(steps) == 2
    for r in steps:  # the count recorded is llama-server's own cache_n, and usage says the same
        assert r["cached_tokens"] == r["server"]["per_request"]["cached_tokens"] == r["usage_cached_tokens"]
    for a, b in zip(steps, steps[1:]):  # each step found the whole prompt sent before in the slot's cache
        assert b["cached_tokens"] >= a["prompt_tokens"] - 1, (a, b)
    tools = {(r["turn"], r["step"]): r for r in records if r.get("kind") == "tools"}
    assert tools[0, 0]["calls"] == ["list_users()"] and "Alice" in tools[0, 0]["results"][0]
    call_id = tools[0, 0]["assistant"]["tool_calls"][0]["id"]  # the result went back, answering the call
    assert steps[1]["sent"] == [{"role": "tool", "content": tools[0, 0]["results"][0], "tool_call_id": call_id}]
    turns = [r for r in records if r.get("kind") == "turn"]
    assert len(turns) == 1 and turns[0]["steps"] == 2 and "MessageAPI" in turns[0]["state"]
    assert "CACHE LOST" not in outputs_text(nb)
    (counters,) = [r for r in records if r.get("kind") == "counters"]  # read around the sessions, not each step
    assert counters["steps"] == 2 and counters["interference"] is None and "ANOTHER CLIENT" not in outputs_text(nb)
    drawn = next(r for r in records if r.get("kind") == "drawn")  # llama-server keeps a prompt token by token
    assert drawn["cache_block"] == 1 and "no blocks" in drawn["cache_block_said"]
    new = steps[1]["prompt_tokens"] - steps[1]["cached_tokens"]  # every token sent before counts, none rounded
    should = figures.step_table(records)["should_cache"].tolist()
    assert should == [0, max(0, min(new, steps[0]["prompt_tokens"] - steps[1]["cached_tokens"]))]


def test_a_server_that_does_not_say_its_cache_blocks_leaves_what_it_should_have_cached_unknown(live):
    """The live run's records as a server that names no blocks would leave them: should_cache and the prefill it
    would have saved unknown (never counted by the token), and said so."""
    records = [r | {"cache_block": None, "cache_block_said": "its server does not say"} if r.get("kind") == "drawn"
               else r for r in live[3]]
    should = figures.step_table(records)["should_cache"]
    assert should.iloc[0] == 0 and should.isna().tolist() == [False, True]  # the first step had nothing sent before
    split = agent.session_table(records).iloc[0]
    assert split["prefill_lost_s"] is None and split["prefill_new_s"] is None and split["cached_tokens"] > 0
    said = [n.text for n in traps.findings(records)]
    assert any("BLOCKS ARE UNKNOWN (its server does not say)" in t and "should_cache" in t for t in said), said


def test_a_replay_sends_the_same_prompts_and_names_the_cache_a_server_did_not_keep(live):
    tmp, _, folder, records = live
    with testbed.start("smollm2-tools", free_port(), engine="llama.cpp", timeout=120,
                       extra_args=("--no-cache-prompt",), log_path=tmp / "nocache.log") as server:
        nb, replay = run_notebook("agent", tmp, {"model": "smollm2-tools-llamacpp", "endpoint": server.url,
                                                 "replay_from": str(folder), "in_flight": 2, **LIVE})
    assert verify(replay) == []

    def by_step(rs: list[dict]) -> dict:
        return {(r["session"], r["turn"], r["step"]): r for r in rs if r.get("kind") == "step"}

    live_steps, again = by_step(records), by_step(read_records(replay))
    assert again.keys() == live_steps.keys()  # through the in-flight client, every step of the live run sent again
    assert {k: r["prompt_tokens"] for k, r in again.items()} == {k: r["prompt_tokens"] for k, r in live_steps.items()}
    assert {k: r["completion_tokens"] for k, r in again.items()} == {
        k: max(1, r["completion_tokens"]) for k, r in live_steps.items()}
    text = outputs_text(nb)
    assert "CACHE LOST at session" in text and "did not keep it" in text
    past = {"cached": read_past(str(folder), "agent")[0], "uncached": read_past(str(replay), "agent")[0]}
    runs = Runs({"agent": past}, ["cached", "uncached"])
    wait, first, later, share, score, solved, tokens = headline_rows(runs)
    assert score.values == {"cached": 100.0} and "uncached: a replay" in score.note  # the replay is not graded
    assert solved.values["cached"] == pytest.approx(wait.values["cached"])  # one session, solved: its own wait
    assert tokens.values["cached"] == sum(r["completion_tokens"] for r in records if r.get("kind") == "step")
    assert share.values["cached"] > 0.9 and share.values["uncached"] == 0  # the comparison's row tells them apart
    assert wait.n == {"cached": 1, "uncached": 1} and wait.ratios["uncached"].estimate > 0  # paired by session
    checks = [r for r in read_records(replay) if r.get("kind") == "cache_check"]
    assert checks and all(c["first_difference"] is None or c["first_difference"] >= c["prompt_before"] - 1
                          for c in checks)


def _first_difference(url: str, records: list[dict]) -> tuple[int, int]:
    """The live session's two prompts as llama-server's own /apply-template renders them (the session's tools) and
    its /tokenize counts them: the first token where they differ, and the first prompt's length."""
    root, tools = url.removesuffix("/v1"), json.loads(next(r for r in records if r.get("kind") == "session")["tools"])
    first, second = (r["sent"] for r in records if r.get("kind") == "step")
    answer = next(r for r in records if r.get("kind") == "tools")["assistant"]
    ids = []
    for messages in (first, first + [answer] + second):
        text = httpx.post(f"{root}/apply-template", json={"messages": messages, "tools": tools}, timeout=60)
        ids.append(httpx.post(f"{root}/tokenize", json={"content": text.json()["prompt"], "add_special": True},
                              timeout=60).json()["tokens"])
    return next(i for i, (a, b) in enumerate(zip(*ids)) if a != b), len(ids[0])


def test_a_replay_to_a_template_that_rewrites_an_earlier_turn_names_the_token_where_the_prompt_changed(live,
                                                                                                     tmp_path):
    """The live run replayed to llama-server given sparknb's template rewritten as Mistral v0.3's rewrites its
    system message (SYSTEM above): the second step's prompt changes near its start, so the slot's cache holds
    almost none of it; the study names the loss, the step, and the token where the re-rendered prompt first
    differs, the very token llama-server's own /apply-template and /tokenize give."""
    _, _, folder, records = live
    shipped = real_models.TEMPLATE.read_text()
    assert shipped.count(SYSTEM) == 1
    template = tmp_path / "rewrites-the-system-turn.jinja"
    template.write_text(shipped.replace(SYSTEM, REWRITES))
    with testbed.start("smollm2", free_port(), engine="llama.cpp", timeout=120, log_path=tmp_path / "rewrite.log",
                       extra_args=("--jinja", "--chat-template-file", str(template))) as server:
        nb, replay = run_notebook("agent", tmp_path, {**LIVE, "endpoint": server.url, "replay_from": str(folder)})
        at, before = _first_difference(server.url, records)
    assert verify(replay) == [] and at < before // 2  # the prompt changed in the first half of the one sent before
    checks = [r for r in read_records(replay) if r.get("kind") == "cache_check"]
    assert [(c["turn"], c["step"], c["first_difference"], c["rendered_before"]) for c in checks] == [(0, 1, at, before)]
    text = outputs_text(nb)
    assert "CACHE LOST at session repeat_0 turn 1 step 2:" in text and "did not keep it" not in text
    assert f"The chat template rewrote an earlier turn: the re-rendered prompt first differs at token {at} " in text


def test_a_request_of_another_client_during_the_sessions_is_named(smollm2_tools, tmp_path):
    """The server's counters are read around all the sessions (measure.counted), not each step: a request that
    another client sent meanwhile is named, with what the counters saw; a step alone is marked by nothing."""
    study = start("agent", model=LIVE["model"], endpoint=smollm2_tools.url, outputs=str(tmp_path), seal=False,
                  settings={"test": "counted"})
    before, taken = study.endpoint.metrics(), len(study.records())
    step = study.endpoint.chat(PROBE, max_tokens=3)
    study.run.record({"kind": "step", **step.as_dict()})
    alone = counted(study, before, taken)
    other = study.endpoint.chat(PROBE, max_tokens=3)  # not recorded: another client's
    both = counted(study, before, taken)
    study.finish({})
    assert alone["steps"] == 1 and alone["interference"] is None and traps.counters([alone]) == []
    generated = step.completion_tokens + other.completion_tokens
    assert both["interference"] == (f"the server generated {generated} tokens while this request received "
                                    f"{step.completion_tokens}; another client was using it")
    (said,) = traps.counters([both])
    assert said.text.startswith("ANOTHER CLIENT USED THE SERVER during the sessions: the server generated")


def test_a_call_cut_at_max_tokens_runs_nothing_and_the_refusal_that_follows_ends_only_its_turn(smollm2_tools,
                                                                                               tmp_path):
    """As BFCL's own loop: an answer whose call does not decode runs none of its calls and ends the turn, its message
    going back as the model wrote it. llama-server then refuses the next turn's request (it cannot render the cut
    call): that ends the turn, named with the fix, and the session and the run go on. A 20-session run of the real
    model failed whole on it in its 10th session."""
    entry = next(e for e in bfcl.entries("multi_turn_base") if "MessageAPI" in e["involved_classes"])
    long = {"receiver_id": "USR002", "message": "The quarterly report is ready for your review, please read it "
                                                "before the meeting on Friday afternoon."}
    asked = [[{"role": "user", "content": REPEAT.format("send_message", json.dumps(long))}],
             [{"role": "user", "content": "Thank you."}]]
    cut = {"id": "cut_0", "question": asked, "initial_config": entry["initial_config"],
           "involved_classes": ["MessageAPI"]}
    study = start("agent", model=LIVE["model"], endpoint=smollm2_tools.url, outputs=str(tmp_path), seal=False,
                  settings={"test": "cut"})
    one(study, Session(cut, "native", 3, {"max_tokens": 30, "temperature": 0}, study.run.record))
    records = study.records()
    study.finish({})
    steps, tools, turns = ([r for r in records if r.get("kind") == k] for k in ("step", "tools", "turn"))
    assert steps[0]["finish_reason"] == "length" and not parses(ToolCall(**steps[0]["tool_calls"][0]))
    assert tools[0]["calls"] == [] and "send_message" in tools[0]["parse_error"]
    assert turns[0]["stopped"] == UNDECODED and turns[0]["steps"] == 1
    assert turns[0]["state"] == state(bfcl.backends(cut))  # nothing ran
    assert "refused the request (500): Failed to parse tool call arguments" in steps[1]["error"]
    assert turns[1]["stopped"] == "error" and len(steps) == 2
    (said,) = traps.failed(records)
    assert said.text.startswith("REQUESTS FAILED: 1 request(s), e.g. session cut_0 turn 2 step 1")
    assert said.text.endswith("Fix: raise max_tokens.")


def test_tools_dropped_in_silence_are_caught_before_the_first_session(tmp_path, session_file):
    with testbed.start("smollm2", free_port(), engine="llama.cpp", timeout=120, extra_args=("--jinja",),
                       log_path=tmp_path / "own-template.log") as server:
        with pytest.raises(papermill.PapermillExecutionError, match="TOOLS DROPPED IN SILENCE") as caught:
            run_notebook("agent", tmp_path, {**LIVE, "sessions_file": session_file, "endpoint": server.url})
    assert "supports_tools False" in str(caught.value) and "--chat-template-file" in str(caught.value)
    (folder,) = (tmp_path / "outputs" / "agent").iterdir()
    assert not [r for r in read_records(folder) if r.get("kind") in ("session", "step")]


# --- graded as BFCL grades them ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def prompted(smollm2_tools, prompt_file, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("agent-prompt")
    nb, folder = run_notebook("agent", tmp, {**LIVE, "mode": "prompt", "sessions_file": prompt_file,
                                             "endpoint": smollm2_tools.url})
    return nb, folder, read_records(folder)


def test_prompt_mode_on_the_real_model_runs_grades_and_pairs_with_native(live, prompted):
    """BFCL's prompt format on the real model: the calls read from the text, executed, their results sent back as
    tool messages, each session graded with BFCL's reason; beside the native run, the score rows pair the session
    both ran (the format's effect) and the cost row divides the wait by the sessions solved."""
    nb, folder, records = prompted
    assert verify(folder) == []
    tools = {(r["session"], r["turn"], r["step"]): r for r in records if r.get("kind") == "tools"}
    assert tools["repeat_0", 0, 0]["calls"] == ["list_users()"] and "Alice" in tools["repeat_0", 0, 0]["results"][0]
    assert tools["repeat_1", 0, 0]["calls"] == ["get_user_id(user='Bob')"]
    second = next(r for r in records if r.get("kind") == "step" and r["session"] == "repeat_0" and r["step"] == 1)
    assert second["sent"] == [{"role": "tool", "content": tools["repeat_0", 0, 0]["results"][0], "name": "list_users"}]
    grades = agent.grade_table(records).set_index("session")
    assert grades.loc["repeat_0", "bfcl"] and grades.loc["repeat_0", "error_type"] == "pass"
    assert grades.loc["repeat_1", "error_type"] == "multi_turn:execution_response_mismatch"
    text = outputs_text(nb)
    assert "BFCL multi-turn score 50.0%" in text and "steps made at least one call" in text
    assert "rule set robust equals bfcl for sessions" in text
    assert json.loads(json.dumps(read_past(str(folder), "agent")[0].summary["graded"]))["passed"] == 1
    past = {"native": read_past(str(live[2]), "agent")[0], "prompt": read_past(str(folder), "agent")[0]}
    rows = {r.figure: r for r in headline_rows(Runs({"agent": past}, ["native", "prompt"]))}
    assert rows["BFCL multi-turn score % (live sessions)"].values == {"native": 100.0, "prompt": 50.0}
    difference = rows["paired difference in BFCL multi-turn score (points)"]
    assert difference.n["prompt"] == 1 and not difference.not_comparable  # repeat_0 alone is in both runs
    assert rows["seconds waited per session solved"].values["prompt"] > 0
    steps = [r for r in records if r.get("kind") == "step" and r["session"] == "repeat_0"]
    solved = rows["tokens per session solved"]  # every session's tokens, of both sessions, over the one solved
    assert solved.values["prompt"] == sum(r["completion_tokens"] for r in records if r.get("kind") == "step") > \
        sum(r["completion_tokens"] for r in steps) and "prompt unknown (the server did not count" in solved.note


def test_graded_live_sessions_equal_bfcl_evals_own_multi_turn_checker(live, prompted):
    """Every live session of both runs (native and prompt mode), graded from its records by sparknb and by
    bfcl-eval's own multi_turn_checker on the same calls: the same verdict and error type; and the same records
    against a ground truth they do not meet (a call the model never made) fail alike."""
    for records in (live[3], prompted[2]):
        opened = {r["session"]: r for r in records if r.get("kind") == "session"}
        grades = agent.grade_table(records).set_index("session")
        for session, r in opened.items():
            entry = {k: r[k] for k in ("initial_config", "involved_classes")} | {"id": session}
            turns = bfcl_turns.turns_of(records, session)
            for truth in (r["ground_truth"], [["get_user_id(user='Eve')"]]):
                theirs = multi_turn_check(entry, truth, turns)
                ours = bfcl_turns.check(entry, truth, turns)
                assert (ours.valid, ours.error_type) == (theirs["valid"], theirs.get("error_type", "")), session
            assert grades.loc[session, "bfcl"] == multi_turn_check(entry, r["ground_truth"], turns)["valid"]


def test_call_problems_on_real_steps_are_named_as_the_bfcl_study_names_them(prompted):
    """The real prompt-mode run's steps as they were (each made a call of an offered function with the right
    arguments: no problem), then with one step's answer replaced by each fault: every problem named, with the step."""
    _, _, records = prompted
    assert problems.counts(records) == dict.fromkeys(problems.LOOKED_AT, 0)
    step = next(r for r in records if r.get("kind") == "step" and r["session"] == "repeat_1" and r["step"] == 0)
    faults = {"[get_user_id(usr='Bob')]": calls.MISSING, "[fly(to='Rome')]": calls.NOT_OFFERED,
              "[get_user_id(user=5)]": calls.WRONG_TYPE, "[get_user_id(user='Bob'": calls.UNPARSED}
    for text, problem in faults.items():
        changed = [r | {"text": text} if r is step else r for r in records]
        assert problems.counts(changed)[problem] == 1, text
        assert any("session repeat_1 turn 1 step 1: `" in n.text for n in problems.findings(changed)), text
    prose = [r | {"text": "I cannot do that."} if r is step else r for r in records]
    assert not any(problems.counts(prose).values())  # prompt mode: prose is the model's answer, not a broken call
    unwanted = [r | {"ground_truth": [[]]} if r.get("kind") == "session" and r["session"] == "repeat_1" else r
                for r in records]
    called = sum(made for r, _, _, made in problems.step_problems(records) if r["session"] == "repeat_1")
    assert called >= 1 and problems.counts(unwanted)[calls.UNWANTED] == called  # each step of the turn that called


def _steps(gaps_ms: list[float], prompts: list[int], in_flight: int | None = None) -> list[dict]:
    """Step records as the study writes them: the client's TTFT, the server's own prompt time, the prompt and its
    cached part (every step's last 150 tokens new)."""
    return [{"kind": "step", "session": "s", "turn": i, "step": 0, "ttft_s": 0.004 + gap / 1000, "prompt_tokens": n,
             "cached_tokens": n - 150, "server": {"per_request": {"prefill_s": 0.004}},
             **({"in_flight": in_flight} if in_flight else {})} for i, (gap, n) in enumerate(zip(gaps_ms, prompts))]


def test_the_time_before_a_prompt_that_the_server_does_not_count_is_named_with_what_it_grows_with():
    """As on the H100 (18 to 29 ms a step at 6,783 to 11,133 tokens, 2.3 to 2.6 us a token): named with its slope;
    a few ms (HTTP and the client) or sessions in flight (a queue) name nothing."""
    from sparknb.studies.agent import figures, traps

    prompts = [6783, 7400, 8100, 8900, 9600, 10400, 11133]
    grown = _steps([0.6 + 0.0025 * n for n in prompts], prompts)
    said = traps.untimed(figures.step_table(grown), grown)
    assert len(said) == 1 and "THE SERVER DOES NOT COUNT" in said[0].text and "2.5 us a token" in said[0].text
    flat = _steps([2.0] * 7, prompts)
    queued = _steps([0.6 + 0.0025 * n for n in prompts], prompts, in_flight=4)
    assert traps.untimed(figures.step_table(flat), flat) == []
    assert traps.untimed(figures.step_table(queued), queued) == []


def test_a_call_cut_at_max_tokens_is_shown_by_a_step_whose_call_the_server_streamed_where_there_is_one():
    """Prose holding a JSON example also counts as a call begun (4 of 5 such steps of a real 20-session run): the
    example shown is the step whose call the server had begun to stream."""
    prose = {"kind": "step", "session": "a", "turn": 0, "step": 0, "finish_reason": "length", "completion_tokens": 256,
             "text": 'Here is a sample:\n```json\n{\n    "name": "Nv'}
    streamed = {**prose, "session": "b", "text": "", "tool_calls": [{"name": "f", "arguments": '{"x": "'}]}
    (said,) = traps.cut([prose, streamed])
    assert said.text.startswith("TOOL CALL CUT AT max_tokens: 2 step(s)") and "session b turn 1 step 1" in said.text
