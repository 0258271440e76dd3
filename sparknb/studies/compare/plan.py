"""Which sealed runs to compare: run folders or ids, or every finished cell of a campaign."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, PrivateAttr, model_validator

from ...runs import plan
from ...runs.report import first_line
from ...runs.run import PastRun, read_past
from ...verdicts.verdict import Runs
from .. import registry


def box_of(run: PastRun) -> str:
    """A run's box: the name it was measured under in a campaign across boxes, else the host's name."""
    fp = run.fingerprint
    return (fp.get("box") or {}).get("name") or (fp.get("host") or {}).get("hostname") or "unknown box"


def across_models(notebook: str) -> bool:
    """A study that visits every model itself (swap): its run is no one model's, and compares no model."""
    contract = registry.find(notebook)
    return bool(contract and contract.across_models)


class Plan(plan.Plan):
    study: ClassVar[str] = "compare"
    runs: list[str] = Field(default_factory=list, description="run folders or run ids of any study")
    campaign: str = Field("", description="a campaign id under outputs/campaigns/: all its finished cells; with "
                          "neither, the newest campaign")
    _past: list[PastRun] = PrivateAttr(default_factory=list)
    _campaign: str = PrivateAttr("")

    @model_validator(mode="after")
    def _read(self) -> Plan:
        """Every run read once, its seal verified; one `sparknb verify` does not call trusted is refused by name."""
        from ...boxes import campaign

        chosen = self.campaign or ("" if self.runs else campaign.latest(self.outputs) or "")
        values = list(self.runs) + (campaign.runs(chosen, self.outputs) if chosen else [])
        if not values:
            raise ValueError("there is nothing to compare: give `runs` (run folders or ids) or a `campaign` id, or "
                             "run `make demo` for the demo's campaign")
        self._campaign = chosen
        self._past = read_past(values, None, what="runs", outputs=self.outputs)
        return self

    @property
    def past(self) -> list[PastRun]:
        return list(self._past)

    @property
    def read(self) -> list[PastRun]:
        return self.past

    def by_study(self, runs: list[PastRun] | None = None, key=None) -> dict[str, dict[str, PastRun]]:
        """notebook -> subject (the model label, or `key(run)`) -> its run; a later run replaces an earlier one."""
        out: dict[str, dict[str, PastRun]] = {}
        for run in sorted(self._past if runs is None else runs, key=lambda r: r.id):  # ids begin with their start
            out.setdefault(run.notebook, {})[key(run) if key else run.label] = run
        return out

    def question(self) -> str:
        """The campaign's own question, said above the verdict ("" for runs given one by one)."""
        from ...boxes import campaign

        return campaign.question(self._campaign, self.outputs) if self._campaign else ""

    def models(self) -> list[str]:
        """The models in the order given: the first is the base every ratio divides by."""
        return list(dict.fromkeys(r.label for r in self._past if not across_models(r.notebook)))

    def boxes(self) -> list[str]:
        """The boxes the runs were measured on, by the name a box joined a cluster with, else by its host name;
        in a campaign's order of boxes (the first is the base), else in the order the runs were given."""
        seen = list(dict.fromkeys(box_of(r) for r in self._past))
        order = []
        if self._campaign:
            from ...boxes import campaign

            order = [b for b in campaign.boxes(self._campaign, self.outputs) if b in seen]
        return order + [b for b in seen if b not in order]

    def mode(self) -> str:
        """models (one box), boxes (one model on several), models per box, or setups (each box another model)."""
        boxes, models = self.boxes(), self.models()
        if len(boxes) < 2:
            return "models"
        if len(models) == 1:
            return "boxes"
        return "models per box" if len(self.comparisons()) > 1 else "setups"

    def comparisons(self) -> list[tuple[str, Runs]]:
        """What is set side by side, and under what heading:
        - one box: the models;
        - one model on several boxes: the boxes (the question itself, not a caveat);
        - several models on each of several boxes: the models, box by box (each ratio within one box);
        - otherwise (each box a different model): the models as setups, every row caveated for the boxes."""
        boxes, models = self.boxes(), self.models()
        if len(boxes) < 2:
            return [("", Runs(self.by_study(), models))]
        if len(models) == 1:
            return [(f"{models[0]} on each box", Runs(self.by_study(key=box_of), boxes))]
        per_box = {b: [r for r in self._past if box_of(r) == b] for b in boxes}
        if all(len({r.label for r in runs if not across_models(r.notebook)}) > 1 for runs in per_box.values()):
            return [(f"on {b}", Runs(self.by_study(runs), [m for m in models if any(r.label == m for r in runs)]))
                    for b, runs in per_box.items()]
        where = "; ".join(f"{m} on {', '.join(sorted({box_of(r) for r in self._past if r.label == m}))}" for m in models)
        return [("", Runs(self.by_study(), models, f"measured on different boxes ({where}): a comparison of setups"))]

    def compared(self) -> Runs:
        """The first (for one box, the only) comparison."""
        return self.comparisons()[0][1]

    def missing(self) -> list[str]:
        """Every study that is not compared for every model, and why: a campaign's failed cells with their
        reasons, and studies run for some models only."""
        out = []
        if self._campaign:
            from ...boxes import campaign

            for r in campaign.failed(self._campaign, self.outputs):
                out.append(f"{r['cell']} failed: {first_line(str(r.get('reason') or 'no reason recorded'))}")
        models = self.models()
        for study, runs in self.by_study().items():
            if across_models(study):
                continue
            absent = [m for m in models if m not in runs]
            if absent:
                out.append(f"{study} has no run of {', '.join(absent)}, so it is not compared for them")
        return out
