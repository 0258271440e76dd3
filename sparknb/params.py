"""Params: the YAML files that say what a model is, where it is served and on what hardware.

Validated with pydantic so that a typo fails before any GPU time is spent, with the field named.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ParamsError(ValueError):
    """A params file is missing or invalid; the message names the file, the field and the fix."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Weights(Strict):
    """What one forward pass reads from memory: the input to the bandwidth limit."""

    dense_params: float = Field(ge=0, description="read for every token: all weights of a dense model; "
                                "attention, embeddings, norms and router of a MoE")
    active_expert_params: float = Field(0, ge=0, description="routed-expert parameters active per token")
    bytes_per_param: float = Field(gt=0, description="stored bytes per dense parameter (bf16 2, fp8 1)")
    expert_bytes_per_param: float | None = Field(None, gt=0, description="if experts are stored differently")
    bytes_per_token: float | None = Field(None, gt=0, description="a measured figure that overrides the count")
    source: str = Field(description="where these numbers come from, shown next to every limit")


class Lifecycle(Strict):
    """How a model is started and stopped; used by the test bed and the swap study."""

    testbed: Literal["tiny-dense", "tiny-moe"] | None = None


class ModelParams(Strict):
    name: str
    served_model_name: str
    endpoint: str = Field(pattern=r"^https?://", description="base URL of the OpenAI API, ending in /v1")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                    description="the environment variable that holds the key, never the key")
    hardware: str
    architecture: Literal["dense", "moe"]
    speculative: str | None = Field(None, description="speculative decoding method, e.g. mtp, ngram, draft")
    reasoning: bool = False
    weights: Weights
    lifecycle: Lifecycle = Lifecycle()
    notes: str = ""

    @model_validator(mode="after")
    def _moe_has_experts(self) -> ModelParams:
        if self.architecture == "moe" and not self.weights.active_expert_params and not self.weights.bytes_per_token:
            raise ValueError("a moe model needs weights.active_expert_params (or weights.bytes_per_token)")
        return self

    def api_key(self) -> str | None:
        """The key from the environment, read at the last moment so it is never stored in params."""
        return os.environ.get(self.api_key_env) if self.api_key_env else None


class HardwareParams(Strict):
    name: str
    accelerator: str
    memory_gb: float = Field(gt=0)
    unified_memory: bool
    memory_bandwidth_gbs: float | None = Field(None, gt=0, description="peak memory bandwidth, GB/s; "
                                               "leave empty where unknown and no limit is drawn")
    compute_capability: str | None = None
    source: str = Field(description="where the bandwidth figure comes from")


def project_root() -> Path:
    """The folder holding params/ and outputs/: $SPARKNB_HOME, else the checkout this package lives in."""
    return Path(os.environ.get("SPARKNB_HOME") or Path(__file__).resolve().parents[1])


def _read(path: Path, kind: type[Strict], what: str, available: list[str]) -> Strict:
    if not path.is_file():
        hint = f" Known {what}s: {', '.join(available)}." if available else ""
        raise ParamsError(f"No {what} params at {path}.{hint} Write one, or pass a path to a YAML file.")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ParamsError(f"{path} is not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise ParamsError(f"{path} must hold a mapping of fields, not {type(data).__name__}.")
    try:
        return kind.model_validate(data)
    except ValidationError as e:
        lines = [f"  {'.'.join(map(str, err['loc'])) or '(file)'}: {err['msg']}" for err in e.errors()]
        raise ParamsError(f"{path} is invalid:\n" + "\n".join(lines)) from None


def _locate(name_or_path: str, folder: str) -> tuple[Path, list[str]]:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        return candidate, []
    base = project_root() / "params" / folder
    return base / f"{name_or_path}.yaml", sorted(p.stem for p in base.glob("*.yaml"))


def load_model(name_or_path: str) -> ModelParams:
    """A model by name (params/models/NAME.yaml) or by path to a YAML file."""
    path, known = _locate(name_or_path, "models")
    return _read(path, ModelParams, "model", known)  # type: ignore[return-value]


def load_hardware(name_or_path: str) -> HardwareParams:
    path, known = _locate(name_or_path, "hardware")
    return _read(path, HardwareParams, "hardware", known)  # type: ignore[return-value]
