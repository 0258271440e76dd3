"""The parameters every graded study takes alike (MMLU-Pro, HumanEval, the next one), each said once with its
marks, its checks, its default and what it means; a study's Plan names them among its own, in its own order."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from ...runs.plan import COMPARED, IGNORED, RESUMED

MaxTokens = Annotated[int, COMPARED, RESUMED, Field(8192, ge=1, description="the longest answer in tokens, reasoning "
                                                    "included, 1 or more")]
Temperature = Annotated[float, COMPARED, RESUMED, Field(0.0, ge=0, le=2, description="between 0 and 2; 0 is greedy")]
Stop = Annotated[list[Annotated[str, Field(min_length=1)]], COMPARED, RESUMED]  # a study gives its own example
Concurrency = Annotated[int, IGNORED, Field(8, ge=1, description="requests in flight at once, 1 or more")]
TrapShare = Annotated[float, IGNORED, Field(0.05, ge=0, lt=1, description="a fraction between 0 and 1, e.g. 0.05")]
