"""The command line: parameters typed as YAML, a sealed folder verified, a study found by its name, and every
refusal said in one line with exit code 2 before anything runs."""

import zlib

import pytest

from sparknb.cli import main, parse_parameters
from sparknb.runs.run import Run


def test_parameters_are_read_as_yaml_and_a_value_given_with_p_wins_over_the_file(tmp_path):
    file = tmp_path / "params.yaml"
    file.write_text("prompt_lengths: [111, 364]\nrepetitions: auto\ntemperature: 0.5\n")
    given = parse_parameters([["repetitions", "5"], ["compare_with", "run-1"], ["force", "true"]], [str(file)])
    assert given == {"prompt_lengths": [111, 364], "repetitions": 5, "temperature": 0.5, "compare_with": "run-1",
                     "force": True}


def sealed(tmp_path, run_id: str, seal: bool = True) -> Run:
    run = Run.create("decode", {"notebook": "decode", "settings": {}}, run_id=run_id, outputs=tmp_path)
    run.record({"prompt_length": 111, "load_1m": zlib.crc32(run_id.encode()) / 2**32})  # each run its own
    if seal:
        run.seal()
    return run


def test_verify_says_intact_changed_or_not_sealed_and_exits_non_zero_unless_intact(tmp_path, capsys):
    intact, changed, open_ = sealed(tmp_path, "a"), sealed(tmp_path, "b"), sealed(tmp_path, "c", seal=False)
    records = changed.path / "records.jsonl"
    records.chmod(0o644)
    records.write_text('{"prompt_length": 112}\n')
    assert main(["verify", str(intact.path)]) == 0 and ": intact, signed by " in capsys.readouterr().out
    assert main(["verify", str(changed.path)]) == 1
    out = capsys.readouterr().out
    assert "records.jsonl" in out and out.endswith(": CHANGED\n")
    assert main(["verify", str(open_.path)]) == 1 and capsys.readouterr().out.endswith(": NOT SEALED\n")


def test_a_study_that_does_not_exist_is_refused_naming_the_studies_there_are(tmp_path, capsys):
    assert main(["run", "decod", "--outputs", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparknb run: No notebook 'decod'. Known: decode, prefill") and "compare" in err
    assert not any(tmp_path.iterdir())


def test_seal_closes_a_run_that_died_and_refuses_one_that_is_sealed(tmp_path, capsys):
    died = sealed(tmp_path, "died", seal=False)
    assert main(["seal", str(died.path)]) == 0 and "sealed:" in capsys.readouterr().out
    assert main(["verify", str(died.path)]) == 1 and ": SEALED AFTER THE FACT by " in capsys.readouterr().out
    assert main(["seal", str(died.path)]) == 2 and "is sealed already" in capsys.readouterr().err


def test_a_cluster_that_does_not_answer_is_refused_before_the_campaign_starts_anything(tmp_path, capsys):
    pytest.importorskip("ray")
    assert main(["campaign", "run", "tiny", "--outputs", str(tmp_path), "--cluster", "127.0.0.1:1"]) == 2
    assert "Nothing answers at '127.0.0.1:1'" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
