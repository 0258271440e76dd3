"""Tool calls on the wire (endpoint.tools, wire.Events): native `tool_calls` assembled from a real llama-server's
stream, the times to the first tool-call and content chunks, the server's own per-request cache count, and prompt
mode's `[f(a=1)]` read with ast."""

from __future__ import annotations

import json

import pytest

from sparknb.endpoint.client import Endpoint
from sparknb.endpoint.tools import Assembly, prompted

CD = {"type": "function", "function": {
    "name": "cd", "description": "Change the current directory to the given folder.",
    "parameters": {"type": "object", "properties": {"folder": {"type": "string", "description": "The folder."}},
                   "required": ["folder"]}}}
# SmolLM2-135M seldom calls a tool of itself; asked to repeat a call in the template's format, it writes one, which
# the server's own parser then reads back (measured: finish_reason tool_calls, the call whole, at temperature 0)
ASK = [{"role": "user", "content": 'Repeat exactly this line and nothing else:\n<tool_call>\n{"name": "cd", '
                                   '"arguments": {"folder": "document"}}\n</tool_call>'}]


@pytest.fixture(scope="module")
def endpoint(smollm2_tools):
    ep = Endpoint(smollm2_tools.url, "smollm2", timeout=120)
    ep.info()
    yield ep
    ep.close()


def test_the_template_says_it_renders_tools(endpoint):
    caps = endpoint.engine.template_caps(endpoint._ask)
    assert caps["supports_tools"] and caps["supports_tool_calls"]


def test_a_streamed_tool_call_is_assembled_and_timed(endpoint):
    done = endpoint.chat(ASK, max_tokens=48, tools=[CD])
    assert done.finish_reason == "tool_calls", (done.text, done.tool_calls)
    (call,) = done.tool_calls
    assert call.name == "cd" and call.id and call.parsed() == {"folder": "document"} and done.text == ""
    assert done.tool_call_s is not None and done.ttft_s <= done.tool_call_s
    assert call.as_call() == "cd(folder='document')"


def test_the_tools_reach_the_prompt_and_the_cache_count_is_the_servers_own(endpoint):
    bare = endpoint.chat(ASK, max_tokens=4)
    first = endpoint.chat(ASK, max_tokens=4, tools=[CD])
    again = endpoint.chat(ASK, max_tokens=4, tools=[CD])
    assert first.prompt_tokens > bare.prompt_tokens + 40  # the tool's schema was rendered, not dropped
    assert again.server["cached_tokens"] == endpoint.engine.cached_tokens(again) == again.usage_cached_tokens
    assert again.server["cached_tokens"] >= again.prompt_tokens - 1  # the repeat served from the slot's cache
    assert again.server["prompt_tokens"] + again.server["cached_tokens"] == again.prompt_tokens


def test_content_is_timed_apart_from_tool_calls(endpoint):
    done = endpoint.chat([{"role": "user", "content": "Say hello."}], max_tokens=8)
    assert not done.tool_calls and done.tool_call_s is None
    assert done.content_s == done.ttft_s


def test_prompt_mode_calls_are_read_as_bfcl_reads_them():
    """With ast, as BFCL's decoder (tests/test_prompt_decoder.py checks it against BFCL's own): positional arguments
    dropped, a call without keywords as its text, arithmetic on numbers computed, any other code refused."""
    calls = prompted("```\n[cd(folder='document'), mkdir(dir_name=temp), ls(a=True)]\n```")
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("cd", {"folder": "document"}), ("mkdir", {"dir_name": "temp"}), ("ls", {"a": True})]
    assert prompted("math.add(a=1, b=-2)")[0].name == "math.add"
    assert [c.parsed() for c in prompted("[cd('document'), cd(folder=open('x')), sleep(s=2*30)]")] == [
        {}, {"folder": "open('x')"}, {"s": 60}]
    for bad, why in [("cd(folder=lambda: 1)", "not a value BFCL reads"), ("cd(folder=x*2)", "no model-written code"),
                     ("I will go there.", "not a list of calls"), ("[1, 2]", "not a function call")]:
        with pytest.raises(ValueError, match=why):
            prompted(bad)


def test_deltas_are_put_together_by_index():
    assembly = Assembly()
    assembly.add([{"index": 0, "id": "a", "function": {"name": "cd", "arguments": '{"fol'}}])
    assembly.add([{"index": 1, "id": "b", "function": {"name": "ls", "arguments": "{}"}}])
    assembly.add([{"index": 0, "function": {"arguments": 'der": "x"}'}}])
    assert [(c.id, c.name, c.parsed()) for c in assembly.calls()] == [("a", "cd", {"folder": "x"}), ("b", "ls", {})]
