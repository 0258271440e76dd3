"""How BFCL asks a single-turn item, in each of its two formats: the item's own messages, and either

- `native`: the functions sent as OpenAI `tools` (batch.bfcl.openai_tools, BFCL's own type map), a dot in a name
  written as an underscore, as BFCL's convert_to_tool does for open models (OpenAI-style servers allow only
  `[a-zA-Z0-9_-]` in a tool's name); the calls read from the answer's `tool_calls`; or
- `prompt`: BFCL's default system prompt (batch.bfcl.system_prompt) with the functions as indented JSON, dots kept,
  before the item's own system message where it has one; the calls read from the text as `[func(arg=value)]`.
"""

from __future__ import annotations

import copy

from ..batch import bfcl

FORMATS = ("native", "prompt")


def messages(entry: dict, form: str) -> list[dict]:
    """The item's chat messages as BFCL sends them in this format (its first turn: single-turn items have one)."""
    turn = copy.deepcopy(entry["question"][0])
    if form == "native":
        return turn
    system = bfcl.system_prompt(entry["function"])
    if turn and turn[0]["role"] == "system":
        turn[0]["content"] = system + "\n\n" + turn[0]["content"]
        return turn
    return [{"role": "system", "content": system}] + turn


def tools(functions: list[dict]) -> list[dict]:
    """The functions as OpenAI `tools`, named as BFCL names them for an open model served with function calling."""
    renamed = [f | {"name": f["name"].replace(".", "_")} for f in functions]
    return bfcl.openai_tools(renamed)
