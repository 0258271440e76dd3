"""Sealed run folders: nothing overwritten, every change detected, records kept as they come."""

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import nbformat
import numpy as np
import pandas as pd
import pytest
from support import strict, strict_lines

from sparknb.cli import main
from sparknb.errors import DataError, RunError
from sparknb.runs.run import Run, read_past, read_records, verify
from sparknb.runs.signing import whoami


def make(tmp_path, **kw):
    return Run.create("decode", {"model": "tiny-dense"}, outputs=tmp_path, label="tiny-dense", **kw)


def test_a_record_is_on_disk_as_soon_as_it_is_taken(tmp_path):
    run = make(tmp_path)
    run.record({"n": 1})
    assert read_records(run.path) == [{"n": 1}]  # read back by another handle, before anything closes
    run.record({"n": 2})
    assert [r["n"] for r in read_records(run.path)] == [1, 2]


def test_run_ids_are_never_reused(tmp_path):
    first = make(tmp_path)
    with pytest.raises(RunError, match="never reused"):
        make(tmp_path, run_id=first.id)
    assert json.loads((first.path / "params.json").read_text()) == {"model": "tiny-dense"}


def test_a_folder_made_in_advance_can_be_claimed_once(tmp_path):
    folder = tmp_path / "decode" / "my-run"
    folder.mkdir(parents=True)
    (folder / "notebook.ipynb").write_text("{}")  # papermill writes here while the run goes on
    run = make(tmp_path, run_id="my-run")
    assert run.path == folder
    with pytest.raises(RunError):
        make(tmp_path, run_id="my-run")


def test_no_file_is_overwritten(tmp_path):
    run = make(tmp_path)
    run.write_json("summary.json", {"a": 1})
    with pytest.raises(FileExistsError):
        run.write_json("summary.json", {"a": 2})
    assert json.loads((run.path / "summary.json").read_text()) == {"a": 1}


def test_a_sealed_run_is_read_only_and_verifies(tmp_path):
    run = make(tmp_path)
    run.record({"n": 1})
    run.seal()
    assert verify(run.path) == []
    assert all(not (p.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) for p in run.path.iterdir())
    with pytest.raises(RunError, match="sealed"):
        run.record({"n": 2})
    assert main(["verify", str(run.path)]) == 0


def _unseal(path):
    for p in [path, *path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)


def test_any_change_is_detected(tmp_path, capsys):
    run = make(tmp_path)
    run.record({"decode_tok_s": 170.2})
    run.write_json("summary.json", {"median": 170.2})
    run.seal()
    _unseal(run.path)
    (run.path / "records.jsonl").write_text(json.dumps({"decode_tok_s": 270.2}) + "\n")
    (run.path / "summary.json").unlink()
    (run.path / "extra.txt").write_text("x")
    assert verify(run.path) == ["changed: records.jsonl", "missing: summary.json", "added after sealing: extra.txt"]
    assert main(["verify", str(run.path)]) == 1
    assert "CHANGED" in capsys.readouterr().out


def test_an_unsealed_folder_does_not_verify(tmp_path):
    assert "never sealed" in verify(make(tmp_path).path)[0]


def test_secrets_never_reach_the_files(tmp_path):
    run = make(tmp_path, secrets=("sk-very-secret-1234",))
    run.record({"url": "http://u:hunter22@127.0.0.1/v1", "echo": "key was sk-very-secret-1234"})
    run.write_text("notes.txt", "sk-very-secret-1234")
    text = "".join(p.read_text() for p in run.path.iterdir())
    assert "sk-very-secret-1234" not in text and "hunter22" not in text


def _sealed(tmp_path, notebook="decode", **kw):
    run = Run.create(notebook, {"notebook": notebook, "model": {"name": "tiny-dense"}}, outputs=tmp_path,
                     label="tiny-dense", **kw)
    run.write_json("fingerprint.json", {"host": "here"})
    run.record({"n": 1})
    run.seal()
    return run


def test_a_file_added_in_a_subfolder_is_caught(tmp_path):
    run = Run.create("swap", {"model": "x"}, outputs=tmp_path)
    (run.path / "logs").mkdir()
    (run.path / "logs" / "server.log").write_text("started")
    run.seal()
    assert verify(run.path) == []
    _unseal(run.path)
    (run.path / "logs" / "extra.log").write_text("x")
    assert verify(run.path) == ["added after sealing: logs/extra.log"]


def test_an_empty_folder_and_a_symlink_added_are_caught(tmp_path):
    run = _sealed(tmp_path)
    _unseal(run.path)
    (run.path / "empty").mkdir()
    (run.path / "link.jsonl").symlink_to(run.path / "records.jsonl")
    assert verify(run.path) == ["folder added after sealing: empty", "symbolic link: link.jsonl"]


def test_a_sealed_run_copied_under_another_run_id_is_caught(tmp_path):
    run = _sealed(tmp_path)
    copy = run.path.parent / "20990101-000000-tiny-dense-abcdef"
    shutil.copytree(run.path, copy)
    assert verify(copy) == [f"renamed: the folder is {copy.name!r} but the run sealed in it is {run.id!r}"]


def test_past_runs_are_read_by_folder_or_by_run_id_under_outputs(tmp_path):
    run = _sealed(tmp_path)
    by_id = read_past(run.id, "decode", outputs=tmp_path)
    by_path = read_past([str(run.path)], "decode")
    assert [r.path for r in by_id] == [r.path for r in by_path] == [run.path]
    assert by_id[0].label == "tiny-dense" and by_id[0].records == [{"n": 1}] and by_id[0].failure is None
    assert read_past("", "decode") == [] and read_past([], "decode") == []


def test_past_runs_that_are_tampered_unsealed_missing_or_of_another_study_are_refused_all_at_once(tmp_path):
    tampered = _sealed(tmp_path)
    _unseal(tampered.path)
    (tampered.path / "records.jsonl").write_text(json.dumps({"n": 2}) + "\n")
    unsealed = Run.create("decode", {"notebook": "decode"}, outputs=tmp_path)
    other = _sealed(tmp_path, notebook="prefill")
    with pytest.raises(DataError) as e:
        read_past([tampered.id, str(unsealed.path), "no-such-run", str(other.path), tampered.id], "decode",
                  what="compare_with", outputs=tmp_path)
    text = str(e.value)
    assert "changed: records.jsonl" in text and "never sealed" in text and "'no-such-run': no such run" in text
    assert "is a 'prefill' run" in text and "names" in text and "twice" in text


def test_a_run_that_died_unsealed_is_sealed_by_hand_marked_failed_and_sealed_after_the_fact(tmp_path, capsys):
    run = Run.create("decode", {"notebook": "decode"}, outputs=tmp_path)
    run.record({"n": 1})
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell("# Decode")]
    nbformat.write(notebook, run.path / "notebook.ipynb")  # as papermill leaves it when the kernel dies
    assert main(["seal", str(run.path)]) == 0
    assert verify(run.path) == []
    report = (run.path / "report.html").read_text()
    assert report.index("Sealed after the fact") < report.index("This run failed halfway") < report.index("Decode")
    assert json.loads((run.path / "failure.json").read_text())["failed_halfway"] is True
    late = json.loads((run.path / "sealed-after-the-fact.json").read_text())
    assert late["sealed_by"] == whoami() and "own seal was missing" in late["why"]
    capsys.readouterr()
    assert main(["verify", str(run.path)]) == 1
    assert f"SEALED AFTER THE FACT by {whoami()} at {late['sealed_at']}" in capsys.readouterr().out
    assert main(["seal", str(run.path)]) == 2 and "sealed already" in capsys.readouterr().err


def _another_box(monkeypatch, tmp_path, name, trusting=None):
    """Another box's sparknb: its own key and ledger; `trusting` is another box's config folder, whose own key it
    trusts by that folder's name (`sparknb trust`)."""
    config = tmp_path / name
    config.mkdir()
    monkeypatch.setenv("SPARKNB_CONFIG_DIR", str(config))
    if trusting is not None:
        assert main(["trust", str(trusting / "signing_key.pub"), "--as", trusting.name]) == 0
    return config


def _tamper(path, old=b"170.2", new=b"171.2"):
    _unseal(path)
    records = path / "records.jsonl"
    records.write_bytes(records.read_bytes().replace(old, new))


def test_a_run_tampered_then_sealed_again_is_refused_here_and_named_elsewhere(tmp_path, monkeypatch, capsys):
    author = _another_box(monkeypatch, tmp_path, "author")
    run = Run.create("decode", {"notebook": "decode"}, outputs=tmp_path / "outputs")
    run.record({"decode_tok_s": 170.2})
    run.write_json("summary.json", {"median": 170.2})
    run.seal()
    assert main(["verify", str(run.path)]) == 0 and f"intact, signed by {whoami()}" in capsys.readouterr().out
    _tamper(run.path)
    (run.path / "manifest.json").unlink()
    (run.path / "manifest.sig").unlink()
    assert main(["seal", str(run.path)]) == 2  # this box sealed it once: never again
    assert "was sealed on this box" in capsys.readouterr().err and not (run.path / "manifest.json").exists()
    _another_box(monkeypatch, tmp_path, "mallory")  # sealed again where no ledger knows it, with another key
    assert main(["seal", str(run.path)]) == 0
    monkeypatch.setenv("SPARKNB_CONFIG_DIR", str(author))
    capsys.readouterr()
    assert main(["verify", str(run.path)]) == 1
    assert "SEALED AGAIN" in capsys.readouterr().out
    _another_box(monkeypatch, tmp_path, "reader", trusting=author)  # a reader who trusts the author's key
    assert verify(run.path) == []  # every file matches the new manifest: only the signature tells
    assert main(["verify", str(run.path)]) == 1
    out = capsys.readouterr().out
    assert "SEALED AFTER THE FACT" in out and "signed by a key not in" in out and "own seal was missing" in out


def _rehash(path, name="records.jsonl"):
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["sha256"][name] = hashlib.sha256((path / name).read_bytes()).hexdigest()
    (path / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def test_a_record_changed_and_its_hash_rewritten_fails_the_signature(tmp_path, monkeypatch, capsys):
    run = _sealed(tmp_path)
    _tamper(run.path, b'"n": 1', b'"n": 2')
    _rehash(run.path)
    assert any(p.startswith("bad signature") for p in verify(run.path))
    assert main(["verify", str(run.path)]) == 1 and "BAD SIGNATURE" in capsys.readouterr().out
    _another_box(monkeypatch, tmp_path, "reader")  # no ledger there: the signature alone tells
    assert main(["verify", str(run.path)]) == 1 and "BAD SIGNATURE" in capsys.readouterr().out
    (run.path / "manifest.sig").unlink()
    assert any(p.startswith("signature missing") for p in verify(run.path))


def test_a_copy_under_another_run_id_is_refused_however_it_was_sealed(tmp_path, monkeypatch):
    run = _sealed(tmp_path)
    copy = run.path.parent / "20990101-000000-tiny-dense-abcdef"
    shutil.copytree(run.path, copy)
    _unseal(copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    (copy / "manifest.json").write_text(json.dumps(manifest | {"run_id": copy.name}))
    assert any(p.startswith("bad signature") for p in verify(copy))
    (copy / "manifest.json").unlink()
    (copy / "manifest.sig").unlink()
    Run(copy).seal()
    assert verify(copy) == [f"a copy: its records.jsonl is that of run {run.id}, sealed on this box at "
                            f"{json.loads((run.path / 'manifest.json').read_text())['sealed_at']}"]
    author = Path(os.environ["SPARKNB_CONFIG_DIR"])
    _another_box(monkeypatch, tmp_path, "reader", trusting=author)  # no ledger knows the original: the records tell
    assert verify(copy) == []
    with pytest.raises(DataError, match=f"{run.id} and {copy.name} hold the same records"):
        read_past([run.id, copy.name], "decode", outputs=tmp_path)


def test_an_unsigned_run_verifies_as_unsigned_and_a_key_that_cannot_sign_leaves_it_sealed(tmp_path, monkeypatch,
                                                                                         capsys):
    monkeypatch.setenv("SPARKNB_SIGNING_KEY", str(tmp_path / "no-such-key"))
    run = _sealed(tmp_path)
    assert not (run.path / "manifest.sig").exists()
    assert "SPARKNB_SIGNING_KEY names" in json.loads((run.path / "manifest.json").read_text())["unsigned"]
    assert verify(run.path) == []
    assert main(["verify", str(run.path)]) == 1 and "UNSIGNED" in capsys.readouterr().out


def test_json_is_strict_an_unknown_figure_is_null(tmp_path):
    run = make(tmp_path)
    run.write_json("summary.json", {"low": float("nan"), "high": np.float64("inf"), "n": np.int64(3),
                                    "share": pd.NA, "rows": [{"x": -np.inf}]})
    run.record({"ttft_s": float("nan")})
    assert strict(run.path / "summary.json") == {"low": None, "high": None, "n": 3, "share": None,
                                                 "rows": [{"x": None}]}
    assert strict_lines(run.path / "records.jsonl") == [{"ttft_s": None}]


def test_a_run_resumed_from_and_its_copy_compared_with_are_refused(tmp_path, monkeypatch):
    from test_mmlu_pro_plan import answer, past_run

    from sparknb.studies import mmlu_pro

    past_run(tmp_path, "orig", {"temperature": 0.0}, [answer("1")])
    past_run(tmp_path, "copy", {"temperature": 0.0}, [answer("1")])
    author = Path(os.environ["SPARKNB_CONFIG_DIR"])
    _another_box(monkeypatch, tmp_path, "reader", trusting=author)  # no ledger knows them: the records tell
    with pytest.raises(DataError, match="orig and copy hold the same records"):
        mmlu_pro.Plan.build(outputs=str(tmp_path), resume_from="orig", compare_with="copy")


def test_a_study_pins_the_runs_it_read_so_one_sealed_again_later_fails_its_verify(tmp_path, monkeypatch):
    from sparknb.studies import decode

    other = _sealed(tmp_path)
    plan = decode.Plan.build(outputs=str(tmp_path), compare_with=other.id, prompt_lengths=[111])
    run = Run.create("decode", {"notebook": "decode", "settings": plan.settings()}, outputs=tmp_path)
    run.seal()
    assert verify(run.path) == []
    _tamper(run.path.parent / other.id, b'"n": 1', b'"n": 2')
    for name in ("manifest.json", "manifest.sig"):
        (other.path / name).unlink()
    _another_box(monkeypatch, tmp_path, "mallory")
    Run(other.path).seal()
    assert verify(other.path) == []  # whole by itself, signed by another key: only the run that read it knows
    (problem,) = verify(run.path)
    assert problem.startswith(f"input sealed again: {other.path} no longer has the manifest this run read")


def test_another_studys_run_by_id_says_whose_it_is_and_sparknb_seal_is_offered_only_for_an_unsealed_run(tmp_path):
    other = _sealed(tmp_path, notebook="prefill")
    tampered = _sealed(tmp_path)
    _unseal(tampered.path)
    (tampered.path / "records.jsonl").write_text(json.dumps({"n": 2}) + "\n")
    unsealed = Run.create("decode", {"notebook": "decode"}, outputs=tmp_path)
    said = {}
    for run in (other, tampered, unsealed):
        with pytest.raises(DataError) as e:
            read_past(run.id, "decode", outputs=tmp_path)
        said[run.id] = str(e.value)
    assert f"that run id is a 'prefill' run ({other.path}), not a decode run" in said[other.id]
    assert "sparknb seal" not in said[tampered.id] and "nothing makes it trusted again" in said[tampered.id]
    assert f"`sparknb seal {unsealed.path}` keeps what it took" in said[unsealed.id]
