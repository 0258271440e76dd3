"""The sequential paired comparison: its error under continuous monitoring on a small simulated draw (the full one
is bench/sequential_sim.py), its interval against an independent implementation, and resuming from records."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from sparknb.verdicts.sequential import Design, Live, PairedSequence, order

ROOT = Path(__file__).resolve().parents[1]


def bench():
    spec = importlib.util.spec_from_file_location("sequential_sim", ROOT / "bench" / "sequential_sim.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def stream(truth: float, n: int, seed: int, discordance: float = 0.3) -> list[tuple[bool, bool]]:
    """Pairs (A right, B right) whose B-minus-A difference is `truth` on average."""
    rng = np.random.default_rng(seed)
    d = rng.choice([-1, 0, 1], size=n, p=[(discordance - truth) / 2, 1 - discordance, (discordance + truth) / 2])
    return [(bool(x == -1), bool(x == 1)) for x in d]


def test_checked_after_every_answer_the_sequence_errs_at_most_alpha_where_peeked_mcnemar_does_not():
    sim = bench()
    results = {r.truth: r for r in sim.simulate([0.0, 0.03, 0.10], sequences=400, budget=1000, seed=1)}
    assert all(r.wrong <= 0.05 and r.covered >= 0.95 for r in results.values()), results
    assert results[0.0].mcnemar_wrong > 0.15  # the same looks at a fixed-sample test: several times alpha
    ten = results[0.10]
    assert ten.outcomes["better"] > 0.9 and ten.median_questions < ten.fixed  # decided sooner than fixed-sample
    assert "| +0 points |" in sim.table(list(results.values()), 1000)


def test_the_interval_matches_an_independent_betting_confidence_sequence():
    ville = pytest.importorskip("ville", reason="ville is in the dev extra: pip install -e .[dev]")
    pairs = stream(0.05, 400, seed=3)
    seq = PairedSequence.replay(pairs, Design(budget=400, margin=0.001))
    d = np.array([int(b) - int(a) for a, b in pairs], float)
    theirs = ville.BettingCS(bounds=(-1, 1), alpha=0.05, c=0.5, theta=0.5, grid=2001).fit(d[: seq.n])
    assert np.allclose([p[1] for p in seq.path], theirs.lower_, atol=1e-9)
    assert np.allclose([p[2] for p in seq.path], theirs.upper_, atol=1e-9)


def test_each_outcome_and_its_reason():
    better = PairedSequence.replay(stream(0.2, 2000, seed=4), Design(budget=2000))
    worse = PairedSequence.replay(stream(-0.2, 2000, seed=5), Design(budget=2000))
    same = PairedSequence.replay([(True, True)] * 3000, Design(budget=3000))  # never disagree: inside the margin
    short = PairedSequence.replay(stream(0.0, 100, seed=6), Design(budget=100))
    assert (better.outcome, worse.outcome, same.outcome, short.outcome) == ("better", "worse", "equivalent",
                                                                            "cannot tell")
    assert better.interval()[0] > 0 > worse.interval()[1] and -0.03 <= same.interval()[0] < same.interval()[1] <= 0.03
    assert better.stopped_at < 2000 and short.stopped_at == 100 and short.needed() > 100
    assert "above 0" in better.reason and "margin" in same.reason and "budget" in short.reason


def test_resuming_from_the_records_kept_gives_the_same_state():
    pairs = stream(0.08, 1500, seed=7)
    whole = PairedSequence.replay(pairs, Design(budget=1500))
    resumed = PairedSequence.replay(pairs[:97], Design(budget=1500)).update(pairs[97:])
    assert resumed.as_dict() == whole.as_dict() and resumed.path == whole.path
    assert whole.outcome == "better" and len(whole.pairs) == whole.stopped_at  # answers past the stop unused


def test_the_order_is_seeded_and_a_bad_design_is_named():
    ids = [str(i) for i in range(50)]
    assert order(ids, 3) == order(reversed(ids), 3) != order(ids, 4) and sorted(order(ids, 3)) == sorted(ids)
    with pytest.raises(ValueError, match="margin is a fraction"):
        Design(margin=3)
    with pytest.raises(ValueError, match="budget"):
        Design(budget=0)


def test_answers_arriving_out_of_order_are_fed_in_as_order_and_the_calls_stop_when_decided():
    pairs = stream(0.15, 600, seed=8)
    ids = [str(i) for i in range(600)]
    whole = PairedSequence.replay(pairs, Design(budget=600))
    live = Live(ids, {q: a for q, (a, _) in zip(ids, pairs)}, Design(budget=600))
    sent = []
    rng = np.random.default_rng(9)
    flight = []
    for q in live.until_decided(iter(ids)):  # four in flight, answered in a random order
        sent.append(q)
        flight.append(q)
        if len(flight) == 4:
            done = flight.pop(int(rng.integers(4)))
            live.add(done, pairs[int(done)][1])
    for q in flight:
        live.add(q, pairs[int(q)][1])
    assert live.decided and live.sequence.as_dict() == whole.as_dict()
    assert whole.stopped_at <= len(sent) < 200 < len(ids)  # sending stopped soon after the decision
