"""The order of a sweep's requests: every (length, repetition), warmups first, fixed in number or `auto` until
each length's median is precise enough; a resumed sweep sends only what its earlier run did not finish."""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

from ..verdicts import stats


def schedule(lengths: Sequence[int], warmup: int, repetitions: int, order: str = "shuffled",
             seed: int = 0) -> list[tuple[int, int]]:
    """The (length, repetition) of every request, warmups as negative repetitions.

    Grouped: every length in turn, its warmups then its repetitions. Shuffled: the warmups of every
    length first, then the measured requests in a seeded random order, so that a box warming up or
    drifting during the sweep spreads over all lengths instead of tilting the curve.
    """
    if order == "grouped":
        return [(n, rep) for n in lengths for rep in range(-warmup, repetitions)]
    measured = [(n, rep) for n in lengths for rep in range(repetitions)]
    random.Random(seed).shuffle(measured)
    return [(n, rep) for n in lengths for rep in range(-warmup, 0)] + measured


AUTO = "auto"
AUTO_FIRST = 6  # the fewest values whose median has a 95% distribution-free interval (stats.median_interval)


class Schedule:
    """The (length, repetition) of every request of a sweep, with `repetitions` fixed or `auto`.

    Fixed: `schedule()`'s order. Auto: every length gets AUTO_FIRST measured requests, then, round after
    round (each round's lengths shuffled, or one length after another where grouped), one more for each
    length whose median's 95% interval is still wider than +/- `target` of the median, until every length
    is within it or has `cap` requests. The sweep reports each measured value with `add`, and `stopped()`
    says per length why it stopped, for the report.
    """

    def __init__(self, lengths: Sequence[int], warmup: int, repetitions: int | str, order: str = "shuffled",
                 seed: int = 0, target: float = 0.02, cap: int = 30):
        self.lengths, self.warmup, self.repetitions = list(lengths), warmup, repetitions
        self.order, self.target, self.cap = order, target, cap
        self._rng = random.Random(seed)
        self.values: dict[int, list[float]] = {n: [] for n in self.lengths}
        self.sent: dict[int, int] = {n: 0 for n in self.lengths}
        self.seed = seed
        self.finished: dict[int, set[int]] = {n: set() for n in self.lengths}  # reps an earlier run measured

    def resume(self, done: dict[int, dict[int, float | None]]) -> None:
        """What an earlier run of the same sweep measured (length -> rep -> its figure): counted, never sent again."""
        for n, reps in done.items():
            if n in self.finished:
                self.finished[n], self.sent[n] = set(reps), len(reps)
                for value in reps.values():
                    self.add(n, value)

    def _wanted(self, n: int) -> bool:
        """Whether a length still has requests to send (its warmups go only where it does)."""
        if not self.auto:
            return len(self.finished[n]) < self.repetitions
        return self.sent[n] < AUTO_FIRST or not self._settled(n)

    @property
    def auto(self) -> bool:
        return self.repetitions == AUTO

    @property
    def planned(self) -> str:
        """The number of requests as a progress line can say it: exact when fixed, a bound when auto."""
        n = len(self.lengths)
        if not self.auto:  # what is left to send: an earlier run's finished requests are not sent again
            return str(sum(self.warmup + self.repetitions - len(self.finished[m]) for m in self.lengths
                           if self._wanted(m)))
        return f"{n * (self.warmup + AUTO_FIRST)} to {n * (self.warmup + max(self.cap, AUTO_FIRST))}"

    def add(self, length: int, value: float | None) -> None:
        """A measured request's figure (None where it cannot count: another client meanwhile, no figure)."""
        if value is not None and value == value:
            self.values[length].append(float(value))

    def width(self, length: int) -> float:
        """The relative half-width of the 95% interval of the length's median so far (nan: too few values)."""
        return stats.relative_half_width(stats.median_interval(self.values[length]))

    def _settled(self, length: int) -> bool:
        w = self.width(length)
        return (w == w and w <= self.target) or self.sent[length] >= self.cap

    def __iter__(self) -> Iterator[tuple[int, int]]:
        wanted = {n for n in self.lengths if self._wanted(n)}
        if not self.auto:
            for length, rep in schedule(self.lengths, self.warmup, self.repetitions, self.order, self.seed):
                if length in wanted and rep not in self.finished[length]:
                    self.sent[length] += rep >= 0
                    yield length, rep
            return
        for n in self.lengths:
            for rep in range(-self.warmup, 0) if n in wanted else ():
                yield n, rep
        first = [n for n in self.lengths for _ in range(AUTO_FIRST - min(self.sent[n], AUTO_FIRST))]
        if self.order == "grouped":
            for n in self.lengths:
                while self._wanted(n):
                    self.sent[n] += 1
                    yield n, self.sent[n] - 1
            return
        self._rng.shuffle(first)
        rounds = [first]
        while rounds:
            for n in rounds.pop():
                self.sent[n] += 1
                yield n, self.sent[n] - 1
            more = [n for n in self.lengths if not self._settled(n)]
            if more:
                self._rng.shuffle(more)
                rounds.append(more)

    def stopped(self) -> dict[int, str]:
        """Per length, why it has as many requests as it has."""
        out = {}
        for n in self.lengths:
            count, w = len(self.values[n]), self.width(n)
            shown = "no interval" if w != w else f"+/-{100 * w:.1f}%"
            if not self.auto:
                out[n] = f"fixed at {self.repetitions} repetitions; the median's 95% interval: {shown}"
            elif w == w and w <= self.target:
                out[n] = (f"reached {shown} (target +/-{100 * self.target:g}%) after {count} clean requests")
            else:
                out[n] = (f"stopped at the cap of {self.cap} requests with {shown} (target +/-{100 * self.target:g}%): "
                          "the requests spread wider than the target allows at that count")
        return out
