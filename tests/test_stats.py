"""The intervals and tests, pinned against published values and against the seed study's own figures."""

import math

import numpy as np
import pytest

from sparknb.verdicts import stats


def test_wilson_interval_matches_newcombes_published_examples():
    # Newcombe (1998), Statistics in Medicine 17:857, method 3 (Wilson score) on his worked examples.
    for (x, n), (low, high) in {(81, 263): (0.2553, 0.3662), (15, 148): (0.0624, 0.1605),
                                (0, 20): (0.0, 0.1611)}.items():
        ci = stats.accuracy(x, n)
        assert (round(ci.low, 4), round(ci.high, 4)) == (low, high)
        assert ci.estimate == x / n and ci.method == "Wilson score"


def test_a_wilson_interval_holds_its_estimate_at_none_and_all_right():
    # statsmodels' Wilson bounds miss 0 and 1 by rounding (0 of 7: low 2.8e-17; 12 of 12: high 1 - 1e-16): an
    # estimate outside its own interval made the per-category plot of a real MMLU-Pro run fail.
    for n in range(1, 60):
        for x in (0, n):
            ci = stats.accuracy(x, n)
            assert ci.low <= ci.estimate <= ci.high, (x, n, ci)


def test_bonett_price_matches_the_contingencytables_package():
    # Fagerland, Lydersen and Laake's R package contingencytables (ocbe-uio/contingencytables,
    # tests/testthat, chapter 8): Cavo et al. (2012), complete response before and after
    # consolidation therapy, n = [[59, 6], [16, 80]] -> estimate -0.0621 (95% CI -0.1195 to -0.0032).
    pairs = stats.Pairs(both=59, a_only=6, b_only=16, neither=80)
    ci = stats.paired_difference(pairs)
    assert round(ci.estimate, 4) == -0.0621
    assert (round(ci.low, 4), round(ci.high, 4)) == (-0.1195, -0.0032)
    # The same package: McNemar exact conditional test P = 0.052479.
    assert round(stats.mcnemar(pairs).pvalue, 6) == 0.052479


def test_bonett_price_by_hand_from_the_formula():
    # Bentur et al. (2009), airway hyper-responsiveness, n = [[1, 1], [7, 12]], N = 21, worked by hand:
    # p12 = 2/23 = 0.086957, p21 = 8/23 = 0.347826, centre = -0.260870,
    # SE = sqrt((0.434783 - 0.068053) / 23) = 0.126274, z SE = 0.247492 -> [-0.5084, -0.0134];
    # Fagerland, Lydersen and Laake (2014, Stat Med 33:2850) give -0.508 to -0.013.
    ci = stats.paired_difference(stats.Pairs(1, 1, 7, 12))
    assert ci.estimate == pytest.approx(-6 / 21)
    assert ci.low == pytest.approx(-0.50836, abs=5e-5) and ci.high == pytest.approx(-0.01338, abs=5e-5)


def test_the_seeds_published_interval_implies_its_discordance():
    # The seed gives 280 questions, 230 and 228 right, and [-5.6, +7.0] points, but not the discordant
    # counts. Searched rather than typed in: of every split with b - c = 2, only b + c = 80 (41 and 39)
    # rounds to the published interval. A wrong formula would find another count, or none.
    matches = [b + (b - 2) for b in range(2, 140)
               if stats.paired_difference(stats.Pairs(230 - b, b, b - 2, 52 - b)).points(signed=True)
               == "+0.7 points [-5.6, +7.0]"]
    assert matches == [80]
    pairs = stats.Pairs(both=189, a_only=41, b_only=39, neither=11)
    assert stats.mcnemar(pairs).pvalue > 0.5
    # The seed's "roughly 700 questions" buys +/-4 points at this discordance, not +/-2: two points
    # needs about 2,800. Hand-computed: z^2 (0.29078 - 0.00709^2) / h^2 - 2.
    z2 = 1.959964 ** 2
    assert stats.questions_needed(pairs, 0.04) == math.ceil(z2 * (82 / 282 - (2 / 282) ** 2) / 0.04 ** 2 - 2) == 697
    assert stats.questions_needed(pairs, 0.02) == 2791


def test_the_paired_interval_covers_the_true_difference_95_percent_of_the_time():
    # An independent check of the formula: draw many 2x2 tables from known rates and count how often
    # the interval holds the true difference. Bonett-Price's coverage is close to the nominal 95%.
    rng = np.random.default_rng(7)
    p = {"both": 0.68, "a_only": 0.15, "b_only": 0.11, "neither": 0.06}
    truth = p["a_only"] - p["b_only"]
    draws = rng.multinomial(280, list(p.values()), size=4000)
    covered = 0
    for both, a_only, b_only, neither in draws:
        ci = stats.paired_difference(stats.Pairs(int(both), int(a_only), int(b_only), int(neither)))
        covered += ci.low <= truth <= ci.high
    assert 0.935 <= covered / len(draws) <= 0.965


def test_questions_needed_really_narrows_the_interval():
    pairs = stats.Pairs(189, 41, 39, 11)
    n = stats.questions_needed(pairs, 0.03)
    scale = n / pairs.n  # the same rates at n questions
    bigger = stats.Pairs(*(round(v * scale) for v in (189, 41, 39, 11)))
    ci = stats.paired_difference(bigger)
    assert (ci.high - ci.low) / 2 == pytest.approx(0.03, abs=0.001)


def test_pairs_from_outcomes_and_the_table_orientation():
    pairs = stats.Pairs.of([True, True, False, False, True], [True, False, True, False, False])
    assert (pairs.both, pairs.a_only, pairs.b_only, pairs.neither) == (1, 2, 1, 1)
    assert pairs.table() == [[1, 2], [1, 1]]  # rows: A right, A wrong; columns: B right, B wrong
    assert stats.paired_difference(pairs).estimate == pytest.approx(1 / 5)
    with pytest.raises(ValueError, match="same questions"):
        stats.Pairs.of([True], [True, False])


def test_no_disagreement_is_no_evidence_either_way():
    pairs = stats.Pairs(10, 0, 0, 4)
    assert stats.mcnemar(pairs).pvalue == 1.0
    ci = stats.paired_difference(pairs)
    assert ci.estimate == 0 and ci.low < 0 < ci.high  # the adjustment keeps the interval open


def test_stratified_average_weights_categories():
    counts = {"a": (18, 20), "b": (10, 20)}
    macro = stats.stratified(counts, {"a": 1, "b": 1})
    assert macro.estimate == pytest.approx(0.7)
    micro = stats.stratified(counts, {"a": 300, "b": 100})
    assert micro.estimate == pytest.approx(0.75 * 0.9 + 0.25 * 0.5)
    assert 0 <= macro.low < macro.estimate < macro.high <= 1
    perfect = stats.stratified({"a": (20, 20), "b": (20, 20)}, {"a": 1, "b": 1})
    assert perfect.estimate == 1 and perfect.low < 1  # 100% in a category still carries uncertainty
    with pytest.raises(ValueError, match="every weighted category"):
        stats.stratified(counts, {"a": 1, "c": 1})


def test_nonsense_is_named():
    with pytest.raises(ValueError, match="at least one"):
        stats.accuracy(0, 0)
    with pytest.raises(ValueError, match="fraction"):
        stats.questions_needed(stats.Pairs(1, 1, 1, 1), 2)
    with pytest.raises(ValueError, match="between 0 and 1"):
        stats.z_value(95)
    with pytest.raises(ValueError, match="at least one question"):
        stats.paired_difference(stats.Pairs(0, 0, 0, 0))


def test_drift_needs_a_spread_to_judge_by_and_more_than_it():
    assert stats.drift([8.4, 8.3, 6.0]) is None  # one value between first and last: no spread
    assert not stats.drift([8.4, 8.0, 8.8, 8.5]).beyond_spread  # within what the middle ones vary
    slowed = stats.drift([8.4, 8.3, 8.35, 7.2])
    assert slowed.beyond_spread and slowed.change == pytest.approx(7.2 / 8.4 - 1)
