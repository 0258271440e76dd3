"""Tool calls, in the one shape both ways of asking for them give: a name, its arguments as a JSON text, and the
server's id for it where it gave one.

- Native calling (OpenAI's `tools` parameter): the server's parser turns the model's text into streamed
  `tool_calls` deltas, one call spread over many chunks by `index` (the first carries id and name, the rest
  pieces of the arguments' text); `Assembly` puts them back together as they arrive (wire.Events feeds it).
- Prompt mode (BFCL's): the tools are described in a system prompt and the model writes
  `[func(arg=value), ...]` in its answer; `prompted` reads that as BFCL's own decoder does (prompt_calls), with
  `ast`, never eval.

A call is executed as the call string `name(key=repr(value), ...)`, as BFCL turns a decoded call back into the
string its backends run (prompt mode: exactly as BFCL writes it, nested calls and dicts included).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from .prompt_calls import decode, executed


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the server sent it (native) or as sparknb wrote it (prompt mode)
    id: str | None = None
    call: str | None = None  # prompt mode: the call string as BFCL writes it for its backends (prompt_calls.executed)

    def parsed(self) -> dict:
        """The arguments as a dict; ValueError where they are not a JSON object (a call cut short, or garbled)."""
        args = json.loads(self.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError(f"the arguments of {self.name} are not a JSON object: {self.arguments[:80]!r}")
        return args

    def as_call(self) -> str:
        """The call string a backend runs (ValueError where the arguments do not parse)."""
        return self.call or f"{self.name}({','.join(f'{k}={v!r}' for k, v in self.parsed().items())})"

    def as_dict(self) -> dict:
        return asdict(self)


class Assembly:
    """Streamed `tool_calls` deltas put back together by their index."""

    def __init__(self):
        self.by_index: dict[int, ToolCall] = {}

    def add(self, deltas: list[dict]) -> None:
        for position, delta in enumerate(deltas):
            index = delta.get("index", position)
            call = self.by_index.setdefault(index, ToolCall(name="", arguments=""))
            function = delta.get("function") or {}
            call.id = delta.get("id") or call.id
            call.name += function.get("name") or ""
            call.arguments += function.get("arguments") or ""

    def calls(self) -> list[ToolCall]:
        return [self.by_index[i] for i in sorted(self.by_index)]


def prompted(text: str) -> list[ToolCall]:
    """The calls of a prompt-mode answer as BFCL's decoder reads them (prompt_calls.decode), each with its arguments
    as JSON text and the call string BFCL's backends would run; ValueError where the answer is not calls BFCL reads,
    or an argument is not a JSON value."""
    calls = decode(text)
    return [_tool_call(c, done) for c, done in zip(calls, executed(calls))]


def _tool_call(call: dict, done: str) -> ToolCall:
    name, args = next(iter(call.items()))
    try:
        return ToolCall(name=name, arguments=json.dumps(args), call=done)
    except (TypeError, ValueError) as e:
        raise ValueError(f"the arguments of {name} are not JSON ({e}): {args!r}"[:200]) from None
