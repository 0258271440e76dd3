"""A campaign: every study on every model of one comparison, from one file and one command.

Each cell is an independent task (a notebook, a model, its parameters, and the box it runs on) that
ends in its own sealed run folder. Without `boxes:` every cell runs on this machine; with them, every
cell runs on every box, handed there by a runner (cluster.Boxes). The campaign itself is a run
folder under outputs/campaigns/ with one record per cell; it is sealed once every cell is done, and
until then `--resume` runs only the cells without a sealed, intact run folder.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Protocol

import yaml

from ..endpoint.client import Endpoint
from ..errors import ParamsError, RunError, SparknbError
from ..runs import interrupt
from ..runs.execute import Interrupted, parameter_problems, run_notebook
from ..runs.params import CampaignParams, load_campaign, load_model
from ..runs.params import _locate as params_file
from ..runs.plan import BY_SPARKNB, BY_THE_CAMPAIGN, Plan
from ..runs.redaction import redact
from ..runs.report import duration
from ..runs.run import MANIFEST, Run, outputs_dir, read_records, refusal
from ..studies import registry

NOTEBOOK = "campaigns"


@dataclass(frozen=True)
class Cell:
    """One notebook on one model with its parameters: the unit that runs, seals, and can be resumed."""

    notebook: str
    model: str | None  # None: the study visits the campaign's models itself (swap)
    parameters: dict = field(default_factory=dict)
    rep: int = 0
    box: str | None = None  # None: this machine

    @property
    def key(self) -> str:
        return f"{self.notebook}/{self.model or 'all models'}/{self.rep + 1}" + (f"@{self.box}" if self.box else "")

    def as_dict(self) -> dict:
        return asdict(self) | {"cell": self.key}  # not "key": a field so named is masked as a secret

    def notebook_parameters(self, endpoint: str | None, model_ref: Callable[[str], str] = str) -> dict:
        """What the notebook is given; `model_ref` names a model as it is to be loaded where the cell runs."""
        if self.model is None:
            return dict(self.parameters) | {"models": [model_ref(m) for m in self.parameters.get("models", [])]}
        return dict(self.parameters) | {"model": model_ref(self.model), "endpoint": endpoint}


def load(file: str) -> CampaignParams:
    """The campaign file, every problem in it named at once: an unknown model stops the params' own check, and
    its studies' problems (an unknown study, a misspelt parameter) went unsaid behind it."""
    try:
        return load_campaign(file)
    except ParamsError as e:
        path, _ = params_file(file, "campaigns")
        studies = (yaml.safe_load(path.read_text()) or {}).get("studies") if path.is_file() else None
        more = study_problems(studies) if isinstance(studies, dict) else []
        if not more:
            raise
        raise ParamsError("\n  ".join([str(e), *more])) from None


def study_problems(studies: dict) -> list[str]:
    """Every study that is not one, and every parameter its notebook would refuse."""
    problems = []
    for notebook, given in studies.items():
        study = registry.find(notebook)
        if study is None or not study.measures or not study.notebook_path().is_file():
            problems.append(f"studies.{notebook}: no such notebook; known: {', '.join(sorted(registry.known()))}")
            continue
        problems += [f"studies.{notebook}.{p.replace('set by sparknb itself', 'set by the campaign itself')}"
                     for p in parameter_problems(study.notebook_path(), dict(given or {}),
                                                 set_by_the_campaign(study.Plan))]
    return problems


def plan(campaign: CampaignParams) -> list[Cell]:
    """Every cell, per model in the file's order, cross-model studies last; every bad field named first."""
    problems = study_problems(campaign.studies)
    if problems:
        raise ParamsError(f"Campaign {campaign.name!r} is invalid:\n  " + "\n  ".join(problems))
    across = {nb for nb in campaign.studies if registry.find(nb).across_models}
    cells = []
    for box in campaign.boxes or [None]:
        for rep in range(campaign.repetitions):
            for model in campaign.models:
                cells += [Cell(nb, model, dict(p), rep, box) for nb, p in campaign.studies.items() if nb not in across]
        for rep in range(campaign.repetitions):
            cells += [Cell(nb, None, {"models": list(campaign.models)} | dict(p), rep, box)
                      for nb, p in campaign.studies.items() if nb in across]
    return cells


def set_by_the_campaign(plan: type[Plan]) -> tuple[str, ...]:
    """What a cell's notebook is given by the campaign (and by sparknb), never by the file; a study's own parameter
    of the same name (swap's `models`, the models it visits) stays the file's to give."""
    given = [n for n in plan.marked(BY_THE_CAMPAIGN) if n not in plan.model_fields]
    return tuple(given) + plan.marked(BY_SPARKNB)


# --- running ---------------------------------------------------------------------------------------------

def say(line: str) -> None:
    print(line, flush=True)


class Runner(Protocol):
    """Where the cells run: here (run_here), or on the campaign's boxes (cluster.Boxes); returns how many failed."""

    def __call__(self, campaign: CampaignParams, cells: list[Cell], record: Run, outputs: str | Path,
                 progress: _Progress) -> int: ...


def run(file: str, *, resume: str = "", outputs: str | Path = "", log: Callable[[str], None] = say,
        on: Runner | None = None, again: str = "") -> Path:
    """Run every cell not already done; returns the campaign's folder (sealed when every cell is done).

    `on` runs the cells elsewhere (a campaign with boxes needs one); `again` is how the command that
    resumes it is written (e.g. its --cluster option).
    """
    campaign = load(file)
    if bool(campaign.boxes) != (on is not None):
        raise ParamsError(f"Campaign {campaign.name!r} names boxes ({', '.join(campaign.boxes)}): run it with "
                          "--cluster HEAD:6379 (or auto)" if campaign.boxes else
                          f"Campaign {campaign.name!r} names no boxes, so it runs on this machine: add `boxes:` "
                          "to the file, or leave out --cluster")
    cells = plan(campaign)
    record, done = _open(campaign, file, cells, resume, outputs)
    todo = [c for c in cells if c.key not in done]
    log(f"campaign {record.id}: {campaign.name}, {len(cells)} cells, {len(cells) - len(todo)} already done; "
        f"writing {record.path}")
    progress = _Progress(len(todo), log)
    again = f"sparknb campaign run {file}{again} --resume {record.id}"
    try:
        with interrupt.remembered():
            failed = (on or run_here)(campaign, todo, record, outputs, progress)
    except KeyboardInterrupt:
        record.record({"event": "interrupted", "at": time.time()})
        log(f"Interrupted. Every finished cell is sealed and no server is left running; finish with\n  {again}")
        raise
    if failed:
        log(f"{failed} cell(s) failed (reasons in {record.path / 'records.jsonl'}); run them again with\n  {again}")
        return record.path
    record.seal()
    log(f"campaign {record.id}: every cell done, sealed: {record.path}")
    return record.path


def against(cell: Cell, campaign: CampaignParams, record: Run) -> Cell:
    """A later model's cell of a study planned `sequential` runs against the first model's run of the same study,
    repetition and box (compare_with, unless the file gave one): asked in its order, it stops once decided."""
    first = campaign.models[0] if campaign.models else None
    if not cell.parameters.get("sequential") or cell.model in (None, first) or cell.parameters.get("compare_with"):
        return cell
    key = replace(cell, model=first).key
    done = {r.get("cell"): r.get("run") for r in read_records(record.path) if r.get("status") == "done"}
    return replace(cell, parameters=cell.parameters | {"compare_with": done[key]}) if key in done else cell


def resumed(cell: Cell, record: Run) -> Cell:
    """A cell planned `sequential` whose last try stopped halfway resumes from that run (resume_from, unless the
    file gave one): its sequence is fed the answers kept, and only the rest is asked, in the same order."""
    if not cell.parameters.get("sequential") or cell.parameters.get("resume_from"):
        return cell
    tries = [r for r in read_records(record.path) if r.get("cell") == cell.key and r.get("status")]
    halfway = tries[-1].get("run") if tries and tries[-1]["status"] in ("failed", "interrupted") else None
    if not halfway or refusal(Path(halfway), resume=True):  # gone, or not one resume_from takes: asked afresh
        return cell
    return replace(cell, parameters=cell.parameters | {"resume_from": halfway})


def _open(campaign: CampaignParams, file: str, cells: list[Cell], resume: str,
          outputs: str | Path) -> tuple[Run, dict[str, str]]:
    if not resume:
        params = {"notebook": NOTEBOOK, "campaign": campaign.model_dump(), "file": str(file),
                  "cells": [c.as_dict() for c in cells]}
        return Run.create(NOTEBOOK, params, outputs=outputs, label=campaign.name), {}
    path = Path(outputs or outputs_dir()) / NOTEBOOK / resume
    if not (path / "params.json").is_file():
        raise RunError(f"No campaign {resume!r} under {path.parent}; give the id `sparknb campaign run` printed.")
    if (path / MANIFEST).exists():
        raise RunError(f"Campaign {resume} is complete and sealed; start a new one to measure again.")
    recorded = json.loads((path / "params.json").read_text())["cells"]
    if [c["cell"] for c in recorded] != [c.key for c in cells]:
        raise RunError(f"{file} no longer describes campaign {resume}: its cells changed. Start a new campaign.")
    return Run(path), _finished(path)


def _finished(path: Path) -> dict[str, str]:
    """The cells a stopped campaign finished whose runs every reader takes; any other is measured again, saying
    why (a run tampered with, or sealed again, since)."""
    done = {}
    for r in read_records(path):
        folder = Path(r.get("run", ""))
        refused = refusal(folder) if r.get("status") == "done" and folder.is_dir() else None
        if refused:
            say(f"{r['cell']}: measured again, as {folder.name} is refused: {refused}")
        elif refused is not None:
            done[r["cell"]] = str(folder)
    return done


def run_here(campaign: CampaignParams, cells: list[Cell], record: Run, outputs: str | Path,
             progress: _Progress) -> int:
    """Every cell on this machine, a model's cells under one start of its server; returns how many failed."""
    failed = 0
    for model in [*campaign.models, None]:
        mine = [c for c in cells if c.model == model]
        if not mine:
            continue
        ran = len(read_records(record.path))
        try:
            with serving(model, record) as endpoint:
                for cell in mine:
                    interrupt.check()
                    cell = resumed(against(cell, campaign, record), record)
                    failed += not _run_cell(cell, endpoint, record, outputs, progress)
        except SparknbError as e:  # the model could not be served: its cells fail, the next model still runs
            settled = {r.get("cell") for r in read_records(record.path)[ran:] if r.get("status")}
            for cell in (c for c in mine if c.key not in settled):
                record.record({"cell": cell.key, "status": "failed", "reason": f"server: {e}", "seconds": 0.0})
                progress.step(cell, f"FAILED: {model} could not be served: {str(e).splitlines()[0]}")
                failed += 1
    return failed


class Record(Protocol):
    """Where serving() writes: the campaign's own folder, or what a box sends back to it (box.Notes)."""

    def record(self, obj: dict) -> None: ...

    def write_text(self, name: str, text: str) -> object: ...


@contextlib.contextmanager
def serving(model: str | None, record: Record) -> Iterator[str | None]:
    """The model's server up for its cells, as its lifecycle says, and down again whatever happens."""
    if model is None:
        yield None
        return
    params = load_model(model)
    mode = params.lifecycle.mode
    if mode in (None, "sidecar"):  # someone else serves it: check that the right model answers
        ep = Endpoint(params.endpoint, params.served_model_name, api_key=params.api_key(), key_env=params.api_key_env)
        try:
            ep.info()
        finally:
            ep.close()
        yield params.endpoint
        return
    from ..serving import lifecycle, targets

    target = targets.resolve(params)
    with tempfile.TemporaryDirectory(prefix="sparknb-campaign-") as tmp:
        server = lifecycle.launch(target, Path(tmp) / "server.log")
        try:
            server.wait_ready()
            record.record({"event": "server up", "model": params.name, "pid": server.pid, "ready_s": server.elapsed(),
                           "target": target.describe()})
            yield target.endpoint
        finally:
            gone = server.stop()
            record.record({"event": "server down", "model": params.name, "how": gone.how, "seconds": gone.seconds})
            name = f"server-{params.name}-{int(time.time())}.log"
            record.write_text(name, redact(server.log_text()))


def _run_cell(cell: Cell, endpoint: str | None, record: Run, outputs: str | Path, progress: _Progress) -> bool:
    t0 = time.monotonic()
    try:
        folder = run_notebook(cell.notebook, cell.notebook_parameters(endpoint), outputs)
    except Interrupted as e:
        if e.complete:  # Ctrl-C after its last request: the cell is done, and the campaign stops after it
            _done(record, cell, e.folder, time.monotonic() - t0)
        elif e.folder is not None:  # sealed halfway: a sequential cell resumes from it
            record.record({"cell": cell.key, "status": "interrupted", "run": str(e.folder)})
        raise
    except SparknbError as e:
        seconds = time.monotonic() - t0
        kept = getattr(e, "folder", None)  # the records taken before it failed, sealed: a sequential cell resumes there
        record.record({"cell": cell.key, "status": "failed", "reason": str(e), "seconds": seconds}
                      | ({"run": str(kept)} if kept else {}))
        progress.step(cell, f"FAILED after {duration(seconds)}: {str(e).splitlines()[0]}")
        return False
    seconds = time.monotonic() - t0
    _done(record, cell, folder, seconds)
    progress.step(cell, f"sealed in {duration(seconds)}: {folder}")
    return True


def _done(record: Run, cell: Cell, folder: Path, seconds: float) -> None:
    record.record({"cell": cell.key, "status": "done", "run": str(folder), "notebook": cell.notebook,
                   "model": cell.model, "seconds": seconds})


class _Progress:
    """One line per cell: what it did, the time so far, and an estimate of what is left."""

    def __init__(self, total: int, log: Callable[[str], None]) -> None:
        self.total, self.log, self.done, self.t0 = total, log, 0, time.monotonic()

    def step(self, cell: Cell, what: str) -> None:
        self.done += 1
        elapsed = time.monotonic() - self.t0
        left = elapsed / self.done * (self.total - self.done)
        self.log(f"[{self.done}/{self.total}] {cell.key}: {what}; {duration(elapsed)} so far, "
                 f"about {duration(left)} left")


def runs(campaign_id: str, outputs: str | Path = "") -> list[str]:
    """The run folders of a campaign's finished cells, for the comparison."""
    path = Path(outputs or outputs_dir()) / NOTEBOOK / campaign_id
    if not (path / "params.json").is_file():
        raise RunError(f"No campaign {campaign_id!r} under {path.parent}.")
    return [r["run"] for r in read_records(path) if r.get("status") == "done"]


def latest(outputs: str | Path = "") -> str | None:
    """The id of the newest campaign with a finished cell, for a comparison given nothing else."""
    for path in sorted((Path(outputs or outputs_dir()) / NOTEBOOK).glob("*/params.json"), reverse=True):
        if any(r.get("status") == "done" for r in read_records(path.parent)):
            return path.parent.name
    return None


def failed(campaign_id: str, outputs: str | Path = "") -> list[dict]:
    """The records of the campaign's cells that failed and were not done later (a resume may have redone them)."""
    path = Path(outputs or outputs_dir()) / NOTEBOOK / campaign_id
    records = read_records(path)
    done = {r["cell"] for r in records if r.get("status") == "done"}
    last: dict[str, dict] = {}
    for r in records:
        if r.get("status") == "failed" and r["cell"] not in done:
            last[r["cell"]] = r
    return list(last.values())


def boxes(campaign_id: str, outputs: str | Path = "") -> list[str]:
    """The boxes a campaign names, in its file's order (none for a campaign on one box)."""
    return list(_file(campaign_id, outputs).get("boxes") or {})


def question(campaign_id: str, outputs: str | Path = "") -> str:
    """The question a campaign's file asks ("" where it asks none), for the top of its comparison."""
    return str(_file(campaign_id, outputs).get("question") or "")


def _file(campaign_id: str, outputs: str | Path) -> dict:
    """The campaign's file as its folder recorded it ({} where it cannot be read)."""
    path = Path(outputs or outputs_dir()) / NOTEBOOK / campaign_id / "params.json"
    try:
        return json.loads(path.read_text()).get("campaign") or {}
    except (OSError, ValueError):
        return {}
