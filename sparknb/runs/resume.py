"""Finishing a sweep that failed halfway (decode's lengths, load's levels), as mmlu_pro's resume_from finishes a batch.

The earlier run is read from its seal (plan.Plan.build) and refused, before anything starts, where a setting that
changes what is measured differs (plan.RESUMED, the model included). What it finished is copied into the new run,
each record marked `resumed_from`, and only the rest is measured: the new run holds the whole sweep, the way
it would have, and says which of its records came from where.
"""

from __future__ import annotations

from collections.abc import Callable

from .plan import Plan
from .study import Study

RESUMED_FROM = "resumed_from"


def reusable(plan: Plan, model: str, finished: Callable[[list[dict]], list[dict]]) -> list[dict]:
    """The records of plan.resumed that `finished` keeps (none without resume_from), once its settings are checked
    against this run's (`model` as the notebook names it)."""
    past = plan.resumed
    if past is None:
        return []
    plan.check_resume(past, plan.settings() | {"model": model})
    return finished(past.records)


def copy(study: Study, plan: Plan, records: list[dict], log: Callable[[str], None] = print) -> None:
    """Put the reused records into the new run, marked with the run they came from, before any request."""
    for r in records:
        study.run.record({**r, RESUMED_FROM: plan.resumed.id})
    if plan.resumed is not None:
        log(f"{len(records)} record(s) reused from {plan.resumed.id}; measuring only what it did not finish.")
