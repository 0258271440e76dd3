"""The prefill study's parameters, checked together, and the earlier runs they name, read once.

Every problem is named before the server is asked anything; what needs the server (its context
length) is checked against it before the run lock is taken or a folder is made.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, model_validator

from ... import engines
from ...endpoint.client import Endpoint, ServerInfo
from ...errors import ParamsError
from ...runs import plan
from ...runs.plan import COMPARED, IGNORED
from ...runs.run import PastRun
from .tables import measured_lengths

NOTEBOOK = "prefill"
# The reference DGX Spark study's lengths: short chat to long document, the range where the gap shows.
DEFAULT_LENGTHS = (111, 364, 1024, 2048, 5378, 10714)


class Plan(plan.Sweep):
    study: ClassVar[str] = NOTEBOOK
    prompt_lengths: list[Annotated[int, Field(ge=16)]] = Field(
        [], description="whole numbers of tokens, 16 or more, two lengths or more; empty for the standard "
        f"{list(DEFAULT_LENGTHS)}")
    output_tokens: Annotated[int, COMPARED] = Field(1, ge=1, description="answer length in tokens, 1 or more")
    allow_cache_hits: Annotated[bool, COMPARED] = Field(False, description="true or false")
    compare_with: Annotated[plan.RunIds, IGNORED] = Field(
        [], description="run folders or run ids of earlier prefill runs")

    @model_validator(mode="after")
    def _lengths_fit_a_line(self) -> Plan:
        lengths = self.prompt_lengths
        repeated = sorted(n for n in set(lengths) if lengths.count(n) > 1)
        if repeated:
            raise ValueError(f"prompt_lengths has repeats: {repeated}; give each length once")
        if len(lengths) == 1:
            raise ValueError(f"prompt_lengths needs two lengths or more to fit the overhead and the per-token "
                             f"cost; got {lengths}. Leave it empty for the standard {list(DEFAULT_LENGTHS)}")
        return self

    def unusable(self, run: PastRun) -> str:
        return "" if measured_lengths(run.records) else "it holds no clean measured request"

    def lengths_for(self, server: ServerInfo) -> tuple[tuple[int, ...], str | None]:
        """The lengths this run measures, and a note where standard ones did not fit the server.

        Standard lengths that do not fit are left out (a server with a short context still gets a
        curve); a length the user asked for that does not fit is an error, not quietly dropped.
        """
        room = None if server.max_model_len is None else server.max_model_len - self.output_tokens
        if self.prompt_lengths:
            too_long = [n for n in self.prompt_lengths if room is not None and n > room]
            if too_long:
                raise ParamsError(
                    f"prompt length(s) {too_long} plus {self.output_tokens} output token(s) exceed the server's "
                    f"max_model_len of {server.max_model_len} for {server.model}. Drop them from prompt_lengths "
                    "(or leave it empty for the standard lengths that fit), or restart the server with a larger "
                    f"{engines.named(server.engine).context_option}.")
            return tuple(sorted(self.prompt_lengths)), None
        if room is None:
            return DEFAULT_LENGTHS, (f"{server.model}'s server does not report max_model_len: all standard "
                                     f"lengths {list(DEFAULT_LENGTHS)} are tried.")
        kept = tuple(n for n in DEFAULT_LENGTHS if n <= room)
        dropped = [n for n in DEFAULT_LENGTHS if n > room]
        if len(kept) < 2:
            raise ParamsError(
                f"Only {list(kept) or 'none'} of the standard prompt lengths {list(DEFAULT_LENGTHS)} fit "
                f"{server.model}'s max_model_len of {server.max_model_len}; a fit needs two. Give prompt_lengths "
                f"explicitly, e.g. [{min(32, room)}, {room}].")
        if not dropped:
            return kept, None
        return kept, (f"Note: the standard length(s) {dropped} are left out: with {self.output_tokens} output "
                      f"token(s) they exceed {server.model}'s max_model_len of {server.max_model_len}. "
                      f"Measuring {list(kept)}.")

    def check_server(self, server: ServerInfo, endpoint: Endpoint | None = None) -> None:
        """Before the run opens: the lengths fit the server, and match every run to compare with."""
        lengths, _ = self.lengths_for(server)
        differ = [f"{o.id} ({o.label}) measured {list(measured_lengths(o.records))}" for o in self.past
                  if measured_lengths(o.records) != lengths]
        if differ:
            raise ParamsError(
                f"compare_with runs of other prompt lengths: this run would measure {list(lengths)}, but "
                + "; ".join(differ) + ". A ratio needs the same lengths in every run: set prompt_lengths to "
                "the other run's lengths, or compare with a run of these.")
