"""Sealed run folders: nothing overwritten, every change detected, records kept as they come."""

import json
import os
import stat

import pytest

from sparknb.cli import main
from sparknb.run import Run, RunError, read_records, verify


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
    path.chmod(0o755)
    for p in path.iterdir():
        p.chmod(0o644)


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
