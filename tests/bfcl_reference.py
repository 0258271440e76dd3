"""bfcl-eval's own checkers, for the tests only: sparknb's BFCL grading is checked against them item by item.

They are imported from the pinned wheel studies.batch.bfcl fetches (sha256-checked), as a zip on sys.path, not
installed: a dev extra (`pip install -e .[dev]`) would pull in bfcl-eval's declared dependencies (numpy pinned to
1.26.4, six vendor SDKs, faiss, sentence-transformers), which would break the project's own environment.

Stand-in modules, for what the checkers and the decoder import but never use here:
- `bfcl_eval.constants.model_config` imports every vendor's model handler (anthropic, cohere, google-genai, ...),
  and the AST checker reads only `MODEL_CONFIG_MAPPING[model].underscore_to_dot` from it. The stand-in has two
  entries: `prompt` (names keep their dots, as BFCL's prompt-mode models) and `native` (dots written as underscores,
  as BFCL's function-calling models);
- `tree_sitter`, `tree_sitter_java` and `tree_sitter_javascript` (Java and JavaScript call parsers, which
  model_handler/utils builds at import), where they are not installed: only the Python decoder is used.
Nothing else of the checkers or of BFCL's prompt-mode decoder is replaced.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import sys
import types
from dataclasses import dataclass
from functools import lru_cache

from sparknb.studies.batch import bfcl

MODES = {"prompt": False, "native": True}  # the stand-in's model names -> underscore_to_dot
_names = itertools.count()


@dataclass(frozen=True)
class _Config:
    underscore_to_dot: bool


@lru_cache(maxsize=None)
def _loaded() -> None:
    """bfcl_eval importable from the wheel, with the one stand-in module; its eval_config makes result and score
    folders under BFCL_PROJECT_ROOT on import, pointed beside the wheel in the user cache."""
    bfcl.root()
    os.environ["BFCL_PROJECT_ROOT"] = str(bfcl.folder() / "reference-project")
    sys.path.insert(0, str(bfcl.folder() / bfcl.WHEEL["file"]))
    stand_in = types.ModuleType("bfcl_eval.constants.model_config")
    stand_in.MODEL_CONFIG_MAPPING = {name: _Config(dot) for name, dot in MODES.items()}
    sys.modules["bfcl_eval.constants.model_config"] = stand_in
    for name in ("tree_sitter", "tree_sitter_java", "tree_sitter_javascript"):
        if importlib.util.find_spec(name) is None:
            sys.modules[name] = _unused(name)


def _unused(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.language = lambda: None
    module.Language = lambda *args: None
    module.Parser = lambda: types.SimpleNamespace(set_language=lambda language: None)
    return module


def decoded(record: dict) -> list | None:
    """A recorded answer decoded as BFCL decodes it, None where its decoder fails: prompt mode by its own
    default_decode_ast_prompting on the text; native as its OpenAI function-calling handler's decode_ast does
    (openai_completion.py: each tool call's arguments by json.loads; an answer without tool calls is its text,
    which that loop fails on unless it is empty)."""
    _loaded()
    from bfcl_eval.model_handler.utils import default_decode_ast_prompting

    try:
        if record["format"] == "prompt":
            return default_decode_ast_prompting(record["text"])
        if not record["tool_calls"]:
            return [] if not record["text"] else None
        return [{c["name"]: json.loads(c["arguments"])} for c in record["tool_calls"]]
    except Exception:  # BFCL's runner counts any decoder failure as no valid call
        return None


def execution(text: str) -> list[str] | None:
    """A prompt-mode answer as the call strings BFCL's multi-turn runner executes (its
    default_decode_execute_prompting), None where that fails (the runner then ends the turn)."""
    _loaded()
    from bfcl_eval.model_handler.utils import default_decode_execute_prompting

    try:
        return default_decode_execute_prompting(text)
    except Exception:  # BFCL's runner takes any failure as no call
        return None


def graded(record: dict) -> dict:
    """BFCL's verdict on a recorded answer, from its raw text or tool calls: BFCL's decoder, then its checker."""
    return ast_check(record["category"], record["functions"], decoded(record), record["answer"], record["format"])


def ast_check(category: str, functions: list, calls: list | None, answer: list, mode: str) -> dict:
    """BFCL's verdict on one single-turn item, as its eval_runner reaches it: a decode failure (None) fails an AST
    item and passes an irrelevance one; BFCL's format and emptiness checks come first."""
    _loaded()
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker
    from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

    if "irrelevance" in category:
        made = calls is not None and not is_empty_output(calls)
        return {"valid": not made, "error_type": "irrelevance_error:decoder_success" if made else ""}
    if calls is None:
        return {"valid": False, "error_type": "ast_decoder:decoder_failed"}
    if not is_function_calling_format_output(calls):
        return {"valid": False, "error_type": "ast_decoder:decoder_wrong_output_format"}
    return ast_checker(functions, calls, answer, Language.PYTHON, category, mode)


def multi_turn_check(entry: dict, ground_truth: list, turns: list) -> dict:
    """BFCL's multi_turn_checker on one session (turns: per turn, per step, call strings), under a model name of
    its own: BFCL keeps each session's backends in a module global named by model and entry."""
    _loaded()
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if len(turns) != len(ground_truth):
        return {"valid": False, "error_type": "multi_turn:force_terminated"}
    return multi_turn_checker([[s for s in t if s] for t in turns], ground_truth, dict(entry),
                              "multi_turn_base", f"sparknb_check_{next(_names)}")


def pick(accepted: list, required: bool = False):
    """The first value an answer accepts, nested values taken the same way; None (leave it out) where the answer
    lets it be left out and the schema does not require it (BFCL's answers list an optional parameter's value
    under the wrong function at least once, parallel_multiple_12, where giving it fails)."""
    value = next((a for a in accepted if a != ""), None)
    if "" in accepted and not required:
        return None
    if isinstance(value, dict):
        return {k: v for k, v in ((k, pick(v)) for k, v in value.items()) if v is not None}
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return [pick([v]) for v in value]
    return value


def replayed(answer: list, functions: list, native: bool = False) -> list:
    """BFCL's possible answer as the calls a model that got everything right would make (decoded form)."""
    out = []
    for item in answer:
        name, params = next(iter(item.items()))
        schema = next(f for f in functions if f["name"] == name)["parameters"]
        picked = {p: pick(v, p in schema.get("required", [])) for p, v in params.items()}
        out.append({name.replace(".", "_") if native else name: {p: v for p, v in picked.items() if v is not None}})
    return out
