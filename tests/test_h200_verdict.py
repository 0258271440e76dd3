"""The speed verdict on real evidence: the four sealed runs of docs/examples/h200-verdict (llama-server on an H200,
Qwen3-4B's and Qwen3-1.7B's shapes, decode and prefill with the defaults and repetitions auto). Both prefill runs
hold a rough fit and a missed +/-2% target, the spread llama-server's own prompt time; every verdict row must
decide for the smaller model, and the two shortest prompts stay the trap. The copies lack their notebooks and
reports (left out for size), so they are read here without the seal check; every file read matches its manifest."""

import hashlib
import json
from pathlib import Path

import pytest

from sparknb.runs.run import PastRun, read_records
from sparknb.runs.strict_json import read_object
from sparknb.studies import compare
from sparknb.verdicts.verdict import Runs, decide

HERE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "h200-verdict"
BASE, SUBJECT = "qwen3-4b-random-llamacpp", "qwen3-1.7b-random-llamacpp"
READ = ("params.json", "fingerprint.json", "records.jsonl", "summary.json")


def past(folder: Path) -> PastRun:
    sealed = json.loads((folder / "manifest.json").read_text())["sha256"]
    for name in READ:
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == sealed[name], (folder.name, name)
    return PastRun(folder, read_object(folder / "params.json"), read_object(folder / "fingerprint.json"),
                   read_records(folder), read_object(folder / "summary.json"), None)


@pytest.fixture(scope="module")
def rows():
    runs = [past(f) for f in sorted(HERE.glob("2026*-qwen3-*"))]
    by_study = {}
    for r in runs:
        by_study.setdefault(r.notebook, {})[r.label] = r
    return compare.headline(Runs(by_study, [BASE, SUBJECT])).rows


def test_every_verdict_row_of_the_h200_runs_decides_for_the_smaller_model(rows):
    verdict = [r for r in rows if r.role == "verdict"]
    assert {r.study for r in verdict} == {"decode", "prefill"} and len(verdict) == 8
    for r in verdict:
        d = decide(r, SUBJECT, BASE)
        assert (d.outcome, d.winner) == ("wins", SUBJECT), (r.figure, d.reasons)
        assert r.ratios[SUBJECT].excludes == (1.0 if r.study == "decode" else -1.0)


def test_the_h200_prefill_runs_say_what_no_row_carries_and_keep_the_trap(rows):
    texts = [finding["text"] for folder in HERE.glob("2026*-qwen3-*")
             for finding in read_object(folder / "summary.json")["findings"]]
    assert any("misses the median TTFT" in t for t in texts) and any("stopped at its cap" in t for t in texts)
    trap = [r.figure for r in rows if r.role == "trap"]
    assert trap == ["TTFT ms at 111 tokens", "TTFT ms at 364 tokens"]
    assert all(decide(r, SUBJECT, BASE).outcome == "trap" for r in rows if r.role == "trap")
