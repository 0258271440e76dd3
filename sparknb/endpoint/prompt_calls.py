"""A prompt-mode answer `[func(arg=value), ...]` read exactly as BFCL reads it (bfcl-eval 2026.3.23,
model_handler/utils.py: default_decode_ast_prompting, ast_parse, resolve_ast_call, resolve_ast_by_type), into BFCL's
decoded form: a list of `{name: {argument: value}}`. tests/test_prompt_decoder.py feeds the same texts to BFCL's own
decoder and to this one and finds the same calls (or both fail).

BFCL's reading, kept as it is, quirks included (each changes a grade, so a copy that "fixed" one would not be BFCL's):
- code fences and newlines stripped from both ends, then `[` and `]` added where missing (a ```json fence is left
  as the word `json` and fails); the whole text must then be one Python list of calls, else the answer did not parse;
- a function's name is its dotted path (`math.factorial`); a call on anything else (`f()(a=1)`) is named by its
  attributes alone, here none: the empty name;
- positional arguments are dropped (`f(1, b=2)` is `{f: {b: 2}}`: the checker then finds the argument missing);
  `**kwargs` is kept under the key None;
- values: literals (tuples stay tuples, `...` is the text "..."); a bare name is its text; a call without keyword
  arguments is its source text, one with them a nested call `{g: {...}}`; a subscript is its source text; a unary
  operator on a literal is its NEGATION whatever the operator (`+5` is -5, `not True` is -1: BFCL's code);
- a binary operation BFCL evaluates with Python's `eval`. sparknb runs no model-written code: it computes arithmetic
  on numeric literals only (a tiny evaluator of `ast` nodes, bounded) and refuses the rest. BFCL computes `'ab' * 2`
  or `len(x) * 2`; sparknb refuses them (the test lists these as its known divergences), and BFCL fails the rest
  (a name, None) as sparknb does. An integer of more than MAX_BITS is refused too (no JSON writer holds it).
"""

from __future__ import annotations

import ast
import operator

NUMBERS = (bool, int, float, complex)
MAX_BITS = 14_000  # a larger integer is refused: BFCL's eval would compute `10**10**10` for ever, JSON cannot hold it
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert, ast.Not: operator.not_}


def decode(text: str) -> list[dict]:
    """The calls of a prompt-mode answer in BFCL's decoded form; ValueError where BFCL's decoder fails."""
    body = text.strip("`\n ")
    body = body if body.startswith("[") else "[" + body
    body = body if body.endswith("]") else body + "]"
    try:
        tree = ast.parse(body.strip().strip("'"), mode="eval").body
        return [_call(node) for node in ([tree] if isinstance(tree, ast.Call) else _elements(tree))]
    except (SyntaxError, TypeError, ArithmeticError, RecursionError, MemoryError) as e:
        raise ValueError(f"not a list of calls ({type(e).__name__}: {e}): {text[:120]!r}") from None


def executed(calls: list[dict]) -> list[str]:
    """Decoded calls as the strings BFCL's backends run in a multi-turn session (its decode_execute_prompting:
    decoded_output_to_execution_list); ValueError where BFCL's fails (an empty dict argument)."""
    return [f"{name}({_arguments(args)})" for call in calls for name, args in call.items()]


def _arguments(args: dict) -> str:
    return ", ".join(f"{k}={_rendered(v)}" for k, v in args.items())


def _rendered(value: object) -> str:
    """BFCL's parse_nested_value: a dict of dicts is a nested call (its first key's), another dict is written with
    its keys quoted as text, anything else is its repr."""
    if not isinstance(value, dict):
        return repr(value)
    if not value:
        raise ValueError("an empty dict argument (BFCL's decoder fails on it: the step is no call)")
    if all(isinstance(v, dict) for v in value.values()):
        return f"{next(iter(value))}({_arguments(next(iter(value.values())))})"
    return "{" + ", ".join(f"'{k}': {_rendered(v)}" for k, v in value.items()) + "}"


def _elements(tree: ast.AST) -> list[ast.AST]:
    if not isinstance(tree, (ast.List, ast.Tuple, ast.Set)):
        raise ValueError(f"not a list of calls: {ast.unparse(tree)[:120]!r}")
    return tree.elts


def _call(node: ast.AST) -> dict:
    if not isinstance(node, ast.Call):
        raise ValueError(f"not a function call: {ast.unparse(node)[:120]!r}")
    return {_name(node.func): {k.arg: _value(k.value) for k in node.keywords}}


def _name(node: ast.AST) -> str:
    """The dotted path of attributes down to a name; a part that is neither is left out (BFCL's)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts, node = [node.attr] + parts, node.value
    return ".".join(([node.id] if isinstance(node, ast.Name) else []) + parts)


def _value(node: ast.AST) -> object:
    """An argument's value as BFCL's resolve_ast_by_type gives it."""
    kind = type(node)
    if kind in READERS:
        return READERS[kind](node)
    raise ValueError(f"not a value BFCL reads ({kind.__name__}): {ast.unparse(node)[:80]!r}")


def _negated(node: ast.UnaryOp) -> object:
    """BFCL's `-operand.value`, whatever the operator: a literal operand only."""
    if not isinstance(node.operand, ast.Constant):
        raise ValueError(f"an operator on a non-literal: {ast.unparse(node)[:80]!r}")
    return _sized(-node.operand.value)


def _nested(node: ast.Call) -> object:
    return _call(node) if node.keywords else ast.unparse(node)


def _arithmetic(node: ast.AST) -> object:
    """A binary operation on numeric literals computed, bounded; anything else refused (sparknb runs no model code)."""
    if isinstance(node, ast.Constant) and type(node.value) in NUMBERS:
        return node.value
    if isinstance(node, ast.UnaryOp):
        return UNARY[type(node.op)](_arithmetic(node.operand))
    if isinstance(node, ast.BinOp):
        return _bounded(node.op, _arithmetic(node.left), _arithmetic(node.right))
    raise ValueError(f"not arithmetic on numbers: {ast.unparse(node)[:80]!r} (sparknb runs no model-written code)")


def _bounded(op: ast.operator, a, b) -> object:
    """`a op b`; an integer result over MAX_BITS refused, a power or a shift before it is computed."""
    if all(type(v) in (int, bool) for v in (a, b)) and _reach(op, a, b) > MAX_BITS:
        raise ValueError(f"{a!r} {type(op).__name__} {b!r} is too large to compute")
    return _sized(getattr(operator, OPERATORS[type(op)])(a, b))


def _reach(op: ast.operator, a: int, b: int) -> int:
    """The bits of an integer power or left shift, about, before it is computed (0 for the other operators)."""
    if type(op) is ast.Pow:
        return b * abs(a).bit_length() if abs(a) > 1 else 0
    return b if type(op) is ast.LShift else 0


def _sized(value: object) -> object:
    """An integer of more than MAX_BITS refused: Python will not write it as JSON text (4,300 digits at most)."""
    if type(value) is int and value.bit_length() > MAX_BITS:
        raise ValueError(f"an integer of {value.bit_length():,} bits: more than sparknb reads ({MAX_BITS:,})")
    return value


def _dict(node: ast.Dict) -> dict:
    if None in node.keys:
        raise ValueError(f"`**` in a dict: {ast.unparse(node)[:80]!r}")
    return {_value(k): _value(v) for k, v in zip(node.keys, node.values)}


OPERATORS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "truediv", ast.FloorDiv: "floordiv",
             ast.Mod: "mod", ast.Pow: "pow", ast.LShift: "lshift", ast.RShift: "rshift", ast.BitOr: "or_",
             ast.BitXor: "xor", ast.BitAnd: "and_", ast.MatMult: "matmul"}
READERS = {
    ast.Constant: lambda n: "..." if n.value is Ellipsis else _sized(n.value),
    ast.UnaryOp: _negated,
    ast.List: lambda n: [_value(v) for v in n.elts],
    ast.Tuple: lambda n: tuple(_value(v) for v in n.elts),
    ast.Dict: _dict,
    ast.BinOp: _arithmetic,
    ast.Name: lambda n: n.id,
    ast.Call: _nested,
    ast.Subscript: lambda n: ast.unparse(n.value) + "[" + ast.unparse(n.slice) + "]",
}
