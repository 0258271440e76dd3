"""Intervals and tests for accuracy, and for two models answering the same questions.

Two runs on the same questions are paired: only the questions where they disagree carry evidence of
a difference. An interval for independent samples (statsmodels' confint_proportions_2indep) ignores
that and is wrong here; statsmodels has no paired one, so Bonett and Price's adjusted Wald interval
(J. Educ. Behav. Stat. 37, 2012) is written out below, checked against the published values of
Fagerland, Lydersen and Laake's contingencytables package.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.stats import norm
from statsmodels.stats.contingency_tables import mcnemar as _mcnemar
from statsmodels.stats.proportion import proportion_confint


def z_value(level: float) -> float:
    if not 0 < level < 1:
        raise ValueError(f"a confidence level is between 0 and 1, e.g. 0.95; got {level!r}")
    return float(norm.ppf(0.5 + level / 2))


@dataclass(frozen=True)
class Interval:
    """An estimate with its confidence interval, all as fractions (0.821, not 82.1)."""

    estimate: float
    low: float
    high: float
    level: float
    method: str

    def points(self, signed: bool = False) -> str:
        """'82.1% [77.2, 86.2]', or '+0.7 points [-5.6, +7.0]' for a difference."""
        if signed:
            return (f"{100 * self.estimate:+.1f} points [{100 * self.low:+.1f}, {100 * self.high:+.1f}]")
        return f"{100 * self.estimate:.1f}% [{100 * self.low:.1f}, {100 * self.high:.1f}]"

    def times(self) -> str:
        """'2.00x [1.82, 2.22]' for a ratio; the interval left out where it is unknown."""
        if math.isnan(self.low):
            return f"{self.estimate:.2f}x (no interval: too few measurements)"
        return f"{self.estimate:.2f}x [{self.low:.2f}, {self.high:.2f}]"

    @property
    def excludes(self) -> float | None:
        """Which side of 1 the whole interval lies on, as +1 or -1; None where it holds 1 (or is unknown)."""
        if math.isnan(self.low) or self.low <= 1 <= self.high:
            return None
        return 1.0 if self.low > 1 else -1.0

    def as_dict(self) -> dict:
        return asdict(self)


def accuracy(correct: int, n: int, level: float = 0.95) -> Interval:
    """Wilson's score interval: unlike the plain Wald one it stays inside [0, 1] and keeps its
    coverage near 0% and 100%, where small categories often sit."""
    if n <= 0:
        raise ValueError("accuracy needs at least one graded answer; none was given")
    if not 0 <= correct <= n:
        raise ValueError(f"correct must be between 0 and n={n}; got {correct}")
    low, high = proportion_confint(correct, n, alpha=1 - level, method="wilson")
    # statsmodels' bounds miss 0 and 1 by rounding (0 of 7 right: low 2.8e-17), which put the estimate outside its
    # own interval and made matplotlib refuse the error bars of an MMLU-Pro run with a category at 0.
    estimate = correct / n
    return Interval(estimate, min(float(low), estimate), max(float(high), estimate), level, "Wilson score")


def stratified(counts: Mapping[str, tuple[int, int]], weights: Mapping[str, float],
               level: float = 0.95) -> Interval:
    """The weighted average of per-category accuracies, for a sample drawn category by category.

    counts maps category -> (correct, n); weights need not sum to one. Each category's variance
    uses (correct + 1) / (n + 2), so a category at 0% or 100% still counts its uncertainty.
    """
    missing = sorted(set(weights) - set(counts))
    if missing or not counts:
        raise ValueError(f"no graded answers in categories {missing or list(weights)}; a weighted "
                         "average needs every weighted category")
    total = sum(weights[c] for c in counts)
    estimate = variance = 0.0
    for cat, (correct, n) in counts.items():
        w = weights[cat] / total
        estimate += w * correct / n
        adjusted = (correct + 1) / (n + 2)
        variance += w * w * adjusted * (1 - adjusted) / n
    half = z_value(level) * math.sqrt(variance)
    return Interval(estimate, max(0.0, estimate - half), min(1.0, estimate + half), level,
                    "stratified Wald, add-one variance")


@dataclass(frozen=True)
class Pairs:
    """The 2x2 table of two runs, A and B, on the same questions."""

    both: int  # both right
    a_only: int  # A right, B wrong: McNemar's b
    b_only: int  # A wrong, B right: McNemar's c
    neither: int  # both wrong

    @classmethod
    def of(cls, a: Sequence[bool], b: Sequence[bool]) -> Pairs:
        if len(a) != len(b):
            raise ValueError(f"paired outcomes must cover the same questions; got {len(a)} and {len(b)}")
        pairs = list(zip(map(bool, a), map(bool, b)))
        return cls(pairs.count((True, True)), pairs.count((True, False)), pairs.count((False, True)),
                   pairs.count((False, False)))

    @property
    def n(self) -> int:
        return self.both + self.a_only + self.b_only + self.neither

    @property
    def discordant(self) -> int:
        return self.a_only + self.b_only

    def table(self) -> list[list[int]]:
        """Rows: A right, A wrong; columns: B right, B wrong."""
        return [[self.both, self.a_only], [self.b_only, self.neither]]

    def as_dict(self) -> dict:
        return asdict(self) | {"n": self.n}


@dataclass(frozen=True)
class Test:
    statistic: float
    pvalue: float
    method: str

    def as_dict(self) -> dict:
        return asdict(self)


def mcnemar(pairs: Pairs) -> Test:
    """McNemar's exact test (a binomial test on the discordant questions): valid at any count."""
    if pairs.discordant == 0:
        return Test(0.0, 1.0, "McNemar exact (no discordant questions: no evidence either way)")
    result = _mcnemar(pairs.table(), exact=True)
    return Test(float(result.statistic), float(result.pvalue), "McNemar exact")


def _laplace(pairs: Pairs) -> tuple[float, float, int]:
    if pairs.n == 0:
        raise ValueError("a paired comparison needs at least one question answered by both runs")
    m = pairs.n + 2
    return (pairs.a_only + 1) / m, (pairs.b_only + 1) / m, m


def paired_difference(pairs: Pairs, level: float = 0.95) -> Interval:
    """Accuracy of A minus accuracy of B, with Bonett and Price's adjusted Wald interval.

    p12 = (b+1)/(N+2), p21 = (c+1)/(N+2), SE = sqrt((p12 + p21 - (p12 - p21)^2) / (N+2)); the
    interval is (p12 - p21) +/- z SE, the estimate (b - c) / N.
    """
    p12, p21, m = _laplace(pairs)
    centre = p12 - p21
    half = z_value(level) * math.sqrt((p12 + p21 - centre ** 2) / m)
    return Interval((pairs.a_only - pairs.b_only) / pairs.n, max(-1.0, centre - half), min(1.0, centre + half),
                    level, "Bonett-Price adjusted Wald (paired)")


def questions_needed(pairs: Pairs, half_width: float, level: float = 0.95) -> int:
    """How many questions would narrow the paired interval to +/- half_width, if the two models
    kept disagreeing as often as they did here: z^2 (psi - delta^2) / h^2, with psi and delta the
    discordance and the difference as the interval itself estimates them."""
    if not 0 < half_width < 1:
        raise ValueError(f"half_width is a fraction, e.g. 0.02 for 2 points; got {half_width!r}")
    p12, p21, _ = _laplace(pairs)
    psi, delta = p12 + p21, p12 - p21
    return max(1, math.ceil(z_value(level) ** 2 * (psi - delta ** 2) / half_width ** 2 - 2))


@dataclass(frozen=True)
class Drift:
    """How the first and last of a run's requests at one setting differ, against the spread of the rest."""

    first: float
    last: float
    spread: float  # max - min of the requests between them
    n: int

    @property
    def change(self) -> float:
        return self.last / self.first - 1 if self.first else float("nan")

    @property
    def beyond_spread(self) -> bool:
        """True where the last differs from the first by more than the middle requests differ among
        themselves, and by more than 5%: a change the repetitions themselves do not explain."""
        return abs(self.last - self.first) > max(self.spread, 0.05 * abs(self.first))


def drift(values_in_order: Sequence[float]) -> Drift | None:
    """None with fewer than four values: with one between first and last, there is no spread to judge by."""
    values = [float(v) for v in values_in_order]
    if len(values) < 4:
        return None
    middle = values[1:-1]
    return Drift(values[0], values[-1], max(middle) - min(middle), len(values))


def median_ratio(other: Sequence[float], base: Sequence[float], level: float = 0.95, seed: int = 0,
                 draws: int = 4000) -> Interval:
    """The median of `other` over the median of `base`, with a percentile-bootstrap interval over each
    side's own measurements (seeded: the same data always give the same interval). With under two
    values a side the interval is unknown (nan), never a made-up width."""
    a, b = np.asarray(other, dtype=float), np.asarray(base, dtype=float)
    estimate = float(np.median(a) / np.median(b)) if len(a) and len(b) else math.nan
    if len(a) < 2 or len(b) < 2:
        return Interval(estimate, math.nan, math.nan, level, "ratio of medians (too few values for an interval)")
    rng = np.random.default_rng(seed)
    ratios = np.median(rng.choice(a, size=(draws, len(a))), axis=1) / np.median(rng.choice(b, size=(draws, len(b))), axis=1)
    low, high = np.quantile(ratios, [(1 - level) / 2, (1 + level) / 2])
    return Interval(estimate, float(low), float(high), level, "ratio of medians, percentile bootstrap")


def median_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """The median with a distribution-free interval between two order statistics: [x(j), x(n-j+1)] holds
    the true median with probability 1 - 2 P(Binomial(n, 1/2) < j), whatever the distribution. The widest
    such pair, [min, max], reaches 95% only from 6 values; with fewer the interval is unknown (nan)."""
    from scipy.stats import binom

    x = np.sort(np.asarray(values, dtype=float))
    n = len(x)
    estimate = float(np.median(x)) if n else math.nan
    best = None
    for j in range(1, n // 2 + 1):
        if 1 - 2 * binom.cdf(j - 1, n, 0.5) >= level:
            best = j
    if best is None:
        return Interval(estimate, math.nan, math.nan, level, f"median of {n} (too few values for a {level:.0%} interval)")
    return Interval(estimate, float(x[best - 1]), float(x[n - best]), level, "median, order-statistic interval")


def relative_half_width(interval: Interval) -> float:
    """Half the interval's width over its estimate: 0.02 for a median of 100 within [98, 102]; nan where unknown."""
    if math.isnan(interval.low) or not interval.estimate:
        return math.nan
    return (interval.high - interval.low) / 2 / abs(interval.estimate)


def requests_needed(ratio: Interval, per_side: int) -> int | None:
    """How many requests a side would make a ratio's interval exclude 1, if the spread stayed as observed: an
    interval narrows as one over the square root of the sample, so the sample grows by the square of how much
    wider the interval is (on the log scale) than its distance from 1. None where no difference was seen at
    all (estimate 1, or no interval): then no sample size is promised."""
    if math.isnan(ratio.low) or ratio.estimate <= 0 or ratio.low <= 0 or per_side < 1:
        return None
    distance = abs(math.log(ratio.estimate))
    half = (math.log(ratio.high) - math.log(ratio.low)) / 2
    if distance < 1e-9:
        return None
    return max(per_side + 1, math.ceil(per_side * (half / distance) ** 2))
