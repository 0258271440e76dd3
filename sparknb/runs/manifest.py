"""A run's manifest: the sha256 of every file, signed, remembered by the box that sealed it, checked.

Unsigned, a manifest proved nothing: one byte of records.jsonl changed, manifest.json deleted and the
folder sealed again verified as intact, and so did a record changed with its sha256 rewritten, and a copy
under another run id. Now the manifest is signed (signing.py), so a rewritten one fails and one signed
again names its signer; the box keeps a ledger of every manifest it sealed (sealed.jsonl in sparknb's
config folder), so a run sealed twice here, or a copy of one under another id, is caught here; a seal made
by `sparknb seal` after the run died says so in the folder; and a run that read other runs pins their
manifests (params.json's settings.inputs), so an input sealed again later is caught when the run that read
it is checked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..errors import RunError
from . import signing
from .strict_json import dumps, read_object

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"  # written after the manifest, so outside it
AFTER_THE_FACT = "sealed-after-the-fact.json"  # who sealed a run that had died before sealing itself, and when
log = logging.getLogger(__name__)


def walk(folder: Path) -> tuple[list[str], list[str], list[str]]:
    """Files, folders and symbolic links below `folder`, as relative paths; links are never followed."""
    files, folders, links = [], [], []
    for root, dirs, names in os.walk(folder, followlinks=False):
        base = Path(root)
        for name in dirs:
            (links if (base / name).is_symlink() else folders).append((base / name).relative_to(folder).as_posix())
        for name in names:
            (links if (base / name).is_symlink() else files).append((base / name).relative_to(folder).as_posix())
    return sorted(files), sorted(folders), sorted(links)


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# --- sealing --------------------------------------------------------------------------------------------

def after_the_fact(why: str) -> dict:
    """What a seal made for a run that did not seal itself says: by whom, when, and why."""
    return {"sealed_by": signing.whoami(), "sealed_at": _now(), "why": why}


def write(folder: Path, run_id: str, late: dict | None = None) -> Path:
    """Hash every file into the manifest, sign it and remember it; `late` (after_the_fact()) is written into
    the folder first. A run this box sealed before is never sealed again."""
    refuse_second_seal(run_id)
    if late:
        _create(folder / AFTER_THE_FACT, dumps(late, indent=2) + "\n")
    files, folders, links = walk(folder)
    if links:
        raise RunError(f"{folder} holds symbolic links ({', '.join(links)}); a sealed run holds only its own files.")
    hashes = {name: sha256(folder / name) for name in files if name not in (MANIFEST, SIGNATURE)}
    body = {"run_id": run_id, "sha256": hashes, "folders": folders, "sealed_by": signing.whoami(),
            "sealed_at": _now()}
    text, signature = _signed(body)
    _create(folder / MANIFEST, text)
    if signature:
        _create(folder / SIGNATURE, signature)
    _remember({"run_id": run_id, "manifest_sha256": hashlib.sha256(text.encode()).hexdigest(),
               "records_sha256": _records(hashes, folder), "record_lines_sha256": _record_lines(folder),
               "signed": bool(signature), "at": body["sealed_at"]})
    return folder / MANIFEST


def _signed(body: dict) -> tuple[str, str]:
    """The manifest's text and its signature; a key that cannot sign leaves the run sealed UNSIGNED, with the
    reason in the manifest, never unsealed (its records must stay)."""
    try:
        path, public = signing.signer()
        text = dumps(body | {"key": signing.fingerprint(public)}, indent=2, sort_keys=True) + "\n"
        return text, signing.sign(text.encode(), path)
    except RunError as e:
        log.warning("sealed UNSIGNED: %s", e)
        return dumps(body | {"unsigned": str(e)}, indent=2, sort_keys=True) + "\n", ""


def _create(path: Path, text: str) -> None:
    """A new file, whole or not at all: half a manifest left by a full disk would pass for a seal."""
    with open(path, "x") as f:
        try:
            f.write(text)
            f.flush()
        except OSError:
            path.unlink()
            raise


def _records(hashes: dict, folder: Path) -> str | None:
    """The sha256 of a run's records, where it has any (empty records are no one's in particular)."""
    name = "records.jsonl"
    return hashes[name] if name in hashes and (folder / name).stat().st_size else None


def _record_lines(folder: Path) -> str | None:
    """The sha256 of a run's records, each written alike and in sorted order: a copy whose lines were shuffled (or
    respaced) before it was sealed again hashed as other records and passed the ledger's copy check."""
    path = folder / "records.jsonl"
    lines = path.read_text(errors="replace").splitlines() if path.is_file() else []
    same = sorted(_alike(line) for line in lines if line.strip())
    return hashlib.sha256("\n".join(same).encode()).hexdigest() if same else None


def _alike(line: str) -> str:
    try:
        return json.dumps(json.loads(line), sort_keys=True)
    except ValueError:  # a half-written line is compared as it is
        return line.strip()


# --- the ledger of this box's seals ---------------------------------------------------------------------

def _ledger() -> Path:
    return signing.config_dir() / "sealed.jsonl"


def _sealed_here() -> list[dict]:
    path = _ledger()
    lines = path.read_text().splitlines() if path.is_file() else []
    return [entry for entry in map(_entry, lines) if entry]


def _entry(line: str) -> dict | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) and "run_id" in entry else None


def _remember(entry: dict) -> None:
    path = _ledger()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:  # one short line, appended whole
        f.write(dumps(entry, sort_keys=True) + "\n")


def refuse_second_seal(run_id: str) -> None:
    before = [e for e in _sealed_here() if e["run_id"] == run_id]
    if before:
        raise RunError(f"run {run_id} was sealed on this box at {before[0].get('at')} ({_ledger()}); its "
                       "manifest has been removed or replaced since, so the folder may have changed after "
                       "sealing. It is not sealed again: a seal made now would vouch for files nobody checked.")


# --- checking -------------------------------------------------------------------------------------------

NEVER_SEALED = "it was never sealed"  # a folder without a manifest, which `sparknb seal FOLDER` can seal

@dataclass(frozen=True)
class Seal:
    """What a run folder's seal says: every problem (never to be trusted), who signed, and what went unchecked;
    and the one rule by which every reader of past runs takes it or refuses it (refusal)."""

    problems: tuple[str, ...]
    signature: signing.Signature | None  # None: no signature
    after_the_fact: dict | None  # sealed-after-the-fact.json, where `sparknb seal` sealed a run that had died
    notes: tuple[str, ...] = ()  # what could not be checked here, and why
    digest: str = ""  # the sha256 of the manifest checked (what a run that reads this one pins); "" with none
    unsigned: str = ""  # why the box that sealed it could not sign, as its manifest says
    untrusted_inputs: tuple[str, ...] = ()  # runs it read that were not trusted then, with their verdicts

    @property
    def trusted(self) -> bool:
        return self.verdict.startswith("intact")

    @property
    def vouched(self) -> bool:
        """Whole and signed by a key known here, though perhaps sealed after the fact or resting on such a run."""
        return not self.problems and self.signature is not None and self.signature.signer is not None

    @property
    def verdict(self) -> str:
        """One line: intact and by whom, or the first thing that stands against it."""
        for word, marker in (("NOT SEALED", "never sealed"), ("SIGNATURE UNCHECKED", "signature unchecked"),
                             ("BAD SIGNATURE", "signature"),
                             ("AN INPUT WAS SEALED AGAIN", "input sealed again"),
                             ("SEALED AGAIN", "sealed again")):
            if any(marker in p for p in self.problems):
                return word
        if self.problems:
            return "A COPY" if all(p.startswith("a copy") for p in self.problems) else "CHANGED"
        if self.signature is None:
            return "UNSIGNED: its files match its manifest, but nothing vouches for the manifest"
        by = (f"signed by {self.signature.signer} ({self.signature.key})" if self.signature.signer else
              f"signed by a key not in {signing.allowed_signers()}: {self.signature.key}")
        if self.after_the_fact:
            a = self.after_the_fact
            return f"SEALED AFTER THE FACT by {a.get('sealed_by')} at {a.get('sealed_at')} ({a.get('why')}); {by}"
        if self.signature.signer and self.untrusted_inputs:
            return f"READ AN UNTRUSTED RUN: {'; '.join(self.untrusted_inputs)}; {by}"
        return f"intact, {by}" if self.signature.signer else f"UNKNOWN SIGNER: {by}"

    def refusal(self, resume: bool = False) -> str:
        """Why a reader may not take this run, in the verdict's words, and what would make it trusted; "" where
        it may. The one rule for every reader (compare_with, resume_from, the comparison, campaigns, the run
        browser): only what `sparknb verify` calls intact and trusted. `resume` also takes a run that is whole and
        signed by a known key but sealed after the fact (a kernel that died): the run that finishes it pins it
        as untrusted, so it is never trusted either."""
        if self.trusted or (resume and self.vouched):
            return ""
        return f"{self.verdict}. {self.remedy()}"

    def remedy(self) -> str:
        """What would make it trusted, or why nothing would."""
        if len(self.problems) == 1 and NEVER_SEALED in self.problems[0]:
            folder = self.problems[0].split(f" has no {MANIFEST}")[0]
            return (f"{self.problems[0]}. If its run died before sealing it, `sparknb seal {folder}` keeps what it "
                    "took, sealed after the fact: resume_from can then finish it")
        if self.problems and all(p.startswith("signature unchecked") for p in self.problems):
            return f"{self.problems[0]}, and read it again"
        if self.problems:
            return ("It differs from its seal (" + "; ".join(self.problems) + "): nothing makes it trusted again; "
                    "measure again, or use an intact run")
        if self.signature is None:
            why = f"Its manifest says: {self.unsigned.rstrip('.')}. " if self.unsigned else ""
            return (f"{why}Only a signed seal is trusted: install openssh-client (it provides ssh-keygen, which "
                    f"signs seals), check that ${signing.KEY_ENV}, if set, names a key that signs, and measure again")
        if self.signature.signer is None:
            return (f"If you trust whoever holds that key: sparknb trust '{self.signature.public}' --as NAME "
                    "(NAME: theirs, never this box's own)")
        if self.after_the_fact:
            return ("Nothing vouches that its files are the run's own: it may be finished with resume_from (the run "
                    "that finishes it is not trusted either), never compared; measure again to compare")
        return "It read runs this box could not vouch for: measure again without them"


def check(path: str | Path) -> Seal:
    """Every way the folder differs from its manifest, whether the manifest's signature holds and whose it is,
    and what this box's ledger and the run's pinned inputs say."""
    folder = Path(path)
    manifest = folder / MANIFEST
    if not manifest.is_file():
        return Seal((f"{folder} has no {MANIFEST}: {NEVER_SEALED} (or the manifest was removed)",
                     *_ledger_problems(folder.name, None, None)), None, None)
    raw = manifest.read_bytes()  # read once: parsed, signature-checked and hashed as these bytes
    try:
        sealed = json.loads(raw)
        expected, run_id = dict(sealed["sha256"]), sealed["run_id"]
    except (ValueError, KeyError, TypeError):
        return Seal((f"{manifest} is not a manifest sparknb wrote",), None, None)
    signature, problems = _signature(folder, sealed, raw)
    problems += _changes(folder, expected, sealed.get("folders", []))
    if run_id != folder.name:
        problems.insert(0, f"renamed: the folder is {folder.name!r} but the run sealed in it is {run_id!r}")
    sha = hashlib.sha256(raw).hexdigest()
    records = "records.jsonl" in expected and (folder / "records.jsonl").is_file()
    problems += _ledger_problems(run_id, sha, (_records(expected, folder), _record_lines(folder)) if records else None)
    pinned, notes, untrusted = _pinned(folder)
    return Seal(tuple(problems + pinned), signature, read_object(folder / AFTER_THE_FACT), tuple(notes), sha,
                str(sealed.get("unsigned") or ""), tuple(untrusted))


def _signature(folder: Path, sealed: dict, raw: bytes) -> tuple[signing.Signature | None, list[str]]:
    if not (folder / SIGNATURE).is_file():
        return None, ([f"signature missing: the manifest was signed by {sealed['key']}, and {SIGNATURE} is gone"]
                      if "key" in sealed else [])
    try:
        signature = signing.check(raw, folder / SIGNATURE)
    except signing.NoKeygen as e:
        return None, [f"signature unchecked: {e}"]
    except RunError as e:
        return None, [f"bad signature: {e}"]
    if not signature.good:
        return signature, [f"bad signature: {SIGNATURE} does not sign this {MANIFEST} (it was rewritten after "
                           f"signing, or signed for another); ssh-keygen: {signature.detail}"]
    return signature, []


def _changes(folder: Path, expected: dict, sealed_folders: Sequence[str]) -> list[str]:
    """Anything not in the manifest counts, anywhere in the tree: a file, an empty folder, a symbolic link."""
    files, folders, links = walk(folder)
    present = {name for name in files if name not in (MANIFEST, SIGNATURE)}
    problems = []
    for name, digest in sorted(expected.items()):
        if name not in present:
            problems.append(f"missing: {name}")
        elif sha256(folder / name) != digest:
            problems.append(f"changed: {name}")
    problems += [f"added after sealing: {name}" for name in sorted(present - expected.keys())]
    known = set(sealed_folders) | {Path(n).parent.as_posix() for n in expected if "/" in n}
    problems += [f"folder added after sealing: {name}" for name in folders if name not in known]
    return problems + [f"symbolic link: {name}" for name in links]


def _ledger_problems(run_id: str, digest: str | None, records: tuple[str | None, str | None] | None) -> list[str]:
    """A run this box sealed with another manifest was sealed again; records that a run sealed here before it
    holds are a copy (the run sealed first is the original)."""
    sealed = _sealed_here()
    own = [e for e in sealed if e["run_id"] == run_id]
    earlier = sealed[:sealed.index(own[0])] if own else sealed
    problems = []
    for e in own:
        if digest is None:
            problems.append(f"this box sealed run {run_id} at {e.get('at')}; its manifest was removed since")
        elif e.get("manifest_sha256") != digest:
            problems.append(f"sealed again: this box sealed run {run_id} at {e.get('at')} with another manifest "
                            f"(sha256 {str(e.get('manifest_sha256'))[:12]}...); the folder changed after sealing")
    return problems + [f"a copy: its records.jsonl is that of run {e['run_id']}, sealed on this box at {e.get('at')}"
                       for e in earlier if records and _same(e, *records)]


def _same(entry: dict, file: str | None, lines: str | None) -> bool:
    """The same records as a ledger entry: the same file, or the same lines in any order (entries written before
    the lines were hashed hold the file's hash only)."""
    return bool(file and entry.get("records_sha256") == file or lines and entry.get("record_lines_sha256") == lines)


# --- runs read by a run ---------------------------------------------------------------------------------

def digest(folder: Path) -> str:
    """The sha256 of a sealed run's manifest: what pins it (its files, its id and its signer's key)."""
    return hashlib.sha256((folder / MANIFEST).read_bytes()).hexdigest()


def pins(runs: Sequence) -> list[dict]:
    """The pins of the runs a plan read (run.PastRun): where each was and its manifest's sha256 then."""
    return [{"notebook": r.path.parent.name, "run_id": r.path.name, "path": str(r.path.resolve()),
             "manifest_sha256": r.manifest_sha256} | _trust_of(r.seal) | ({"signer": r.signer} if r.signer else {})
            for r in runs]


def said(pins: Sequence[dict]) -> list[str]:
    """What a run says of the runs it read, where one was signed by another key or was not trusted."""
    return [f"reads {p['run_id']}: {p.get('verdict')}" for p in pins if p.get("signer") or p.get("trusted") is False]


def _trust_of(seal: Seal | None) -> dict:
    """Whether a run read was trusted then, and its verdict: a run that read one that was not (resume_from a run
    sealed after the fact) is itself not trusted, signed as it is (`resume_from` a forged unsigned run made a
    new run that verified intact, signed by this box)."""
    return {} if seal is None else {"trusted": seal.trusted, "verdict": seal.verdict}


def _pinned(folder: Path) -> tuple[list[str], list[str], list[str]]:
    """Each input whose manifest is no longer the one this run read (a problem), that is not here (a note), or
    that was not trusted when this run read it (its verdict then, signed into this run's params.json)."""
    problems, notes = [], []
    settings = (read_object(folder / "params.json") or {}).get("settings")
    pinned = settings.get("inputs") or [] if isinstance(settings, dict) else []
    untrusted = [f"{pin['run_id']} ({pin.get('verdict')})" for pin in pinned if pin.get("trusted") is False]
    for pin in pinned:
        found = next((p for p in (folder.parent.parent / pin["notebook"] / pin["run_id"], Path(pin["path"]))
                      if (p / MANIFEST).is_file()), None)
        now = digest(found) if found is not None else None
        if found is None:
            notes.append(f"input {pin['run_id']} is not here (nor at {pin['path']}): its pin is unchecked")
        elif now != pin["manifest_sha256"]:
            problems.append(f"input sealed again: {found} no longer has the manifest this run read (sha256 "
                            f"{pin['manifest_sha256'][:12]}..., now {now[:12]}...)")
    return problems, notes, untrusted
