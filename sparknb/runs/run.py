"""Sealed runs: outputs/<notebook>/<run-id>/, written once, hashed, read-only, checkable.

A number is only defensible if the files behind it cannot have changed since it was taken. Each
record is in the file whole as it completes, so a run that fails halfway keeps what it measured, and pushed to
disk moments later (push.Pusher); each is written whole or not at all: a full disk once left records.jsonl ending in
half a line, on which sealing crashed (JSONDecodeError), so that run could never be sealed.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import io
import json
import logging
import os
import re
import secrets as _secrets
import shutil
import stat
import tarfile
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..errors import DataError, RunError
from . import manifest, signing
from .manifest import MANIFEST, walk
from .push import Pusher
from .params import project_root
from .redaction import redact
from .strict_json import dumps, read_object

log = logging.getLogger(__name__)
CLAIM = "params.json"  # created first and exclusively: whoever writes it owns the run id
FAILURE = "failure.json"  # written by a run that stopped halfway, before it is sealed
RESERVE = ".space-reserve"  # room held by `sparknb run` so that a run stopped by a full disk can still be sealed
RESERVE_BYTES = 16 << 20  # the report, the notebook's last save, failure.json and the manifest of a failed run


def new_run_id(label: str = "") -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-")[:40]
    return "-".join(p for p in (stamp, slug, _secrets.token_hex(3)) if p)


def outputs_dir() -> Path:
    return Path(os.environ.get("SPARKNB_OUTPUTS") or project_root() / "outputs")


def _dump(obj) -> str:
    return dumps(obj, indent=2, sort_keys=True)


class Run:
    """One run folder being written. Nothing in it is ever overwritten."""

    def __init__(self, path: Path, secrets: tuple[str, ...] = ()):
        self.path = path
        self.id = path.name
        self._secrets = secrets
        self._pusher = Pusher()
        self._held: list[dict] | None = None  # records kept while `holding`

    @classmethod
    def create(cls, notebook: str, params: dict, *, run_id: str = "", outputs: str | Path = "",
               label: str = "", secrets: tuple[str, ...] = ()) -> Run:
        """Claim a new run id. A folder made in advance (for papermill's output) may be claimed once."""
        path = Path(outputs or outputs_dir()) / notebook / (run_id or new_run_id(label))
        path.mkdir(parents=True, exist_ok=True)
        run = cls(path, secrets)
        try:
            run.write_json(CLAIM, params)
        except FileExistsError:
            raise RunError(f"Run id {path.name!r} is already used ({path}); run ids are never reused. "
                           "Leave run_id empty for a new one.") from None
        return run

    def _target(self, name: str) -> Path:
        if (self.path / MANIFEST).exists():
            raise RunError(f"{self.path} is sealed; nothing more can be written to it.")
        return self.path / name

    def write_json(self, name: str, obj) -> Path:
        return self.write_text(name, _dump(redact(obj, self._secrets)) + "\n")

    def write_text(self, name: str, text: str) -> Path:
        """Write a new file, whole or not at all; an existing one is never replaced."""
        target = self._target(name)
        with open(target, "x") as f:  # 'x' fails if the file exists
            try:
                f.write(redact(text, self._secrets))
                f.flush()
            except OSError as e:
                target.unlink()  # made here, by 'x': nobody else's
                raise unwritable(self.path, e) from None
        return target

    def record(self, obj: dict) -> None:
        """One request's line in records.jsonl, in the file now, so a crash later cannot lose it (while `holding`,
        at its next flush)."""
        if self._held is not None:
            self._held.append(obj)
            return
        self.append("records.jsonl", obj)

    @contextlib.contextmanager
    def holding(self) -> Iterator[Callable[[], None]]:
        """Records kept in order until the flush it yields is called, and all at its end however it ends: the agent
        writes a step's records while its next request is out (wire.meanwhile), 0.6 ms of the 1.2 to 1.5 ms a step
        waited on the client on an H200's host. A process killed meanwhile loses what is held, one step's records."""
        self._held = []
        try:
            yield self._flush
        finally:
            self._flush()
            self._held = None

    def _flush(self) -> None:
        while self._held:
            self.append("records.jsonl", self._held[0])
            del self._held[0]

    def append(self, name: str, obj: dict) -> None:
        """Append one JSON line to a file of lines in one write, pushed to disk off the caller's path (push.Pusher); a
        write cut short is taken back, so the file never ends in half a line."""
        line = (dumps(redact(obj, self._secrets), sort_keys=True) + "\n").encode()
        target = self._target(name)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            end = os.fstat(fd).st_size
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            except OSError as e:
                os.ftruncate(fd, end)
                raise unwritable(self.path, e) from None
        finally:
            os.close(fd)
        self._pushed(lambda: self._pusher.push(target))

    def _pushed(self, call) -> None:
        """A push to disk that failed, as a failed write (unwritable): said once, at the next append or at seal."""
        try:
            call()
        except OSError as e:
            raise unwritable(self.path, e) from None

    def seal(self, after_the_fact: dict | None = None) -> Path:
        """Hash every file into the signed manifest, then make all of it read-only. `after_the_fact`
        (manifest.after_the_fact()): who seals a run that did not seal itself, when and why; said in the
        folder, and by verify."""
        self._target(MANIFEST)
        self._pushed(self._pusher.wait)
        (self.path / RESERVE).unlink(missing_ok=True)  # room held by `sparknb run`, never part of a run
        sealed = manifest.write(self.path, self.id, after_the_fact)
        _read_only(self.path)
        return sealed

    @property
    def sealed(self) -> bool:
        return (self.path / MANIFEST).exists()


def cannot_write(folder: Path, error: OSError) -> str:
    """A write that failed, as the user can act on it: which folder, why, and what to do."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    fix = ("Free space on that disk (df -h shows it), or give another outputs folder" if full else
           "Make the folder writable, or give another outputs folder")
    return f"Could not write to {folder}: {error.strerror or error}. {fix}."


def unwritable(folder: Path, error: OSError) -> RunError:
    """A failed write in a run: the room held for sealing (RESERVE) is let go, so that the run can still mark
    itself failed and be sealed."""
    (folder / RESERVE).unlink(missing_ok=True)
    return RunError(f"{cannot_write(folder, error)} Every record taken before is kept whole.")


READ_ONLY_FILE = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
READ_ONLY_FOLDER = READ_ONLY_FILE | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def _read_only(path: Path, mode: tuple[int, int] = (READ_ONLY_FILE, READ_ONLY_FOLDER)) -> None:
    """Every file and folder of a run read-only (or, given other modes, e.g. writable again to be moved)."""
    files, folders, _ = walk(path)
    for name in files:
        (path / name).chmod(mode[0])
    for folder in [*(path / f for f in reversed(folders)), path]:
        folder.chmod(mode[1])


# --- a sealed run travelling between boxes ---------------------------------------------------------------

def pack(folder: str | Path) -> bytes:
    """A sealed run as one uncompressed tar whose only top entry is the run's folder: what travels."""
    path = Path(folder)
    if not (path / MANIFEST).is_file():
        raise RunError(f"{path} is not sealed; only a sealed run may travel.")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(path, arcname=path.name)
    return buffer.getvalue()


def arrive(payload: bytes, parent: str | Path) -> Path:
    """A travelled run unpacked into parent/<run id>, only if it matches its own manifest; never over another run.

    A folder that differs from its manifest (changed on the way) is refused and nothing of it stays.
    Where the run is already there, as sealed (the box that made it writes into this same outputs/),
    that folder is the one returned.
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    landing = Path(tempfile.mkdtemp(prefix=".arriving-", dir=parent))
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(payload), mode="r:") as tar:
                tops = sorted({Path(m.name).parts[0] for m in tar.getmembers() if Path(m.name).parts})
                if len(tops) != 1:
                    raise RunError(f"refused on arrival: a travelled run is one folder, this holds {tops}")
                tar.extractall(landing, filter="data")  # no absolute paths, no links out, no devices
        except (tarfile.TarError, OSError) as e:
            raise RunError(f"refused on arrival: not a sealed run's folder ({type(e).__name__}: {e})") from None
        folder = landing / tops[0]
        problems = verify(folder)
        if problems:
            raise RunError(f"refused on arrival: {folder.name} does not match its manifest ({'; '.join(problems)}); "
                           "it changed between the box and here")
        target = parent / folder.name
        if target.exists():
            if verify(target) == [] and (target / MANIFEST).read_bytes() == (folder / MANIFEST).read_bytes():
                return target
            raise RunError(f"refused on arrival: {target} exists and is another run; run ids are never reused")
        _read_only(folder, (stat.S_IRUSR | stat.S_IWUSR, stat.S_IRWXU))  # a folder moves only while writable
        folder.rename(target)
        _read_only(target)
        return target
    finally:
        _read_only(landing, (stat.S_IRUSR | stat.S_IWUSR, stat.S_IRWXU))
        shutil.rmtree(landing)


def read_records(path: str | Path) -> list[dict]:
    """A run's records; a line that is not whole JSON (written before writes were whole, or cut by a kernel killed
    mid-write) is said and left out, never a JSONDecodeError that stops the run from being sealed or read."""
    file = Path(path) / "records.jsonl"
    lines = file.read_text().splitlines() if file.exists() else []
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records += [json.loads(line)] if line.strip() else []
        except ValueError:
            log.warning("%s line %d is not a whole record (%d characters, cut short when it was written); it is "
                        "left out", file, number, len(line))
    return records


def measured(records: Sequence[dict]) -> list[dict]:
    """The records of measured requests: warmups and failed requests left out."""
    return [r for r in records if not r.get("warmup") and "error" not in r]


def verify(path: str | Path) -> list[str]:
    """Every reason not to trust the folder's seal (manifest.check): empty means it is as sealed, by whoever
    signed it; whether that signer is known here, or the run was sealed after the fact, is check()'s verdict."""
    return list(manifest.check(path).problems)


def refusal(path: str | Path, resume: bool = False) -> str:
    """Why no reader takes the folder (manifest.Seal.refusal: only what verify calls intact and trusted, or, for
    `resume`, sealed after the fact by a known key), with the command that would make it trusted; "" if one does."""
    return manifest.check(path).refusal(resume)


# --- earlier runs, read back -----------------------------------------------------------------------------

@dataclass(frozen=True)
class PastRun:
    """An earlier run, read back from its sealed folder: the one way every study reads the past."""

    path: Path
    params: dict
    fingerprint: dict
    records: list[dict]
    summary: dict | None
    failure: dict | None  # what stopped it, for a run sealed after failing halfway
    manifest_sha256: str = ""  # its manifest as it was read: what a run that reads it pins (settings.inputs)
    seal: manifest.Seal | None = None  # its seal as it was read: intact, signed by whom, or not (None: not read)

    @property
    def id(self) -> str:
        return self.path.name

    @functools.cached_property
    def records_sha256(self) -> str:
        """Its records' hash in any order (a copy's lines shuffled are the same records), taken once however many
        reads of the past look for copies (same_records)."""
        return hashlib.sha256(dumps(sorted(dumps(r, sort_keys=True) for r in self.records)).encode()).hexdigest()

    @property
    def signer(self) -> str:
        """Who signed it, where that is not this box's own key ("" for this box's own run): a run signed by
        another key that is trusted here is named as theirs wherever it is shown."""
        signature = self.seal.signature if self.seal else None
        own = signature is None or signature.signer is None or signature.public == signing.own_key()
        return "" if own else f"signed by {signature.signer} ({signature.key}), not with this box's own key"

    @property
    def notebook(self) -> str:
        return self.params.get("notebook", "")

    @property
    def settings(self) -> dict:
        return self.params.get("settings", {})

    @property
    def label(self) -> str:
        """The model's name, or the models' for a run that visits several."""
        if isinstance(self.params.get("model"), dict):
            return self.params["model"].get("name") or self.id
        return ", ".join(self.params.get("models", {})) or self.id


def _locate(value: str, notebook: str | None, outputs: str | Path) -> Path | None:
    """A folder as typed (notebooks run in notebooks/, so also from the project root), or a run id."""
    base = Path(outputs or outputs_dir())
    ids = [base / notebook / value] if notebook else sorted(base.glob(f"*/{value}"))
    candidates = [Path(value).expanduser(), project_root() / value, *ids]
    return next((c for c in candidates if c.is_dir()), None)


def _read_one(value: str, notebook: str | None, what: str, outputs: str | Path) -> PastRun | str:
    where = Path(outputs or outputs_dir()) / (notebook or "*")
    kind = f"{notebook} run" if notebook else "run"
    if not isinstance(value, str) or not value.strip():
        return f"{what} {value!r}: give the folder of an earlier {kind} or its run id"
    path = _locate(value, notebook, outputs)
    if path is None:
        other = sorted(Path(outputs or outputs_dir()).glob(f"*/{value}")) if notebook and "/" not in value else []
        if other:  # said as "no such run" before, as if it did not exist
            return (f"{what} {value!r}: that run id is a {other[0].parent.name!r} run ({other[0]}), not a {notebook} "
                    f"run; only {notebook} runs measured the same thing.")
        return (f"{what} {value!r}: no such run folder, nor a run id under {where}. Give the folder of an earlier "
                f"{kind} (as `sparknb run` printed it) or its run id.")
    params = read_object(path / "params.json")
    if params is None:
        return f"{what} {value!r}: {path} has no readable params.json, so it is not a sparknb run folder."
    if notebook and params.get("notebook") != notebook:
        return (f"{what} {value!r}: {path.name} is a {params.get('notebook')!r} run, not a {notebook} run; only "
                f"{notebook} runs measured the same thing.")
    seal = manifest.check(path)
    refused = seal.refusal(resume=what == "resume_from")
    if refused:
        return f"{what} {value!r}: {path.name} is refused, as `sparknb verify {path}` says: {refused}."
    fingerprint = read_object(path / "fingerprint.json")
    if fingerprint is None:
        return (f"{what} {value!r}: {path.name} has no fingerprint.json; without it nobody can tell whether it ran "
                "on the same box and server build.")
    return PastRun(path, params, fingerprint, read_records(path), read_object(path / "summary.json"),
                   read_object(path / FAILURE), seal.digest, seal)


def read_past(values: str | Sequence[str], notebook: str | None, *, what: str = "compare_with",
              outputs: str | Path = "") -> list[PastRun]:
    """Earlier sealed runs of `notebook` (None: of any) by folder or run id; every problem is named at once."""
    if isinstance(values, str):
        values = [values] if values.strip() else []
    values = list(values or [])
    problems = [f"{what} names {v!r} twice" for v in sorted(set(values)) if values.count(v) > 1]
    runs = []
    for value in dict.fromkeys(values):
        found = _read_one(value, notebook, what, outputs)
        if isinstance(found, str):
            problems.append(found)
        else:
            runs.append(found)
    problems += same_records(runs)
    if problems:
        raise DataError(f"Cannot use {what}:\n  " + "\n  ".join(problems))
    return runs


def same_records(runs: Sequence[PastRun]) -> list[str]:
    """Two runs whose records are the same were not measured apart: one is a copy of the other (a copy sealed
    again under another id was compared with its original as two runs with identical figures)."""
    seen: dict[str, PastRun] = {}
    problems = []
    for run in runs:
        key = run.records_sha256
        if run.records and key in seen:
            problems.append(f"{seen[key].id} and {run.id} hold the same records: one is a copy of the other, "
                            "not a second measurement; compare runs measured apart")
        seen.setdefault(key, run)
    return problems
