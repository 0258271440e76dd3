"""Sealed runs: outputs/<notebook>/<run-id>/, written once, hashed, read-only, checkable.

A number is only defensible if the files behind it cannot have changed since it was taken. Each
record is flushed to disk as it completes, so a run that fails halfway keeps what it measured.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets as _secrets
import stat
from datetime import datetime, timezone
from pathlib import Path

from .fingerprint import redact
from .params import project_root

MANIFEST = "manifest.json"
CLAIM = "params.json"  # created first and exclusively: whoever writes it owns the run id


class RunError(RuntimeError):
    """A run folder cannot be written or does not check out."""


def new_run_id(label: str = "") -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", label).strip("-")[:40]
    return "-".join(p for p in (stamp, slug, _secrets.token_hex(3)) if p)


def outputs_dir() -> Path:
    return Path(os.environ.get("SPARKNB_OUTPUTS") or project_root() / "outputs")


def _dump(obj) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)


class Run:
    """One run folder being written. Nothing in it is ever overwritten."""

    def __init__(self, path: Path, secrets: tuple[str, ...] = ()):
        self.path = path
        self.id = path.name
        self._secrets = secrets

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
        """Write a new file; an existing one is never replaced."""
        target = self._target(name)
        with open(target, "x") as f:  # 'x' fails if the file exists
            f.write(redact(text, self._secrets))
        return target

    def record(self, obj: dict) -> None:
        """Append one line and push it to disk now, so a crash later cannot lose it."""
        with open(self._target("records.jsonl"), "a") as f:
            f.write(json.dumps(redact(obj, self._secrets), sort_keys=True, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def seal(self) -> Path:
        """Hash every file into the manifest, then make all of it read-only."""
        manifest = self._target(MANIFEST)
        hashes = {p.relative_to(self.path).as_posix(): _sha256(p) for p in _files(self.path)}
        manifest.write_text(_dump({"run_id": self.id, "sha256": hashes}) + "\n")
        for p in [*_files(self.path), manifest]:
            p.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
        self.path.chmod(stat.S_IRUSR | stat.S_IXUSR | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
        return manifest


def read_records(path: str | Path) -> list[dict]:
    file = Path(path) / "records.jsonl"
    return [json.loads(line) for line in file.read_text().splitlines() if line.strip()] if file.exists() else []


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify(path: str | Path) -> list[str]:
    """Every way the folder differs from its manifest; empty means it is as sealed."""
    folder = Path(path)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return [f"{folder} has no {MANIFEST}: it was never sealed (or the manifest was removed)"]
    try:
        expected = json.loads(manifest.read_text())["sha256"]
    except (ValueError, KeyError):
        return [f"{manifest} is not a manifest sparknb wrote"]
    problems = []
    present = {p.relative_to(folder).as_posix(): p for p in _files(folder)}
    for name, digest in sorted(expected.items()):
        if name not in present:
            problems.append(f"missing: {name}")
        elif _sha256(present[name]) != digest:
            problems.append(f"changed: {name}")
    problems += [f"added after sealing: {name}" for name in sorted(present.keys() - expected.keys())]
    return problems
