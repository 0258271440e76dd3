"""The fit: TTFT against prompt length split into a fixed overhead per request and a cost per token.

Relative errors, a robust (Huber) regression and Student's t intervals: see fit() for why each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from ...errors import FitError
from ...runs.report import duration
from .tables import clean

LEVEL = 0.95  # confidence level of every interval of the prefill study


@dataclass(frozen=True)
class Estimate:
    """A figure with its interval, at the fit's confidence level."""

    value: float
    low: float
    high: float

    def show(self, fmt: Callable[[float], str]) -> str:
        return f"{fmt(self.value)} [{fmt(self.low)}, {fmt(self.high)}]"


@dataclass(frozen=True)
class Fit:
    """TTFT = overhead + per_token * n (+ curvature * n^2 where the data bend), fitted per request."""

    shape: str  # "straight line" or "quadratic"
    overhead_s: Estimate  # TTFT of an empty prompt: what every request pays
    per_token_s: Estimate  # the cost of one more prompt token at the shortest prompt measured
    curvature_s: Estimate | None  # s per token^2; None where a straight line fits
    crossover_tokens: Estimate | None  # where the tokens' share passes the overhead; None: never
    lengths: tuple[int, ...]
    n: int
    level: float
    worst_misfit: tuple[int, float]  # (length, fit / median - 1) where the fit misses the median most
    outliers: tuple[tuple[int, float, float], ...]  # (length, TTFT, that length's median) the fit set aside
    params: np.ndarray = field(repr=False, compare=False, default=None)  # in seconds and thousands of tokens
    cov: np.ndarray = field(repr=False, compare=False, default=None)
    t_quantile: float = field(repr=False, compare=False, default=float("nan"))

    def per_token_at(self, n: float) -> float:
        """Marginal cost of one more token at length n."""
        return self.per_token_s.value if self.curvature_s is None else _slope(self.params, n)

    def predict(self, n: Sequence[float]) -> pd.DataFrame:
        """Fitted TTFT in seconds with the interval of the mean, for drawing the line."""
        tokens = np.asarray(n, dtype=float)
        x = _design(tokens, self.curvature_s is not None)
        mean = x @ self.params
        half = self.t_quantile * np.sqrt(np.einsum("ij,jk,ik->i", x, self.cov, x))
        return pd.DataFrame({"tokens": tokens, "ttft_s": mean, "low": mean - half, "high": mean + half})

    @property
    def where(self) -> str:
        """Where the per-token cost was read: a bent fit's slope changes along the prompt."""
        return f" where the prompt is {self.lengths[0]:,} tokens" if self.curvature_s else ""

    def table(self) -> pd.DataFrame:
        pct = f"{100 * self.level:.0f}%"
        rows = {"fixed overhead per request": self.overhead_s.show(duration),
                f"cost per prompt token{self.where}": self.per_token_s.show(duration)}
        if self.curvature_s:
            rows[f"per-token cost at {self.lengths[-1]:,} tokens"] = duration(self.per_token_at(self.lengths[-1]))
            rows["curvature (per token squared)"] = self.curvature_s.show(lambda v: f"{v:.3g} s")
        x = self.crossover_tokens
        rows["per-token cost dominates from"] = (
            "never, in this fit" if x is None
            else "the first token: no fixed overhead above zero" if x.value == 0
            else x.show(lambda v: f"{v:,.0f} tokens"))
        rows["model"] = (f"{self.shape}, robust (Huber) regression over {self.n} requests at {len(self.lengths)} "
                         f"lengths; {len(self.outliers)} set aside as outliers")
        return pd.DataFrame({f"estimate [{pct} interval]": list(rows.values())}, index=list(rows))

    def as_dict(self) -> dict:
        est = {k: asdict(v) if v else None for k, v in (("overhead_s", self.overhead_s), ("per_token_s", self.per_token_s),
               ("curvature_s", self.curvature_s), ("crossover_tokens", self.crossover_tokens))}
        return {"shape": self.shape, **est, "lengths": list(self.lengths), "n": self.n, "level": self.level,
                "worst_misfit": {"prompt_length": self.worst_misfit[0], "relative": self.worst_misfit[1]},
                "outliers": [{"prompt_length": n, "ttft_s": t, "median_s": m} for n, t, m in self.outliers]}


def _design(n: np.ndarray, quadratic: bool) -> np.ndarray:
    k = n / 1000.0  # in thousands of tokens, so n^2 stays well conditioned
    return np.column_stack([np.ones_like(k), k, k * k] if quadratic else [np.ones_like(k), k])


@dataclass(frozen=True)
class _Solved:
    params: np.ndarray
    cov: np.ndarray
    t_quantile: float
    weights: np.ndarray

    def interval(self, i: int) -> tuple[float, float]:
        half = self.t_quantile * math.sqrt(self.cov[i, i])
        return self.params[i] - half, self.params[i] + half


def _solve(n: np.ndarray, y: np.ndarray, scale: np.ndarray, quadratic: bool, level: float) -> _Solved:
    import statsmodels.api as sm
    from scipy.stats import t

    x = _design(n, quadratic)
    # Dividing each row by its length's median TTFT fits relative errors (weights 1/median^2).
    result = sm.RLM(y / scale, x / scale[:, None], M=sm.robust.norms.HuberT()).fit()
    df_resid = max(len(y) - x.shape[1], 1)
    return _Solved(np.asarray(result.params, dtype=float), np.asarray(result.cov_params(), dtype=float),
                   float(t.ppf(0.5 + level / 2, df_resid)), np.asarray(result.weights, dtype=float))


def fit(df: pd.DataFrame, level: float = LEVEL) -> Fit:
    """Fixed overhead and per-token cost, with intervals, from every clean request.

    Relative errors (each length weighted by 1/median^2): timing noise grows with the time measured,
    and equal weights would let the longest prompts alone decide the overhead. Huber's robust
    regression: one request slowed by something else (a neighbour on the CPU, a first compile)
    must not tilt the line; such requests are named, not hidden. A bend (quadratic term) is kept
    only where its interval excludes zero: attention makes long prompts cost more per token.
    Intervals use Student's t on the robust covariance, which is conservative for few requests.
    """
    kept = clean(df)
    lengths = tuple(sorted(int(n) for n in kept["prompt_length"].unique()))
    if len(lengths) < 2 or len(kept) < 3:
        raise FitError(f"The fit needs clean requests at two prompt lengths or more, three requests in all; "
                       f"there are {len(kept)} at {list(lengths)}. Measure more lengths or repetitions.")
    n = kept["prompt_length"].to_numpy(dtype=float)
    y = kept["ttft_s"].to_numpy(dtype=float)
    median = kept.groupby("prompt_length")["ttft_s"].transform("median").to_numpy(dtype=float)
    solved, quadratic = _solve(n, y, median, False, level), False
    if len(lengths) >= 3 and len(y) > 3:
        bent = _solve(n, y, median, True, level)
        low, high = bent.interval(2)
        if low > 0 or high < 0:
            solved, quadratic = bent, True
    unit = (1.0, 1e-3, 1e-6)  # back from thousands of tokens to tokens

    def est(i):
        low, high = solved.interval(i)
        return Estimate(float(solved.params[i] * unit[i]), float(low * unit[i]), float(high * unit[i]))

    per_token = _slope_estimate(solved, lengths[0]) if quadratic else est(1)

    medians = kept.groupby("prompt_length")["ttft_s"].median()
    misfit = _design(medians.index.to_numpy(dtype=float), quadratic) @ solved.params / medians.to_numpy() - 1
    worst = int(np.argmax(np.abs(misfit)))
    outliers = tuple((int(a), float(b), float(c)) for a, b, c, w in zip(n, y, median, solved.weights) if w < 0.5)
    return Fit(
        shape="quadratic" if quadratic else "straight line",
        overhead_s=est(0), per_token_s=per_token, curvature_s=est(2) if quadratic else None,
        crossover_tokens=_crossover(solved), lengths=lengths, n=len(y), level=level,
        worst_misfit=(int(medians.index[worst]), float(misfit[worst])), outliers=outliers,
        params=solved.params, cov=solved.cov, t_quantile=solved.t_quantile)


def _gradient(n: float) -> np.ndarray:
    return np.array([0.0, 1.0, 2 * n / 1000])  # d/dk of a + b k + c k^2, k in thousands of tokens


def _slope(params: np.ndarray, n: float) -> float:
    return float(_gradient(n) @ params * 1e-3)


def _slope_estimate(solved: _Solved, n: float) -> Estimate:
    """A bent fit's slope at n tokens, with its interval. Its own linear term is the slope at zero tokens, outside
    what was measured, where noise in the bend can turn it negative: CI once printed -8.5 us a token for the tiny
    dense model on 2 cores, whose median TTFT at 600 tokens was 2.0 to 2.7 times that at 100 in four runs here."""
    g, value = _gradient(n), _slope(solved.params, n)
    half = 1e-3 * solved.t_quantile * math.sqrt(max(float(g @ solved.cov @ g), 0.0))
    return Estimate(value, value - half, value + half)


def _root(p: np.ndarray) -> float:
    """Smallest positive n (in thousands) where the tokens' time equals the overhead; nan if none."""
    a, b = p[0], p[1]
    c = p[2] if len(p) > 2 else 0.0
    if a <= 0:
        return 0.0
    if c == 0:
        return a / b if b > 0 else math.nan
    disc = b * b + 4 * c * a
    if disc < 0:
        return math.nan
    roots = [r for r in ((-b + math.sqrt(disc)) / (2 * c), (-b - math.sqrt(disc)) / (2 * c)) if r > 0]
    return min(roots) if roots else math.nan


def _crossover(solved: _Solved) -> Estimate | None:
    """The crossover length with a delta-method interval (a ratio of estimates has no exact one here)."""
    p = solved.params
    value = _root(p)
    if math.isnan(value):
        return None
    if value == 0.0:
        return Estimate(0.0, 0.0, 0.0)
    grad = np.zeros_like(p)
    for i in range(len(p)):
        h = 1e-6 * max(abs(p[i]), 1e-12)
        up, down = p.copy(), p.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (_root(up) - _root(down)) / (2 * h)
    half = solved.t_quantile * math.sqrt(max(float(grad @ solved.cov @ grad), 0.0))
    if math.isnan(half):
        return Estimate(float(1000 * value), math.nan, math.nan)
    return Estimate(float(1000 * value), float(max(0.0, 1000 * (value - half))), float(1000 * (value + half)))


