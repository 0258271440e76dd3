"""The load study's parameters, checked together, and the earlier runs they name, read once.

Levels are either requests in flight (a closed loop: a new request as one ends) or request rates
(an open loop: seeded Poisson arrivals that do not wait for answers). What needs the server (its
context length, how many of these requests its KV cache holds at once) is checked before the run
lock is taken or a folder made.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, ClassVar, Literal

from pydantic import Field, PrivateAttr, model_validator

from ... import engines
from ...endpoint.client import Endpoint, ServerInfo
from ...errors import ParamsError
from ...runs import plan
from ...runs.plan import COMPARED, IGNORED, RESUMED
from ...runs.run import PastRun
from .prompts import Prompts, make_prompts

NOTEBOOK = "load"
DEFAULT_CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Level:
    """One step of the sweep: how many requests are kept in flight, or how many arrive per second, and
    how many are measured: `requests` exactly, or (0) as many as `duration_s` of sending allows but at
    least `min_requests`."""

    mode: Literal["concurrency", "rate"]
    value: float
    warmup: int  # requests sent first, recorded and left out
    requests: int  # measured requests; 0: the rule of duration_s and min_requests
    duration_s: float = 30.0
    min_requests: int = 0

    @property
    def name(self) -> str:
        return f"{self.value:g} in flight" if self.mode == "concurrency" else f"{self.value:g} req/s"

    @property
    def count_rule(self) -> str:
        """How many requests this level measures, in words."""
        if self.requests:
            return f"{self.requests} requests"
        return f"{self.duration_s:g} s of sending" + (f", at least {self.min_requests} requests"
                                                     if self.min_requests else "")

    def done(self, sent: int, sending_s: float | None) -> bool:
        """Whether a level that has sent `sent` requests (warmup included), the measured ones for
        `sending_s` seconds (None before the first), has sent all it measures."""
        measured = sent - self.warmup
        if self.requests:
            return measured >= self.requests
        return sending_s is not None and sending_s >= self.duration_s and measured >= self.min_requests


class Plan(plan.Plan):
    study: ClassVar[str] = NOTEBOOK
    concurrency: list[Annotated[int, Field(ge=1)]] = Field(
        [], description=f"requests in flight per level, e.g. [1, 4, 16]; empty: {list(DEFAULT_CONCURRENCY)}")
    request_rates: list[Annotated[float, Field(gt=0)]] = Field(
        [], description="requests per second per level, e.g. [0.5, 2]; given instead of concurrency")
    prompt_tokens: Annotated[int, COMPARED, RESUMED] = Field(512, ge=16, description="exact prompt length in tokens, 16 or more")
    output_tokens: Annotated[int, COMPARED, RESUMED] = Field(128, ge=2, description="answer length in tokens, 2 or more")
    prompts: Annotated[str, COMPARED, RESUMED] = Field("", description="empty, a prompt set under params/prompts/ (or a YAML "
                                              "path), or mmlu_pro:SOURCE")
    warmup: Annotated[int, COMPARED, RESUMED] = Field(1, ge=0, description="warmup waves per level, 0 or more")
    requests_per_level: Annotated[int, Field(ge=0)] | list[Annotated[int, Field(ge=0)]] = Field(
        0, description="measured requests per level, or a list of them, one per level in the order given; "
                       "0: send for duration_s (and at least min_requests)")
    duration_s: float = Field(30.0, gt=0, description="seconds of sending per level after its warmup")
    min_requests: int = Field(0, ge=0, description="with duration_s: send on past it until this many are measured")
    percentiles: list[Annotated[float, Field(gt=0, le=100)]] = Field(
        [50, 90, 99], min_length=1, description="the percentiles of TTFT, TPOT, ITL and E2E, e.g. [50, 90, 99]")
    seed: int = Field(0, description="seeds the arrivals and the order of a prompt set")
    slo_ttft_s: float = Field(2.0, gt=0, description="the longest TTFT a request may take to count as goodput")
    slo_tpot_s: float = Field(0.1, gt=0, description="the longest time per output token to count as goodput")
    temperature: Annotated[float, COMPARED, RESUMED] = Field(0.0, ge=0, le=2)
    compare_with: Annotated[plan.RunIds, IGNORED] = Field([], description="run folders or run ids of earlier load runs")
    resume_from: Annotated[str, IGNORED] = Field(
        "", description="an earlier load run (folder or run id) that failed halfway: its finished levels are "
        "reused, only the others measured")
    _prompts: Prompts | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _one_kind_of_level(self) -> Plan:
        if self.concurrency and self.request_rates:
            raise ValueError("give concurrency or request_rates, not both: a level keeps a number of requests in "
                             "flight, or sends them at a rate")
        for name in ("concurrency", "request_rates"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"{name} has repeats: {values}; give each level once")
        given = self.request_rates or self.concurrency or DEFAULT_CONCURRENCY
        if isinstance(self.requests_per_level, list) and len(self.requests_per_level) != len(given):
            raise ValueError(f"requests_per_level has {len(self.requests_per_level)} counts for {len(given)} levels "
                             f"({list(given)}); give one count per level, in the same order, or one for all")
        if len(set(self.percentiles)) != len(self.percentiles):
            raise ValueError(f"percentiles has repeats: {self.percentiles}")
        if self.prompts.startswith("mmlu_pro") and not self.prompts.startswith("mmlu_pro:"):
            raise ValueError(f"prompts {self.prompts!r}: write mmlu_pro:hub or mmlu_pro:FOLDER (the folder of its "
                             "parquet files)")
        return self

    def unusable(self, run: PastRun) -> str:
        """An earlier run to compare with must have measured a level (one that failed at once has none)."""
        return "" if any(r.get("kind") == "level" for r in run.records) else "it holds no measured level"

    @property
    def source(self) -> Prompts:
        if self._prompts is None:
            raise ParamsError("The prompts are made when the plan is checked against the server (check_server).")
        return self._prompts

    def wanted(self) -> list[Level]:
        """Every level asked for, in increasing order, before the server's KV cache has a say."""
        mode = "rate" if self.request_rates else "concurrency"
        given = self.request_rates or self.concurrency or DEFAULT_CONCURRENCY
        counts = self.requests_per_level if isinstance(self.requests_per_level, list) else \
            [self.requests_per_level] * len(given)
        return [Level(mode, v, math.ceil(self.warmup * v) if mode == "rate" else self.warmup * v, n, self.duration_s,
                      self.min_requests) for v, n in sorted(zip(given, counts))]

    def levels(self, capacity: int | None) -> tuple[list[Level], str | None]:
        """The levels to measure, and a note where more in flight than the KV cache holds (`capacity`
        requests of these lengths at once) were left out: past it requests only wait their turn."""
        wanted = self.wanted()
        if capacity is None or self.request_rates:
            return wanted, None
        kept = [lv for i, lv in enumerate(wanted) if lv.value <= capacity or i == 0]
        dropped = [f"{lv.value:g}" for lv in wanted if lv not in kept]
        if not dropped:
            return kept, None
        return kept, (f"Levels {', '.join(dropped)} in flight are left out: the server's KV cache holds {capacity} "
                      "of these requests at once, so more would only wait their turn.")

    def check_server(self, server: ServerInfo, endpoint: Endpoint) -> None:
        """Make the prompts (by the server's own tokenizer), check that they fit its context, and that every
        compare_with run shares a level with this one."""
        self._prompts = make_prompts(self, endpoint)
        longest = self._prompts.longest
        if server.max_model_len is not None and longest + self.output_tokens > server.max_model_len:
            raise ParamsError(f"The longest prompt is {longest} tokens; with output_tokens {self.output_tokens} it "
                              f"exceeds {server.model}'s max_model_len of {server.max_model_len}. Lower prompt_tokens "
                              "or output_tokens, or restart the server with a larger "
                              f"{engines.named(server.engine).context_option}.")
        mine = {lv.name for lv in self.wanted()}
        differ = [f"{o.id} ({o.label})" for o in self.past
                  if not mine & {r.get("level_name") for r in o.records if r.get("kind") == "level"}]
        if differ:
            raise ParamsError(f"compare_with runs that share no level with this one ({sorted(mine)}): "
                              + "; ".join(differ) + ". Give the same concurrency or request_rates as those runs.")


def kv_capacity(endpoint, tokens_per_request: int) -> int | None:
    """How many requests of this many tokens the server's KV cache holds at once, as its engine tells
    (vLLM: its cache_config_info gauge); None where the server does not say."""
    text = endpoint.metrics_text()
    return None if text is None else endpoint.engine.kv_capacity(text, tokens_per_request)
