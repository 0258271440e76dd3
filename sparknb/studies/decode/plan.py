"""The decode study's parameters, and the earlier runs they name, read once before any request."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, PrivateAttr, model_validator

from ... import params
from ...client import Endpoint, ServerInfo
from ...errors import ParamsError
from ...run import PastRun, read_past
from ...study import AUTO


class Plan(params.Sweep):
    study: ClassVar[str] = "decode"
    prompt_lengths: list[Annotated[int, Field(ge=16)]] = Field(
        min_length=1, description="prompt sizes in whole tokens, 16 or more, e.g. [111, 364]")
    output_tokens: int = Field(150, ge=2, description="decode speed needs two tokens or more")
    temperature: float = Field(0.0, ge=0, le=2)
    compare_with: params.RunIds = Field(default_factory=list, description="earlier decode runs: folders or run ids")
    outputs: str = Field("", exclude=True)
    _past: list[PastRun] = PrivateAttr(default_factory=list)

    @model_validator(mode="after")
    def _read(self) -> Plan:
        """The earlier runs, read once and verified, before any request."""
        self._past = read_past(self.compare_with, "decode", outputs=self.outputs)
        return self

    @property
    def auto(self) -> bool:
        return self.repetitions == AUTO

    @property
    def past(self) -> list[PastRun]:
        return list(self._past)

    def check_server(self, server: ServerInfo, endpoint: Endpoint | None = None) -> None:
        """Every prompt plus its answer must fit the model's context, or the server would refuse halfway."""
        if server.max_model_len is None:
            return
        too_long = [n for n in self.prompt_lengths if n + self.output_tokens > server.max_model_len]
        if too_long:
            raise ParamsError(
                f"prompt length(s) {too_long} plus {self.output_tokens} output tokens exceed the server's "
                f"max_model_len of {server.max_model_len} for {server.model}. Drop them from prompt_lengths "
                "or restart the server with a larger --max-model-len.")
