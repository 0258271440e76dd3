"""The toy study's parameters: each says, beside it, whether a difference in it stops a comparison."""

from typing import Annotated, ClassVar

from pydantic import Field

from sparknb.runs import plan
from sparknb.runs.plan import COMPARED, IGNORED


class Plan(plan.Plan):
    study: ClassVar[str] = "toy"
    repetitions: int = Field(5, ge=1, description="measured requests, 1 or more")
    output_tokens: Annotated[int, COMPARED] = Field(4, ge=1, description="answer length in tokens, 1 or more")
    compare_with: Annotated[plan.RunIds, IGNORED] = Field([], description="earlier toy runs: folders or run ids")
