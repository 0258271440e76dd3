"""The swap study's parameters, with every model's params loaded and checked before anything starts."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, PrivateAttr, model_validator

from ...endpoint.client import Endpoint
from ...errors import SparknbError
from ...runs import plan
from ...runs.params import ModelParams, load_model
from ...serving import targets


class Plan(plan.Plan):
    study: ClassVar[str] = "swap"
    models: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="a list of model names or YAML paths, e.g. [tiny-dense, tiny-moe, tiny-dense]")
    repetitions: int = Field(1, ge=1, description="a whole number, 1 or more")
    clear_compile_cache: bool = Field(False, description="true or false")
    _loaded: tuple[ModelParams, ...] = PrivateAttr(default=())

    @model_validator(mode="after")
    def _load_and_check(self) -> Plan:
        """Every model's params, its lifecycle, one kind of swap and one box; every problem at once."""
        loaded, problems = {}, []
        for name in dict.fromkeys(self.models):
            try:
                loaded[name] = load_model(name)
                if loaded[name].lifecycle.mode is None:
                    targets.resolve(loaded[name])  # raises with the fields to add
            except SparknbError as e:
                problems.append(str(e))
        if problems:
            raise ValueError("\n  ".join(problems))
        models = tuple(loaded[name] for name in self.models)
        if len({m.lifecycle.mode == "sidecar" for m in models}) > 1:
            problems.append("Mix of sidecar and started models: a proxy that swaps on request and models this "
                            "study starts itself would fight over the memory. Visit one kind per run.")
        hardware = sorted({m.hardware for m in models})
        if len(hardware) > 1:
            problems.append(f"The models name different hardware ({', '.join(hardware)}); a swap happens on one "
                            "box, so give them the same `hardware`.")
        unknown = sorted({m.name for m in models if m.lifecycle.mode != "testbed" and not m.lifecycle.compile_cache})
        if self.clear_compile_cache and unknown:
            problems.append(f"clear_compile_cache needs to know where the compiled graphs are: set "
                            f"lifecycle.compile_cache for {', '.join(unknown)} (vLLM's default is ~/.cache/vllm), "
                            "or run with clear_compile_cache false.")
        if problems:
            raise ValueError("\n  ".join(problems))
        self._loaded = models
        if self.sidecar:
            self._check_sidecars()
        return self

    def _check_sidecars(self) -> None:
        """The proxy must be there before anything is timed through it (raises EndpointError)."""
        for m in self.distinct():
            target = targets.resolve(m)
            ep = Endpoint(target.endpoint, m.served_model_name, api_key=target.api_key, key_env=m.api_key_env)
            try:
                ep.info()
            finally:
                ep.close()

    @property
    def visits(self) -> tuple[ModelParams, ...]:
        """The sequence to visit, one entry per visit."""
        return self._loaded

    @property
    def sidecar(self) -> bool:
        return self._loaded[0].lifecycle.mode == "sidecar"

    @property
    def names(self) -> list[str]:
        return [m.name for m in self._loaded]

    def distinct(self) -> list[ModelParams]:
        seen: dict[str, ModelParams] = {}
        for m in self._loaded:
            seen.setdefault(m.name, m)
        return list(seen.values())
