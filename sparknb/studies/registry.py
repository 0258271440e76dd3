"""The studies: each package under sparknb.studies (and each one named in $SPARKNB_STUDIES) declares its `STUDY`,
a Contract; `sparknb run`, the campaign, the comparison and the run browser find studies only here.

A new study is a package that fills the contract (CONTRIBUTING.md, "Adding a study"): nothing outside it names it.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import ParamsError
from ..runs.params import project_root
from ..runs.plan import Plan

ENV = "SPARKNB_STUDIES"  # more study modules, e.g. mylab.studies.gsm8k, separated by commas


@dataclass(frozen=True)
class Contract:
    """What a study declares: its parameters (with their marks), how it measures, its tables and findings, its rows
    of the comparison, its notebook; `order` places its rows in the comparison; `across_models`: it visits every
    model itself (one cell of a campaign, run with no server up); `speeds`: its runs' single-stream decode speeds,
    which another study's rows may set their own figures beside, without naming it; `prompts`: its questions, which
    another study may send as its prompts ("NAME:SOURCE"), without naming it."""

    name: str
    Plan: type[Plan]
    measure: Callable | None = None
    tables: Callable | None = None
    findings: Callable | None = None
    headline_rows: Callable | None = None
    title: str = ""
    order: int = 1000
    across_models: bool = False
    notebook: Path | None = None
    speeds: Callable | None = None  # run -> {prompt length: single-stream tok/s}, for a study that measures those
    prompts: Callable | None = None  # (source, seed) -> (texts, what they are): its questions as another's prompts

    def __post_init__(self) -> None:
        if self.Plan.study != self.name:
            raise ParamsError(f"study {self.name!r} declares a Plan of study {self.Plan.study!r}: they must agree, "
                              "since earlier runs are looked up by the study's name")

    @property
    def measures(self) -> bool:
        """A study that measures (a campaign can run it), as against one that reads runs (the comparison)."""
        return self.measure is not None

    @property
    def heading(self) -> str:
        """The study's name as a sentence begins with it."""
        return self.title or self.name[0].upper() + self.name[1:]

    def notebook_path(self) -> Path:
        return self.notebook or project_root() / "notebooks" / f"{self.name}.ipynb"


def _modules() -> list:
    """sparknb's own study modules, then those $SPARKNB_STUDIES names."""
    from .. import studies

    own = [importlib.import_module(f"{studies.__name__}.{m.name}") for m in pkgutil.iter_modules(studies.__path__)
           if m.name != "registry"]
    return own + [_extra(m.strip()) for m in os.environ.get(ENV, "").split(",") if m.strip()]


def _extra(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ParamsError(f"{ENV} names {name!r}, which cannot be imported ({e}); fix the name or drop it") from None


def studies() -> dict[str, Contract]:
    """Every study, in the comparison's order."""
    found = [m.STUDY for m in _modules() if isinstance(getattr(m, "STUDY", None), Contract)]
    return {c.name: c for c in sorted(found, key=lambda c: (c.order, c.name))}


def find(name: str) -> Contract | None:
    """The study of this name, or None where there is none."""
    return studies().get(name)


def of_notebook(path: Path) -> Contract | None:
    """The study whose notebook this file is, or None (a notebook of one's own)."""
    return next((c for c in studies().values() if c.notebook_path().resolve() == Path(path).resolve()), None)


def known(measuring: bool = True) -> list[str]:
    """The names of the studies (those that measure, by default), for a message that lists them."""
    return [n for n, c in studies().items() if c.measures or not measuring]
