"""The BFCL study's parameters, the earlier runs they name, and the work decided before any request: the items
drawn evenly per category (seeded), matched against resume_from and compare_with from their seals, before the run
lock is taken or a folder made."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field

from ...endpoint.client import Endpoint, ServerInfo
from ...errors import DataError
from ...runs.params import load_model
from ...runs.plan import COMPARED, IGNORED, RESUMED
from ...runs.run import PastRun
from ..batch import bfcl
from ..batch.plan import Concurrency, MaxTokens, Past, Prepared, Temperature, TrapShare, compare_with, resume_from
from ..batch.sequence import Sequential, ordered
from .prompt import FORMATS

NOTEBOOK = "bfcl"
CATEGORIES = ("simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance")
Category = Literal["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"]


class Plan(Sequential):
    study: ClassVar[str] = NOTEBOOK
    drawn: ClassVar[str] = "items"
    unit: ClassVar[str] = "tasks"
    key: ClassVar[str] = "item"
    recorded: ClassVar = {"dataset_sha256": (COMPARED, RESUMED), "items": (IGNORED,)}
    categories: Annotated[list[Category], COMPARED, RESUMED] = Field(
        list(CATEGORIES), min_length=1, description="BFCL's single-turn categories to draw from")
    per_category: int = Field(10, ge=0, description="items drawn per category, 0 or more; 0 asks every one")
    seed: int = Field(0, description="seed of the draw and of a sequential run's order, a whole number")
    format: Annotated[Literal["native", "prompt", "model"], RESUMED] = Field(
        "native", description='"native": the functions as OpenAI tools, the calls read from tool_calls; "prompt": '
        "BFCL's system prompt, the calls written as [func(arg=value)] in the answer; \"model\": as the model's "
        "params say (tool_format), native where they say nothing")
    max_tokens: MaxTokens
    temperature: Temperature
    concurrency: Concurrency
    trap_share: TrapShare
    resume_from: Past = resume_from(NOTEBOOK)
    compare_with: Past = compare_with(NOTEBOOK, "items")
    target_half_width: Annotated[float, IGNORED] = Field(0.05, gt=0, lt=1, description="a fraction, e.g. 0.05 for "
                                                         "5 points")


@dataclass(frozen=True)
class Item:
    id: str
    category: str
    entry: dict
    answer: list  # BFCL's possible answer (ground_truth); empty for irrelevance


@dataclass
class Work(Prepared[Plan, dict]):
    """Everything decided before the first request: the items and the answers reused."""

    items: list[Item]

    @property
    def ids(self) -> list[str]:
        return [i.id for i in self.items]

    def in_order(self) -> list[Item]:
        return ordered(self.plan, self.items, lambda i: i.id, self.live)

    def todo(self) -> list[Item]:
        reused = {str(r["item"]) for r in self.reused}
        return [i for i in self.in_order() if i.id not in reused]

    def settings(self) -> dict:
        return self.plan.settings() | {"model": self.model, "dataset_name": self.dataset["name"],
                                       "dataset_sha256": self.dataset["sha256"], "items": self.ids}

    def check_server(self, server: ServerInfo, endpoint: Endpoint) -> None:
        """Before the lock is taken: max_tokens must leave room for a prompt in the model's context."""
        self.room(server)


def draw(plan: Plan) -> list[Item]:
    """`per_category` items of each category, the same on any machine for a seed, in the file's order."""
    items = []
    for category in plan.categories:
        entries, answers = bfcl.entries(category), bfcl.answers(category) if category != "irrelevance" else {}
        k = len(entries) if plan.per_category == 0 else min(plan.per_category, len(entries))
        chosen = sorted(random.Random(f"{plan.seed}:{category}").sample(range(len(entries)), k))
        items += [Item(entries[i]["id"], category, entries[i],
                       answers.get(entries[i]["id"], {}).get("ground_truth", [])) for i in chosen]
    return items


def prepare(plan: Plan, model: str) -> Work:
    """Draw the items and match them against the earlier runs: every refusal comes before a request."""
    from .scores import right

    if plan.format == "model":  # resolved once: the run records the format it asked in
        plan = plan.model_copy(update={"format": load_model(model).tool_format or "native"})
    dataset = {"name": f"BFCL v4 ({bfcl.WHEEL['package']} {bfcl.WHEEL['version']})", "sha256": bfcl.WHEEL["sha256"]}
    work = Work(plan, model, dataset, draw(plan))
    return work.matched(_reusable, _comparable, right, "item", "correct")


def _reusable(past: PastRun, work: Work) -> list[dict]:
    work.plan.check_resume(past, work.settings())
    done = {str(r["item"]): r for r in past.records if "correct" in r}
    return [done[i] for i in work.ids if i in done]


def _comparable(other: PastRun, work: Work) -> None:
    work.same_items(other, "in this draw", f"It was drawn with per_category={other.settings.get('per_category')}, "
                    f"seed={other.settings.get('seed')}; draw the same way to compare.")
    missing = set(work.ids) - {str(r["item"]) for r in other.records if "correct" in r}
    if missing and not work.plan.sequential:
        raise DataError(f"compare_with {other.id} has no finished answer to {len(missing)} of the {len(work.ids)} "
                        f"items. Finish it first: run it again with resume_from={other.id!r}.")


__all__ = ["CATEGORIES", "FORMATS", "NOTEBOOK", "Item", "Plan", "Work", "draw", "prepare"]
