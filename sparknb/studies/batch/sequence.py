"""A graded batch asked sequentially: the one path every graded study takes (MMLU-Pro, HumanEval, the next one).

`sequential: true` asks a run's items in a seeded random order of its draw (by `seed`), up to `budget`; with
`compare_with`, the run is B: it asks the other run's answered items in that run's order, each graded answer
feeds the confidence sequence (sparknb.verdicts.sequential), and the batch sends nothing more once it decides.
A study says which of its settings records the draw's ids (`Sequential.drawn`) and what an item is called
(`unit`); the record's fields that name an item and say it was right are those it hands the batch.

The plot of a sequence (its notebook's and the comparison report's) is here too: the interval narrowing as the
answers arrive, the margin band set before the run, and where it stopped.

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
from ...verdicts.sequential import markdown
from ...verdicts.stats import Interval
from .ask import Batch

__all__ = ["Sequential", "held", "live", "markdown", "of_run", "ordered", "plot"]

T = TypeVar("T")


class Sequential(plan.Plan):
    """The parameters of a graded study that may be asked sequentially."""

    drawn: ClassVar[str] = "questions"  # the setting a run records its draw's ids in
    unit: ClassVar[str] = "questions"  # what an item is called
    key: ClassVar[str] = "question_id"  # the field of a record that names its item
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


def plot(seq: Mapping, title: str, subject: str, base: str):
    """The sequence narrowing as answers arrive (valid at every count), the margin band, and where it stopped."""
    from matplotlib.figure import Figure

    n, low, high, estimate = (list(x) for x in zip(*seq["path"])) if seq["path"] else ([], [], [], [])
    margin = 100 * seq["design"]["margin"]
    fig = Figure(figsize=(8.5, 3.6))
    ax = fig.subplots()
    ax.axhspan(-margin, margin, color="grey", alpha=0.15, label=f"+/-{margin:.0f}-point margin")
    ax.axhline(0, color="grey", ls=":")
    ax.fill_between(n, [100 * x for x in low], [100 * x for x in high], color="C0", alpha=0.3,
                    label="95% confidence sequence")
    ax.plot(n, [100 * x for x in estimate], color="C0", lw=1, label="difference so far")
    if seq.get("stopped_at"):
        ax.axvline(seq["stopped_at"], color="C3", ls="--", label=f"stopped at {seq['stopped_at']:,}: {seq['outcome']}")
    k = min(len(n) - 1, 20)  # the first answers' sequence spans +/-100 points: scale to where it has narrowed
    span = min(100.0, max([3 * margin] + ([100 * abs(low[k]), 100 * abs(high[k])] if n else [])))
    ax.set_ylim(-span, span)
    ax.set_xlabel(f"{seq.get('unit', 'questions')} answered by both, in the first run's order")
    ax.set_ylabel(f"{subject} minus {base} (points)")
    ax.set_title(f"{title}, sequential", fontsize=10)
    ax.legend(fontsize=8, loc="upper right")
    return fig
