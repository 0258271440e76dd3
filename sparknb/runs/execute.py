"""Executing a notebook into a sealed run folder: the one way every runner runs a study.

`sparknb run`, a campaign on this box and a campaign's cell on another box all call run_notebook,
so a run is made the same way wherever it is made: its parameters checked against the notebook's
own, its secrets kept out of the notebook, its report written, and its folder sealed, also when it
fails halfway or is interrupted.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

from nbclient.exceptions import DeadKernelError

from ..errors import ExecuteError, RunError, SparknbError
from ..studies import registry
from . import interrupt, manifest
from .plan import BY_SPARKNB, Plan
from .redaction import redact
from .run import (CLAIM, FAILURE, RESERVE, RESERVE_BYTES, Run, cannot_write, new_run_id, outputs_dir, read_records,
                  unwritable)
from .study import ENV_PREFIX

log = logging.getLogger(__name__)
# The kernel's own log is plumbing, not the run's: it printed a TCP warning on every run and "KeyboardInterrupt
# caught in kernel" after a Ctrl-C. A cell's errors still come through papermill, and end the run with them.
QUIET_KERNEL = ["--IPKernelApp.log_level=CRITICAL"]


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or a stop sent to a box) during a run; `folder` is the run sealed as failed halfway, if one began,
    or sealed whole where `complete` (the Ctrl-C came after its last request, and its analysis was let finish)."""

    def __init__(self, folder: Path | None = None, complete: bool = False) -> None:
        super().__init__()
        self.folder, self.complete = folder, complete

    def __str__(self) -> str:
        if self.folder is None:
            return f"{interrupt.REASON} before the run opened; nothing was measured"
        if self.complete:
            return f"{interrupt.REASON} after the last request: the run is complete and sealed in {self.folder}"
        return f"{interrupt.REASON}; every record taken is kept, sealed as failed halfway, in {self.folder}"


def notebook_path(name: str) -> Path:
    """A study's notebook by the study's name (studies.registry), or a notebook by its path."""
    study = None if name.endswith(".ipynb") else registry.find(name)
    path = Path(name) if study is None else study.notebook_path()
    if not path.is_file():
        raise ExecuteError(f"No notebook {name!r}. Known: {', '.join(registry.known(measuring=False))}.")
    return path


def hide_secrets(parameters: dict, environ: dict) -> dict:
    """Parameters with every secret-bearing value moved into `environ` and passed as env:NAME instead.

    papermill writes its injected parameters into the executed notebook, and so into the report: a
    password in an endpoint URL must never be one of them. The kernel inherits the environment. The URL
    goes into a variable whose name does not look secret, so that records keep it as
    http://user:***@host:port/v1; its password alone goes into one that does, so that every sparknb write
    masks the password wherever it appears (redaction masks secret-named variables' values).
    """
    safe = {}
    for name, value in parameters.items():
        if isinstance(value, str) and redact(value) != value:
            if name != "endpoint":
                raise ExecuteError(f"parameter {name} holds a secret; pass secrets through the environment variable "
                                   "named by api_key_env in the model's params, never as a parameter.")
            variable = f"SPARKNB_PARAMETER_{name.upper()}"
            environ[variable] = value
            password = urlsplit(value).password
            if password:
                environ[f"SPARKNB_{name.upper()}_PASSWORD"] = password
            value = ENV_PREFIX + variable
        safe[name] = value
    return safe


def declared_parameters(source: Path) -> dict:
    """The notebook's parameters as papermill reads them, without its "Input Notebook" line: the run's own
    execution says it, and each run printed it twice."""
    import papermill

    log = logging.getLogger("papermill")
    level = log.level
    log.setLevel(logging.WARNING)
    try:
        return papermill.inspect_notebook(str(source))
    finally:
        log.setLevel(level)


def parameter_problems(source: Path, given: dict, set_here: tuple[str, ...] = Plan.marked(BY_SPARKNB)) -> list[str]:
    """Every given parameter the notebook does not declare, or of the wrong type, each named with the fix: a
    misspelt name would otherwise run the defaults (papermill only warns). `set_here`: what run_notebook (or the
    campaign) gives the notebook itself."""
    declared = declared_parameters(source)
    known = ", ".join(n for n in declared if n not in set_here)
    study = registry.of_notebook(source)
    problems = []
    for name, value in given.items():
        if name in set_here:
            problems.append(f"{name}: set by sparknb itself; leave it out")
        elif name not in declared:
            problems.append(f"{name}: not a parameter of {source.name}; its parameters: {known}")
        else:
            problems += _plan_problems(study and study.Plan, name, value, declared[name]["inferred_type_name"])
            problems += _model_problems(name, value)
    return problems


def _model_problems(name: str, value) -> list[str]:
    """A `model` or `models` whose params file (or its hardware's) is missing or invalid, found before any kernel
    starts: the study would find it only after its first cells ran."""
    from .params import load_hardware, load_model

    if name not in ("model", "models") or not value:
        return []
    problems = []
    for each in [value] if isinstance(value, str) else value if isinstance(value, list) else []:
        try:
            load_hardware(load_model(str(each)).hardware)
        except SparknbError as e:
            problems.append(f"{name}: {e}")
    return problems


def _plan_problems(plan: type[Plan] | None, name: str, value, type_name: str) -> list[str]:
    """A value the study's own Plan would refuse (a range, a choice, `auto`), found before any kernel starts;
    a parameter that is not a Plan field (model, force, ...) is checked against the notebook's declared type."""
    from pydantic import TypeAdapter, ValidationError

    field = plan.model_fields.get(name) if plan is not None else None
    if field is None or field.exclude:
        return [] if fits(value, type_name) else [f"{name}: {value!r} is not of type {type_name}"]
    try:
        kind = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
        TypeAdapter(kind).validate_python(value, strict=True)
    except ValidationError as e:
        return [f"{name}: {err['msg'].removeprefix('Value error, ')}"
                + ("" if err["type"] == "value_error" else f"; got {value!r}")
                + (f" ({field.description})" if field.description else "") for err in e.errors()[:1]]
    return []


def fits(value, type_name: str) -> bool:
    """Whether a value suits the type a notebook's parameter line declares (an undeclared type takes anything)."""
    kinds = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,), "list": (list,), "dict": (dict,)}
    expected = kinds.get(type_name)
    if expected is None:
        return True
    if isinstance(value, bool) and bool not in expected:
        return False
    return isinstance(value, expected)


def run_notebook(name: str, parameters: dict, outputs: str | Path = "") -> Path:
    """Check the parameters against the notebook's own, execute it into its own run folder, add the HTML
    report, then seal the folder."""
    import papermill

    source = notebook_path(name)
    notebook = source.stem
    problems = parameter_problems(source, parameters)
    if problems:
        raise ExecuteError(f"Bad parameters for {notebook}, nothing was run:\n  "
                           + "\n  ".join(p.replace("\n", "\n    ") for p in problems))
    label = str(parameters.get("model") or "-".join(map(str, parameters.get("models") or [])))
    run_id = new_run_id(Path(label).stem if label.endswith((".yaml", ".yml")) else label)
    folder = Path(outputs or outputs_dir()) / notebook / run_id
    hold_room(folder)
    executed = folder / "notebook.ipynb"
    secrets: dict[str, str] = {}
    injected = hide_secrets(parameters, secrets) | {"run_id": run_id, "outputs": str(Path(outputs or outputs_dir())),
                                                    "seal": False}
    os.environ.update(secrets)  # the kernel inherits them; gone again once it has ended
    try:
        with interrupt.handled() as stop:  # Ctrl-C interrupts the kernel's cell, never tears the kernel down
            papermill.execute_notebook(str(source), str(executed), parameters=injected, log_output=True,
                                       progress_bar=False, kernel_manager_class=stop.kernel_class,
                                       on_cell_start=stop.cell_start, extra_arguments=QUIET_KERNEL)
    except (papermill.PapermillExecutionError, KeyboardInterrupt, DeadKernelError, OSError, RuntimeError) as e:
        # RuntimeError: nbclient's "Kernel died before replying to kernel_info"
        interrupted = stop.asked or isinstance(e, KeyboardInterrupt) or getattr(e, "ename", "") == "KeyboardInterrupt"
        why = interrupt.REASON if interrupted else reason(e, stop.process, folder)
        if not (folder / CLAIM).exists():  # it failed its checks: nothing was measured, nothing to keep
            shutil.rmtree(folder)
            if interrupted:
                raise Interrupted() from None
            raise ExecuteError(f"{notebook} did not start: {why}") from None
        close(folder, executed, failure=why)
        if interrupted:  # the caller (a campaign) must stop too, not go on to the next cell
            raise Interrupted(folder) from None
        raise ExecuteError(f"{notebook} failed halfway: {why}\nEvery record taken so far is kept, sealed, in "
                           f"{folder}{resume_hint(source, parameters, run_id, outputs)}", folder) from None
    finally:
        for variable in secrets:
            os.environ.pop(variable, None)
    close(folder, executed)
    if stop.asked:  # sealed whole, analysis and all; a campaign stops after it all the same
        raise Interrupted(folder, complete=True)
    return folder


def hold_room(folder: Path) -> None:
    """Hold RESERVE_BYTES in the run's folder while it runs, let go by the first write that finds the disk full
    (run.unwritable) and before sealing: a full disk once left a run that could not even mark itself failed, nor
    be sealed. Refused before any kernel starts where the folder cannot be made or there is not that much room."""
    try:
        folder.mkdir(parents=True)
        with open(folder / RESERVE, "xb") as f:
            f.write(bytes(RESERVE_BYTES))  # written, not a sparse hole: the room must be taken for real
            os.fsync(f.fileno())
    except OSError as e:
        shutil.rmtree(folder, ignore_errors=True)
        raise ExecuteError(f"{cannot_write(folder.parent, e)} Nothing was run: a run holds "
                           f"{RESERVE_BYTES >> 20} MiB free until it is sealed.") from None


def reason(error: BaseException, kernel: subprocess.Popen | None, folder: Path) -> str:
    """Why a run stopped, in words: the study's own exception, a write that failed, or a kernel that died
    (papermill's bare DeadKernelError said nothing of the OOM killer or a signal)."""
    if isinstance(error, DeadKernelError):
        code = getattr(kernel, "returncode", None)
        how = (f"killed by signal {signal.Signals(-code).name}" if code is not None and code < 0 else
               f"exit status {code}" if code is not None else "how it ended could not be read")
        return (f"the notebook's kernel died ({how}): the OOM killer, a kill or a crash ended the process that ran "
                "the study")
    if isinstance(error, OSError):  # papermill's own save of the notebook
        return f"{type(error).__name__}: {unwritable(folder, error)}"
    return f"{error.ename}: {error.evalue}"


def resume_hint(source: Path, parameters: dict, run_id: str, outputs: str | Path = "") -> str:
    """The command that finishes a run that failed halfway, for a study that can resume (resume_from)."""
    if "resume_from" not in declared_parameters(source):
        return ""
    given = [f"-p {name} {shlex.quote(value if isinstance(value, str) else json.dumps(value))}"
             for name, value in parameters.items() if name != "resume_from"]
    where = ["--outputs", shlex.quote(str(outputs))] if outputs else []
    command = " ".join(["sparknb run", source.stem, *given, "-p resume_from", run_id, *where])
    return f"\nTo finish it once the cause is fixed (only what it did not finish is measured): {redact(command)}"


def close(folder: Path, executed: Path, failure: str | None = None) -> None:
    """Report and seal; a run that stopped before its summary is marked as failed halfway, if the study did not.
    The room held for it (hold_room) is let go first; where the seal still cannot be written, the message says
    how to seal it once there is room."""
    (folder / RESERVE).unlink(missing_ok=True)
    run = Run(folder)
    try:
        if failure is not None and not (folder / FAILURE).exists():
            run.write_json(FAILURE, {"failed_halfway": True, "reason": failure})
        _report(folder, executed, failure)
        run.seal()
    except (OSError, RunError) as e:
        if run.sealed:
            raise
        raise ExecuteError(f"{folder} could not be sealed: {e}\nOnce it can be written (room on its disk, the folder "
                           f"writable): sparknb seal {folder}", folder) from None


def _report(folder: Path, executed: Path, failure: str | None) -> None:
    """The HTML report; a notebook left unreadable by a failed write gets none, and the run is sealed without it."""
    from .report import write_html

    if not executed.exists():
        return
    recorded = json.loads((folder / FAILURE).read_text()) if failure is not None else {}
    why = str(recorded.get("reason") or failure) if failure is not None else None
    try:
        write_html(executed, folder / "report.html", why, read_records(folder) if why else None)
    except (OSError, ValueError) as e:
        log.warning("no report.html: %s could not be read (%s: %s)", executed, type(e).__name__, e)


def seal_interrupted(folder: str | Path) -> Path:
    """Seal a run that died before it could (a killed kernel): marked failed halfway, its records kept, and
    marked sealed after the fact, by whom and when, in the folder and at the top of its report."""
    from .report import write_html

    path = Path(folder)
    if not (path / CLAIM).is_file():
        raise ExecuteError(f"{path} is not a sparknb run folder (no {CLAIM}).")
    run = Run(path)
    if run.sealed:
        raise ExecuteError(f"{path} is sealed already.")
    manifest.refuse_second_seal(run.id)
    if not (path / "summary.json").exists() and not (path / FAILURE).exists():
        run.write_json(FAILURE, {"failed_halfway": True, "reason": "sealed by hand after the run died"})
    late = manifest.after_the_fact("the run's own seal was missing: it stopped before sealing itself")
    if (path / "notebook.ipynb").exists() and not (path / "report.html").exists():
        failure = json.loads((path / FAILURE).read_text()) if (path / FAILURE).exists() else None
        write_html(path / "notebook.ipynb", path / "report.html", failure and str(failure.get("reason")),
                   read_records(path) if failure else None,
                   note=f"**Sealed after the fact** by {late['sealed_by']} at {late['sealed_at']}: {late['why']}. "
                        "Nothing vouches that its files did not change between the run and this seal.")
    run.seal(after_the_fact=late)
    return path
