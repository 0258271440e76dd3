"""What every graded study's plan holds alike (MMLU-Pro, HumanEval, the next one): the parameters it takes, each said
once with its marks, its checks, its default and what it means (a study's Plan names them among its own, in its own
order), and the work prepared before the first request (a study's Work adds its own items)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Self, TypeVar

from pydantic import Field

from ...endpoint.client import ServerInfo
from ...errors import DataError, ParamsError
from ...runs import plan
from ...runs.plan import COMPARED, IGNORED, RESUMED
from ...runs.run import PastRun
from ...verdicts import sequential
from .sequence import live

P = TypeVar("P")  # a study's Plan
D = TypeVar("D")  # a study's data

MaxTokens = Annotated[int, COMPARED, RESUMED, Field(8192, ge=1, description="the longest answer in tokens, reasoning "
                                                    "included, 1 or more")]
Temperature = Annotated[float, COMPARED, RESUMED, Field(0.0, ge=0, le=2, description="between 0 and 2; 0 is greedy")]
Stop = Annotated[list[Annotated[str, Field(min_length=1)]], COMPARED, RESUMED]  # a study gives its own example
Concurrency = Annotated[int, IGNORED, Field(8, ge=1, description="requests in flight at once, 1 or more")]
TrapShare = Annotated[float, IGNORED, Field(0.05, ge=0, lt=1, description="a fraction between 0 and 1, e.g. 0.05")]
Past = Annotated[str, IGNORED]  # resume_from, compare_with: one earlier run of the same study


def resume_from(study: str) -> Any:
    return Field("", description=f"an earlier {study} run folder or run id")


def compare_with(study: str, items: str) -> Any:
    return Field("", description=f"another {study} run folder or run id on the same {items}")


@dataclass
class Prepared(plan.Prepared, Generic[P, D]):
    """What a graded study decides before its first request, beside its own items (a study's Work adds them): the
    plan, the model and the data; the answers reused from resume_from, the longest prompt once measured, and a
    sequential run's live sequence against compare_with."""

    plan: P
    model: str
    dataset: D
    reused: list[dict] = field(default_factory=list, kw_only=True)
    longest: tuple[str, int] | None = field(default=None, kw_only=True)  # (item, tokens) of the longest prompt to ask
    live: sequential.Live | None = field(default=None, kw_only=True)  # stops the batch once the sequence decides

    def room(self, server: ServerInfo) -> int | None:
        """Before the lock is taken: the server's context (None where it does not say), refused where max_tokens
        alone fills it."""
        limit = server.max_model_len
        if limit is not None and self.plan.max_tokens >= limit:
            raise ParamsError(f"max_tokens={self.plan.max_tokens} leaves no room for a prompt in {server.model}'s "
                              f"max_model_len of {limit}. Lower max_tokens.")
        return limit

    def same_items(self, other: PastRun, where: str, how: str) -> None:
        """compare_with asked this run's items (the ids its settings record under the plan's `drawn`), else refused
        naming how many differ, `where` those it lacks are not, and `how` to ask the same."""
        theirs, ours = set(map(str, other.settings.get(type(self.plan).drawn, []))), set(self.ids)
        if theirs != ours:
            raise DataError(f"compare_with {other.id} asked other {type(self.plan).unit}: {len(theirs - ours)} of its "
                            f"{len(theirs)} are not {where} and {len(ours - theirs)} of these {len(ours)} are not in "
                            f"it. {how}")

    def matched(self, reusable: Callable[[PastRun, Any], list[dict]], comparable: Callable[[PastRun, Any], None],
                right: Callable[[PastRun], Mapping[str, bool]], key: str, right_field: str) -> Self:
        """The earlier runs the plan read, matched: resume_from's answers that `reusable` keeps, compare_with checked
        by `comparable`, and a sequential run's live sequence fed from compare_with's answers (`right`: each item
        right or not; `key` and `right_field`: the record's fields naming an item and saying it was right)."""
        if self.plan.resumed is not None:
            self.reused = reusable(self.plan.resumed, self)
        if self.plan.other is not None:
            comparable(self.plan.other, self)
        if self.plan.sequential and self.plan.other is not None:
            self.live = live(self.plan, right(self.plan.other), self.reused, key, right_field)
        return self
