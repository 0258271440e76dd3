"""Prefill scaling: time to first token against prompt length, cache-proof, and between models.

One short prompt measures mostly the fixed cost of a request, which no architecture changes, so
two models look alike; only long prompts show what prefill really costs. So the sweep spans short
to long, a fit splits the fixed overhead from the per-token cost, and runs of other models are set
beside this one from their sealed records at the same lengths. A prefix-cache hit would make
prefill look many times faster than it is: every prompt is unique from its first token, and any
hit the server counts stops the run, with the counts, unless hits were allowed on purpose.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ... import metrics
from ...client import ServerInfo
from ...params import project_root
from ...prompts import PromptMaker
from ...run import outputs_dir, read_records, verify
from ...study import Study, fingerprint_table

NOTEBOOK = "prefill"
# The reference DGX Spark study's lengths: short chat to long document, the range where the gap shows.
DEFAULT_LENGTHS = (111, 364, 1024, 2048, 5378, 10714)
LEVEL = 0.95  # confidence level of every interval here


class CacheHitError(RuntimeError):
    """The server served part of a prompt from its prefix cache: that TTFT is not a prefill time."""


class FitError(ValueError):
    """Too few clean measurements for the fit; the message says what is missing."""


# --- the plan ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    prompt_lengths: tuple[int, ...] = ()  # empty: DEFAULT_LENGTHS, those beyond max_model_len left out
    output_tokens: int = 1
    warmup: int = 1
    repetitions: int = 5
    allow_cache_hits: bool = False
    compare_with: tuple[str, ...] = ()

    def __post_init__(self):
        # Notebook parameters arrive as lists, or a lone string for one compare_with run.
        object.__setattr__(self, "prompt_lengths", tuple(self.prompt_lengths or ()))
        runs = self.compare_with
        object.__setattr__(self, "compare_with", (runs,) if isinstance(runs, str) else tuple(runs or ()))
        problems = []
        lengths = self.prompt_lengths
        bad = [n for n in lengths if not isinstance(n, int) or isinstance(n, bool) or n < 16]
        if bad:
            problems.append(f"prompt_lengths must be whole numbers of tokens, 16 or more; got {bad}")
        elif len(set(lengths)) != len(lengths):
            problems.append(f"prompt_lengths has repeats: {sorted(n for n in set(lengths) if lengths.count(n) > 1)}")
        elif len(lengths) == 1:
            problems.append(f"prompt_lengths needs two lengths or more to fit the overhead and the per-token "
                            f"cost; got {list(lengths)}. Leave it empty for the standard {list(DEFAULT_LENGTHS)}")
        if not _whole(self.output_tokens, 1):
            problems.append(f"output_tokens must be a whole number, 1 or more; got {self.output_tokens!r}")
        if not _whole(self.repetitions, 1):
            problems.append(f"repetitions must be 1 or more; got {self.repetitions!r}")
        if not _whole(self.warmup, 0):
            problems.append(f"warmup must be 0 or more; got {self.warmup!r}")
        if not isinstance(self.allow_cache_hits, bool):
            problems.append(f"allow_cache_hits must be true or false; got {self.allow_cache_hits!r}")
        if not all(isinstance(r, str) and r.strip() for r in self.compare_with):
            problems.append(f"compare_with must be run folders or run ids of earlier prefill runs; "
                            f"got {list(self.compare_with)!r}")
        elif len(set(self.compare_with)) != len(self.compare_with):
            problems.append(f"compare_with names a run twice: {list(self.compare_with)}")
        if problems:
            raise ValueError("Bad prefill parameters:\n  " + "\n  ".join(problems))

    def settings(self) -> dict:
        """The parameters as params.json records them (an empty prompt_lengths means the standard set)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    def lengths_for(self, server: ServerInfo) -> tuple[tuple[int, ...], str | None]:
        """The lengths this run measures, and a note where standard ones did not fit the server.

        Standard lengths that do not fit are left out (a server with a short context still gets a
        curve); a length the user asked for that does not fit is an error, not quietly dropped.
        """
        room = None if server.max_model_len is None else server.max_model_len - self.output_tokens
        if self.prompt_lengths:
            too_long = [n for n in self.prompt_lengths if room is not None and n > room]
            if too_long:
                raise ValueError(
                    f"prompt length(s) {too_long} plus {self.output_tokens} output token(s) exceed the server's "
                    f"max_model_len of {server.max_model_len} for {server.model}. Drop them from prompt_lengths "
                    "(or leave it empty for the standard lengths that fit), or restart the server with a larger "
                    "--max-model-len.")
            return tuple(sorted(self.prompt_lengths)), None
        if room is None:
            return DEFAULT_LENGTHS, (f"{server.model}'s server does not report max_model_len: all standard "
                                     f"lengths {list(DEFAULT_LENGTHS)} are tried.")
        kept = tuple(n for n in DEFAULT_LENGTHS if n <= room)
        dropped = [n for n in DEFAULT_LENGTHS if n > room]
        if len(kept) < 2:
            raise ValueError(
                f"Only {list(kept) or 'none'} of the standard prompt lengths {list(DEFAULT_LENGTHS)} fit "
                f"{server.model}'s max_model_len of {server.max_model_len}; a fit needs two. Give prompt_lengths "
                f"explicitly, e.g. [{min(32, room)}, {room}].")
        if not dropped:
            return kept, None
        return kept, (f"Note: the standard length(s) {dropped} are left out: with {self.output_tokens} output "
                      f"token(s) they exceed {server.model}'s max_model_len of {server.max_model_len}. "
                      f"Measuring {list(kept)}.")

    def check_server(self, server: ServerInfo, others: Sequence[PastRun] = ()) -> None:
        """Before the run opens: the lengths fit the server, and match every run to compare with."""
        lengths, _ = self.lengths_for(server)
        differ = [f"{o.id} ({o.label}) measured {list(o.lengths())}" for o in others if o.lengths() != lengths]
        if differ:
            raise ValueError(
                f"compare_with runs of other prompt lengths: this run would measure {list(lengths)}, but "
                + "; ".join(differ) + ". A ratio needs the same lengths in every run: set prompt_lengths to "
                "the other run's lengths, or compare with a run of these.")


def _whole(v, low: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


# --- earlier runs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PastRun:
    """An earlier prefill run folder, read back from what it sealed."""

    path: Path
    params: dict
    fingerprint: dict
    records: list[dict]
    problems: tuple[str, ...]  # what verify() found; empty: the folder is as it was sealed

    @property
    def id(self) -> str:
        return self.path.name

    @property
    def label(self) -> str:
        return self.params.get("model", {}).get("name") or self.id

    @property
    def cache_hits_allowed(self) -> bool:
        return bool(self.params.get("settings", {}).get("allow_cache_hits"))

    def frame(self) -> pd.DataFrame:
        return frame(self.records)

    def lengths(self) -> tuple[int, ...]:
        """The prompt lengths with at least one clean measurement."""
        df = self.frame()
        if df.empty:
            return ()
        return tuple(sorted(int(n) for n in df[df["interference"].isna()]["prompt_length"].unique()))


def read_runs(values: Sequence[str], outputs: str | Path = "") -> list[PastRun]:
    """Earlier prefill runs by folder path or run id; every problem with them is named at once."""
    runs, problems = [], []
    for value in values:
        # A path as typed (the notebook runs in notebooks/, so also from the project root), or a run id.
        candidates = [Path(value).expanduser(), project_root() / value, Path(outputs or outputs_dir()) / NOTEBOOK / value]
        path = next((c for c in candidates if c.is_dir()), None)
        if path is None:
            problems.append(f"compare_with {value!r}: no such run folder, nor a run id under "
                            f"{Path(outputs or outputs_dir()) / NOTEBOOK}. Give the folder of an earlier prefill "
                            "run (as `sparknb run` printed it) or its run id.")
            continue
        try:
            params = json.loads((path / "params.json").read_text())
        except (OSError, ValueError):
            problems.append(f"compare_with {value!r}: {path} has no readable params.json, so it is not a sparknb "
                            "run folder.")
            continue
        if params.get("notebook") != NOTEBOOK:
            problems.append(f"compare_with {value!r}: {path.name} is a {params.get('notebook')!r} run, not a "
                            f"prefill run; only prefill runs measured the same thing.")
            continue
        try:
            fp = json.loads((path / "fingerprint.json").read_text())
        except (OSError, ValueError):
            problems.append(f"compare_with {value!r}: {path.name} has no fingerprint.json; without it nobody can "
                            "tell whether it ran on the same box and server build.")
            continue
        run = PastRun(path, params, fp, read_records(path), tuple(verify(path)))
        if not run.lengths():
            problems.append(f"compare_with {value!r}: {path.name} holds no clean measured request.")
            continue
        runs.append(run)
    if problems:
        raise ValueError("Cannot compare:\n  " + "\n  ".join(problems))
    return runs


# --- the sweep -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class CacheCount:
    """The server's prefix-cache counters over the whole sweep: read before the first request, after the last."""

    exposed: bool  # False: the server has no such counters, so a hit could not be seen
    queries: float  # prompt tokens looked up in the cache
    hits: float  # of those, tokens found there
    restarted: bool = False

    def line(self) -> str:
        if not self.exposed:
            return "The server exposes no prefix-cache counters: a cache hit could not be detected."
        return (f"Prefix cache over the whole sweep (server counters before and after): {self.queries:,.0f} prompt "
                f"tokens looked up, {self.hits:,.0f} found" + (" (the server restarted meanwhile)" if self.restarted
                                                              else "") + ".")


def repeating(make: Callable[[int], list[int]]) -> Callable[[int], list[int]]:
    """The same prompt again for each length: what a naive benchmark does, and what the cache serves."""
    made: dict[int, list[int]] = {}

    def prompt(n: int) -> list[int]:
        if n not in made:
            made[n] = make(n)
        return made[n]

    return prompt


def sweep(study: Study, plan: Plan, lengths: Sequence[int],
          prompts: Callable[[int], list[int]] | None = None) -> tuple[pd.DataFrame, CacheCount]:
    """All requests, shortest prompts first, one at a time; stops at the first cache hit not allowed.

    `prompts` makes the prompt of a given length: fresh ones by default, the same one per length
    where cache hits are allowed on purpose.
    """
    maker = PromptMaker(study.endpoint.tokenize)
    prompts = prompts or (repeating(maker.make) if plan.allow_cache_hits else maker.make)
    total = len(lengths) * (plan.warmup + plan.repetitions)
    before = study.endpoint.metrics()
    k = 0
    for length in lengths:
        for rep in range(-plan.warmup, plan.repetitions):
            k += 1
            prompt = prompts(length)
            # ignore_eos: the answer is exactly output_tokens long, whatever the random text says.
            rec = study.request(
                {"prompt_length": length, "rep": rep, "warmup": rep < 0, "cache_hits_allowed": plan.allow_cache_hits,
                 "load_1m": _load()},
                lambda ep: ep.complete(prompt, max_tokens=plan.output_tokens, temperature=0.0, ignore_eos=True),
            )
            server = rec["server"]
            hits = server.get("prefix_cache_hits") or 0
            print(f"[{k}/{total}] {length} tokens, {'warmup' if rep < 0 else f'rep {rep + 1}'}: "
                  f"TTFT {_ms(rec['ttft_s'])}, vLLM prefill {_ms(server.get('prefill_s'))}"
                  + (f", CACHE HIT {hits:g} tokens" if hits else "")
                  + (f"  !! {rec['interference']}" if rec["interference"] else ""), flush=True)
            if not plan.allow_cache_hits:
                check_no_cache_hits([rec])
    after = study.endpoint.metrics()
    d = metrics.delta(before, after)
    cache = CacheCount(exposed=after.has(metrics.PREFIX_QUERIES), queries=d[metrics.PREFIX_QUERIES],
                       hits=d[metrics.PREFIX_HITS], restarted=bool(d.reset))
    records = study.records()
    if not plan.allow_cache_hits:
        check_no_cache_hits(records, cache)
    print(f"{k} requests done. {cache.line()}", flush=True)
    return frame(records), cache


def _load() -> float | None:
    """This machine's 1-minute load average: a busy client delays every token it receives."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def check_no_cache_hits(records: Sequence[dict], cache: CacheCount | None = None) -> None:
    """Raise, with the counts, if the server served any prompt token from its prefix cache."""
    hit = [r for r in records if ((r.get("server") or {}).get("prefix_cache_hits") or 0) > 0]
    if not hit and not (cache and cache.hits > 0):
        return
    lines = [f"{r.get('prompt_length')}-token prompt, {'warmup' if r.get('warmup') else 'rep ' + str(r.get('rep', 0) + 1)}: "
             f"{r['server']['prefix_cache_hits']:g} of {r['server'].get('prefix_cache_queries', 0):g} prompt tokens "
             "from the cache" for r in hit[:5]]
    more = f" (and {len(hit) - 5} more)" if len(hit) > 5 else ""
    total = (f" Over the sweep the server counted {cache.hits:,.0f} hits in {cache.queries:,.0f} looked-up tokens."
             if cache else "")
    raise CacheHitError(
        f"PREFIX-CACHE HIT: {len(hit)} request(s) were served partly from the prefix cache: "
        + "; ".join(lines) + more + "." + total
        + " Their TTFT is not a prefill time, so the run stops here (every record so far is kept). Every prompt "
        "is meant to be unique from its first token: is another client sending the same prompts? To show the "
        "cache's effect on purpose, set allow_cache_hits true; the run is then marked as such.")


def frame(records: Sequence[dict]) -> pd.DataFrame:
    """Measured requests as a table, the server's timings beside the client's."""
    rows = []
    for r in records:
        if r.get("warmup") or "error" in r:
            continue
        server = r.get("server") or {}
        rows.append({
            "prompt_length": r["prompt_length"],
            "rep": r.get("rep"),
            "prompt_tokens": r.get("prompt_tokens"),
            "completion_tokens": r.get("completion_tokens"),
            "ttft_s": r.get("ttft_s"),
            "server_ttft_s": server.get("ttft_s"),
            "server_prefill_s": server.get("prefill_s"),
            "server_queue_s": server.get("queue_s"),
            "cache_queries": server.get("prefix_cache_queries"),
            "cache_hits": server.get("prefix_cache_hits"),
            "cache_hits_allowed": bool(r.get("cache_hits_allowed")),
            "load_1m": r.get("load_1m"),
            "interference": r.get("interference"),
        })
    columns = ["prompt_length", "rep", "prompt_tokens", "completion_tokens", "ttft_s", "server_ttft_s",
               "server_prefill_s", "server_queue_s", "cache_queries", "cache_hits", "cache_hits_allowed",
               "load_1m", "interference"]
    return pd.DataFrame(rows, columns=columns)


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["interference"].isna() & df["ttft_s"].notna()]


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per prompt length: the spread of TTFT, prefill throughput, and vLLM's own times beside them."""
    out = []
    for length, g in _clean(df).groupby("prompt_length"):
        ttft = g["ttft_s"]
        median = float(ttft.median())

        def server_ms(column, g=g):
            return 1000 * float(g[column].median()) if g[column].notna().all() else None

        both = g["server_ttft_s"].notna().all()
        queries = g["cache_queries"].fillna(0).sum()
        out.append({
            "prompt tokens": int(length),
            "n": len(g),
            "TTFT ms (median)": 1000 * median,
            "std": 1000 * float(ttft.std(ddof=1)) if len(g) > 1 else float("nan"),
            "min": 1000 * float(ttft.min()),
            "max": 1000 * float(ttft.max()),
            "prefill tok/s": length / median if median > 0 else float("nan"),
            "vLLM TTFT ms": server_ms("server_ttft_s"),
            "vLLM prefill ms": server_ms("server_prefill_s"),
            "vLLM queue ms": server_ms("server_queue_s"),
            "outside vLLM ms": 1000 * float((g["ttft_s"] - g["server_ttft_s"]).median()) if both else None,
            "cache hit %": 100 * g["cache_hits"].fillna(0).sum() / queries if queries else None,
        })
    return pd.DataFrame(out).set_index("prompt tokens") if out else pd.DataFrame()


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{1000 * seconds:.0f} ms"


def duration(seconds: float) -> str:
    """A time at a scale a reader takes in: 2.31 s, 41.2 ms, 870 us."""
    a = abs(seconds)
    if a >= 1:
        return f"{seconds:.2f} s"
    if a >= 1e-3:
        return f"{1000 * seconds:.3g} ms"
    return f"{1e6 * seconds:.3g} us"


# --- the fit -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Estimate:
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
    per_token_s: Estimate  # the cost of one more prompt token, at short prompts
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
        return self.per_token_s.value + 2 * (self.curvature_s.value if self.curvature_s else 0.0) * n

    def predict(self, n: Sequence[float]) -> pd.DataFrame:
        """Fitted TTFT in seconds with the interval of the mean, for drawing the line."""
        tokens = np.asarray(n, dtype=float)
        x = _design(tokens, self.curvature_s is not None)
        mean = x @ self.params
        half = self.t_quantile * np.sqrt(np.einsum("ij,jk,ik->i", x, self.cov, x))
        return pd.DataFrame({"tokens": tokens, "ttft_s": mean, "low": mean - half, "high": mean + half})

    def table(self) -> pd.DataFrame:
        pct = f"{100 * self.level:.0f}%"
        rows = {"fixed overhead per request": self.overhead_s.show(duration),
                "cost per prompt token": self.per_token_s.show(duration)}
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
    clean = _clean(df)
    lengths = tuple(sorted(int(n) for n in clean["prompt_length"].unique()))
    if len(lengths) < 2 or len(clean) < 3:
        raise FitError(f"The fit needs clean requests at two prompt lengths or more, three requests in all; "
                       f"there are {len(clean)} at {list(lengths)}. Measure more lengths or repetitions.")
    n = clean["prompt_length"].to_numpy(dtype=float)
    y = clean["ttft_s"].to_numpy(dtype=float)
    median = clean.groupby("prompt_length")["ttft_s"].transform("median").to_numpy(dtype=float)
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

    medians = clean.groupby("prompt_length")["ttft_s"].median()
    misfit = _design(medians.index.to_numpy(dtype=float), quadratic) @ solved.params / medians.to_numpy() - 1
    worst = int(np.argmax(np.abs(misfit)))
    outliers = tuple((int(a), float(b), float(c)) for a, b, c, w in zip(n, y, median, solved.weights) if w < 0.5)
    return Fit(
        shape="quadratic" if quadratic else "straight line",
        overhead_s=est(0), per_token_s=est(1), curvature_s=est(2) if quadratic else None,
        crossover_tokens=_crossover(solved), lengths=lengths, n=len(y), level=level,
        worst_misfit=(int(medians.index[worst]), float(misfit[worst])), outliers=outliers,
        params=solved.params, cov=solved.cov, t_quantile=solved.t_quantile)


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


# --- several runs --------------------------------------------------------------------------------------

def ratio_table(frames: dict[str, pd.DataFrame], base: str, level: float = LEVEL, seed: int = 0) -> pd.DataFrame:
    """Median TTFT of every run per length, and each other run's over the base run's, with an interval.

    The interval is a percentile bootstrap over each run's own requests (seeded: the same records
    always give the same interval). With five requests a side it is rough, but it says when a
    ratio is too noisy to carry a conclusion.
    """
    tables = {label: summarize(df) for label, df in frames.items()}
    lengths = {label: list(t.index) for label, t in tables.items()}
    if any(ls != lengths[base] for ls in lengths.values()):
        raise ValueError("The runs measured different prompt lengths: "
                         + "; ".join(f"{label} {ls}" for label, ls in lengths.items())
                         + ". A ratio needs the same lengths in every run.")
    rng = np.random.default_rng(seed)
    ttfts = {label: {n: g["ttft_s"].to_numpy(dtype=float) for n, g in _clean(df).groupby("prompt_length")}
             for label, df in frames.items()}
    out = pd.DataFrame(index=pd.Index(lengths[base], name="prompt tokens"))
    for label, t in tables.items():
        out[f"{label} TTFT ms"] = t["TTFT ms (median)"]
    for label, t in tables.items():
        if label == base:
            continue
        col = f"{label} / {base}"
        out[col] = t["TTFT ms (median)"] / tables[base]["TTFT ms (median)"]
        bounds = [_ratio_interval(ttfts[label][n], ttfts[base][n], level, rng) for n in out.index]
        out[f"{col} low"], out[f"{col} high"] = [b[0] for b in bounds], [b[1] for b in bounds]
        # The same ratio from vLLM's own TTFT: free of whatever held up either client.
        if t["vLLM TTFT ms"].notna().all() and tables[base]["vLLM TTFT ms"].notna().all():
            out[f"{col} (vLLM)"] = t["vLLM TTFT ms"].astype(float) / tables[base]["vLLM TTFT ms"].astype(float)
    return out


def _ratio_interval(other: np.ndarray, base: np.ndarray, level: float, rng, draws: int = 4000) -> tuple[float, float]:
    if len(other) < 2 or len(base) < 2:
        return math.nan, math.nan
    a = np.median(rng.choice(other, size=(draws, len(other))), axis=1)
    b = np.median(rng.choice(base, size=(draws, len(base))), axis=1)
    low, high = np.quantile(a / b, [(1 - level) / 2, (1 + level) / 2])
    return float(low), float(high)


# What must match for two runs to be set side by side, by what a difference means.
_FACETS: dict[str, Callable[[dict], dict]] = {
    "hardware": lambda fp: {
        "cpu": fp.get("host", {}).get("cpu_model"),
        "cpu threads": fp.get("host", {}).get("cpu_count"),
        "memory": fp.get("host", {}).get("memory_total_bytes"),
        "gpu": "; ".join(f"{d.get('name')} {d.get('memory_total_bytes')}" for d in fp.get("gpu", {}).get("devices", []))
               or "none"},
    "driver": lambda fp: {"driver": fp.get("gpu", {}).get("driver_version"),
                          "CUDA driver": fp.get("gpu", {}).get("cuda_driver_version")},
    "server version": lambda fp: {"vLLM": fp.get("server", {}).get("version")},
    "host": lambda fp: {"hostname": fp.get("host", {}).get("hostname")},
}


def fingerprint_differences(mine: dict, theirs: dict) -> list[str]:
    """Where two runs' machines or server builds differ; empty means same box and build."""
    out = []
    for facet, pick in _FACETS.items():
        a, b = pick(mine), pick(theirs)
        diffs = [f"{k} {a[k]!r} vs {b[k]!r}" for k in a if a[k] != b[k]]
        if diffs:
            out.append(f"{facet} differs: " + ", ".join(diffs))
    return out


@dataclass(frozen=True)
class Comparison:
    base: str
    labels: tuple[str, ...]  # the other runs, in compare_with order
    run_ids: tuple[str, ...]
    table: pd.DataFrame
    fingerprints: pd.DataFrame
    warnings: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"base": self.base, "others": [{"label": la, "run_id": r} for la, r in zip(self.labels, self.run_ids)],
                "table": self.table.reset_index().to_dict(orient="records"), "warnings": list(self.warnings)}

    def warnings_markdown(self) -> str:
        if not self.warnings:
            return "Every run compared here ran on the same box, driver and server build, and verifies as sealed."
        return "\n".join(f"- **WARNING:** {w}" for w in self.warnings)


def compare(df: pd.DataFrame, study: Study, others: Sequence[PastRun], allow_cache_hits: bool) -> Comparison:
    """This run beside earlier ones, every figure of theirs read from their own sealed records."""
    names = [study.model.name, *(o.label for o in others)]
    ids = [study.run.id, *(o.id for o in others)]
    labels = [n if names.count(n) == 1 else f"{n} ({i})" for n, i in zip(names, ids)]
    base = labels[0]
    frames = {base: df} | {label: o.frame() for label, o in zip(labels[1:], others)}
    warnings = []
    for label, o in zip(labels[1:], others):
        for d in fingerprint_differences(study.fingerprint, o.fingerprint):
            warnings.append(f"{label} ran elsewhere: {d}.")
        if o.problems:
            warnings.append(f"{label} ({o.id}) no longer verifies against its manifest: "
                            f"{'; '.join(o.problems[:4])}. Its numbers may not be what it measured.")
        if o.cache_hits_allowed != allow_cache_hits:
            marked = label if o.cache_hits_allowed else base
            warnings.append(f"{marked} allowed prefix-cache hits on purpose and the other did not: the ratio shows "
                            "the cache's effect, not the models'.")
    prints = {}
    for label, run_id, fp in zip(labels, ids, [study.fingerprint, *(o.fingerprint for o in others)]):
        try:
            rows = fingerprint_table(fp)["value"]
        except (KeyError, TypeError, AttributeError):
            rows = pd.Series({"fingerprint": "incomplete; see its fingerprint.json"})
        prints[label] = pd.concat([pd.Series({"run": run_id}), rows])
    return Comparison(base, tuple(labels[1:]), tuple(ids[1:]), ratio_table(frames, base),
                      pd.concat(prints, axis=1), tuple(warnings))


# --- what the numbers say ------------------------------------------------------------------------------

def findings(df: pd.DataFrame, table: pd.DataFrame, fit_: Fit | None, plan: Plan, cache: CacheCount,
             note: str | None = None) -> list[str]:
    """Every reason to doubt the numbers, then what the fit says about them."""
    notes = []
    if plan.allow_cache_hits:
        notes.append("MARKED: this run allowed prefix-cache hits on purpose (each length's prompt repeats): its "
                     "TTFTs show what a cache hit looks like, not what prefill costs.")
    if note:
        notes.append(note)
    notes.append(cache.line())
    dropped = df["interference"].notna().sum()
    if dropped:
        notes.append(f"WARNING: {dropped} request(s) were left out because another client used the server "
                     "meanwhile; see the 'interference' column of the records.")
    off = df[df["prompt_tokens"].notna() & (df["prompt_tokens"] != df["prompt_length"])]
    if len(off):
        notes.append(f"WARNING: {len(off)} prompt(s) were not the length asked for: the server counted "
                     f"{sorted(set(off['prompt_tokens']))} tokens for {sorted(set(off['prompt_length']))}.")
    if df["completion_tokens"].isna().any():
        notes.append("WARNING: the server sent no usage for some requests; their token counts are unknown, not guessed.")
    wrong = df[df["completion_tokens"].notna() & (df["completion_tokens"] != plan.output_tokens)]
    if len(wrong):
        notes.append(f"WARNING: {len(wrong)} answer(s) were not {plan.output_tokens} token(s) long "
                     f"({sorted(set(wrong['completion_tokens'].astype(str)))}): the server ignored ignore_eos.")
    if table.empty:
        return notes + ["No clean measurement was taken."]
    clean = _clean(df)
    median = clean.groupby("prompt_length")["ttft_s"].transform("median")
    odd = clean[(clean["ttft_s"] > 1.5 * median) | (clean["ttft_s"] < median / 1.5)]
    if len(odd):
        shown = "; ".join(f"{duration(t)} at {n:,} tokens (median {duration(m)})"
                          for n, t, m in zip(odd["prompt_length"], odd["ttft_s"], median[odd.index]))
        notes.append(f"WARNING: {len(odd)} request(s) took over 1.5 times as long as the median of their length, or "
                     f"under two thirds of it: {shown}. The same prompt length should cost the same; something else "
                     "likely used the machine. Medians and the robust fit resist them; std and max do not.")
    gap = table["outside vLLM ms"].dropna()
    if len(gap):
        if (gap < -2).any():
            notes.append("WARNING: the client saw the first token before vLLM says it made it: the clocks or "
                         "the counters are not to be trusted here.")
        notes.append(f"Outside vLLM (HTTP, the client, streaming) each request spent {gap.min():.1f} to "
                     f"{gap.max():.1f} ms of its TTFT; the rest is vLLM's own time to first token.")
        if gap.max() > 2 * max(gap.iloc[0], 1.0) and gap.max() - gap.iloc[0] > 10:
            notes.append(f"WARNING: the time outside vLLM should not depend on the prompt length (one output token, "
                         f"prompts sent as token ids), yet it grows from {gap.iloc[0]:.1f} ms at {gap.index[0]:,} tokens "
                         f"to {gap.max():.1f} ms at {gap.idxmax():,}. Most often a busy machine holds up the client or "
                         "the server's front end; the client's TTFTs then include that delay, "
                         "and vLLM's own columns show the engine's time alone.")
    else:
        notes.append("The server exposes no TTFT histogram: only the client's times are shown.")
    loads = df["load_1m"].dropna() if "load_1m" in df else pd.Series(dtype=float)
    cpus = os.cpu_count() or 1
    if len(loads) and loads.median() > cpus:  # the server and this client alone make a load of about 2
        notes.append(f"WARNING: this machine's load average reached {loads.max():.1f} on {cpus} CPU threads during "
                     f"the sweep (median {loads.median():.1f}): other processes competed with the client, and with "
                     "the server if it runs here. Expect slow outliers; measure again on a quiet machine before "
                     "trusting the figures.")
    if fit_ is not None:
        if fit_.outliers:
            shown = "; ".join(f"{duration(t)} at {n:,} tokens" for n, t, _ in fit_.outliers[:3])
            notes.append(f"The robust fit gave little weight to {len(fit_.outliers)} request(s) far from its curve "
                         f"({shown}{'; ...' if len(fit_.outliers) > 3 else ''}).")
        length, miss = fit_.worst_misfit
        if abs(miss) > 0.10:
            notes.append(f"WARNING: the {fit_.shape} misses the median TTFT at {length:,} tokens by {100 * miss:+.0f}%: "
                         "read the fitted overhead and per-token cost as rough.")
        if fit_.curvature_s:
            word = "faster" if fit_.curvature_s.value > 0 else "slower"
            notes.append(f"TTFT grows {word} than in proportion to the prompt: the per-token cost is "
                         f"{duration(fit_.per_token_s.value)} at short prompts and "
                         f"{duration(fit_.per_token_at(fit_.lengths[-1]))} at {fit_.lengths[-1]:,} tokens.")
    return notes


def _gap(r: float) -> float:
    return max(r, 1 / r)


def story(table: pd.DataFrame, fit_: Fit | None, label: str, comparison: Comparison | None = None,
          allow_cache_hits: bool = False) -> str:
    """The plain-language paragraph: what one short prompt would have said, and what the long ones show."""
    if table.empty:
        return "Nothing was measured cleanly, so there is nothing to conclude."
    short, long_ = table.index[0], table.index[-1]
    s, l_ = table.loc[short], table.loc[long_]
    parts = []
    if allow_cache_hits:
        parts.append("This run allowed prefix-cache hits on purpose, so none of this is a prefill cost.")
    rate_change = l_["prefill tok/s"] / s["prefill tok/s"]
    parts.append(f"A single short-prompt test ({short:,} tokens) would have measured {s['TTFT ms (median)']:,.0f} ms "
                 f"to the first token for {label}, a prefill rate of {s['prefill tok/s']:,.0f} tokens/s.")
    if rate_change > 1.1:
        why = ("so at short prompts most of the time is the fixed cost of a request, and a short test understates "
               "what the hardware does on long documents")
    elif rate_change < 1 / 1.1:
        why = ("so each token costs more as the context grows (attention's work grows with the square of the length), "
               "and a short test overstates the speed on long documents")
    else:
        why = "about the same, so here the short test would not have misled on throughput"
    parts.append(f"At {long_:,} tokens it takes {l_['TTFT ms (median)']:,.0f} ms, {l_['prefill tok/s']:,.0f} tokens/s: "
                 f"{rate_change:.2f} times the short-prompt rate, {why}.")
    rates = table["prefill tok/s"]
    if rates.idxmax() not in (short, long_) and rates.max() > 1.1 * max(rates.iloc[0], rates.iloc[-1]):
        parts.append(f"In between, the rate peaks at {rates.max():,.0f} tokens/s at {rates.idxmax():,} tokens: "
                     "one length alone, short or long, would not have shown the shape.")
    if fit_ is not None:
        a, b = fit_.overhead_s, fit_.per_token_s
        fixed = (f"The fit puts the fixed overhead of a request at {a.show(duration)} and one prompt token at "
                 f"{b.show(duration)} ({100 * fit_.level:.0f}% intervals)")
        x = fit_.crossover_tokens
        if a.low <= 0:
            fixed += ("; the overhead is not distinguishable from zero (its interval reaches it), so the prompt's "
                      "tokens dominate from the shortest prompts on")
        elif x is None:
            fixed += "; the tokens' share never overtakes the overhead in this fit"
        elif x.value < short:
            fixed += (f"; the tokens outweigh the overhead from about {x.value:,.0f} tokens, so even the "
                      f"{short:,}-token prompt mostly measures prefill")
        elif x.value > long_:
            fixed += (f"; the tokens would outweigh the overhead only from about {x.value:,.0f} tokens, beyond the "
                      f"longest prompt here, so every length measured is mostly overhead")
        else:
            fixed += (f"; the tokens outweigh the overhead from about {x.value:,.0f} tokens "
                      f"[{x.low:,.0f}, {x.high:,.0f}], so prompts shorter than that mostly measure overhead")
        parts.append(fixed + ".")
    if comparison is not None:
        for other in comparison.labels:
            parts.append(_versus(comparison, other))
    return " ".join(parts)


def _versus(comparison: Comparison, other: str) -> str:
    """One other run against this one, claiming no more than the ratio's intervals allow."""
    t, base = comparison.table, comparison.base
    col = f"{other} / {base}"
    ratios, low, high = t[col], t[f"{col} low"], t[f"{col} high"]
    short, long_ = t.index[0], t.index[-1]
    r0, r1 = ratios.iloc[0], ratios.iloc[-1]

    def span(i):
        return "" if math.isnan(low.iloc[i]) else f" [{low.iloc[i]:.2f}, {high.iloc[i]:.2f}]"

    vllm = (f" (by vLLM's own TTFT: {t[col + ' (vLLM)'].iloc[0]:.2f} and {t[col + ' (vLLM)'].iloc[-1]:.2f})"
            if col + " (vLLM)" in t else "")
    text = (f"Against {other}: the {short:,}-token test would have said {other} takes {r0:.2f}{span(0)} times as "
            f"long as {base} to the first token; at {long_:,} tokens it is {r1:.2f}{span(-1)} times{vllm}.")
    slower = (low > 1).any()  # somewhere the other is surely slower
    faster = (high < 1).any()  # somewhere it is surely faster
    if slower and faster:
        return text + " The faster model changes with the prompt length: a short test picks the wrong one for long prompts."
    if math.isnan(low.iloc[0]) or math.isnan(low.iloc[-1]):
        return text + " With one request per length there is no interval to say whether the ratio really changes."
    if low.iloc[0] <= 1 <= high.iloc[0]:
        text += f" At {short:,} tokens the two cannot be told apart."
    if not (high.iloc[0] < low.iloc[-1] or high.iloc[-1] < low.iloc[0]):
        return text + (" The intervals at the two ends overlap: these repetitions cannot tell whether the ratio "
                       "really changes with the prompt length; more repetitions, or a quieter machine, would.")
    if _gap(r1) > _gap(r0):
        return text + (f" The gap grows from {_gap(r0):.2f}x to {_gap(r1):.2f}x: a short-prompt benchmark would "
                       "have called the two models closer than they are.")
    return text + (f" The gap shrinks from {_gap(r0):.2f}x to {_gap(r1):.2f}x: a short-prompt benchmark would "
                   "have called them further apart than they are on long prompts.")


def summary(lengths: Sequence[int], plan: Plan, cache: CacheCount, table: pd.DataFrame, fit_: Fit | None,
            comparison: Comparison | None, paragraph: str, notes: list[str]) -> dict:
    """What summary.json holds: the figures and the words, as printed."""
    return {"prompt_lengths": list(lengths), "cache_hits_allowed": plan.allow_cache_hits, "cache": asdict(cache),
            "table": table.reset_index().to_dict(orient="records"),
            "fit": fit_.as_dict() if fit_ else None,
            "comparison": comparison.as_dict() if comparison else None,
            "story": paragraph, "findings": notes}


# --- plots ---------------------------------------------------------------------------------------------

def plot(table: pd.DataFrame, fit_: Fit | None, label: str, allow_cache_hits: bool = False):
    """TTFT against prompt length with the fit and its interval; prefill throughput beside it."""
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    x = table.index.to_numpy(dtype=float)
    y = table["TTFT ms (median)"].to_numpy()
    ax.errorbar(x, y, yerr=[y - table["min"].to_numpy(), table["max"].to_numpy() - y], fmt="o", capsize=3,
                label=f"{label}, median (min to max)")
    if fit_ is not None:
        grid = np.geomspace(x.min(), x.max(), 100)
        pred = fit_.predict(grid)
        ax.plot(grid, 1000 * pred["ttft_s"], "-", color="C1", label=f"fit ({fit_.shape})")
        ax.fill_between(grid, 1000 * pred["low"], 1000 * pred["high"], color="C1", alpha=0.2,
                        label=f"{100 * fit_.level:.0f}% interval of the fit")
        if fit_.overhead_s.value > 0:  # a log axis cannot show zero or less
            ax.axhline(1000 * fit_.overhead_s.value, color="grey", ls=":", label="fixed overhead")
    _log_ms_axis(ax)
    _length_axis(ax, x)
    ax.set_ylabel("time to first token (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    ax2.plot(x, table["prefill tok/s"], "o-")
    _length_axis(ax2, x)
    ax2.set_ylim(bottom=0)
    ax2.set_ylabel("prefill tokens per second (prompt / TTFT)")
    ax2.grid(alpha=0.3)
    mark = " - CACHE HITS ALLOWED ON PURPOSE" if allow_cache_hits else ""
    fig.suptitle(f"Prefill: {label}{mark}")
    fig.tight_layout()
    return fig


def plot_comparison(comparison: Comparison):
    """Every run's TTFT, and each other run's TTFT over this one's, against prompt length."""
    import matplotlib.pyplot as plt

    t = comparison.table
    x = t.index.to_numpy(dtype=float)
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label in (comparison.base, *comparison.labels):
        ax.plot(x, t[f"{label} TTFT ms"], "o-", label=label)
    _log_ms_axis(ax)
    _length_axis(ax, x)
    ax.set_ylabel("median time to first token (ms)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    for i, label in enumerate(comparison.labels):
        col = f"{label} / {comparison.base}"
        y = t[col].to_numpy(dtype=float)
        err = np.vstack([y - t[f"{col} low"].to_numpy(dtype=float), t[f"{col} high"].to_numpy(dtype=float) - y])
        ax2.errorbar(x, y, yerr=np.nan_to_num(err), fmt="o-", color=f"C{i}", capsize=3,
                     label=f"{col}, {100 * LEVEL:.0f}% bootstrap interval")
        if f"{col} (vLLM)" in t:
            ax2.plot(x, t[f"{col} (vLLM)"], "s--", color=f"C{i}", alpha=0.6, label=f"{col}, vLLM's own TTFT")
    ax2.axhline(1, color="grey", ls=":")
    _length_axis(ax2, x)
    ax2.set_ylabel("TTFT ratio")
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=8)
    fig.suptitle("Time to first token, run against run")
    fig.tight_layout()
    return fig


def _length_axis(ax, lengths) -> None:
    """A log axis labelled at the lengths measured, in plain numbers."""
    from matplotlib.ticker import FixedLocator, NullLocator

    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(list(lengths)))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{int(n):,}" for n in lengths])
    ax.set_xlabel("prompt length (tokens)")


def _log_ms_axis(ax) -> None:
    from matplotlib.ticker import LogFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
