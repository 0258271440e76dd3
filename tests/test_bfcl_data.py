"""BFCL v4 read from its pinned wheel (studies.batch.bfcl): the data, the schemas, and call strings run on a
session's own backends as BFCL runs them, never through eval."""

from __future__ import annotations

import pytest

from sparknb.errors import BuildError, DataError
from sparknb.studies.batch import bfcl


@pytest.fixture(scope="module")
def base() -> tuple[list[dict], dict]:
    return bfcl.entries("multi_turn_base"), bfcl.answers("multi_turn_base")


def test_the_wheel_is_checked_by_its_pinned_hash(tmp_path, monkeypatch):
    fake = tmp_path / bfcl.WHEEL["file"]
    fake.write_bytes(b"not the wheel")
    monkeypatch.setenv(bfcl.ENV_VAR, str(fake))
    with pytest.raises(BuildError, match="not the pinned"):
        bfcl._wheel(tmp_path)


def test_multi_turn_base_has_200_sessions_with_their_answers(base):
    entries, answers = base
    assert len(entries) == 200 and set(answers) == {e["id"] for e in entries}
    assert all(len(answers[e["id"]]["ground_truth"]) == len(e["question"]) for e in entries)
    assert {t["name"] for t in bfcl.schemas("GorillaFileSystem")} >= {"cd", "mkdir", "mv", "grep"}


def test_the_ground_truth_runs_on_fresh_backends_and_state_is_the_sessions_own(base):
    entries, answers = base
    first = entries[0]
    mine, other = bfcl.backends(first), bfcl.backends(first)
    results = [bfcl.execute(call, mine) for turn in answers[first["id"]]["ground_truth"] for call in turn]
    assert not [r for r in results if r.startswith("Error during execution")]
    assert "budget analysis" in results[4]  # the grep of turn 2, after the move of turn 1
    # the other session's file system never moved: its file is still where the scenario put it
    assert "Error during execution" not in bfcl.execute("cd(folder='document')", other)
    assert "final_report.pdf" in bfcl.execute("ls()", other)


def test_calls_are_read_not_evaluated(base):
    instances = bfcl.backends(base[0][0])
    assert bfcl.execute("cd(folder=__import__('os').getcwd())", instances).startswith("Error during execution")
    assert bfcl.execute("kill()", instances) == "Error during execution: Function call kill is not allowed."
    assert bfcl.execute("nowhere(a=1)", instances) == "Error during execution: name 'nowhere' is not defined"
    assert bfcl.parse_call("mv(source='a', destination='b')") == ("mv", [], {"source": "a", "destination": "b"})


def test_math_api_is_refused_by_name():
    assert "mpmath" in bfcl.refusal(["GorillaFileSystem", "MathAPI"])
    with pytest.raises(DataError, match="MathAPI is not supported"):
        bfcl.backend("MathAPI")
    with pytest.raises(DataError, match="name a category"):
        bfcl.entries("no_such_category")


def test_the_tools_and_the_prompt_mode_system_prompt_are_bfcls():
    docs = bfcl.functions(["TwitterAPI", "GorillaFileSystem"])
    tools = bfcl.openai_tools(docs)
    assert len(tools) == len(docs) and all(t["function"]["parameters"]["type"] == "object" for t in tools)
    assert not any("response" in t["function"] for t in tools) and all("response" in d for d in docs)
    kinds = {p["type"] for t in tools for p in t["function"]["parameters"]["properties"].values()}
    assert kinds <= {"string", "integer", "number", "boolean", "array", "object"}
    prompt = bfcl.system_prompt(docs)
    assert "[func_name1(params_name1=params_value1" in prompt and '"name": "post_tweet"' in prompt
