"""The MMLU-Pro study's parameters, the earlier runs they name, and the work decided before any request.

The parameters are checked together and every problem named at once; `resume_from` and
`compare_with` are read once, from their seals, when the plan is built; the questions are drawn and
matched against those runs, and every prompt is measured by the server's tokenizer, before the run
lock is taken or a folder made.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from ...endpoint.client import Endpoint, ServerInfo
from ...errors import DataError, ParamsError
from ...runs.plan import COMPARED, IGNORED, RESUMED
from ...runs.run import PastRun
from ..batch.plan import Concurrency, MaxTokens, Past, Prepared, Stop, Temperature, TrapShare, compare_with, resume_from
from ..batch.sequence import Sequential, ordered
from .data import Dataset, Question, draw, load, load_suite
from .grading import answered, frame
from .prompt import messages

NOTEBOOK = "mmlu_pro"


class Plan(Sequential):
    study: ClassVar[str] = NOTEBOOK
    recorded: ClassVar = {"dataset_name": (COMPARED, RESUMED), "dataset_source": (IGNORED,), "questions": (IGNORED,)}
    dataset: Annotated[str, IGNORED] = Field(
        "hub", description='"hub", a folder holding the two parquet files of TIGER-Lab/MMLU-Pro, or "auto": the hub '
        'where it can be had, else the demo questions shipped with sparknb (not MMLU-Pro, and named so)')
    per_category: int = Field(20, ge=0, description="questions drawn per category, 0 or more; 0 asks the whole "
                              "test split")
    seed: int = Field(0, description="seed of the draw and of a sequential run's order, a whole number")
    shots: Annotated[int, COMPARED, RESUMED] = Field(5, ge=0, le=5, description="worked examples per prompt, 0 to 5: "
                                                     "the validation split has 5 per category")
    suite: str = Field("", description="a JSONL file of your own questions, or empty for MMLU-Pro")
    max_tokens: MaxTokens
    temperature: Temperature
    prompt_format: Annotated[Literal["sparknb", "lm-eval"], COMPARED, RESUMED] = Field(
        "sparknb", description='"sparknb" (one user turn, the "N/A" padding left out) or "lm-eval": lm-evaluation-'
        "harness's mmlu_pro request under --apply_chat_template, byte for byte (the lm-eval rule set's score is what "
        "lm-eval would print only then)")
    stop: Stop = Field(
        [], description="a list of non-empty stop strings, e.g. ['Question:']; none by default")
    concurrency: Concurrency
    trap_share: TrapShare
    resume_from: Past = resume_from(NOTEBOOK)
    compare_with: Past = compare_with(NOTEBOOK, "questions")
    target_half_width: Annotated[float, IGNORED] = Field(0.02, gt=0, lt=1, description="a fraction, e.g. 0.02 for 2 "
                                                         "points")


@dataclass
class Work(Prepared[Plan, Dataset]):
    """Everything decided before the first request: the questions, their prompts, reused answers."""

    questions: list[Question]
    prompts: dict[str, list[dict]]  # each question's chat messages, in the plan's prompt format

    @property
    def ids(self) -> list[str]:
        return [q.id for q in self.questions]

    @property
    def is_suite(self) -> bool:
        """Questions of a suite (yours, or the demo's own), asked zero-shot: there are no worked examples."""
        return bool(self.plan.suite) or not self.dataset.validation

    def todo(self) -> list[Question]:
        """The questions still to ask: those without a reused answer, in draw order; a sequential run's in its
        seeded order (against compare_with, that run's), up to its budget."""
        reused = {str(r["question_id"]) for r in self.reused}
        return [q for q in self.in_order() if q.id not in reused]

    def in_order(self) -> list[Question]:
        return ordered(self.plan, self.questions, lambda q: q.id, self.live)

    def settings(self) -> dict:
        """What params.json records: the parameters, the data's identity, and the questions drawn."""
        return self.plan.settings() | {
            "model": self.model, "dataset_name": self.dataset.name, "dataset_source": self.dataset.source,
            "dataset_sha256": self.dataset.sha256, "dataset_notes": list(self.dataset.notes),
            "shots": 0 if self.is_suite else self.plan.shots, "questions": self.ids}

    def check_server(self, server: ServerInfo, endpoint: Endpoint) -> None:
        """Before the lock is taken: every prompt to be asked, measured by the server's own tokenizer with
        the chat template, plus max_tokens must fit the context, or the server would refuse it halfway."""
        limit = self.room(server)
        todo = self.todo()
        if not todo:
            return
        counts = prompt_tokens(endpoint, self, todo)
        qid, longest = max(counts.items(), key=lambda kv: kv[1])
        if limit is not None and longest + self.plan.max_tokens > limit:
            over = sum(n + self.plan.max_tokens > limit for n in counts.values())
            raise ParamsError(f"The longest prompt (question {qid}) is {longest} tokens by the server's own "
                              f"tokenizer, chat template included; with max_tokens={self.plan.max_tokens} it exceeds "
                              f"{server.model}'s max_model_len of {limit}, and so do {over} of the {len(counts)} "
                              f"prompts. Lower max_tokens to {limit - longest} or less, or use fewer shots.")
        self.longest = (qid, longest)


def prompt_tokens(endpoint: Endpoint, work: Work, questions: list[Question]) -> dict[str, int]:
    """Each question's prompt in tokens, as the server will see it (chat template included)."""
    with ThreadPoolExecutor(max_workers=work.plan.concurrency, thread_name_prefix="mmlu-pro-tokenize") as pool:
        counts = pool.map(lambda q: len(endpoint.tokenize_chat(work.prompts[q.id])), questions)
        return dict(zip((q.id for q in questions), counts))


def prepare(plan: Plan, model: str, dataset: Dataset | None = None) -> Work:
    """Load and draw the questions and match them against the earlier runs: every refusal comes before a request.

    `dataset`, when given, is drawn from instead of loading the one the plan names.
    """
    if dataset is None:
        dataset = load_suite(plan.suite) if plan.suite else load(plan.dataset)
    questions = list(dataset.test) if plan.suite else draw(dataset, plan.per_category, plan.seed)
    prompts = {q.id: messages(q, dataset.examples(q.category, plan.shots), plan.prompt_format) for q in questions}
    return Work(plan, model, dataset, questions, prompts).matched(_reusable, _check_comparable, right, "question_id",
                                                                  "correct")


def right(run: PastRun) -> dict[str, bool]:
    """Each question a run answered: right or not, graded afresh by this code."""
    graded = frame(run.records, tuple(run.settings.get("stop") or ())).set_index("question_id")["correct"]
    return {str(q): bool(c) for q, c in graded.items()}


def _reusable(past: PastRun, work: Work) -> list[dict]:
    work.plan.check_resume(past, work.settings())
    done = answered(past.records)
    return [done[q.id] for q in work.questions if q.id in done]


def _check_comparable(other: PastRun, work: Work) -> None:
    work.same_items(other, "in this draw", f"It was drawn with per_category={other.settings.get('per_category')}, "
                    f"seed={other.settings.get('seed')}, suite={other.settings.get('suite')!r}; draw the same way to "
                    "compare.")
    missing = set(work.ids) - set(answered(other.records))
    if missing and not work.plan.sequential:  # a sequential run asks only what the other answered, in its order
        raise DataError(f"compare_with {other.id} has no finished answer to {len(missing)} of the {len(work.ids)} "
                        f"questions. Finish it first: run it again with resume_from={other.id!r}.")
