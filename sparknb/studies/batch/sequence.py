"""A graded batch asked sequentially: the one path every graded study takes (MMLU-Pro, HumanEval, the next one).

`sequential: true` asks a run's items in a seeded random order of its draw (by `seed`), up to `budget`; with
`compare_with`, the run is B: it asks the other run's answered items in that run's order, each graded answer
feeds the confidence sequence (sparknb.verdicts.sequential), and the batch sends nothing more once it decides. A study
says which of its settings records the draw's ids (`Sequential.drawn`); the record's field that names an item
and the one that says it was right are those it hands the batch (`Questions.right`).

A sequential run that stopped on its sequence's decision left the rest unasked on purpose: that is said as a
fact of the run, never as a warning, which would caveat the very row the sequence decides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, ClassVar, TypeVar

from pydantic import Field

from ...runs import plan
from ...runs.plan import IGNORED
from ...runs.run import PastRun
from ...verdicts import sequential
from ...verdicts.sequential import markdown, plot
from ...verdicts.stats import Interval
from .ask import Batch

__all__ = ["Sequential", "held", "live", "markdown", "of_run", "ordered", "plot"]

T = TypeVar("T")


class Sequential(plan.Plan):
    """The parameters of a graded study that may be asked sequentially."""

    drawn: ClassVar[str] = "questions"  # the setting a run records its draw's ids in
    unit: ClassVar[str] = "questions"  # what an item is called
    seed: Annotated[int, IGNORED] = Field(0, description="seed of the order a sequential run asks in, a whole "
                                          "number")
    sequential: Annotated[bool, IGNORED] = Field(False, description="true: asked in a seeded random order, and "
                                                 "with compare_with, stopped as soon as the paired difference is "
                                                 "decided")
    margin: Annotated[float, IGNORED] = Field(0.03, gt=0, lt=1, description="a fraction, e.g. 0.03 for 3 points: a "
                                              "sequential run calls a smaller difference equivalent")
    budget: Annotated[int, IGNORED] = Field(0, ge=0, description="the most items a sequential run asks, 0 or more; "
                                            "0 asks them all")


def ordered(plan: Sequential, items: Sequence[T], id_of: Callable[[T], str], live: sequential.Live | None) -> list[T]:
    """The items a run asks, in the order it asks them: as drawn; a sequential run's in its seeded order (against
    compare_with, the other run's order of what it answered), up to its budget."""
    if not plan.sequential:
        return list(items)
    by_id = {id_of(item): item for item in items}
    ids = live.ids if live else sequential.order(by_id, plan.seed)
    return [by_id[q] for q in ids[: plan.budget or None]]


def live(plan: Sequential, right: Mapping[str, bool], reused: Sequence[dict], key: str,
         field: str) -> sequential.Live | None:
    """The sequence against compare_with (`right`: its answers, right or not, by id), in its order, fed first with
    the answers reused from resume_from: the state of a run never interrupted. None: not sequential against one."""
    other = plan.other
    if not plan.sequential or other is None:
        return None
    ids = sequential.a_order(other, right, type(plan).drawn)
    fed = sequential.Live(ids, right, sequential.design_of(plan.model_dump(), len(ids)), key)
    for r in reused:
        fed.add(r[key], r[field])
    return fed


def held(a: PastRun, b: PastRun, a_right: Mapping[str, bool], b_right: Mapping[str, bool],
         plan: type[Sequential]) -> tuple[Interval, int, str, dict] | None:
    """B's sealed run, planned sequential, against A's, as a verdict row carries it (sequential.from_runs); None
    for a fixed-sample run."""
    if not sequential.design_of(b.settings, 1):
        return None
    return sequential.from_runs(a, b, a_right, b_right, plan.drawn, plan.unit)


def of_run(work, right: Mapping[str, bool], batch: Batch) -> dict | None:
    """This run's sequence replayed from its own graded answers (`right`, by id) in the other run's order, with
    what a question not asked saves (the batch's seconds per question): what its notebook shows and seals. None:
    not sequential against another run."""
    pace = batch.wall_s / batch.asked if batch.asked else None
    return sequential.of_run(work.live, right, pace, type(work.plan).unit)
