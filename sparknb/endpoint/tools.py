"""Tool calls, in the one shape both ways of asking for them give: a name, its arguments as a JSON text, and the
server's id for it where it gave one.

- Native calling (OpenAI's `tools` parameter): the server's parser turns the model's text into streamed
  `tool_calls` deltas, one call spread over many chunks by `index` (the first carries id and name, the rest
  pieces of the arguments' text); `Assembly` puts them back together as they arrive (wire.Events feeds it).
- Prompt mode (BFCL's): the tools are described in a system prompt and the model writes
  `[func(arg=value), ...]` in its answer; `prompted` reads that with `ast` (never eval), literal arguments only.

A call is executed as the call string `name(key=repr(value), ...)`, as BFCL turns a decoded call back into the
string its backends run.
"""

from __future__ import annotations

import ast
import json
from dataclasses import asdict, dataclass


@dataclass
class ToolCall:
    name: str
    arguments: str  # JSON text, as the server sent it (native) or as sparknb wrote it (prompt mode)
    id: str | None = None

    def parsed(self) -> dict:
        """The arguments as a dict; ValueError where they are not a JSON object (a call cut short, or garbled)."""
        args = json.loads(self.arguments or "{}")
        if not isinstance(args, dict):
            raise ValueError(f"the arguments of {self.name} are not a JSON object: {self.arguments[:80]!r}")
        return args

    def as_call(self) -> str:
        """The call string a backend runs (ValueError where the arguments do not parse)."""
        return f"{self.name}({','.join(f'{k}={v!r}' for k, v in self.parsed().items())})"

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
    """The calls of a prompt-mode answer, `[f(a=1), g(b='x')]` (the brackets may be missing, and code fences
    around it are dropped, as BFCL's decoder does); ValueError naming what is not a call of literal arguments."""
    body = text.strip("`\n ")
    body = body if body.startswith("[") else "[" + body
    body = body if body.endswith("]") else body + "]"
    try:
        tree = ast.parse(body.strip().strip("'"), mode="eval").body
    except SyntaxError as e:
        raise ValueError(f"not Python call syntax ({e.msg}): {text[:120]!r}") from None
    elements = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    return [_call(node) for node in elements]


def _call(node: ast.AST) -> ToolCall:
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a function call: {ast.unparse(node)[:120]!r}")
    if node.args:
        raise ValueError(f"positional arguments in {ast.unparse(node)[:120]!r}: the format names every argument")
    return ToolCall(name=_name(node.func), arguments=json.dumps({k.arg: _value(k.value) for k in node.keywords}))


def _name(node: ast.AST) -> str:
    """A function's (dotted) name."""
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Name):
        return node.id
    raise ValueError(f"not a function name: {ast.unparse(node)[:80]!r}")


def _value(node: ast.AST) -> object:
    """A literal argument; a bare name is read as its text, as BFCL's decoder reads it."""
    if isinstance(node, ast.Name):
        return node.id
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"not a literal argument: {ast.unparse(node)[:80]!r}") from None
