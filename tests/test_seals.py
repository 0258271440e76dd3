"""One rule for reading past runs: whatever `sparknb verify` does not call intact and trusted is refused by every
reader (compare_with, resume_from, the comparison, campaigns, the run browser), in the verdict's words and with the
command that would make it trusted. Each laundered run here passed every reader before: a tampered copy sealed
after the fact, a manifest rehashed with its signature dropped, a run signed by any other key."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from test_compare import decode_run, fingerprint

from sparknb.boxes import campaign
from sparknb.cli import main
from sparknb.errors import DataError
from sparknb.runs import manifest
from sparknb.runs.run import Run, read_past, read_records
from sparknb.runs.signing import whoami
from sparknb.studies import compare, decode
from sparknb.studies.compare.browser import sealed_runs


def _unseal(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def _bare(path: Path) -> None:
    """The folder writable again, its seal gone: as a forger starts."""
    _unseal(path)
    for name in ("manifest.json", "manifest.sig"):
        (path / name).unlink(missing_ok=True)


def _copy(run: Run, name: str) -> Path:
    copy = run.path.parent / name
    shutil.copytree(run.path, copy)
    _bare(copy)
    return copy


def _forged(tmp_path) -> tuple[Run, Path]:
    """(a) A sealed run copied under a new name, every speed raised by a third, relabelled as another model and
    sealed again with `sparknb seal`."""
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    copy = _copy(a, "20990101-000000-dense-27b-abcdef")
    records = [json.loads(line) for line in (copy / "records.jsonl").read_text().splitlines()]
    (copy / "records.jsonl").write_text("".join(json.dumps(r | {"decode_tokens_per_s": r["decode_tokens_per_s"] * 1.33})
                                                + "\n" for r in records))
    params = json.loads((copy / "params.json").read_text())
    (copy / "params.json").write_text(json.dumps(params | {"model": {"name": "dense-27b", "speculative": None}}))
    assert main(["seal", str(copy)]) == 0
    return a, copy


def test_a_tampered_copy_sealed_after_the_fact_is_refused_by_every_reader(tmp_path, capsys):
    a, copy = _forged(tmp_path)
    capsys.readouterr()
    assert main(["verify", str(copy)]) == 1 and "SEALED AFTER THE FACT" in capsys.readouterr().out
    with pytest.raises(DataError) as e:
        decode.Plan.build(outputs=str(tmp_path), compare_with=copy.name, prompt_lengths=[111])
    said = str(e.value)
    assert f"as `sparknb verify {copy}` says: SEALED AFTER THE FACT by {whoami()}" in said
    assert "never compared; measure again to compare" in said
    with pytest.raises(DataError, match=f"{copy.name} is refused.*SEALED AFTER THE FACT"):
        compare.Plan.build(runs=[a.id, copy.name], outputs=str(tmp_path))
    offered = dict((value, label) for label, value in sealed_runs(tmp_path))
    assert offered[copy.name].startswith(f"decode: {copy.name} (REFUSED: SEALED AFTER THE FACT by {whoami()}")
    assert offered[a.id] == f"decode: {a.id}"


def test_a_run_resumed_from_one_sealed_after_the_fact_is_never_trusted(tmp_path, capsys):
    _, copy = _forged(tmp_path)
    plan = decode.Plan.build(outputs=str(tmp_path), resume_from=copy.name, prompt_lengths=[111])  # a died kernel's run
    (pin,) = plan.settings()["inputs"]
    assert pin["trusted"] is False and pin["verdict"].startswith("SEALED AFTER THE FACT")
    again = Run.create("decode", {"notebook": "decode", "settings": plan.settings()}, outputs=tmp_path)
    for record in read_records(copy):
        again.record(record | {"resumed_from": copy.name})
    again.write_json("fingerprint.json", fingerprint())
    again.seal()
    capsys.readouterr()
    assert main(["verify", str(again.path)]) == 1
    out = capsys.readouterr().out
    assert f"READ AN UNTRUSTED RUN: {copy.name} (SEALED AFTER THE FACT" in out and "measure again without them" in out
    with pytest.raises(DataError, match=f"{again.id} is refused.*READ AN UNTRUSTED RUN"):
        read_past(again.id, "decode", outputs=tmp_path)


def test_a_manifest_rehashed_with_its_signature_dropped_is_refused_naming_what_to_install(tmp_path, monkeypatch):
    """(b) UNSIGNED: here the ledger names it sealed again; on a box without that ledger only the missing signature
    tells, and no reader takes it, resume_from included (a forged unsigned run resumed made a trusted run)."""
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    records = a.path / "records.jsonl"
    _unseal(a.path)
    records.write_text(records.read_text().replace('"rep": 0', '"rep": 7', 1))
    body = json.loads((a.path / "manifest.json").read_text())
    body["sha256"]["records.jsonl"] = manifest.sha256(records)
    (a.path / "manifest.json").write_text(json.dumps({k: v for k, v in body.items() if k != "key"}))
    (a.path / "manifest.sig").unlink()
    assert manifest.check(a.path).verdict == "SEALED AGAIN"
    monkeypatch.setenv("SPARKNB_CONFIG_DIR", str(tmp_path / "elsewhere"))
    with pytest.raises(DataError) as e:
        decode.Plan.build(outputs=str(tmp_path), resume_from=a.id, prompt_lengths=[111])
    assert "UNSIGNED: its files match its manifest, but nothing vouches for the manifest" in str(e.value)
    assert "install openssh-client (it provides ssh-keygen, which signs seals)" in str(e.value)


def test_a_box_without_ssh_keygen_seals_unsigned_and_is_told_what_to_install(tmp_path, monkeypatch, capsys):
    signed = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2)  # sealed while ssh-keygen was there
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))  # no ssh-keygen anywhere
    with pytest.raises(DataError) as e:
        read_past(signed.id, "decode", outputs=tmp_path)
    assert ("says: SIGNATURE UNCHECKED. signature unchecked: ssh-keygen is not installed (it signs and checks seals): "
            "install openssh-client, and read it again") in str(e.value)
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    assert "ssh-keygen is not installed" in json.loads((a.path / "manifest.json").read_text())["unsigned"]
    with pytest.raises(DataError) as e:
        read_past(a.id, "decode", what="compare_with", outputs=tmp_path)
    assert "Its manifest says: ssh-keygen is not installed (it signs and checks seals): install openssh-client" in str(
        e.value)
    capsys.readouterr()
    assert main(["verify", str(a.path)]) == 1 and "install openssh-client" in capsys.readouterr().out


def _key(tmp_path, name: str) -> Path:
    key = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True,
                   timeout=30)
    return key


def test_a_run_signed_by_another_key_is_refused_until_trusted_by_name_and_then_named(tmp_path, monkeypatch, capsys):
    """(c) UNKNOWN SIGNER: a key that SPARKNB_SIGNING_KEY names is never trusted by signing with it; `sparknb trust`
    trusts it, never under this box's own name, and the run is then named as that signer's."""
    other = _key(tmp_path, "mallory")
    monkeypatch.setenv("SPARKNB_SIGNING_KEY", str(other))
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2)
    monkeypatch.delenv("SPARKNB_SIGNING_KEY")
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    capsys.readouterr()
    assert main(["verify", str(b.path)]) == 1
    public = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    assert public.split()[1] not in (Path(os.environ["SPARKNB_CONFIG_DIR"]) / "allowed_signers").read_text()
    assert f"sparknb trust '{public}' --as NAME" in capsys.readouterr().out
    with pytest.raises(DataError) as e:
        compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))
    assert "says: UNKNOWN SIGNER" in str(e.value) and f"sparknb trust '{public}' --as NAME" in str(e.value)
    assert main(["trust", f"{other}.pub", "--as", whoami()]) == 2 and "this box's own name" in capsys.readouterr().err
    assert main(["trust", "ssh-ed25519 not-a-key", "--as", "mallory"]) == 2
    assert "is no SSH public key" in capsys.readouterr().err
    assert main(["trust", public, "--as", "mallory"]) == 0
    assert main(["trust", f"{other}.pub", "--as", "mal"]) == 2
    assert "trusted already, as mallory" in capsys.readouterr().err
    assert main(["verify", str(b.path)]) == 0 and "intact, signed by mallory" in capsys.readouterr().out
    plan = compare.Plan.build(runs=[a.id, b.id], outputs=str(tmp_path))
    named = [str(n) for n in compare.warnings(plan.past)]
    key = manifest.check(b.path).signature.key
    mine = f"{b.id}: signed by mallory ({key}), not with this box's own key."
    assert [n for n in named if "signed by" in n] == [mine]
    pins = decode.Plan.build(outputs=str(tmp_path), compare_with=b.id, prompt_lengths=[111]).settings()["inputs"]
    assert manifest.said(pins) == [f"reads {b.id}: intact, signed by mallory ({key})"]
    assert (f"decode: {b.id} (signed by mallory)", b.id) in sealed_runs(tmp_path)


def test_another_key_listed_under_this_box_s_own_name_is_not_this_box(tmp_path, capsys):
    """What an older sparknb left: a key SPARKNB_SIGNING_KEY named once, listed for good under this box's name."""
    other = _key(tmp_path, "once")
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    listed = Path(os.environ["SPARKNB_CONFIG_DIR"]) / "allowed_signers"
    with open(listed, "a") as f:
        f.write(f'{whoami()} namespaces="sparknb-run" {Path(f"{other}.pub").read_text()}')
    _bare(a.path)
    (a.path / "records.jsonl").write_text((a.path / "records.jsonl").read_text().replace('"rep": 0', '"rep": 7', 1))
    a.path.rename(a.path.with_name("20990101-000000-moe-35b-abcdef"))
    forged = Run(a.path.with_name("20990101-000000-moe-35b-abcdef"))
    os.environ["SPARKNB_SIGNING_KEY"] = str(other)
    try:
        forged.seal()
    finally:
        del os.environ["SPARKNB_SIGNING_KEY"]
    capsys.readouterr()
    assert main(["verify", str(forged.path)]) == 1 and "UNKNOWN SIGNER" in capsys.readouterr().out


def test_the_ledger_knows_a_copy_whose_record_lines_were_shuffled(tmp_path, monkeypatch):
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1)
    copy = _copy(a, "20990101-000000-moe-35b-abcdef")
    lines = (copy / "records.jsonl").read_text().splitlines(keepends=True)
    (copy / "records.jsonl").write_text("".join(reversed(lines)).replace('": ', '":'))  # shuffled and respaced
    Run(copy).seal()
    (problem,) = manifest.check(copy).problems
    assert problem.startswith(f"a copy: its records.jsonl is that of run {a.id}")
    author = Path(os.environ["SPARKNB_CONFIG_DIR"])
    monkeypatch.setenv("SPARKNB_CONFIG_DIR", str(tmp_path / "reader"))  # no ledger knows them: the records tell
    assert main(["trust", str(author / "signing_key.pub"), "--as", "author"]) == 0
    with pytest.raises(DataError, match=f"{a.id} and {copy.name} hold the same records"):
        read_past([a.id, copy.name], "decode", outputs=tmp_path)


def test_a_stopped_campaign_measures_again_a_cell_whose_run_no_reader_takes(tmp_path, capsys):
    a, copy = _forged(tmp_path)
    record = Run.create(campaign.NOTEBOOK, {"cells": []}, outputs=tmp_path)
    record.record({"cell": "decode/moe-35b", "status": "done", "run": str(a.path)})
    record.record({"cell": "decode/dense-27b", "status": "done", "run": str(copy)})
    capsys.readouterr()
    assert campaign._finished(record.path) == {"decode/moe-35b": str(a.path)}
    assert f"decode/dense-27b: measured again, as {copy.name} is refused: SEALED AFTER THE FACT" in capsys.readouterr(
        ).out


@pytest.fixture(scope="module")
def module_run(tmp_path_factory) -> Run:
    """A run sealed by a module fixture, as the notebook tests seal theirs: with the suite's key (conftest)."""
    return decode_run(tmp_path_factory.mktemp("module"), "moe-35b", 26.0, fingerprint(), seed=1)


def test_a_fixture_s_run_is_this_box_s_own_to_every_test(module_run):
    (past,) = read_past(str(module_run.path), "decode")
    assert past.seal.trusted and past.signer == ""
