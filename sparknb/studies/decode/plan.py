"""The decode study's parameters, and the earlier runs they name, read once before any request."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from ... import engines
from ...endpoint.client import Endpoint, ServerInfo
from ...errors import ParamsError
from ...runs import plan
from ...runs.plan import COMPARED, IGNORED, RESUMED
from ...runs.schedule import AUTO


class Plan(plan.Sweep):
    study: ClassVar[str] = "decode"
    prompt_lengths: list[Annotated[int, Field(ge=16)]] = Field(
        min_length=1, description="prompt sizes in whole tokens, 16 or more, e.g. [111, 364]")
    output_tokens: Annotated[int, COMPARED, RESUMED] = Field(150, ge=2, description="decode speed needs two tokens or more")
    temperature: Annotated[float, COMPARED, RESUMED] = Field(0.0, ge=0, le=2)
    compare_with: Annotated[plan.RunIds, IGNORED] = Field(
        default_factory=list, description="earlier decode runs: folders or run ids")
    engine_alone: Annotated[bool, IGNORED] = Field(
        False, description="llama.cpp only: llama-bench on the served GGUF after the sweep, splitting each step's "
        "rest into the engine's and the server's own (it loads a second copy of the weights)")
    resume_from: Annotated[str, IGNORED] = Field(
        "", description="an earlier decode run (folder or run id) that failed halfway: its finished requests are "
        "reused, only the rest measured")

    @property
    def auto(self) -> bool:
        return self.repetitions == AUTO

    def check_server(self, server: ServerInfo, endpoint: Endpoint | None = None) -> None:
        """Every prompt plus its answer must fit the model's context, or the server would refuse halfway."""
        if server.max_model_len is None:
            return
        too_long = [n for n in self.prompt_lengths if n + self.output_tokens > server.max_model_len]
        if too_long:
            raise ParamsError(
                f"prompt length(s) {too_long} plus {self.output_tokens} output tokens exceed the server's "
                f"max_model_len of {server.max_model_len} for {server.model}. Drop them from prompt_lengths "
                f"or restart the server with a larger {engines.named(server.engine).context_option}.")
