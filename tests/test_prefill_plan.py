"""The prefill plan: its parameters, the lengths it measures on a given server, and compare_with read
like every study reads earlier runs (from their seal, by run id or folder, refusing what does not verify).
No server: the earlier runs are sealed folders written here with sparknb.runs.run.Run."""

import json
import os
import stat
import zlib

import pytest
from test_prefill_fit import record

from sparknb.endpoint.client import ServerInfo
from sparknb.errors import DataError, ParamsError
from sparknb.runs.run import Run
from sparknb.studies import prefill


def server(max_model_len=16384) -> ServerInfo:
    return ServerInfo("http://x/v1", "0.32.0", "m", None, max_model_len, ["m"])


def sealed_run(outputs, run_id="p1", notebook="prefill", lengths=(100, 300), seal=True, label="other") -> Run:
    """An earlier run as study.start and finish leave it: params, fingerprint, records, sealed."""
    run = Run.create(notebook, {"notebook": notebook, "model": {"name": label},
                                "settings": {"allow_cache_hits": False}}, run_id=run_id, outputs=outputs)
    run.write_json("fingerprint.json", {"host": {"hostname": "box"}, "server": {"version": "0.32.0"}})
    for n in lengths:  # two real runs never share their records: each saw its own load on the machine
        run.record(record(n, 0.1) | {"load_1m": zlib.crc32(run.path.as_posix().encode()) / 2**32})
    if seal:
        run.seal()
    return run


def test_the_standard_lengths_are_capped_with_a_note_but_given_ones_are_not():
    assert prefill.Plan.build().lengths_for(server(16384)) == (prefill.DEFAULT_LENGTHS, None)
    lengths, note = prefill.Plan.build().lengths_for(server(4096))
    assert lengths == (111, 364, 1024, 2048) and "[5378, 10714] are left out" in note and "4096" in note
    with pytest.raises(ParamsError, match=r"\[20000\] plus 1 output token\(s\) exceed the server's max_model_len of 16384"):
        prefill.Plan.build(prompt_lengths=[111, 20000]).check_server(server(16384))
    with pytest.raises(ParamsError, match="a fit needs two"):
        prefill.Plan.build().lengths_for(server(200))
    assert prefill.Plan.build(prompt_lengths=[364, 111]).lengths_for(server(16384)) == ((111, 364), None)
    lengths, note = prefill.Plan.build().lengths_for(server(None))
    assert lengths == prefill.DEFAULT_LENGTHS and "does not report max_model_len" in note


def test_nonsense_parameters_are_named_all_at_once():
    with pytest.raises(ParamsError) as e:
        prefill.Plan.build(prompt_lengths=[5, 5], output_tokens=0, warmup=-1, repetitions=0, allow_cache_hits="yes",
                           compare_with=[""])
    for field in ("prompt_lengths.0", "output_tokens", "repetitions", "warmup", "allow_cache_hits", "compare_with"):
        assert f"  {field}:" in str(e.value), field
    with pytest.raises(ParamsError, match="needs two lengths"):
        prefill.Plan.build(prompt_lengths=[111])
    with pytest.raises(ParamsError, match=r"prompt_lengths has repeats: \[111\]"):
        prefill.Plan.build(prompt_lengths=[111, 364, 111])
    with pytest.raises(ParamsError, match="tokens"):
        prefill.Plan.build(prompt_lengths=[111, "364"])  # strict: a string is not a length


def test_a_lone_compare_with_run_is_a_list_of_one(tmp_path):
    sealed_run(tmp_path)
    plan = prefill.Plan.build(compare_with="p1", outputs=str(tmp_path))  # -p compare_with RUN
    assert plan.compare_with == ["p1"] and [r.id for r in plan.past] == ["p1"]
    assert plan.settings()["compare_with"] == ["p1"]


def test_compare_with_finds_a_run_id_under_outputs_and_a_folder_path(tmp_path):
    by_id = sealed_run(tmp_path, "p1", label="tiny-moe")
    by_path = sealed_run(tmp_path / "elsewhere", "p2", label="tiny-dense")
    plan = prefill.Plan.build(prompt_lengths=[100, 300], compare_with=["p1", str(by_path.path)], outputs=str(tmp_path))
    assert [(r.path, r.label) for r in plan.past] == [(by_id.path, "tiny-moe"), (by_path.path, "tiny-dense")]
    assert [r.records[-1]["prompt_length"] for r in plan.past] == [300, 300]  # read from their own records
    plan.check_server(server())  # same lengths: nothing to refuse
    with pytest.raises(DataError, match="'p2': no such run folder"):  # p2 is not under outputs/prefill
        prefill.Plan.build(compare_with=["p2"], outputs=str(tmp_path))


def test_a_tampered_past_run_is_refused_naming_the_file(tmp_path):
    run = sealed_run(tmp_path)
    records = run.path / "records.jsonl"
    records.chmod(stat.S_IRUSR | stat.S_IWUSR)
    text = records.read_text()
    records.write_text(text.replace('"ttft_s": 0.1', '"ttft_s": 0.2', 1))
    with pytest.raises(DataError) as e:
        prefill.Plan.build(compare_with=["p1"], outputs=str(tmp_path))
    assert "'p1'" in str(e.value) and "changed: records.jsonl" in str(e.value)


def test_an_unsealed_past_run_is_refused(tmp_path):
    sealed_run(tmp_path, seal=False)
    with pytest.raises(DataError, match="never sealed"):
        prefill.Plan.build(compare_with=["p1"], outputs=str(tmp_path))


def test_every_bad_compare_with_run_is_named_at_once(tmp_path):
    decode_run = sealed_run(tmp_path / "d", "d1", notebook="decode")
    sealed_run(tmp_path, "empty", lengths=())
    with pytest.raises(DataError) as e:
        prefill.Plan.build(compare_with=["no-such-run", str(decode_run.path), "p9", "p9"], outputs=str(tmp_path))
    text = str(e.value)
    assert "'no-such-run': no such run folder" in text and "is a 'decode' run, not a prefill run" in text
    assert "names 'p9' twice" in text
    with pytest.raises(DataError, match="'empty': it holds no clean measured request"):
        prefill.Plan.build(compare_with=["empty"], outputs=str(tmp_path))


def test_a_past_run_of_other_lengths_is_refused_before_the_run_opens(tmp_path):
    sealed_run(tmp_path, lengths=(100, 300))
    plan = prefill.Plan.build(prompt_lengths=[100, 300, 600], compare_with=["p1"], outputs=str(tmp_path))
    with pytest.raises(ParamsError, match=r"compare_with runs of other prompt lengths.*p1 \(other\) measured \[100, 300\]"):
        plan.check_server(server())


def test_the_past_is_read_once_when_the_plan_is_built(tmp_path):
    run = sealed_run(tmp_path)
    plan = prefill.Plan.build(prompt_lengths=[100, 300], compare_with=["p1"], outputs=str(tmp_path))
    os.chmod(run.path, stat.S_IRWXU)
    (run.path / "records.jsonl").chmod(stat.S_IRUSR | stat.S_IWUSR)
    (run.path / "records.jsonl").write_text(json.dumps(record(999, 0.1)) + "\n")  # changed after the plan read it
    plan.check_server(server())  # still the lengths it read, not re-read from disk
    assert [r["prompt_length"] for r in plan.past[0].records] == [100, 300]
