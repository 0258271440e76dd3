"""The study contract: every study found through one registry, what makes two runs comparable read from the marks
beside each parameter, and a toy study that lives only here run through `sparknb run` into a comparison."""

import json
import os
from pathlib import Path

import pytest
from test_mmlu_pro_plan import past_run

from sparknb.boxes import campaign
from sparknb.cli import main
from sparknb.errors import DataError, ParamsError
from sparknb.runs.plan import COMPARED, IGNORED, RESUMED
from sparknb.runs.run import PastRun, read_past
from sparknb.studies import decode, humaneval, mmlu_pro, registry, swap
from sparknb.studies.registry import Contract

HERE = Path(__file__).parent


@pytest.fixture
def toy(monkeypatch):
    """The toy study, named in $SPARKNB_STUDIES, and importable by a notebook's kernel too."""
    monkeypatch.setenv(registry.ENV, "toy_study")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    return registry.find("toy")


def test_every_study_is_found_through_its_contract_in_the_comparisons_order():
    studies = registry.studies()
    measuring = [n for n, c in studies.items() if c.measures]
    assert measuring == ["decode", "prefill", "mtp", "load", "agent", "mmlu_pro", "bfcl", "humaneval", "swap"]
    assert [n for n, c in studies.items() if c.across_models] == ["swap"] and not studies["compare"].measures
    for name, contract in studies.items():
        assert contract.Plan.study == name and contract.notebook_path().is_file()
    assert studies["mmlu_pro"].heading == "MMLU-Pro" and studies["decode"].heading == "Decode"
    assert registry.find("toy") is None  # a study outside sparknb.studies only where $SPARKNB_STUDIES names it


def test_a_study_named_in_the_environment_is_found_and_a_bad_name_is_refused(toy, monkeypatch):
    assert toy is not None and toy.Plan.study == "toy" and toy.notebook_path().parent == HERE / "toy_study"
    assert list(registry.studies())[-1] == "toy"  # no order given: after every study of sparknb's own
    monkeypatch.setenv(registry.ENV, "toy_study, no_such_study")
    with pytest.raises(ParamsError, match="'no_such_study', which cannot be imported"):
        registry.studies()


def test_a_contract_refuses_a_plan_of_another_study():
    with pytest.raises(ParamsError, match="declares a Plan of study 'decode'"):
        Contract("decode2", decode.Plan)


def test_the_marks_beside_the_parameters_say_what_makes_runs_comparable():
    assert mmlu_pro.Plan.marked(COMPARED) == ("shots", "max_tokens", "temperature", "prompt_format", "stop",
                                                  "dataset_name")
    assert set(humaneval.Plan.marked(RESUMED)) == {"style", "samples", "max_tokens", "temperature", "stop",
                                                   "isolation", "python", "timeout_s", "memory_mb", "model",
                                                   "dataset_name", "dataset_sha256"}
    assert {"concurrency", "trap_share", "compare_with", "run_id", "questions"} <= set(mmlu_pro.Plan.marked(IGNORED))
    mine = {"temperature": 0.0, "concurrency": 8, "per_category": 2, "model": "a", "questions": ["1"]}
    theirs = {"temperature": 0.7, "concurrency": 2, "per_category": 3, "model": "b", "questions": ["2"]}
    assert mmlu_pro.Plan.differences(mine, theirs) == {"per_category": {"a": 2, "b": 3},
                                                       "temperature": {"a": 0.0, "b": 0.7}}


def run_with(tmp_path, run_id: str, settings: dict, notebook: str = "mmlu_pro") -> PastRun:
    past_run(tmp_path, run_id, settings)  # a sealed mmlu_pro run folder
    (run,) = read_past(run_id, notebook, outputs=tmp_path)
    return run


def test_the_comparison_and_resume_read_the_same_marks(tmp_path):
    a = run_with(tmp_path, "a", {"temperature": 0.0, "shots": 5, "concurrency": 8, "model": "tiny-dense"})
    b = run_with(tmp_path, "b", {"temperature": 0.0, "shots": 5, "concurrency": 2, "model": "tiny-moe"})
    c = run_with(tmp_path, "c", {"temperature": 0.7, "shots": 0, "concurrency": 8, "model": "tiny-dense"})
    assert mmlu_pro.Plan.same({"x": a, "y": b}) == ""  # concurrency and model do not change a score
    apart = mmlu_pro.Plan.same({"x": a, "y": c})
    assert "shots 5 (x) vs 0 (y)" in apart and "temperature 0.0 (x) vs 0.7 (y)" in apart
    with pytest.raises(DataError, match="different shots, temperature") as e:
        mmlu_pro.Plan.check_resume(c, a.settings)
    assert "0.7 there, 0.0 here" in str(e.value)
    with pytest.raises(DataError, match="different model"):
        mmlu_pro.Plan.check_resume(b, a.settings)
    mmlu_pro.Plan.check_resume(a, a.settings | {"concurrency": 1})  # an IGNORED setting may differ
    # a run sealed before a setting existed did what its default does, and is told apart only from another value
    old = run_with(tmp_path, "old", {"temperature": 0.0, "shots": 5, "model": "tiny-dense"})  # no prompt_format
    new = run_with(tmp_path, "new", {"temperature": 0.0, "shots": 5, "model": "tiny-dense", "prompt_format": "sparknb"})
    lm = run_with(tmp_path, "lm", {"temperature": 0.0, "shots": 5, "model": "tiny-dense", "prompt_format": "lm-eval"})
    assert mmlu_pro.Plan.same({"x": old, "y": new}) == ""
    assert mmlu_pro.Plan.differences(old.settings, new.settings) == {}
    mmlu_pro.Plan.check_resume(old, new.settings)
    assert "prompt_format 'sparknb' (x) vs 'lm-eval' (y)" in mmlu_pro.Plan.same({"x": old, "y": lm})
    with pytest.raises(DataError, match="prompt_format: 'sparknb' there, 'lm-eval' here"):
        mmlu_pro.Plan.check_resume(old, lm.settings)


def test_earlier_runs_are_read_by_the_base_the_same_way_for_every_study(tmp_path):
    done = past_run(tmp_path, "done", {"temperature": 0.0})
    plan = mmlu_pro.Plan.build(outputs=str(tmp_path), compare_with="done", resume_from="done")
    assert plan.other.id == plan.resumed.id == "done" and [r.id for r in plan.past] == ["done"]
    with pytest.raises(DataError) as e:  # both named at once, each by its parameter
        humaneval.Plan.build(outputs=str(tmp_path), compare_with=str(done.path), resume_from="nowhere")
    assert "resume_from 'nowhere': no such run folder" in str(e.value)
    assert "is a 'mmlu_pro' run, not a humaneval run" in str(e.value)


def test_the_campaign_gives_models_only_to_studies_that_do_not_visit_them_themselves():
    given = set(campaign.set_by_the_campaign(decode.Plan))
    assert given == {"model", "models", "endpoint", "run_id", "outputs", "seal"}
    assert "models" not in campaign.set_by_the_campaign(swap.Plan)  # swap's own parameter: the models it visits


@pytest.mark.server
def test_a_toy_study_runs_through_sparknb_run_and_appears_in_a_comparison(toy, tmp_path, tiny_dense, tiny_moe,
                                                                            capsys):
    """The toy study lives only in tests/toy_study: nothing in sparknb names it, yet `sparknb run` runs it and the
    comparison sets its runs side by side, by its own rows."""
    folders = []
    for name, server in (("tiny-dense", tiny_dense), ("tiny-moe", tiny_moe)):
        code = main(["run", "toy", "--outputs", str(tmp_path), "-p", "model", name, "-p", "endpoint", server.url])
        out = capsys.readouterr().out
        assert code == 0, out
        folders.append(Path(out.split("sealed run: ")[1].split()[0]))
    records = [json.loads(line) for line in (folders[0] / "records.jsonl").read_text().splitlines()]
    assert len(records) == 5 and all(r["completion_tokens"] == 4 for r in records)
    assert main(["run", "compare", "--outputs", str(tmp_path), "-p", "runs", json.dumps([str(f) for f in folders]),
                 "-p", "interactive", "false"]) == 0
    (compared,) = (tmp_path / "compare").iterdir()
    rows = json.loads((compared / "summary.json").read_text())["headline"]["rows"]
    (row,) = [r for r in rows if r["study"] == "toy" and r["figure"] == "TTFT ms"]
    assert row["n"] == {"tiny-dense": 5, "tiny-moe": 5} and not row["not_comparable"]
    assert row["values"]["tiny-dense"] == pytest.approx(sorted(1000 * r["ttft_s"] for r in records)[2])


def test_a_notebooks_comparison_and_the_report_draw_the_same_rows_and_cannot_disagree(tmp_path):
    from types import SimpleNamespace

    from test_compare import decode_run, fingerprint

    from sparknb.verdicts.verdict import Runs

    other = decode_run(tmp_path, "dense", 8.9, fingerprint(), seed=2, findings=[
        {"level": "warning", "text": "The box was busy at 111 tokens. More.", "about": [111]}])
    mine = decode_run(tmp_path, "moe", 26.0, fingerprint(), seed=1)
    (past,) = read_past(str(other.path), "decode")
    (this,) = read_past(str(mine.path), "decode")
    study = SimpleNamespace(model=SimpleNamespace(name="moe"), fingerprint=fingerprint())
    table, _ = decode.compare(decode.frame(this.records), study, [past], this.settings)
    rows = decode.headline_rows(Runs({"decode": {"moe": this, "dense": past}}, ["moe", "dense"]))
    for row in rows[:2]:  # tok/s at 111 and at 5,378 tokens
        mine_row = table[table["prompt tokens"] == int(row.figure.split()[2].replace(",", ""))].iloc[0]
        assert mine_row["theirs / this"] == row.ratios["dense"].estimate
        assert (mine_row["95% low"], mine_row["95% high"]) == (row.ratios["dense"].low, row.ratios["dense"].high)
        assert mine_row["standing"] == row.standing("dense", "moe")
    assert list(table["standing"]) == ["caveated", "trusted"]  # the other run's own warning, at its length only
    table, notes = decode.compare(decode.frame(this.records), study, [past], this.settings | {"output_tokens": 64})
    assert set(table["standing"]) == {"not comparable"}
    assert any("output_tokens 64 (moe) vs 150" in n.text and n.level == "warning" for n in notes)


def prefill_run(tmp_path, name: str, ttft, seed: int) -> tuple[PastRun, object]:
    """A sealed prefill run of synthetic requests, with its fit in its summary as the notebook seals it."""
    from test_compare import fingerprint
    from test_prefill_fit import synthetic

    from sparknb.runs.run import Run
    from sparknb.studies import prefill

    run = Run.create("prefill", {"notebook": "prefill", "model": {"name": name}, "settings": {
        "allow_cache_hits": False, "output_tokens": 1}}, outputs=tmp_path, label=name)
    run.write_json("fingerprint.json", fingerprint())
    records = synthetic(ttft, seed=seed)
    for r in records:
        run.record(r)
    fit = prefill.fit(prefill.frame(records))
    run.write_json("summary.json", {"fit": fit.as_dict(), "findings": []})
    run.seal()
    (past,) = read_past(str(run.path), "prefill")
    return past, fit


def test_prefill_notebooks_verdict_at_each_length_is_the_reports(tmp_path):
    from types import SimpleNamespace

    from test_compare import fingerprint

    from sparknb.studies import prefill
    from sparknb.verdicts.verdict import Runs, decide

    this, fit = prefill_run(tmp_path, "moe", lambda n: 0.05 + 1e-4 * n, seed=5)
    other, _ = prefill_run(tmp_path, "dense", lambda n: 0.05 + 2e-4 * n, seed=6)
    study = SimpleNamespace(model=SimpleNamespace(name="moe"), run=SimpleNamespace(id=this.id),
                            fingerprint=fingerprint())
    cmp = prefill.compare(prefill.frame(this.records), study, [other], False, fit, this.settings)
    rows = prefill.headline_rows(Runs({"prefill": {"moe": this, "dense": other}}, ["moe", "dense"]))
    said = {}
    for row in rows:
        d = decide(row, "dense", "moe")
        said[int(row.figure.split()[3].replace(",", ""))] = f"{d.winner} ahead" if d.winner else d.outcome
    assert cmp.table["dense / moe verdict"].to_dict() == said
    assert said[111] == "trap" and said[5378] == "moe ahead"  # the overhead's trap, then the tokens decide
    apart = prefill.compare(prefill.frame(this.records), study, [other], False, fit,
                            this.settings | {"allow_cache_hits": True})
    assert set(apart.table["dense / moe verdict"]) <= {"trap", "not comparable"}


def mtp_run(tmp_path, name: str, speed: float, seed: int, settings: dict) -> PastRun:
    """A sealed mtp run: five answers per kind at about `speed` tok/s, no speculation."""
    import random

    from test_compare import fingerprint

    from sparknb.runs.run import Run

    rng = random.Random(seed)
    run = Run.create("mtp", {"notebook": "mtp", "model": {"name": name}, "settings": settings}, outputs=tmp_path,
                     label=name)
    run.write_json("fingerprint.json", fingerprint())
    for kind in ("json", "story"):
        for rep in range(5):
            seconds = 255 / (speed * (1 + rng.uniform(-0.02, 0.02)) * (1.5 if kind == "json" else 1))
            run.record({"kind": kind, "rep": rep, "warmup": False, "completion_tokens": 256, "decode_tokens": 255,
                        "decode_s": seconds, "decode_tokens_per_s": 255 / seconds, "interference": None,
                        "server": {"decode_s": seconds, "spec_decode": {
                            "tokens_per_step": None, "accepted_tokens": None, "acceptance_rate": None,
                            "acceptance_per_position": None, "drafts": None}}})
    run.write_json("summary.json", {"findings": []})
    run.seal()
    (past,) = read_past(str(run.path), "mtp")
    return past


def test_mtp_notebooks_speed_up_is_the_reports_row(tmp_path):
    from sparknb.studies import mtp
    from sparknb.verdicts.verdict import Runs

    settings = {"temperature": 0.7, "output_tokens": 256, "prompt_set": "reference"}
    plain, this = mtp_run(tmp_path, "plain", 20.0, 1, settings), mtp_run(tmp_path, "spec", 30.0, 2, settings)
    df = mtp.frame(this.records)
    table = df.groupby("kind")["tok_s"].median().to_frame("tok/s")
    out, _ = mtp.compare(table, [plain], df, this.settings)
    label = f"plain ({plain.id})"
    rows = {r.figure: r for r in mtp.headline_rows(Runs({"mtp": {"plain": plain, "spec": this}}, ["plain", "spec"]))}
    for kind in ("json", "story"):
        row = rows[f"tok/s, {kind}"]
        assert out.loc[kind, f"speed-up vs {label}"] == row.ratios["spec"].estimate == pytest.approx(1.5, rel=0.05)
        assert out.loc[kind, f"95% interval vs {label}"] == row.ratios["spec"].times()
        assert out.loc[kind, f"standing vs {label}"] == row.standing("spec", "plain") == "trusted"
    out, _ = mtp.compare(table, [plain], df, this.settings | {"temperature": 0.0})
    assert set(out[f"standing vs {label}"]) == {"not comparable"}


def test_load_notebooks_standing_per_level_is_the_reports(tmp_path):
    import random

    import pandas as pd

    from sparknb.runs.run import Run
    from sparknb.studies.load.compare import standings

    rng = random.Random(3)

    def requests(level: str, speed: float, n: int = 8) -> list[dict]:
        return [{"kind": "request", "level_name": level, "warmup": False, "decode_tokens_per_s": speed * rng.uniform(
            0.98, 1.02), "ttft_s": 0.1 * rng.uniform(0.98, 1.02)} for _ in range(n)]

    run = Run.create("load", {"notebook": "load", "model": {"name": "moe"}, "settings": {"output_tokens": 128}},
                     outputs=tmp_path, label="moe")
    run.write_json("fingerprint.json", {"host": {"hostname": "box"}, "server": {"version": "0.32.0"}})
    for r in requests("1 in flight", 20.0) + requests("2 in flight", 18.0, n=3):
        run.record(r)
    run.write_json("summary.json", {"findings": [{"level": "warning", "text": "Busy at 2 in flight.",
                                                  "about": ["2 in flight"]}]})
    run.seal()
    (past,) = read_past(str(run.path), "load")
    mine = requests("1 in flight", 30.0) + requests("2 in flight", 28.0)
    table = standings(pd.DataFrame(index=pd.Index(["1 in flight", "2 in flight"])), mine, past, "")
    assert list(table["per-user standing"]) == ["trusted", "caveated"]  # its own warning, and 3 requests only
    assert list(table["TTFT standing"]) == ["trusted", "caveated"]
    apart = standings(pd.DataFrame(index=pd.Index(["1 in flight"])), mine, past, "settings differ")
    assert list(apart["per-user standing"]) == ["not comparable"]


def test_the_run_browser_offers_the_runs_of_every_study_that_measures_and_nothing_else(tmp_path, toy):
    from sparknb.runs.run import Run
    from sparknb.studies.compare.browser import sealed_runs

    for notebook in ("decode", "toy", "campaigns", "compare", "nosuch"):
        Run.create(notebook, {"notebook": notebook}, run_id=f"20261204-{notebook}", outputs=tmp_path).seal()
    Run.create("mtp", {"notebook": "mtp"}, run_id="20261204-open", outputs=tmp_path)  # never sealed
    assert sealed_runs(tmp_path) == [("toy: 20261204-toy", "20261204-toy"), ("decode: 20261204-decode",
                                                                              "20261204-decode")]


def test_the_batch_is_set_beside_the_single_stream_speed_of_the_study_that_measures_it(tmp_path):
    """MMLU-Pro's batch rows find single-stream decode speed through the contract (`speeds`), not by name."""
    from statistics import median

    from test_compare import decode_run, fingerprint

    from sparknb.studies.mmlu_pro.headline import batch_rows
    from sparknb.verdicts.verdict import Runs

    decodes = {name: read_past(str(decode_run(tmp_path, name, speed, fingerprint(), seed=seed).path), "decode")[0]
               for name, speed, seed in (("dense", 8.9, 2), ("moe", 26.0, 1))}
    batches = {name: PastRun(tmp_path / name, {"notebook": "mmlu_pro"}, {}, [], {"batch": {
        "tokens_per_s": tps, "completion_tokens": 9000, "concurrency": 8, "prompt_tokens": 4000, "asked": 40}}, None)
        for name, tps in (("dense", 40.0), ("moe", 90.0))}
    rows = batch_rows(Runs({"mmlu_pro": batches, "decode": decodes}, ["dense", "moe"]), "MMLU-Pro")
    assert [r.figure for r in rows] == ["MMLU-Pro batch tok/s at concurrency 8",
                                        "single-stream decode tok/s at 111 tokens (batch prompts: 100)"]
    for name, run in decodes.items():
        speeds = [149 / r["server"]["decode_s"] for r in run.records if r["prompt_length"] == 111]
        assert rows[1].values[name] == pytest.approx(median(speeds), rel=1e-3) and rows[1].n[name] == 5
