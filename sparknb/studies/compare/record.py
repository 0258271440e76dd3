"""A comparison is a run folder too: what it compared, what it concluded, sealed with its report."""

from __future__ import annotations

from ...runs.report import Finding, as_records
from ...runs.run import Run
from .headline import Headline
from .plan import Plan

NOTEBOOK = "compare"


def open_run(plan: Plan, *, run_id: str = "", outputs: str = "") -> Run:
    """Claimed only after every run compared has been read and verified (and pinned: Plan.settings)."""
    params = {"notebook": NOTEBOOK, "settings": plan.settings(),
              "compared": [{"notebook": r.notebook, "model": r.label, "run_id": r.id} for r in plan.past]}
    run = Run.create(NOTEBOOK, params, run_id=run_id, outputs=outputs,
                     label="-".join(plan.models()) or "comparison")
    print(f"comparison {run.id}: {len(plan.past)} sealed runs of {', '.join(plan.models())}; writing {run.path}",
          flush=True)
    return run


def finish(run: Run, headlines: list[tuple[str, Headline]], paragraph: str, notes: list[Finding], seal: bool = True,
           *, run_warnings=None, missing: list[str] = ()) -> None:
    """The comparison's summary: each headline (one per box where models are compared box by box) with every
    row's standing and decision, the verdict, the comparison's own warnings, every warning of the runs compared
    (by run), and the studies missing. `headline` is the first, for a reader of one box."""
    run.write_json("summary.json", {"headline": headlines[0][1].as_dict(),
                                    "headlines": [{"title": t, **h.as_dict()} for t, h in headlines],
                                    "story": paragraph, "findings": as_records(notes),
                                    "run_warnings": run_warnings.as_dict() if run_warnings else {},
                                    "missing": list(missing)})
    if seal:
        run.seal()
    print(f"comparison folder: {run.path}")
