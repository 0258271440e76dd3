"""The questions: MMLU-Pro from the hub or a folder, a suite of your own, and an even, seeded draw.

An old copy of the data gives the answer away: in 524 questions the right option alone carries a
leading space. Every option is stripped on loading, and the loader says how many it stripped.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ...errors import DataError
from ..batch.data import jsonl, sha256

LETTERS = "ABCDEFGHIJ"
FILES = {"test": "test-00000-of-00001.parquet", "validation": "validation-00000-of-00001.parquet"}
HUB_URL = "https://huggingface.co/datasets/TIGER-Lab/MMLU-Pro/resolve/main/data/{file}"
# Eighty-four questions written for this project, six for each of MMLU-Pro's categories, shipped with it: what
# `dataset: auto` falls back to where MMLU-Pro cannot be had (a fresh clone, offline). Never called MMLU-Pro.
DEMO_FILE = Path(__file__).resolve().parents[2] / "data" / "demo_questions.jsonl"
DEMO_NAME = "sparknb demo questions"
COLUMNS = ("question_id", "question", "options", "answer", "category")


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    question: str
    options: tuple[str, ...]
    answer: str  # the right letter
    cot: str = ""  # the worked reasoning of a validation example
    listed: tuple[str, ...] = ()  # every option as the file lists it, stripped, "N/A" padding kept (lm-eval shows it)


@dataclass(frozen=True)
class Dataset:
    name: str
    source: str
    test: tuple[Question, ...]
    validation: tuple[Question, ...] = ()
    sha256: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def categories(self) -> list[str]:
        return sorted({q.category for q in self.test})

    def sizes(self) -> dict[str, int]:
        """Questions per category in the whole test split: the weights of the published (micro) score."""
        out: dict[str, int] = {}
        for q in self.test:
            out[q.category] = out.get(q.category, 0) + 1
        return dict(sorted(out.items()))

    def examples(self, category: str, k: int) -> list[Question]:
        """The first k validation questions of a category, in file order, as the reference harness takes them."""
        return [q for q in self.validation if q.category == category][:k]


def _strip_padding(options: Sequence[str]) -> tuple[str, ...]:
    """Strip every option (an old copy leaks the answer through a leading space) and drop "N/A" padding."""
    out = [str(o).strip() for o in options]
    while out and out[-1] == "N/A":
        out.pop()
    return tuple(out)


def _read_split(path: Path, split: str) -> tuple[list[Question], list[str]]:
    try:
        frame = pd.read_parquet(path)
    except ImportError as e:
        raise DataError(f"Reading parquet needs pyarrow ({e}). Install it: pip install pyarrow") from None
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise DataError(f"{path} is not a readable parquet file ({type(e).__name__}: {e}). Download it again "
                        f"from {HUB_URL.format(file=path.name)}") from None
    needed = COLUMNS + (("cot_content",) if split == "validation" else ())
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise DataError(f"{path} lacks the column(s) {missing}; it has {list(frame.columns)}. This is not the "
                        "MMLU-Pro split sparknb expects: use the parquet files of TIGER-Lab/MMLU-Pro.")
    questions, notes, spaced, mismatched = [], [], 0, []
    for row in frame.itertuples(index=False):
        raw = [str(o) for o in row.options]
        options = _strip_padding(raw)
        spaced += any(o != o.strip() for o in raw)
        answer = str(row.answer).strip()
        if answer not in LETTERS[:len(options)]:
            raise DataError(f"{path.name}: question {row.question_id} has answer {answer!r} but only "
                            f"{len(options)} options. The file is damaged: download it again.")
        index = getattr(row, "answer_index", None)
        if index is not None and LETTERS[int(index)] != answer:
            mismatched.append(str(row.question_id))
        questions.append(Question(str(row.question_id), str(row.category), str(row.question), options, answer,
                                  str(getattr(row, "cot_content", "") or ""), tuple(o.strip() for o in raw)))
    if spaced:
        notes.append(f"{split}: {spaced} question(s) had options with surrounding spaces, stripped (in an old "
                     "copy the space marks the right answer)")
    if mismatched:
        notes.append(f"{split}: in question(s) {', '.join(mismatched[:5])} the answer letter and answer_index "
                     "disagree; the letter is graded, as the reference scripts do")
    return questions, notes


def load(source: str = "hub") -> Dataset:
    """MMLU-Pro from the dataset hub ("hub", cached after the first download) or from a folder
    holding its two parquet files; "auto": the hub's copy where it is cached or can be fetched at once,
    else the project's own demo questions (a suite, zero-shot, named as what it is, never as MMLU-Pro)."""
    if source == "auto":
        try:
            return load_folder(download(timeout=10), "hub")
        except DataError as e:
            demo = load_suite(DEMO_FILE)
            return Dataset(DEMO_NAME, f"{DEMO_FILE.name}, shipped with sparknb", demo.test, (), demo.sha256,
                           (f"NOT MMLU-Pro: MMLU-Pro could not be had ({str(e).splitlines()[0]}), so these are the "
                            f"{len(demo.test)} questions written for sparknb's demo, zero-shot. Point `dataset` at a "
                            "folder holding MMLU-Pro's two parquet files, or at \"hub\" online, for the real "
                            "benchmark.",))
    return load_folder(download() if source in ("", "hub") else Path(source).expanduser(), source)


def heading(dataset: Dataset) -> str:
    """The questions as the report's heading names them: MMLU-Pro only where they are MMLU-Pro's, and the demo's own
    said to be what they are, first thing, so that a report of a run that failed halfway says it too."""
    marked = [note for note in dataset.notes if note.startswith("NOT MMLU-Pro")]
    return f"## The questions: {dataset.name}, from {dataset.source}" + "".join(f"\n\n**{n}**" for n in marked)


def load_folder(folder: Path, source: str) -> Dataset:
    """MMLU-Pro's two parquet files from a folder."""
    if not folder.is_dir():
        raise DataError(f"No folder {folder.resolve()} for the MMLU-Pro data. Pass a folder holding "
                        f"{' and '.join(FILES.values())}, or dataset='hub' to download them.")
    absent = [name for name in FILES.values() if not (folder / name).is_file()]
    if absent:
        raise DataError(f"{folder} lacks {', '.join(absent)}. Put the parquet files of TIGER-Lab/MMLU-Pro there "
                        f"(from {HUB_URL.format(file='...')}), or use dataset='hub'.")
    test, test_notes = _read_split(folder / FILES["test"], "test")
    validation, val_notes = _read_split(folder / FILES["validation"], "validation")
    return Dataset("MMLU-Pro", "hub" if source in ("", "hub") else str(folder), tuple(test), tuple(validation),
                   {name: sha256(folder / name) for name in FILES.values()}, tuple(test_notes + val_notes))


def download(folder: str | Path = "", timeout: float = 120) -> Path:
    """Fetch the two parquet files into a cache folder once, without the `datasets` package."""
    import httpx

    target = Path(folder) if folder else Path.home() / ".cache" / "sparknb" / "mmlu_pro"
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES.values():
        if (target / name).is_file():
            continue
        part = target / (name + ".part")
        try:
            with httpx.stream("GET", HUB_URL.format(file=name), follow_redirects=True, timeout=timeout) as r:
                r.raise_for_status()
                with open(part, "wb") as f:
                    f.writelines(r.iter_bytes())
        except httpx.HTTPError as e:
            part.unlink(missing_ok=True)
            raise DataError(f"Cannot download {name} from the dataset hub ({e}). Without a network, download "
                            "the two parquet files of TIGER-Lab/MMLU-Pro by hand and pass their folder as dataset."
                            ) from None
        part.rename(target / name)
    return target


def load_suite(path: str | Path) -> Dataset:
    """A suite of your own: one JSON object a line, with question, options (a list) and answer (the
    right letter); id and category are optional. Graded like MMLU-Pro, zero-shot."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise DataError(f"No suite file at {file}. Write one JSON object a line: "
                        '{"question": "...", "options": ["...", "..."], "answer": "B", "category": "math"}')
    questions = []
    for where, qid, item in jsonl(file, file.read_text(), "question, options and answer", "id"):
        absent = [k for k in ("question", "options", "answer") if k not in item]
        if absent:
            raise DataError(f"{where} lacks {absent}; each line needs question, options (a list) and answer "
                            "(a letter).")
        options = item["options"]
        if not isinstance(options, list) or not 2 <= len(options) <= len(LETTERS):
            raise DataError(f"{where}: options must be a list of 2 to {len(LETTERS)} texts.")
        options = tuple(str(o).strip() for o in options)
        answer = str(item["answer"]).strip().upper()
        if answer not in LETTERS[:len(options)]:
            raise DataError(f"{where}: answer must be one of {', '.join(LETTERS[:len(options)])} (the right "
                            f"option's letter); got {item['answer']!r}.")
        questions.append(Question(qid, str(item.get("category", "general knowledge")), str(item["question"]), options,
                                  answer))
    if not questions:
        raise DataError(f"{file} holds no questions.")
    return Dataset(f"suite {file.name}", str(file), tuple(questions), (), {file.name: sha256(file)})


def draw(dataset: Dataset, per_category: int = 20, seed: int = 0) -> list[Question]:
    """An even, seeded draw: per_category questions from every category (0: the whole test split).

    Each category has its own generator, seeded by (seed, category), so a draw does not depend on
    which other categories exist. The order interleaves the categories, so a run stopped halfway
    still covers all of them evenly. The demo's own questions (no validation split, 6 a category) give all a
    category holds where per_category asks more, so that `dataset: auto` runs offline with MMLU-Pro's settings.
    """
    if not isinstance(per_category, int) or isinstance(per_category, bool) or per_category < 0:
        raise DataError(f"per_category must be a whole number, 0 or more (0 takes the whole test split); "
                        f"got {per_category!r}")
    by_cat: dict[str, list[Question]] = {}
    for q in dataset.test:
        by_cat.setdefault(q.category, []).append(q)
    if per_category == 0:
        chosen = {c: qs for c, qs in sorted(by_cat.items())}
    else:
        small = {c: len(qs) for c, qs in by_cat.items() if len(qs) < per_category}
        if small and dataset.validation:
            worst = min(small, key=small.get)
            raise DataError(f"per_category={per_category} is more than {worst!r} holds ({small[worst]} questions). "
                            f"Use at most {small[worst]}, or 0 for the whole test split.")
        chosen = {}
        for c, qs in sorted(by_cat.items()):
            ordered = sorted(qs, key=lambda q: _natural(q.id))
            drawn = random.Random(f"{seed}:{c}").sample(ordered, min(per_category, len(qs)))
            chosen[c] = sorted(drawn, key=lambda q: _natural(q.id))
    longest = max(len(qs) for qs in chosen.values())
    return [qs[i] for i in range(longest) for qs in chosen.values() if i < len(qs)]


def _natural(qid: str) -> tuple:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


