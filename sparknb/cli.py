"""The command line: serve a tiny model, run a notebook into a sealed folder, verify a folder, demo."""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Annotated
from urllib.parse import urlsplit

import yaml

from .errors import SparknbError
from .params import load_model, project_root
from .redaction import redact
from .run import CLAIM, FAILURE, Run, new_run_id, outputs_dir, verify
from .study import ENV_PREFIX


class CliError(SparknbError):
    pass


def notebook_path(name: str) -> Path:
    path = Path(name) if name.endswith(".ipynb") else project_root() / "notebooks" / f"{name}.ipynb"
    if not path.is_file():
        known = sorted(p.stem for p in (project_root() / "notebooks").glob("*.ipynb"))
        raise CliError(f"No notebook {name!r}. Known: {', '.join(known)}.")
    return path


def parse_parameters(pairs: list[list[str]], yaml_files: list[str]) -> dict:
    """-p NAME VALUE (VALUE read as YAML, so 5, true and [1, 2] get their types) and -f FILE."""
    params: dict = {}
    for file in yaml_files:
        params |= yaml.safe_load(Path(file).read_text()) or {}
    for name, value in pairs:
        params[name] = yaml.safe_load(value)
    return params


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
                raise CliError(f"parameter {name} holds a secret; pass secrets through the environment variable "
                               "named by api_key_env in the model's params, never as a parameter.")
            variable = f"SPARKNB_PARAMETER_{name.upper()}"
            environ[variable] = value
            password = urlsplit(value).password
            if password:
                environ[f"SPARKNB_{name.upper()}_PASSWORD"] = password
            value = ENV_PREFIX + variable
        safe[name] = value
    return safe


SET_BY_SPARKNB = ("run_id", "outputs", "seal")  # what run_notebook injects itself


def parameter_problems(source: Path, given: dict, set_here: tuple[str, ...] = SET_BY_SPARKNB) -> list[str]:
    """Every given parameter the notebook does not declare, or of the wrong type, each named with the fix: a
    misspelt name would otherwise run the defaults (papermill only warns)."""
    import papermill

    declared = papermill.inspect_notebook(str(source))
    known = ", ".join(n for n in declared if n not in set_here)
    problems = []
    for name, value in given.items():
        if name in set_here:
            problems.append(f"{name}: set by sparknb itself; leave it out")
        elif name not in declared:
            problems.append(f"{name}: not a parameter of {source.name}; its parameters: {known}")
        else:
            problems += _plan_problems(source.stem, name, value, declared[name]["inferred_type_name"])
    return problems


def _plan_problems(notebook: str, name: str, value, type_name: str) -> list[str]:
    """A value the study's own Plan would refuse (a range, a choice, `auto`), found before any kernel starts;
    a parameter that is not a Plan field (model, force, ...) is checked against the notebook's declared type."""
    import importlib

    from pydantic import TypeAdapter, ValidationError

    try:
        plan = importlib.import_module(f"sparknb.studies.{notebook}").Plan
    except (ImportError, AttributeError):
        plan = None
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
        raise CliError(f"Bad parameters for {notebook}, nothing was run:\n  " + "\n  ".join(problems))
    label = str(parameters.get("model") or "-".join(map(str, parameters.get("models") or [])))
    run_id = new_run_id(Path(label).stem if label.endswith((".yaml", ".yml")) else label)
    folder = Path(outputs or outputs_dir()) / notebook / run_id
    folder.mkdir(parents=True)
    executed = folder / "notebook.ipynb"
    secrets: dict[str, str] = {}
    injected = hide_secrets(parameters, secrets) | {"run_id": run_id, "outputs": str(Path(outputs or outputs_dir())),
                                                    "seal": False}
    os.environ.update(secrets)  # the kernel inherits them; gone again once it has ended
    try:
        papermill.execute_notebook(str(source), str(executed), parameters=injected, log_output=True,
                                   progress_bar=False)  # in the caller's folder: relative paths mean what they say
    except (papermill.PapermillExecutionError, KeyboardInterrupt) as e:
        interrupted = not isinstance(e, papermill.PapermillExecutionError) or e.ename == "KeyboardInterrupt"
        why = "interrupted (Ctrl-C)" if interrupted else f"{e.ename}: {e.evalue}"
        if not (folder / CLAIM).exists():  # it failed its checks: nothing was measured, nothing to keep
            shutil.rmtree(folder)
            if interrupted:
                raise KeyboardInterrupt from None
            raise CliError(f"{notebook} did not start: {why}") from None
        _close(folder, executed, failure=why)
        if interrupted:  # the caller (a campaign) must stop too, not go on to the next cell
            raise KeyboardInterrupt from None
        raise CliError(f"{notebook} failed halfway: {why}\nEvery record taken so far is kept, "
                       f"sealed, in {folder}") from None
    finally:
        for name in secrets:
            os.environ.pop(name, None)
    _close(folder, executed)
    return folder


def _close(folder: Path, executed: Path, failure: str | None = None) -> None:
    """Report and seal; a run that stopped before its summary is marked as failed halfway, if the study did not."""
    from .report import write_html
    from .run import read_records

    run = Run(folder)
    if failure is not None and not (folder / FAILURE).exists():
        run.write_json(FAILURE, {"failed_halfway": True, "reason": failure})
    if executed.exists():
        reason = None
        if failure is not None:
            recorded = json.loads((folder / FAILURE).read_text())
            reason = str(recorded.get("reason") or failure)
        write_html(executed, folder / "report.html", reason, read_records(folder) if reason else None)
    run.seal()


def seal_interrupted(folder: str | Path) -> Path:
    """Seal a run that died before it could (a killed kernel): marked failed halfway, its records kept."""
    path = Path(folder)
    if not (path / CLAIM).is_file():
        raise CliError(f"{path} is not a sparknb run folder (no {CLAIM}).")
    run = Run(path)
    if run.sealed:
        raise CliError(f"{path} is sealed already.")
    if not (path / "summary.json").exists() and not (path / FAILURE).exists():
        run.write_json(FAILURE, {"failed_halfway": True, "reason": "sealed by hand after the run died"})
    run.seal()
    return path


def demo(outputs: str | Path = "") -> tuple[Path, list[dict]]:
    """The tiny campaign (every study on both tiny models, real vLLM CPU servers), then its comparison, which
    names any study that failed; returns the comparison's folder and the cells that failed."""
    from . import campaign

    record = campaign.run("tiny", outputs=outputs)
    return run_notebook("compare", {"campaign": record.name}, outputs), campaign.failed(record.name, outputs)


def _verdict(problems: list[str]) -> str:
    """intact, changed since sealing, or never sealed at all (which is not a change)."""
    if not problems:
        return "intact"
    return "NOT SEALED" if any("never sealed" in p for p in problems) else "CHANGED"


def _failures(failed: list[dict]) -> int:
    """A campaign with a failed cell exits non-zero, the failures as its last lines."""
    if not failed:
        return 0
    print(f"\n{len(failed)} cell(s) FAILED:", file=sys.stderr)
    for r in failed:
        print(f"  {r['cell']}: {redact(str(r.get('reason', 'no reason recorded')).splitlines()[0])}", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparknb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="start a tiny test-bed model on the real vLLM CPU server or llama-server")
    p_serve.add_argument("name", choices=["tiny-dense", "tiny-moe"])
    p_serve.add_argument("--engine", choices=["vllm", "llama.cpp"], default="vllm",
                         help="vLLM's CPU build (default), or llama.cpp's llama-server (built once if none is found)")
    p_run = sub.add_parser("run", help="execute a notebook into a new sealed run folder")
    p_run.add_argument("notebook", help="decode, ... or a path to a notebook")
    p_run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    p_run.add_argument("-f", "--parameters-file", action="append", default=[], metavar="YAML")
    p_run.add_argument("--outputs", default="", help="folder for run folders (default: outputs/)")
    p_verify = sub.add_parser("verify", help="check a sealed run folder against its manifest")
    p_verify.add_argument("folder")
    p_seal = sub.add_parser("seal", help="seal a run folder whose run died before sealing it (marked failed halfway)")
    p_seal.add_argument("folder")
    p_demo = sub.add_parser("demo", help="run the tiny campaign and its comparison report")
    p_demo.add_argument("--outputs", default="")
    p_campaign = sub.add_parser("campaign", help="run every study of a campaign file on every model")
    p_campaign.add_argument("action", choices=["run"])
    p_campaign.add_argument("file", help="params/campaigns/NAME.yaml, or NAME")
    p_campaign.add_argument("--resume", default="", metavar="ID", help="finish the cells a stopped campaign left")
    p_campaign.add_argument("--outputs", default="")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.command == "serve":
            from .serving import testbed

            model = load_model(args.name if args.engine == "vllm" else f"{args.name}-llamacpp")
            testbed.serve_forever(args.name, urlsplit(model.endpoint).port, api_key=model.api_key(),
                                  engine=args.engine)
        elif args.command == "run":
            folder = run_notebook(args.notebook, parse_parameters(args.parameter, args.parameters_file), args.outputs)
            print(f"sealed run: {folder}\nreport: {folder / 'report.html'}")
        elif args.command == "verify":
            problems = verify(args.folder)
            for p in problems:
                print(p)
            print(f"{args.folder}: {_verdict(problems)}")
            return 1 if problems else 0
        elif args.command == "seal":
            print(f"sealed: {seal_interrupted(args.folder)}")
        elif args.command == "campaign":
            from . import campaign

            record = campaign.run(args.file, resume=args.resume, outputs=args.outputs)
            return _failures(campaign.failed(record.name, args.outputs))
        elif args.command == "demo":
            t0 = time.monotonic()
            folder, failures = demo(args.outputs)
            print(f"comparison report: {folder / 'report.html'}\n(the tiny campaign and its comparison took "
                  f"{(time.monotonic() - t0) / 60:.1f} min)")
            return _failures(failures)
    except (SparknbError, OSError) as e:  # known failures carry a message meant for the user
        print(f"sparknb {args.command}: {redact(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"sparknb {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0
