"""MMLU-Pro: the questions, an even draw, the reference 5-shot prompt, and grading that reads every raw answer.

Three ways this benchmark lies, each made impossible to miss here:
- An old copy of the data gives the answer away: in 524 questions the right option alone carries a
  leading space. Every option is stripped on loading.
- A stop string fires inside a reasoning model's own thinking (vLLM applies stop strings to the
  reasoning too), cutting every answer before its "the answer is (X)" line: a good model then scores
  13%. No stop strings by default, and `traps` reads every raw response for cut or answerless ones.
- An answer that cannot be parsed is scored as a random guess by the reference scripts. Here it is
  wrong, and counted.
Requests run concurrently (the seed study ran eight at a time), each recorded the moment it ends.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import pandas as pd

from ... import metrics, stats
from ...client import Completion, Endpoint, ServerInfo
from ...params import load_model
from ...run import Run, outputs_dir, read_records

NOTEBOOK = "mmlu_pro"
LETTERS = "ABCDEFGHIJ"
FILES = {"test": "test-00000-of-00001.parquet", "validation": "validation-00000-of-00001.parquet"}
HUB_URL = "https://huggingface.co/datasets/TIGER-Lab/MMLU-Pro/resolve/main/data/{file}"
COLUMNS = ("question_id", "question", "options", "answer", "category")
HEADER = ('The following are multiple choice questions (with answers) about {subject}. Think step by step and '
          'then finish your answer with "the answer is (X)" where X is the correct letter choice.')
STEP = "Let's think step by step."

# The reference scripts' extraction, in order; the last match of the first rule that matches wins.
RULES = (
    ("answer is", re.compile(r"answer is \(?([A-J])\)?")),
    ("Answer:", re.compile(r"[aA]nswer:\s*([A-J])")),
    ("last letter", re.compile(r"\b([A-J])\b")),
)
ANSWER_LINES = (RULES[0][1], RULES[1][1])  # "the answer is (X)" or "Answer: X": the model said it outright

CUT_BY_STOP = "cut by a stop string"
HIT_MAX_TOKENS = "hit max_tokens"
NO_ANSWER_LINE = "no answer line"


class DataError(ValueError):
    """The questions cannot be used as asked; the message says what was found and what to do."""


# -- the questions ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    question: str
    options: tuple[str, ...]
    answer: str  # the right letter
    cot: str = ""  # the worked reasoning of a validation example


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
    except Exception as e:
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
                                  str(getattr(row, "cot_content", "") or "")))
    if spaced:
        notes.append(f"{split}: {spaced} question(s) had options with surrounding spaces, stripped (in an old "
                     "copy the space marks the right answer)")
    if mismatched:
        notes.append(f"{split}: in question(s) {', '.join(mismatched[:5])} the answer letter and answer_index "
                     "disagree; the letter is graded, as the reference scripts do")
    return questions, notes


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(source: str = "hub") -> Dataset:
    """MMLU-Pro from the dataset hub ("hub", cached after the first download) or from a folder
    holding its two parquet files."""
    folder = download() if source in ("", "hub") else Path(source).expanduser()
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
                   {name: _sha256(folder / name) for name in FILES.values()}, tuple(test_notes + val_notes))


def download(folder: str | Path = "") -> Path:
    """Fetch the two parquet files into a cache folder once, without the `datasets` package."""
    import httpx

    target = Path(folder) if folder else Path.home() / ".cache" / "sparknb" / "mmlu_pro"
    target.mkdir(parents=True, exist_ok=True)
    for name in FILES.values():
        if (target / name).is_file():
            continue
        part = target / (name + ".part")
        try:
            with httpx.stream("GET", HUB_URL.format(file=name), follow_redirects=True, timeout=120) as r:
                r.raise_for_status()
                with open(part, "wb") as f:
                    for block in r.iter_bytes():
                        f.write(block)
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
    questions, seen = [], set()
    for number, line in enumerate(file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        where = f"{file.name} line {number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as e:
            raise DataError(f"{where} is not JSON ({e.msg}); each line must be one JSON object.") from None
        if not isinstance(item, dict):
            raise DataError(f"{where} must be a JSON object with question, options and answer.")
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
        qid = str(item.get("id", f"{file.stem}:{number}"))
        if qid in seen:
            raise DataError(f"{where}: id {qid!r} is used twice; ids must be unique.")
        seen.add(qid)
        questions.append(Question(qid, str(item.get("category", "general knowledge")), str(item["question"]),
                                  options, answer))
    if not questions:
        raise DataError(f"{file} holds no questions.")
    return Dataset(f"suite {file.name}", str(file), tuple(questions), (), {file.name: _sha256(file)})


def draw(dataset: Dataset, per_category: int = 20, seed: int = 0) -> list[Question]:
    """An even, seeded draw: per_category questions from every category (0: the whole test split).

    Each category has its own generator, seeded by (seed, category), so a draw does not depend on
    which other categories exist. The order interleaves the categories, so a run stopped halfway
    still covers all of them evenly.
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
        if small:
            worst = min(small, key=small.get)
            raise DataError(f"per_category={per_category} is more than {worst!r} holds ({small[worst]} questions). "
                            f"Use at most {small[worst]}, or 0 for the whole test split.")
        chosen = {}
        for c, qs in sorted(by_cat.items()):
            ordered = sorted(qs, key=lambda q: _natural(q.id))
            chosen[c] = sorted(random.Random(f"{seed}:{c}").sample(ordered, per_category), key=lambda q: _natural(q.id))
    longest = max(len(qs) for qs in chosen.values())
    return [qs[i] for i in range(longest) for qs in chosen.values() if i < len(qs)]


def _natural(qid: str) -> tuple:
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


# -- the prompt ------------------------------------------------------------------------------------


def _block(q: Question, worked: bool) -> str:
    text = f"Question:\n{q.question}\nOptions:\n" + "".join(f"{L}. {o}\n" for L, o in zip(LETTERS, q.options))
    if worked:
        return text + q.cot.replace(f"A: {STEP}", f"Answer: {STEP}") + "\n\n"
    return text + f"Answer: {STEP}"


def prompt(q: Question, examples: Sequence[Question] = ()) -> str:
    """The reference harness's chain-of-thought prompt: the instruction, the worked examples, then
    the question, ending where the model starts reasoning. Sent as one user message."""
    return HEADER.format(subject=q.category) + "\n" + "".join(_block(e, True) for e in examples) + _block(q, False)


# -- grading ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Extraction:
    letter: str | None
    rule: str | None  # which of RULES found it; None when nothing could be parsed


def extract(text: str) -> Extraction:
    """The reference extraction on the answer text: strip '**', then the rules in order, last match."""
    clean = (text or "").replace("**", "")
    for name, pattern in RULES:
        found = pattern.findall(clean)
        if found:
            return Extraction(found[-1], name)
    return Extraction(None, None)


def flag(text: str, finish_reason: str | None, stop: Sequence[str] = ()) -> str | None:
    """Why a raw answer cannot be taken at face value, or None.

    A finish at max_tokens is cut; a normal finish without an answer line ("the answer is (X)" or
    "Answer: X") is either cut by a stop string (when any are set: the server does not say whether a
    string or the model ended it) or a model that never stated its answer.
    """
    if finish_reason == "length":
        return HIT_MAX_TOKENS
    clean = (text or "").replace("**", "")
    if any(p.search(clean) for p in ANSWER_LINES):
        return None
    return CUT_BY_STOP if stop else NO_ANSWER_LINE


@dataclass(frozen=True)
class Grade:
    pred: str | None
    rule: str | None
    correct: bool  # an unparsed answer is wrong
    flag: str | None


def grade(q_answer: str, text: str, finish_reason: str | None, stop: Sequence[str] = ()) -> Grade:
    found = extract(text)
    return Grade(found.letter, found.rule, found.letter == q_answer, flag(text, finish_reason, stop))


# -- the plan and the work -------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """The notebook's parameters, checked together so every problem is named at once."""

    dataset: str = "hub"
    per_category: int = 20
    seed: int = 0
    shots: int = 5
    suite: str = ""
    max_tokens: int = 8192
    temperature: float = 0.0
    stop: tuple[str, ...] = ()
    concurrency: int = 8
    trap_share: float = 0.05
    resume_from: str = ""
    compare_with: str = ""
    target_half_width: float = 0.02

    def __post_init__(self):
        object.__setattr__(self, "stop", tuple(self.stop or ()))
        problems = []

        def whole(name, low):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                problems.append(f"{name} must be a whole number, {low} or more; got {v!r}")

        whole("per_category", 0)
        whole("shots", 0)
        whole("max_tokens", 1)
        whole("concurrency", 1)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            problems.append(f"seed must be a whole number; got {self.seed!r}")
        if isinstance(self.shots, int) and self.shots > 5:
            problems.append("shots must be 5 or fewer: the validation split has 5 worked examples per category; "
                            f"got {self.shots}")
        if not isinstance(self.temperature, (int, float)) or not 0 <= self.temperature <= 2:
            problems.append(f"temperature must be between 0 and 2; got {self.temperature!r}")
        if not all(isinstance(s, str) and s for s in self.stop):
            problems.append(f"stop must be a list of non-empty strings, e.g. ['Question:']; got {list(self.stop)!r}")
        if not isinstance(self.trap_share, (int, float)) or not 0 <= self.trap_share < 1:
            problems.append(f"trap_share must be a fraction between 0 and 1, e.g. 0.05; got {self.trap_share!r}")
        if not isinstance(self.target_half_width, (int, float)) or not 0 < self.target_half_width < 1:
            problems.append("target_half_width must be a fraction, e.g. 0.02 for 2 points; "
                            f"got {self.target_half_width!r}")
        if problems:
            raise ValueError("Bad mmlu_pro parameters:\n  " + "\n  ".join(problems))

    def as_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


# Settings that must match for answers of two runs to be mixed in one (resume_from).
SAME_FOR_RESUME = ("dataset_name", "shots", "max_tokens", "temperature", "stop", "model")


@dataclass(frozen=True)
class PastRun:
    """An earlier mmlu_pro run folder, read back."""

    path: Path
    params: dict
    records: list[dict]
    summary: dict | None

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def settings(self) -> dict:
        return self.params.get("settings", {})

    @property
    def label(self) -> str:
        return self.params.get("model", {}).get("name", self.id)

    def answered(self) -> dict[str, dict]:
        """The last finished answer of each question (failed requests left out)."""
        return {str(r["question_id"]): r for r in self.records if "error" not in r and r.get("finish_reason")}


def find_run(value: str, what: str) -> PastRun:
    """A run folder by path, or by run id under the outputs folder."""
    path = Path(value).expanduser()
    if not path.is_dir():
        path = outputs_dir() / NOTEBOOK / value
    if not (path / "params.json").is_file():
        raise DataError(f"{what}={value!r} is not an mmlu_pro run folder (no params.json at {path}). Give the path "
                        f"of a folder under outputs/{NOTEBOOK}/, or its run id.")
    params = json.loads((path / "params.json").read_text())
    if params.get("notebook") != NOTEBOOK:
        raise DataError(f"{what}: {path} is a {params.get('notebook')!r} run, not an {NOTEBOOK} one.")
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").is_file() else None
    return PastRun(path, params, read_records(path), summary)


@dataclass
class Work:
    """Everything decided before the first request: the questions, their prompts, reused answers."""

    plan: Plan
    model: str
    dataset: Dataset
    questions: list[Question]
    prompts: dict[str, str]
    reused: list[dict] = field(default_factory=list)
    resumed: PastRun | None = None
    other: PastRun | None = None

    @property
    def ids(self) -> list[str]:
        return [q.id for q in self.questions]

    @property
    def is_suite(self) -> bool:
        return bool(self.plan.suite)

    def settings(self) -> dict:
        """What params.json records: the parameters, the data's identity, and the questions drawn."""
        return self.plan.as_dict() | {
            "model": self.model, "dataset_name": self.dataset.name, "dataset_source": self.dataset.source,
            "dataset_sha256": self.dataset.sha256, "dataset_notes": list(self.dataset.notes),
            "shots": 0 if self.is_suite else self.plan.shots, "questions": self.ids}

    def check_server(self, server: ServerInfo, api_key: str | None = None) -> None:
        """The longest prompt plus max_tokens must fit the model's context, or the server refuses halfway."""
        if server.max_model_len is None:
            return
        if self.plan.max_tokens >= server.max_model_len:
            raise ValueError(f"max_tokens={self.plan.max_tokens} leaves no room for a prompt in {server.model}'s "
                             f"max_model_len of {server.max_model_len}. Lower max_tokens.")
        ep = Endpoint(server.url, server.model, api_key=api_key)
        try:
            longest = sorted(self.prompts.values(), key=len)[-3:]
            tokens = max(len(ep.tokenize(p)) for p in longest) + 32  # the chat template's few tokens
        finally:
            ep.close()
        if tokens + self.plan.max_tokens > server.max_model_len:
            raise ValueError(f"The longest prompt is about {tokens} tokens; with max_tokens={self.plan.max_tokens} "
                             f"it exceeds {server.model}'s max_model_len of {server.max_model_len}. Lower max_tokens "
                             f"to {server.max_model_len - tokens} or less, or use fewer shots.")

    def validator(self) -> Callable[[ServerInfo], None]:
        key = load_model(self.model).api_key()
        return lambda server: self.check_server(server, key)


def prepare(plan: Plan, model: str) -> Work:
    """Load and draw the questions and read any earlier runs: every refusal comes before a request."""
    if plan.suite:
        dataset = load_suite(plan.suite)
        questions = list(dataset.test)
        prompts = {q.id: prompt(q) for q in questions}
    else:
        dataset = load(plan.dataset)
        questions = draw(dataset, plan.per_category, plan.seed)
        prompts = {q.id: prompt(q, dataset.examples(q.category, plan.shots)) for q in questions}
    work = Work(plan, model, dataset, questions, prompts)
    mine = work.settings()
    if plan.resume_from:
        past = find_run(plan.resume_from, "resume_from")
        differ = [k for k in SAME_FOR_RESUME if past.settings.get(k) != mine.get(k)]
        if differ:
            raise DataError(f"resume_from {past.id} was run with different {', '.join(differ)} ("
                            + "; ".join(f"{k}: {past.settings.get(k)!r} there, {mine.get(k)!r} here" for k in differ)
                            + "). Its answers cannot be mixed into this run: run these settings afresh.")
        done = past.answered()
        work.resumed = past
        work.reused = [done[q.id] for q in questions if q.id in done]
    if plan.compare_with:
        other = find_run(plan.compare_with, "compare_with")
        theirs, ours = set(map(str, other.settings.get("questions", []))), set(work.ids)
        if theirs != ours:
            raise DataError(f"compare_with {other.id} asked other questions: {len(theirs - ours)} of its "
                            f"{len(theirs)} are not in this draw and {len(ours - theirs)} of these {len(ours)} are "
                            f"not in it. It was drawn with per_category={other.settings.get('per_category')}, "
                            f"seed={other.settings.get('seed')}, suite={other.settings.get('suite')!r}; draw the same "
                            "way to compare.")
        missing = ours - set(other.answered())
        if missing:
            raise DataError(f"compare_with {other.id} has no finished answer to {len(missing)} of the {len(ours)} "
                            f"questions. Finish it first: run it again with resume_from={other.id!r}.")
        work.other = other
    return work


# -- asking ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """The batch as a whole: the speed a user of concurrent requests gets, not single-stream speed."""

    asked: int
    reused: int
    failed: int
    concurrency: int
    wall_s: float
    prompt_tokens: int
    completion_tokens: int
    client_cpu_s: float  # CPU time of this process (all threads) during the batch
    client_request_s: float  # the requests' durations as the client saw them, summed
    server_e2e_s: float | None  # the same requests as vLLM timed them, summed
    server_generated_tokens: float | None
    server_requests: float | None
    prefix_cache_hit_rate: float | None

    @property
    def tokens_per_s(self) -> float | None:
        return self.completion_tokens / self.wall_s if self.wall_s and self.asked else None

    @property
    def client_cpu_share(self) -> float | None:
        """The share of the batch's wall time that the client spent computing rather than waiting."""
        return self.client_cpu_s / self.wall_s if self.wall_s and self.asked else None

    @property
    def outside_server_share(self) -> float | None:
        """The share of request time, as the client saw it, that vLLM's own clock does not cover."""
        if not self.server_e2e_s or not self.client_request_s:
            return None
        return 1 - self.server_e2e_s / self.client_request_s

    @property
    def interference(self) -> str | None:
        """Why the server's counters cannot be this batch's alone, or None."""
        if self.server_requests is None or not self.asked:
            return None
        if self.server_requests != self.asked:
            return (f"the server finished {self.server_requests:g} requests during a batch of {self.asked}; "
                    "another client was using it, so the speed figures are not this batch's alone")
        if self.server_generated_tokens != self.completion_tokens:
            return (f"the server generated {self.server_generated_tokens:g} tokens while the batch received "
                    f"{self.completion_tokens}; another client was using it")
        return None

    def as_dict(self) -> dict:
        return asdict(self) | {"tokens_per_s": self.tokens_per_s, "client_cpu_share": self.client_cpu_share,
                               "outside_server_share": self.outside_server_share, "interference": self.interference}


def _answer(endpoint: Endpoint, text: str, plan: Plan) -> Completion:
    return endpoint.chat([{"role": "user", "content": text}], max_tokens=plan.max_tokens,
                         temperature=plan.temperature, stop=list(plan.stop) or None)


def _record(q: Question, done: Completion, plan: Plan, order: int) -> dict:
    g = grade(q.answer, done.text, done.finish_reason, plan.stop)
    timing = {k: v for k, v in done.as_dict().items() if k not in ("chunk_times", "chunk_tokens", "text", "reasoning")}
    return {"question_id": q.id, "category": q.category, "answer": q.answer, "order": order,
            "pred": g.pred, "rule": g.rule, "correct": g.correct, "flag": g.flag,
            "text": done.text, "reasoning": done.reasoning, **timing}


def ask(endpoint: Endpoint, run: Run, work: Work, log: Callable[[str], None] = print) -> Batch:
    """Ask every question not answered before, `concurrency` at a time, recording each answer as it
    arrives (from this thread only, so lines never interleave). On a failed request nothing new is
    sent; the answers in flight are awaited and kept, then the error is raised."""
    plan = work.plan
    for rec in work.reused:
        run.record({**rec, "resumed_from": work.resumed.id if work.resumed else None})
    reused = {str(r["question_id"]) for r in work.reused}
    todo = [q for q in work.questions if q.id not in reused]
    total, step = len(todo), max(1, math.ceil(len(todo) / 40))
    if work.reused:
        log(f"{len(work.reused)} answer(s) reused from {work.resumed.id}; asking the other {total}")
    before = endpoint.metrics()
    cpu0, t0 = time.process_time(), time.perf_counter()
    pool = ThreadPoolExecutor(max_workers=plan.concurrency, thread_name_prefix="mmlu-pro")
    queue = iter(enumerate(todo))
    flight: dict[Future, tuple[int, Question]] = {}
    done_n = right = tokens = prompt_tokens = 0
    request_s, failures, first_error = 0.0, 0, None

    def send() -> None:
        item = next(queue, None)
        if item is not None:
            flight[pool.submit(_answer, endpoint, work.prompts[item[1].id], plan)] = item

    try:
        for _ in range(plan.concurrency):
            send()
        while flight:
            finished, _ = wait(flight, return_when=FIRST_COMPLETED)
            for fut in finished:
                order, q = flight.pop(fut)
                try:
                    answer = fut.result()
                except Exception as e:
                    failures += 1
                    first_error = first_error or e
                    run.record({"question_id": q.id, "category": q.category, "order": order,
                                "error": f"{type(e).__name__}: {e}"})
                    continue
                rec = _record(q, answer, plan, order)
                run.record(rec)
                done_n += 1
                right += rec["correct"]
                tokens += rec["completion_tokens"] or 0
                prompt_tokens += rec["prompt_tokens"] or 0
                request_s += answer.total_s or 0.0
                if first_error is None:
                    send()
                if done_n % step == 0 or done_n == total:
                    elapsed = time.perf_counter() - t0
                    log(f"[{done_n}/{total}] {right} right so far; {tokens} tokens in {elapsed:.0f} s "
                        f"({tokens / elapsed:.1f} tok/s); last: {q.category}, {rec['pred'] or 'unparsed'}"
                        + (f" ({rec['flag']})" if rec["flag"] else ""))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    wall = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    if first_error is not None:
        raise RuntimeError(f"{failures} request(s) failed, the first with: {first_error}. The {done_n} answers "
                           f"received are recorded in {run.path}; to finish, run again with resume_from="
                           f"{run.id!r}.") from first_error
    delta = _settled(endpoint, before, done_n)
    queries = delta[metrics.PREFIX_QUERIES] if delta else 0
    return Batch(done_n, len(work.reused), failures, plan.concurrency, wall, prompt_tokens, tokens, cpu, request_s,
                 delta.histogram(metrics.E2E)[0] if delta else None,
                 delta[metrics.GENERATED] if delta else None,
                 delta[metrics.E2E + "_count"] if delta else None,
                 delta[metrics.PREFIX_HITS] / queries if delta and queries else None)


def _settled(endpoint: Endpoint, before: metrics.Snapshot, n: int, settle_s: float = 5.0) -> metrics.Delta | None:
    """vLLM counts a request just after answering it: wait until all n are counted."""
    deadline = time.monotonic() + settle_s
    try:
        while True:
            d = metrics.delta(before, endpoint.metrics())
            if d[metrics.E2E + "_count"] >= n or time.monotonic() > deadline:
                return d
            time.sleep(0.05)
    except Exception:  # the figures are an addition; a server that stopped counting must not lose the answers
        return None


# -- reading the answers ---------------------------------------------------------------------------


def frame(records: Sequence[dict], stop: Sequence[str] = ()) -> pd.DataFrame:
    """One row per finished answer, graded afresh from its raw text, so every run is graded alike."""
    rows = []
    for r in records:
        if "error" in r or not r.get("finish_reason"):
            continue
        g = grade(r["answer"], r.get("text", ""), r.get("finish_reason"), stop)
        rows.append({"question_id": str(r["question_id"]), "category": r["category"], "answer": r["answer"],
                     "pred": g.pred, "rule": g.rule, "correct": g.correct, "flag": g.flag,
                     "finish_reason": r.get("finish_reason"), "completion_tokens": r.get("completion_tokens"),
                     "total_s": r.get("total_s"), "resumed": bool(r.get("resumed_from"))})
    df = pd.DataFrame(rows, columns=["question_id", "category", "answer", "pred", "rule", "correct", "flag",
                                     "finish_reason", "completion_tokens", "total_s", "resumed"])
    return df.drop_duplicates("question_id", keep="last").reset_index(drop=True)


@dataclass(frozen=True)
class Traps:
    """What the raw responses say about whether the scores can be believed."""

    n: int
    counts: dict[str, int]
    unparsed: int
    share_limit: float
    stop: tuple[str, ...]
    examples: list[dict]

    @property
    def suspect(self) -> int:
        return sum(self.counts.values())

    @property
    def tripped(self) -> bool:
        return self.n > 0 and self.suspect > self.share_limit * self.n

    def headline(self) -> str:
        if not self.n:
            return "No answer was received, so nothing can be judged."
        parts = ", ".join(f"{k}: {v}" for k, v in self.counts.items() if v)
        if self.tripped:
            text = (f"WARNING: {self.suspect} of {self.n} answers ({100 * self.suspect / self.n:.0f}%) cannot be taken "
                    f"at face value ({parts}); above {100 * self.share_limit:.0f}%, the scores below are marked "
                    f"SUSPECT. {self.unparsed} answer(s) could not be parsed and count as wrong.")
            if self.counts.get(CUT_BY_STOP):
                text += (f" Stop strings {list(self.stop)} were set: vLLM applies them inside a reasoning model's "
                         "thinking too, which cuts answers before their last line. Run with stop=[] to check.")
            elif self.counts.get(HIT_MAX_TOKENS):
                text += " Answers cut at max_tokens end before the answer line: raise max_tokens if the model allows."
            return text
        text = (f"The raw answers look sound: {self.suspect} of {self.n} are cut or lack the answer line"
                + (f" ({parts})" if parts else "") + f", within the {100 * self.share_limit:.0f}% allowed. "
                f"{self.unparsed} answer(s) could not be parsed and count as wrong.")
        if self.stop:
            text += f" Stop strings {list(self.stop)} are set: they also apply inside reasoning."
        return text

    def as_dict(self) -> dict:
        return asdict(self) | {"suspect": self.suspect, "tripped": self.tripped, "headline": self.headline()}


def traps(records: Sequence[dict], stop: Sequence[str] = (), share_limit: float = 0.05, n_examples: int = 3) -> Traps:
    """Count answers cut by a stop string, cut at max_tokens, or missing the answer line; keep raw examples."""
    answers = [r for r in records if "error" not in r and r.get("finish_reason")]
    counts = {CUT_BY_STOP: 0, HIT_MAX_TOKENS: 0, NO_ANSWER_LINE: 0}
    examples, unparsed = [], 0
    for r in answers:
        g = grade(r["answer"], r.get("text", ""), r.get("finish_reason"), stop)
        unparsed += g.pred is None
        if g.flag:
            counts[g.flag] += 1
            if len(examples) < n_examples:
                examples.append({"question_id": str(r["question_id"]), "category": r["category"], "why": g.flag,
                                 "finish_reason": r.get("finish_reason"),
                                 "completion_tokens": r.get("completion_tokens"),
                                 "reasoning_end": _tail(r.get("reasoning", "")),
                                 "content_end": _tail(r.get("text", ""))})
    return Traps(len(answers), counts, unparsed, share_limit, tuple(stop), examples)


def _tail(text: str, n: int = 240) -> str:
    text = text or ""
    return text if len(text) <= n else "..." + text[-n:]


def examples_markdown(t: Traps) -> str:
    """The raw examples, as a reader should see them: where each answer ended."""
    out = []
    for e in t.examples:
        out.append(f"**question {e['question_id']} ({e['category']})**: {e['why']}, finish_reason "
                   f"`{e['finish_reason']}`, {e['completion_tokens']} tokens")
        for part in ("reasoning_end", "content_end"):
            body = e[part].replace("```", "'''") if e[part] else "(empty)"
            out.append(f"{part.replace('_', ' ')}:\n```\n{body}\n```")
    return "\n\n".join(out)


def verdict_markdown(t: Traps) -> str:
    """The verdict on the raw answers, shown at the top of the notebook and its report."""
    if t.tripped:
        counts = " | ".join(f"{k}: **{v}**" for k, v in t.counts.items())
        return f"### ⚠ {t.headline()}\n\nOf {t.n} answers: {counts}."
    return f"**Raw answers checked.** {t.headline()}"


def scores_markdown(s: Scores | None, t: Traps) -> str:
    if s is None:
        return "No answer was received: there is nothing to score."
    mark = "**SUSPECT** (see the check above): " if t.tripped else ""
    text = (f"{mark}**{s.headline.points()}**: the {s.headline_label}, {s.n} questions, "
            f"95% interval ({s.headline.method}).")
    if s.other is not None:
        text += f"\n\n{mark}{s.other.points()}: the {s.other_label}."
    return text + f"\n\n{s.unparsed} answer(s) could not be parsed and count as wrong."


def comparison_markdown(c: Comparison) -> str:
    d = c.difference
    return (f"Rows: {c.a}; columns: {c.b}; {c.pairs.n} questions.\n\n"
            f"- {c.a}: {c.accuracy_a.points()}; {c.b}: {c.accuracy_b.points()}\n"
            f"- difference ({c.a} minus {c.b}): **{d.points(signed=True)}**, 95%, {d.method}\n"
            f"- McNemar's exact test on the {c.pairs.discordant} discordant questions: p = {c.test.pvalue:.3g}\n"
            f"- {_needed_text(c)}")


def _needed_text(c: Comparison) -> str:
    if not c.pairs.discordant:
        return ("the two never disagreed, so how many questions would narrow the interval to "
                f"+/-{100 * c.half_width:.1f} points cannot be estimated from this run")
    return (f"narrowing the interval to +/-{100 * c.half_width:.1f} points would take about {c.needed} questions, "
            "if the two disagree as often as here")


def _counts(df: pd.DataFrame) -> dict[str, tuple[int, int]]:
    return {c: (int(g["correct"].sum()), len(g)) for c, g in df.groupby("category")}


@dataclass(frozen=True)
class Scores:
    headline: stats.Interval
    headline_label: str
    other: stats.Interval | None
    other_label: str | None
    n: int
    unparsed: int


def scores(df: pd.DataFrame, work: Work) -> Scores:
    """The overall accuracy, labelled with what it is an average of."""
    if df.empty:
        raise ValueError("No answer was received; there is nothing to score.")
    counts = _counts(df)
    unparsed = int(df["pred"].isna().sum())
    if work.is_suite:
        return Scores(stats.accuracy(int(df["correct"].sum()), len(df)), f"accuracy on {work.dataset.name}",
                      None, None, len(df), unparsed)
    sizes = work.dataset.sizes()
    macro = stats.stratified(counts, {c: 1.0 for c in counts})
    micro = stats.stratified(counts, {c: sizes[c] for c in counts})
    if work.plan.per_category:
        return Scores(macro, f"macro average of an even draw ({work.plan.per_category} per category)",
                      micro, "micro average, reweighted to the category sizes of the full test set", len(df), unparsed)
    pooled = stats.accuracy(int(df["correct"].sum()), len(df))
    return Scores(pooled, "micro average over the whole test split (the published kind)",
                  macro, "macro average (every category weighted alike)", len(df), unparsed)


def table(df: pd.DataFrame) -> pd.DataFrame:
    """Per category: questions, right, accuracy with its Wilson interval, unparsed and suspect answers."""
    rows = []
    for cat, g in df.groupby("category"):
        ci = stats.accuracy(int(g["correct"].sum()), len(g))
        rows.append({"category": cat, "n": len(g), "right": int(g["correct"].sum()),
                     "accuracy %": 100 * ci.estimate, "95% low": 100 * ci.low, "95% high": 100 * ci.high,
                     "unparsed": int(g["pred"].isna().sum()), "suspect": int(g["flag"].notna().sum())})
    return pd.DataFrame(rows).set_index("category") if rows else pd.DataFrame()


@dataclass(frozen=True)
class Comparison:
    """This run (A) against another (B) on the same questions."""

    a: str
    b: str
    pairs: stats.Pairs
    accuracy_a: stats.Interval
    accuracy_b: stats.Interval
    difference: stats.Interval
    test: stats.Test
    half_width: float
    needed: int
    b_traps: Traps
    settings_differ: dict

    def table(self) -> pd.DataFrame:
        t = self.pairs.table()
        return pd.DataFrame(t, index=[f"{self.a} right", f"{self.a} wrong"],
                            columns=[f"{self.b} right", f"{self.b} wrong"])

    def as_dict(self) -> dict:
        return {"a": self.a, "b": self.b, "pairs": self.pairs.as_dict(), "accuracy_a": self.accuracy_a.as_dict(),
                "accuracy_b": self.accuracy_b.as_dict(), "difference": self.difference.as_dict(),
                "mcnemar": self.test.as_dict(), "half_width": self.half_width, "questions_needed": self.needed,
                "b_traps": self.b_traps.as_dict(), "settings_differ": self.settings_differ}


def compare(df: pd.DataFrame, work: Work, label: str) -> Comparison:
    """The paired comparison with the run named by compare_with, both graded by the same code."""
    other = work.other
    if other is None:
        raise ValueError("compare needs compare_with")
    stop_b = tuple(other.settings.get("stop") or ())
    theirs = frame(other.records, stop_b).set_index("question_id")
    ours = df.set_index("question_id")
    common = [q for q in ours.index if q in theirs.index]
    if len(common) != len(ours):
        raise DataError(f"{len(ours) - len(common)} answered question(s) of this run have no answer in "
                        f"{other.id}; the comparison would not be paired.")
    a = ours.loc[common, "correct"].astype(bool).tolist()
    b = theirs.loc[common, "correct"].astype(bool).tolist()
    pairs = stats.Pairs.of(a, b)
    skip = {"questions", "resume_from", "compare_with", "run_id", "outputs", "seal", "force", "dataset",
            "dataset_source", "target_half_width", "trap_share", "concurrency"}
    mine = work.settings()
    differ = {k: {"a": mine.get(k), "b": other.settings.get(k)} for k in sorted(set(mine) | set(other.settings))
              if k not in skip and mine.get(k) != other.settings.get(k)}
    b_label = other.label if other.label != label else f"{other.label} ({other.id})"
    return Comparison(label, b_label, pairs, stats.accuracy(sum(a), len(a)), stats.accuracy(sum(b), len(b)),
                      stats.paired_difference(pairs), stats.mcnemar(pairs), work.plan.target_half_width,
                      stats.questions_needed(pairs, work.plan.target_half_width),
                      traps(other.records, stop_b, work.plan.trap_share), differ)


def batch_table(batch: Batch, other: PastRun | None = None, label: str = "this run") -> pd.DataFrame:
    """One column per run, so counts stay whole numbers beside the rates."""
    runs = {label: _batch_row(batch.as_dict())}
    if other is not None and other.summary and other.summary.get("batch"):
        runs[f"{other.label} ({other.id})"] = _batch_row(other.summary["batch"])
    return pd.DataFrame(runs, dtype=object)


def _batch_row(b: dict) -> dict:
    share = b.get("client_cpu_share")
    outside = b.get("outside_server_share")
    return {"asked": b["asked"], "reused": b["reused"], "concurrency": b["concurrency"],
            "wall time min": b["wall_s"] / 60, "generated tokens": b["completion_tokens"],
            "batch tok/s": b.get("tokens_per_s"),
            "client CPU % of wall": None if share is None else 100 * share,
            "request time outside vLLM %": None if outside is None else 100 * outside}


def findings(df: pd.DataFrame, work: Work, t: Traps, s: Scores | None, batch: Batch | None,
             cmp: Comparison | None = None) -> list[str]:
    """Plain sentences: what the numbers say, and every reason to doubt them, the worst first."""
    notes = [t.headline()]
    mark = "SUSPECT: " if t.tripped else ""
    if s is not None:
        notes.append(f"{mark}Accuracy {s.headline.points()} over {s.n} questions: the {s.headline_label} "
                     f"(95% interval, {s.headline.method}).")
        if s.other is not None:
            notes.append(f"{mark}The {s.other_label}: {s.other.points()}. MMLU-Pro's published scores are micro "
                         "averages; a harness and temperature different from the vendor's also move the number.")
        notes.append(f"{s.unparsed} of {s.n} answers could not be parsed; they count as wrong (the reference "
                     "scripts would have scored them as random guesses).")
    missing = len(work.questions) - len(df)
    if missing:
        notes.append(f"WARNING: {missing} of the {len(work.questions)} questions have no answer (stopped or failed); "
                     "the scores cover the answered ones only. Finish with resume_from.")
    if work.reused:
        notes.append(f"{len(work.reused)} answer(s) were reused from run {work.resumed.id}; only the others were "
                     "asked, and only those count in the speed figures.")
    for note in work.dataset.notes:
        notes.append(f"Data: {note}.")
    if batch is not None and batch.asked:
        notes.append(f"{batch.asked} requests at concurrency {batch.concurrency} took {_duration(batch.wall_s)} and "
                     f"generated {batch.completion_tokens} tokens: {batch.tokens_per_s:.1f} tok/s for the batch. "
                     "Batched throughput is not single-stream speed: in the seed study the batch ratio between two "
                     "models was 1.2x where single-stream decode differed 3x.")
        if batch.client_cpu_share is not None:
            notes.append(f"The client used {100 * batch.client_cpu_share:.1f}% of the wall time in CPU (all its "
                         "threads); the rest it spent waiting on the server."
                         + (f" {100 * batch.outside_server_share:.1f}% of the request time it saw is not in vLLM's "
                            "own end-to-end time (network, queuing in the client, reading the stream)."
                            if batch.outside_server_share is not None else ""))
        if batch.prefix_cache_hit_rate:
            notes.append(f"{100 * batch.prefix_cache_hit_rate:.0f}% of prompt tokens came from the prefix cache: "
                         "questions of one category share their worked examples.")
        if batch.interference:
            notes.append(f"WARNING: {batch.interference}.")
    if cmp is not None:
        d = cmp.difference
        notes.append(f"{cmp.a} against {cmp.b} on the same {cmp.pairs.n} questions: {cmp.accuracy_a.points()} and "
                     f"{cmp.accuracy_b.points()}; difference {d.points(signed=True)} (95%, Bonett-Price, paired).")
        detect = d.low > 0 or d.high < 0
        notes.append(f"They disagree on {cmp.pairs.discordant} questions ({cmp.pairs.a_only} only {cmp.a} got right, "
                     f"{cmp.pairs.b_only} only {cmp.b}); McNemar's exact test p = {cmp.test.pvalue:.3g}. "
                     + ("The difference is detectable at this size." if detect else
                        "No detectable difference at this size: that is not evidence the two are equal."))
        text = _needed_text(cmp)
        notes.append(text[0].upper() + text[1:] + ".")
        if cmp.b_traps.tripped:
            b = cmp.b_traps
            notes.append(f"WARNING: the other run's raw answers are suspect too: {b.suspect} of {b.n} are cut or "
                         "lack the answer line (" + ", ".join(f"{k}: {v}" for k, v in b.counts.items() if v) + ").")
        if cmp.settings_differ:
            notes.append("The runs differ in: " + "; ".join(f"{k} ({v['a']!r} here, {v['b']!r} there)"
                                                            for k, v in cmp.settings_differ.items()) + ".")
    return notes


def _duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.1f} min"


def plot(df: pd.DataFrame, label: str, cmp_df: pd.DataFrame | None = None, cmp_label: str = ""):
    """Accuracy per category with 95% Wilson intervals; the compared run beside it."""
    import matplotlib.pyplot as plt

    runs = [(label, df)] + ([(cmp_label, cmp_df)] if cmp_df is not None else [])
    cats = sorted(df["category"].unique())
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(cats) + 1.5))
    height = 0.8 / len(runs)
    for i, (name, d) in enumerate(runs):
        t = table(d[d["question_id"].isin(df["question_id"])]).reindex(cats)
        y = [k + (i - (len(runs) - 1) / 2) * height for k in range(len(cats))]
        ax.barh(y, t["accuracy %"], height=height, label=name, alpha=0.8,
                xerr=[t["accuracy %"] - t["95% low"], t["95% high"] - t["accuracy %"]], capsize=2)
    ax.set_yticks(range(len(cats)), cats)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel("accuracy % (95% Wilson interval)")
    ax.set_title(f"Accuracy per category: {label}" + (f" against {cmp_label}" if cmp_df is not None else ""))
    ax.grid(axis="x", alpha=0.3)
    if len(runs) > 1:
        ax.legend()
    fig.tight_layout()
    return fig


def summary(df: pd.DataFrame, work: Work, t: Traps, s: Scores | None, batch: Batch | None,
            cmp: Comparison | None, notes: list[str]) -> dict:
    return {
        "suspect": t.tripped,
        "traps": t.as_dict(),
        "questions": len(work.questions), "answered": len(df),
        "accuracy": None if s is None else {"label": s.headline_label, **s.headline.as_dict()},
        "accuracy_other": None if s is None or s.other is None else {"label": s.other_label, **s.other.as_dict()},
        "unparsed": None if s is None else s.unparsed,
        "per_category": table(df).reset_index().to_dict(orient="records") if len(df) else [],
        "batch": None if batch is None else batch.as_dict(),
        "comparison": None if cmp is None else cmp.as_dict(),
        "findings": notes,
    }
