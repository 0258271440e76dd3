"""Which sealed runs to compare: run folders or ids, or every finished cell of a campaign."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, PrivateAttr, model_validator

from ... import params
from ...run import PastRun, read_past
from ...verdict import Runs


class Plan(params.Plan):
    study: ClassVar[str] = "compare"
    runs: list[str] = Field(default_factory=list, description="run folders or run ids of any study")
    campaign: str = Field("", description="a campaign id under outputs/campaigns/: all its finished cells; with "
                          "neither, the newest campaign")
    outputs: str = Field("", exclude=True)
    _past: list[PastRun] = PrivateAttr(default_factory=list)
    _campaign: str = PrivateAttr("")

    @model_validator(mode="after")
    def _read(self) -> Plan:
        """Every run read once, its seal verified; a tampered or unsealed one is refused by name."""
        from ... import campaign

        chosen = self.campaign or ("" if self.runs else campaign.latest(self.outputs) or "")
        values = list(self.runs) + (campaign.runs(chosen, self.outputs) if chosen else [])
        if not values:
            raise ValueError("there is nothing to compare: give `runs` (run folders or ids) or a `campaign` id, or "
                             "run `make demo` for the tiny campaign")
        self._campaign = chosen
        self._past = read_past(values, None, what="runs", outputs=self.outputs)
        return self

    @property
    def past(self) -> list[PastRun]:
        return list(self._past)

    def by_study(self) -> dict[str, dict[str, PastRun]]:
        """notebook -> model label -> its run; a later run of the same model replaces an earlier one."""
        out: dict[str, dict[str, PastRun]] = {}
        for run in sorted(self._past, key=lambda r: r.id):  # run ids begin with their UTC start time
            out.setdefault(run.notebook, {})[run.label] = run
        return out

    def models(self) -> list[str]:
        """The models in the order given: the first is the base every ratio divides by."""
        return list(dict.fromkeys(r.label for r in self._past if r.notebook != "swap"))

    def compared(self) -> Runs:
        return Runs(self.by_study(), self.models())

    def missing(self) -> list[str]:
        """Every study that is not compared for every model, and why: a campaign's failed cells with their
        reasons, and studies run for some models only."""
        out = []
        if self._campaign:
            from ... import campaign

            for r in campaign.failed(self._campaign, self.outputs):
                out.append(f"{r['cell']} failed: {str(r.get('reason', 'no reason recorded')).splitlines()[0][:300]}")
        models = self.models()
        for study, runs in self.by_study().items():
            if study == "swap":
                continue
            absent = [m for m in models if m not in runs]
            if absent:
                out.append(f"{study} has no run of {', '.join(absent)}, so it is not compared for them")
        return out
