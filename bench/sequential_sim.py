"""The sequential paired comparison under continuous monitoring, against McNemar's test peeked at every 10 questions:
how often each decides wrongly at true differences of 0, +/- the margin and +/- 10 points, how often the sequence
holds the true difference at every count, and at 10 points the median questions to a decision against the
fixed-sample count for the same errors.

Each simulated question is a pair (A right?, B right?) with the two disagreeing on `discordance` of the questions
(0.30: the seed comparison's 95% interval of +/-6.3 points on 280 questions implies about that); B's accuracy minus
A's is the true difference. All sequences run together, one answer at a time.

    python bench/sequential_sim.py                    # 2,000 sequences per difference, budget 2,000
    python bench/sequential_sim.py --sequences 200    # a quick look
    python bench/sequential_sim.py --budget 164 --discordance 0.2    # HumanEval: at most its 164 problems
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import binom

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparknb.verdicts.sequential import Capital, decisions, fixed_sample_size  # noqa: E402

PEEK = 10  # McNemar is looked at every this many questions


@dataclass(frozen=True)
class Result:
    truth: float
    wrong: float  # share of sequences whose first decision was wrong
    covered: float  # share that held the truth at every count up to the budget
    outcomes: dict[str, float]  # better / worse / equivalent / cannot tell: shares
    mcnemar_wrong: float  # share where McNemar, peeked, first called the wrong side (or any side at 0)
    median_questions: float | None  # among sequences that decided
    fixed: int  # a fixed-sample paired test's questions for the same errors at this difference


def probabilities(truth: float, discordance: float) -> list[float]:
    """P(d = -1), P(d = 0), P(d = 1), with d = B right - A right."""
    return [(discordance - truth) / 2, 1 - discordance, (discordance + truth) / 2]


def wrong_codes(truth: float, margin: float) -> set[int]:
    """The decisions that are wrong at this truth: 1 better, -1 worse, 2 equivalent (|difference| < margin)."""
    if truth == 0:
        return {1, -1}
    return {-int(np.sign(truth))} | ({2} if abs(truth) >= margin - 1e-12 else set())


def simulate(truths, sequences=2000, budget=2000, margin=0.03, discordance=0.30, alpha=0.05, seed=0) -> list[Result]:
    truths = list(truths)
    truth = np.repeat(truths, sequences)
    rng = np.random.default_rng(seed)
    points = np.stack([np.full(truth.size, -margin), np.zeros(truth.size), np.full(truth.size, margin), truth], 1)
    cap = Capital(points, truth.size, alpha)
    first, when, mc_first = np.zeros(truth.size, int), np.zeros(truth.size, int), np.zeros(truth.size, int)
    plus, minus = np.zeros(truth.size), np.zeros(truth.size)
    cuts = np.cumsum(np.array([probabilities(t, discordance) for t in truth]), axis=1)
    for n in range(1, budget + 1):
        u = rng.random(truth.size)
        d = (u >= cuts[:, 0]).astype(int) + (u >= cuts[:, 1]) - 1
        cap.step(d)
        plus += d == 1
        minus += d == -1
        code = decisions(cap.above[:, :3], cap.below[:, :3])
        new = (first == 0) & (code != 0)
        first[new], when[new] = code[new], n
        if n % PEEK == 0:
            mc = _mcnemar(plus, minus, alpha)
            mc_first = np.where(mc_first == 0, mc, mc_first)
    missed = cap.above[:, 3] | cap.below[:, 3]
    return [_result(t, truth == t, first, when, missed, mc_first, margin, discordance, alpha) for t in truths]


def _mcnemar(plus: np.ndarray, minus: np.ndarray, alpha: float) -> np.ndarray:
    """McNemar's exact test on the discordant counts so far: +1 / -1 where it rejects (B better / worse), else 0."""
    k = np.minimum(plus, minus)
    p = np.minimum(1.0, 2 * binom.cdf(k, plus + minus, 0.5))
    return np.where((p < alpha) & (plus + minus > 0), np.sign(plus - minus), 0).astype(int)


def _result(t, mine, first, when, missed, mc_first, margin, discordance, alpha) -> Result:
    bad = list(wrong_codes(t, margin))
    names = {1: "better", -1: "worse", 2: "equivalent", 0: "cannot tell"}
    decided = when[mine & (first != 0)]
    fixed = fixed_sample_size(probabilities(t, discordance), abs(t) or margin, alpha)
    return Result(t, float(np.isin(first[mine], bad).mean()), float(1 - missed[mine].mean()),
                  {name: float((first[mine] == code).mean()) for code, name in names.items()},
                  float(np.isin(mc_first[mine], [c for c in bad if c != 2]).mean()),
                  float(np.median(decided)) if decided.size else None, fixed)


def table(results: list[Result], budget: int) -> str:
    head = ("| true difference | wrong decisions (sequence) | McNemar peeked every 10 | coverage, every count | "
            "better / worse / equivalent / cannot tell | median questions to a decision | fixed-sample questions, "
            "same errors |")
    lines = [head, "|" + "---|" * 7]
    for r in results:
        o = r.outcomes
        split = " / ".join(f"{100 * o[k]:.1f}%" for k in ("better", "worse", "equivalent", "cannot tell"))
        median = "-" if r.median_questions is None else f"{r.median_questions:,.0f}"
        lines.append(f"| {100 * r.truth:+.0f} points | {100 * r.wrong:.2f}% | {100 * r.mcnemar_wrong:.2f}% | "
                     f"{100 * r.covered:.2f}% | {split} | {median} | {r.fixed:,} |")
    return "\n".join(lines) + f"\n\n(budget {budget:,} questions; fixed-sample count: power 95% at that difference, " \
        "or at the margin for 0)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sequences", type=int, default=2000, help="paired sequences per true difference")
    parser.add_argument("--budget", type=int, default=2000, help="questions per sequence, checked after each")
    parser.add_argument("--margin", type=float, default=0.03)
    parser.add_argument("--discordance", type=float, default=0.30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    m, started = args.margin, time.monotonic()
    results = simulate([0.0, m, -m, 0.10, -0.10], args.sequences, args.budget, m, args.discordance, seed=args.seed)
    print(table(results, args.budget))
    print(f"\n{args.sequences:,} sequences per difference, discordance {args.discordance:.2f}, margin "
          f"{100 * m:.0f} points, seed {args.seed}: {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
