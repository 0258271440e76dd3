"""A study's parameters: checked together before anything starts, what makes two runs comparable said once, beside
each parameter, and the earlier runs they name read once, the same way for every study.

A parameter's marks say what a difference in it means (the study's headline rows, its notebook's comparison,
resume, the comparison report's warnings, the campaign and `sparknb run` all read them here):
- COMPARED: two runs that differ in it do not measure the same thing, so no ratio is read between them;
- RESUMED: answers of a run that differs in it cannot be mixed into this one;
- IGNORED: it differs on purpose or does not change what is measured, so it is no difference at all;
- BY_SPARKNB, BY_THE_CAMPAIGN: set by `sparknb run` (or the campaign), never given by a user.
A setting without marks is a difference worth saying, but not one that stops a comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PlainValidator, PrivateAttr, ValidationError

from ..errors import DataError, ParamsError, SparknbError
from . import manifest
from .params import explain
from .run import PastRun, read_past, same_records


@dataclass(frozen=True)
class Mark:
    """What a difference in a setting means: pydantic keeps it in the field's metadata (Annotated[type, MARK])."""

    name: str


COMPARED = Mark("must be equal to compare")
RESUMED = Mark("must be equal to resume")
IGNORED = Mark("no difference")
BY_SPARKNB = Mark("set by sparknb")
BY_THE_CAMPAIGN = Mark("set by the campaign")


def _repetitions(value: Any) -> int | str:
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return value
    raise ValueError(f"repetitions must be a whole number, 1 or more, or auto; got {value!r}")


# Measured requests per setting: a count, or "auto" (until the median's interval is narrow enough; schedule.Schedule).
Repetitions = Annotated[int | Literal["auto"], PlainValidator(_repetitions)]

def _named(runs: list[str]) -> list[str]:
    if not all(r.strip() for r in runs):
        raise ValueError(f"name run folders or run ids, not blanks; got {runs!r}")
    return runs


# Earlier runs named by a notebook parameter: `sparknb run -p compare_with RUN` gives one as a plain string.
RunIds = Annotated[list[str], BeforeValidator(lambda v: ([v] if v.strip() else []) if isinstance(v, str) else v),
                   AfterValidator(_named)]

PAST = ("resume_from", "compare_with")  # the parameters that name earlier runs, read by build()


class Plan(BaseModel):
    """A study's notebook parameters, checked together before anything starts, every problem named at once."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    study: ClassVar[str] = "study"
    # Settings a run records that are not parameters of its plan (the notebook's own, or what the study reads
    # from its data), with their marks; a study adds its own.
    recorded: ClassVar[dict[str, tuple[Mark, ...]]] = {
        "model": (RESUMED, IGNORED, BY_THE_CAMPAIGN), "models": (IGNORED, BY_THE_CAMPAIGN),
        "endpoint": (IGNORED, BY_THE_CAMPAIGN), "force": (IGNORED,), "run_id": (IGNORED, BY_SPARKNB),
        "seal": (IGNORED, BY_SPARKNB), "inputs": (IGNORED,)}
    outputs: Annotated[str, IGNORED, BY_SPARKNB] = Field("", exclude=True, description="where earlier runs are found")
    _runs: dict[str, list[PastRun]] = PrivateAttr(default_factory=dict)

    @classmethod
    def build(cls, **values: Any):
        """Check the parameters, then read every earlier run they name from its seal, once, all at once."""
        try:
            plan = cls.model_validate(values)
        except ValidationError as e:
            own = [err.get("ctx", {}).get("error") for err in e.errors()]
            if len(own) == 1 and isinstance(own[0], SparknbError):  # e.g. an earlier run refused: say it as it is
                raise own[0] from None
            raise ParamsError(f"Bad {cls.study} parameters:\n" + explain(e, cls)) from None
        plan._runs = plan._read_past()
        return plan

    def _read_past(self) -> dict[str, list[PastRun]]:
        found, problems = {}, []
        for what in (p for p in PAST if p in type(self).model_fields):
            try:
                found[what] = read_past(getattr(self, what), self.study, what=what, outputs=self.outputs)
            except DataError as e:
                problems.append(str(e))
        problems += same_records(list({r.path: r for runs in found.values() for r in runs}.values()))
        if problems:
            raise DataError("\n".join(problems))
        empty = [f"compare_with {run.id!r}: {why}" for run in found.get("compare_with", [])
                 if (why := self.unusable(run))]
        if empty:
            raise DataError("Cannot compare:\n  " + "\n  ".join(empty))
        return found

    def unusable(self, run: PastRun) -> str:
        """Why an earlier run cannot be compared with (e.g. it measured nothing), or "" where it can."""
        return ""

    @property
    def past(self) -> list[PastRun]:
        """The runs named by compare_with, as read and verified when the plan was built."""
        return list(self._runs.get("compare_with", []))

    @property
    def other(self) -> PastRun | None:
        """The one run named by compare_with, where a study compares with one."""
        return next(iter(self._runs.get("compare_with", [])), None)

    @property
    def resumed(self) -> PastRun | None:
        """The run named by resume_from, as read and verified when the plan was built."""
        return next(iter(self._runs.get("resume_from", [])), None)

    @property
    def read(self) -> list[PastRun]:
        """Every earlier run this plan read, once each."""
        return list({r.path: r for runs in self._runs.values() for r in runs}.values())

    def settings(self) -> dict:
        """The parameters as params.json records them, with the manifest of each earlier run read (`inputs`), so
        that one sealed again after this run read it fails this run's verify."""
        read = self.read
        return self.model_dump(mode="json") | ({"inputs": manifest.pins(read)} if read else {})

    @classmethod
    def marked(cls, mark: Mark) -> tuple[str, ...]:
        """The settings with this mark: the parameters in their order, then what the run records beside them."""
        fields = [n for n, f in cls.model_fields.items() if mark in f.metadata]
        recorded = {}
        for kind in reversed(cls.__mro__):
            recorded |= getattr(kind, "recorded", None) or {}
        return tuple(fields + [n for n, marks in recorded.items() if mark in marks and n not in cls.model_fields])

    @classmethod
    def same(cls, runs: dict[str, PastRun | dict | None]) -> str:
        """Why these runs do not measure the same thing (a COMPARED setting differs), or "" where they do or where
        one's settings are not known (None). `runs`: subject -> its sealed run, or the settings of the run still
        going (a notebook's own)."""
        settings = {s: r if isinstance(r, dict) else r.settings for s, r in runs.items() if r is not None}
        if len(settings) < 2 or len(settings) < len(runs):
            return ""
        differ = []
        for name in cls.marked(COMPARED):
            seen = {s: cls.value(values, name) for s, values in settings.items()}
            if len({repr(v) for v in seen.values()}) > 1:
                differ.append(f"{name} " + " vs ".join(f"{v!r} ({s})" for s, v in seen.items()))
        return ("the runs were measured with different settings: " + "; ".join(differ)) if differ else ""

    @classmethod
    def value(cls, settings: Mapping, name: str) -> Any:
        """A run's setting, and one it does not record (sealed before the setting existed) at its default: what that
        run did, since a parameter is only ever added with the default that keeps the behaviour before it (runs
        sealed before prompt_format were told apart from new ones by it)."""
        field = cls.model_fields.get(name)
        if name in settings or field is None or field.is_required():
            return settings.get(name)
        return field.get_default(call_default_factory=True)

    @classmethod
    def differences(cls, mine: dict, theirs: dict) -> dict[str, dict]:
        """Every setting in which two runs differ, but those that are no difference: name -> {a: mine, b: theirs}."""
        ignored = set(cls.marked(IGNORED))
        return {k: {"a": cls.value(mine, k), "b": cls.value(theirs, k)} for k in sorted(set(mine) | set(theirs))
                if k not in ignored and cls.value(mine, k) != cls.value(theirs, k)}

    @classmethod
    def check_resume(cls, past: PastRun, mine: dict) -> None:
        """Refuse to mix in the answers of a run that differs in a RESUMED setting, naming each."""
        differ = [k for k in cls.marked(RESUMED) if cls.value(past.settings, k) != cls.value(mine, k)]
        if differ:
            raise DataError(f"resume_from {past.id} was run with different {', '.join(differ)} ("
                            + "; ".join(f"{k}: {cls.value(past.settings, k)!r} there, {cls.value(mine, k)!r} here"
                                        for k in differ)
                            + "). Its answers cannot be mixed into this run: run these settings afresh.")


class Prepared:
    """The work a plan prepares before the first request (e.g. a graded batch's questions): the earlier runs it
    hands on are the plan's, as read once when it was built. A subclass holds its `plan`."""

    plan: Plan

    @property
    def resumed(self) -> PastRun | None:
        return self.plan.resumed

    @property
    def other(self) -> PastRun | None:
        return self.plan.other


class Sweep(Plan):
    """A sweep's sampling, shared by decode and prefill: requests per setting fixed, or `auto` until the median's
    95% interval is narrow enough (schedule.Schedule), in an order that spreads drift over every setting."""

    warmup: int = Field(1, ge=0, description="requests per length left out of the figures, 0 or more")
    repetitions: Repetitions = Field(
        5, description="measured requests per length, 1 or more, or auto: until the median's 95% interval is "
        "within +/- target_width, or max_repetitions")
    target_width: float = Field(0.02, gt=0, lt=1, description="with repetitions auto: the relative half-width "
                                "of the median's 95% interval to reach, e.g. 0.02 for +/-2%")
    max_repetitions: int = Field(30, ge=6, description="with repetitions auto: the most requests per length")
    order: Literal["shuffled", "grouped"] = Field("shuffled", description="shuffled (seeded) or grouped by length")
    seed: int = 0
