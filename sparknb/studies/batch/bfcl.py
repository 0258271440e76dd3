"""BFCL v4 (the Berkeley Function Calling Leaderboard) as its own wheel ships it: PyPI's `bfcl-eval` 2026.3.23
(Apache-2.0), fetched once per user by `pip download --no-deps`, checked against its pinned sha256 as the real
test-bed model is (serving.real_models), and unzipped into the user cache. Nothing of it is committed, installed
or imported as a package: its declared dependencies pin numpy 1.26.4 and pull in six vendor SDKs, faiss and
sentence-transformers, none of which the data, the schemas or the multi-turn backends need.
SPARKNB_BFCL_WHEEL names a wheel already on disk, for a machine without PyPI.

What is read from it: a category's entries (`data/BFCL_v4_<category>.json`, one JSON object a line), its possible
answers (`data/possible_answer/`), the tool schemas of the multi-turn classes (`data/multi_turn_func_doc/`), its
default prompt-mode system prompt (`constants/default_prompts.py`, plain constants), and the backends the calls
run on (`eval_checker/multi_turn_eval/func_source_code/*.py`, plain Python loaded by file path). A call string
such as `cd(folder='document')` is executed on a session's own backends as BFCL's multi_turn_utils does (the
method of the first class that has it; a result that is not a string as JSON or str; an exception as the text
`Error during execution: ...`), but read with `ast`, never `eval`: only a call of a name with literal arguments.
`MathAPI` needs mpmath, which sparknb does not depend on: a session involving it is refused by name.
"""

from __future__ import annotations

import ast
import copy
import importlib.util
import inspect
import json
import shutil
import sys
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path
from types import ModuleType

from ...errors import BuildError, DataError
from ...serving import real_models
from ...serving.llama_server import held
from ...serving.tiny_models import cache_root

ENV_VAR = "SPARKNB_BFCL_WHEEL"  # the wheel already on disk
WHEEL = {"package": "bfcl-eval", "version": "2026.3.23", "file": "bfcl_eval-2026.3.23-py3-none-any.whl",
         "sha256": "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a", "bytes": 1_925_664}
KEPT = ("bfcl_eval/data/", "bfcl_eval/constants/", "bfcl_eval/eval_checker/")  # the members unzipped
BACKENDS = "bfcl_eval/eval_checker/multi_turn_eval/func_source_code"
PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"  # the backends' own import of long_context
REFUSED = {"MathAPI": "it needs mpmath, which sparknb does not install; draw sessions without MathAPI"}
# Calls BFCL refuses to run whatever the backend (multi_turn_utils), refused here the same way
FORBIDDEN = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")
FETCH_S = 300


def folder() -> Path:
    return cache_root() / "bfcl" / WHEEL["version"]


def root() -> Path:
    """The unzipped `bfcl_eval/` tree (data, constants, eval_checker), fetched and checked once per user."""
    final = folder() / "bfcl_eval"
    if (final / ".complete").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with held(final.parent / ".fetch.lock", print):
        if not (final / ".complete").is_file():
            _unzip(_wheel(final.parent), final)
    return final


def _wheel(into: Path) -> Path:
    return real_models.fetch_wheel(WHEEL, ENV_VAR, into, "BFCL v4", FETCH_S)


def _unzip(wheel: Path, final: Path) -> None:
    """The kept members, into a temporary folder renamed into place when whole."""
    work = Path(tempfile.mkdtemp(prefix=".unzip-", dir=final.parent))
    try:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(work, [m for m in z.namelist() if m.startswith(KEPT)])
        (work / "bfcl_eval" / ".complete").write_text(WHEEL["sha256"])
        shutil.rmtree(final, ignore_errors=True)
        (work / "bfcl_eval").replace(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _lines(path: Path) -> list[dict]:
    if not path.is_file():
        raise DataError(f"BFCL has no {path.name} in {path.parent}: name a category of BFCL v4 (multi_turn_base, "
                        "simple_python, multiple, parallel, parallel_multiple, irrelevance, ...).")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def entries(category: str) -> list[dict]:
    """The entries of a category (`BFCL_v4_<category>.json`), in the file's order."""
    return _lines(root() / "data" / f"BFCL_v4_{category}.json")


def answers(category: str) -> dict[str, dict]:
    """The possible answers of a category by entry id (`data/possible_answer/`; `ground_truth` in each)."""
    return {a["id"]: a for a in _lines(root() / "data" / "possible_answer" / f"BFCL_v4_{category}.json")}


@lru_cache(maxsize=None)
def _module(relative: str) -> ModuleType:
    """A file of the tree loaded by its path, under a private name (the package is never imported)."""
    path = root().parent / relative
    spec = importlib.util.spec_from_file_location(f"_sparknb_bfcl.{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config() -> ModuleType:
    return _module("bfcl_eval/constants/executable_backend_config.py")


def prompts() -> ModuleType:
    """BFCL's system-prompt constants (`constants/default_prompts.py`: plain strings, no imports)."""
    return _module("bfcl_eval/constants/default_prompts.py")


def schemas(class_name: str) -> list[dict]:
    """A multi-turn class's tool schemas in BFCL's own form (`data/multi_turn_func_doc/*.json`)."""
    mapping = _config().MULTI_TURN_FUNC_DOC_FILE_MAPPING
    if class_name not in mapping:
        raise DataError(f"BFCL has no multi-turn class {class_name!r}; it has {', '.join(mapping)}.")
    return _lines(root() / "data" / "multi_turn_func_doc" / mapping[class_name])


def functions(classes: list[str]) -> list[dict]:
    """The function docs a multi-turn session offers: every schema of its classes, in their order (as BFCL does)."""
    return [doc for name in classes for doc in schemas(name)]


def openai_tools(docs: list[dict]) -> list[dict]:
    """BFCL's function docs as OpenAI `tools`, converted as its OpenAI-style handlers convert them: the types by its
    own GORILLA_TO_OPENAPI map (`constants/type_mappings.py`), a float noted in the description, a missing type a
    string, the `response` schema left out (it is no parameter)."""
    mapping = _module("bfcl_eval/constants/type_mappings.py").GORILLA_TO_OPENAPI
    out = []
    for doc in copy.deepcopy(docs):
        doc.pop("response", None)
        doc["parameters"]["type"] = "object"
        doc["parameters"]["properties"] = _openai_types(doc["parameters"].get("properties", {}), mapping)
        out.append({"type": "function", "function": doc})
    return out


def _openai_types(properties: dict, mapping: dict) -> dict:
    for value in properties.values():
        kind = value.get("type")
        if kind == "float":
            value["format"] = "float"
            value["description"] = value.get("description", "") + " This is a float type value."
        value["type"] = mapping.get(kind, "string")
        if "properties" in value:
            value["properties"] = _openai_types(value["properties"], mapping)
        elif isinstance(value.get("items"), dict) and "type" in value["items"]:
            value["items"]["type"] = mapping.get(value["items"]["type"], "string")
    return properties


def system_prompt(docs: list[dict]) -> str:
    """BFCL's default prompt-mode system prompt (python calls, no tag, JSON docs, plain text, classic style), built
    from its own constants: the model answers `[func(arg=value), ...]`."""
    p = prompts()
    style = p.PROMPT_STYLE_TEMPLATES["classic"]
    call_format = style["tool_call_no_tag"].format(output_format=p.OUTPUT_FORMAT_MAPPING["python"],
                                                   param_types=p.PARAM_TYPE_MAPPING["python"])
    return p.PROMPT_TEMPLATE_MAPPING["plaintext"].format(
        persona=style["persona"], task=style["task"], tool_call_format=call_format,
        multiturn_behavior=style["multiturn_behavior"],
        available_tools=style["available_tools"].format(format="json", functions=json.dumps(docs, indent=4)))


def refusal(classes: list[str]) -> str | None:
    """Why a session over these classes cannot be run here, or None."""
    known = _config().CLASS_FILE_PATH_MAPPING
    for name in classes:
        if name not in known:
            return f"BFCL has no backend class {name!r} (it has {', '.join(known)})"
        if name in REFUSED:
            return f"the class {name} is not supported: {REFUSED[name]}"
    return None


def backend(class_name: str, initial_config: dict | None = None) -> object:
    """A fresh instance of a backend class with its scenario loaded (`_load_scenario`, as BFCL does: a deep copy
    of the entry's config for that class; a stateless class gets none)."""
    why = refusal([class_name])
    if why:
        raise DataError(f"{why}.")
    instance = getattr(_backend_module(class_name), class_name)()
    if class_name not in _config().STATELESS_CLASSES:
        instance._load_scenario(copy.deepcopy((initial_config or {}).get(class_name, {})), long_context=False)
    return instance


def _backend_module(class_name: str) -> ModuleType:
    """The backend's file, loaded by path; the shared `long_context` is registered under the name the backends
    import it by (their one import of the package), unless that name is already loaded."""
    context = f"{PREFIX}.long_context"
    if context not in sys.modules:
        sys.modules[context] = _module(f"{BACKENDS}/long_context.py")
    return _module(f"{BACKENDS}/{_config().CLASS_FILE_PATH_MAPPING[class_name].rsplit('.', 1)[1]}.py")


def backends(entry: dict) -> dict[str, object]:
    """A session's own backends: one fresh instance of each involved class, by class name."""
    return {name: backend(name, entry.get("initial_config")) for name in entry["involved_classes"]}


def methods(instances: dict[str, object]) -> dict[str, object]:
    """Public method name -> bound method, the later class winning a clash as in BFCL's mapping."""
    found = {}
    for instance in instances.values():
        found |= {name: m for name, m in inspect.getmembers(instance, inspect.ismethod) if not name.startswith("_")}
    return found


def parse_call(text: str) -> tuple[str, list, dict]:
    """`name(arg, key=value)` as (name, args, kwargs), with `ast` and literal arguments only; ValueError else."""
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a call of a function name: {text!r}")
    return (node.func.id, [ast.literal_eval(a) for a in node.args],
            {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})


def execute(call: str, instances: dict[str, object]) -> str:
    """One call string run on a session's backends, its result as BFCL hands it to the model: a string as is, a
    dict as JSON (else str), anything else str; any failure as `Error during execution: ...`."""
    try:
        name, args, kwargs = parse_call(call)
        if name in FORBIDDEN:
            raise ValueError(f"Function call {name} is not allowed.")
        method = methods(instances).get(name)
        if method is None:
            raise NameError(f"name '{name}' is not defined")
        result = method(*args, **kwargs)
    except Exception as e:  # the backend's own errors are its answer to the model, as in BFCL
        return f"Error during execution: {e}"
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def main() -> int:
    """`python -m sparknb.studies.batch.bfcl`: fetch and check BFCL now (make demo does, before the tests)."""
    try:
        print(root())
    except BuildError as e:
        print(f"BFCL v4: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
