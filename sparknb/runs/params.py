"""Params: the YAML files that say what a model is, where it is served and on what hardware.

Validated with pydantic so that a typo fails before any GPU time is spent, with the field named.
"""

from __future__ import annotations

import os
import re
import string
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .. import engines
from ..errors import ParamsError
from .redaction import looks_secret, redact


TESTBED_ENGINES = (engines.VLLM.key, engines.LLAMACPP.key)  # the servers the test bed starts


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


# The placeholders a lifecycle template may use; the API key is deliberately not one of them.
TEMPLATE_FIELDS = ("python", "port", "host", "model", "name", "endpoint", "compile_cache")


class Lifecycle(Strict):
    """How a model is started, stopped and known to be ready; used by the test bed and the swap study.

    Three ways, one per model: `testbed` (the test bed's own vLLM command), `start` (your command,
    e.g. `vllm serve ...` or `docker start -a ...`), or `sidecar` (a proxy such as llama-swap swaps
    on demand: the request itself starts the model, and nothing is started or stopped here).
    """

    testbed: Literal["tiny-dense", "tiny-moe", "smollm2", "smollm2-draft", "smollm2-ngram",
                     "smollm2-tools"] | None = Field(
        None, description="a test-bed model: a tiny random one, or the real SmolLM2-135M (its speculative and "
                          "tool-calling servings llama.cpp only)")
    engine: str | None = Field(None, description=(
        "for `testbed`: the server it starts, vLLM's CPU build (the default) or llama.cpp's llama-server"))
    start: str | None = Field(None, min_length=1, description=(
        "command template run without a shell, in its own process group; placeholders: "
        + ", ".join("{" + p + "}" for p in TEMPLATE_FIELDS) + ". The API key goes through the "
        "environment (VLLM_API_KEY and LLAMA_API_KEY, from api_key_env), never the command line"))
    stop: str | None = Field(None, min_length=1, description="command template that stops the model; "
                             "default: SIGTERM (then SIGKILL) to the process group that start made")
    ready_url: str | None = Field(None, description="URL that answers 200 once the model serves; "
                                  "default: {endpoint}/models")
    ready_timeout_s: float = Field(900, gt=0, description="how long a start may take before it is "
                                   "stopped and reported")
    log: str | None = Field(None, description="file the server writes its log to, when it is not the "
                            "start command's own output (which is captured)")
    compile_cache: str | None = Field(None, description="the folder vLLM keeps compiled graphs in "
                                      "(VLLM_CACHE_ROOT, default ~/.cache/vllm): checked before each "
                                      "start, cleared when a study asks for a cold start")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment for start; no secrets")
    sidecar: bool = False

    @field_validator("engine")
    @classmethod
    def _testbed_engine(cls, key: str | None) -> str | None:
        if key is not None and key not in TESTBED_ENGINES:
            raise ValueError(f"the test bed starts {' or '.join(TESTBED_ENGINES)}, not {key!r}")
        return key

    @model_validator(mode="after")
    def _one_way(self) -> Lifecycle:
        ways = [w for w, on in (("testbed", self.testbed), ("start", self.start), ("sidecar", self.sidecar)) if on]
        if len(ways) > 1:
            raise ValueError(f"choose one of testbed, start and sidecar, not {' and '.join(ways)}: a sidecar "
                             "(llama-swap) starts models itself, a test-bed model has its own command")
        if self.engine and not self.testbed:
            raise ValueError("engine chooses the test bed's server; with a start command or a sidecar, the "
                             "command you give is the server (drop engine)")
        if self.engine == engines.LLAMACPP.key and self.compile_cache:
            raise ValueError("llama-server compiles nothing: drop compile_cache from a llama.cpp test-bed model")
        if self.stop and not self.start:
            raise ValueError("stop needs a start command; the test bed and a sidecar stop their own models")
        for name in ("start", "stop", "ready_url", "log", "compile_cache"):
            _check_template(name, getattr(self, name))
        secret = [k for k in self.env if looks_secret(k)]
        if secret:
            raise ValueError(f"env names {secret}: secrets do not belong in params files. Export them in "
                             "your shell; a started command inherits your environment")
        return self

    @property
    def mode(self) -> str | None:
        """testbed, command, sidecar, or None where the file says nothing about starting the model."""
        if self.sidecar:
            return "sidecar"
        if self.testbed:
            return "testbed"
        return "command" if self.start else None


def _check_template(field: str, template: str | None) -> None:
    if not template:
        return
    if re.search(r"(?i)--api[-_]key|\{api_key", template):
        raise ValueError(f"lifecycle.{field} puts an API key on the command line, where every user of the "
                         "machine can read it; set api_key_env instead: the key then reaches the server in "
                         "its environment (VLLM_API_KEY, LLAMA_API_KEY)")
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as e:
        raise ValueError(f"lifecycle.{field} is not a valid template ({e}); write a literal brace as {{{{ or }}}}") from None
    unknown = sorted({n for n in names if n not in TEMPLATE_FIELDS})
    if unknown:
        raise ValueError(f"lifecycle.{field} uses unknown placeholder(s) {unknown}; known: "
                         + ", ".join("{" + p + "}" for p in TEMPLATE_FIELDS)
                         + " (a literal brace, as in a JSON argument, is written {{ or }})")


class ModelParams(Strict):
    name: str
    served_model_name: str
    endpoint: str = Field(pattern=r"^https?://", description="base URL of the OpenAI API, ending in /v1")
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                    description="the environment variable that holds the key, never the key")
    stall_timeout_s: float = Field(600.0, gt=0, description="the longest a request may go without a byte from the "
                                   "server (a long prompt's prefill comes before its first token) before it fails")
    hardware: str
    architecture: Literal["dense", "moe"]
    speculative: str | None = Field(None, description="speculative decoding method, e.g. mtp, ngram, draft")
    reasoning: bool = False
    # How tool calls are asked of this serving where a study's format is "model" (bfcl): two servings of one model,
    # one through the server's tool-call parser and one in BFCL's prompt mode, then compare in one campaign
    tool_format: Literal["native", "prompt"] | None = Field(None, description="native (OpenAI tools) or prompt "
                                                           "(BFCL's prompt mode); none: native")
    engine: str | None = Field(None, description=(
        "the server's family (sparknb.engines), where detection should not decide: vLLM answers /version, "
        "llama.cpp's llama-server /props, and a server with neither is taken as OpenAI-API-only"))
    tokenizer: str | None = Field(None, min_length=1, description="for a server without /tokenize (transformers "
                                  "serve): the model's tokenizer, a folder (absolute or relative to the project) "
                                  "or a hub id already in the Hugging Face cache")
    weights: Weights | None = Field(None, description="hand-written: what one token reads; wins over the census "
                                    "where given, and is marked so in every limit")
    checkpoint: str | None = Field(None, min_length=1, description="the checkpoint the server serves (a GGUF file, "
                                   "or the folder of config.json and *.safetensors), read for the byte census at "
                                   "the start of every run where this box can read it")
    kv_cache_dtype: str | None = Field(None, min_length=1, description="the KV cache's type where the server does not "
                                       "say it (f16, bf16, fp8, q8_0); default: the server's word, else the weights'")
    census: dict | None = Field(None, description="the byte census `sparknb model add` wrote "
                                "(sparknb.roofline.census), used where the checkpoint cannot be read at run time")
    lifecycle: Lifecycle = Lifecycle()
    notes: str = ""

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, key: str | None) -> str | None:
        return None if key is None else engines.named(key).key

    @model_validator(mode="after")
    def _moe_has_experts(self) -> ModelParams:
        if self.weights is None and not self.checkpoint and not self.census:
            raise ValueError("say what one token reads: run `sparknb model add NAME --endpoint URL` (it counts the "
                             "checkpoint's bytes), or give checkpoint: PATH, or hand-written weights:")
        if self.weights is None:
            return self
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


class PromptSet(Strict):
    """Named prompts of different kinds: speculative decoding gains depend on the text."""

    name: str
    prompts: dict[str, str] = Field(min_length=1, description="kind of prompt -> prompt text")

    @model_validator(mode="after")
    def _no_empty_prompt(self) -> PromptSet:
        empty = [k for k, v in self.prompts.items() if not v.strip()]
        if empty:
            raise ValueError(f"empty prompt text for {empty}")
        return self


BOX_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$"
NOT_PER_BOX = ("name", "hardware")  # a model is the same model on every box; its hardware is the box's


class BoxParams(Strict):
    """One box of a campaign spread over several: its hardware, and what differs there for a model.

    A model's fields given under `models` replace its own on this box only (an endpoint, a whole
    lifecycle block); the model's params file on the box itself supplies the rest.
    """

    hardware: str | None = Field(None, description="the box's hardware params (params/hardware/), set on every "
                                 "model measured there; default: each model's own")
    models: dict[str, dict[str, Any]] = Field(default_factory=dict, description="model name -> the fields of its "
                                              "params that differ on this box, e.g. {endpoint: http://...:8000/v1}")

    @field_validator("hardware")
    @classmethod
    def _hardware_exists(cls, name: str | None) -> str | None:
        if name is not None:
            try:
                load_hardware(name)
            except ParamsError as e:
                raise ValueError(str(e).splitlines()[0]) from None
        return name

    @model_validator(mode="after")
    def _no_secrets_or_identity(self) -> BoxParams:
        for model, fields in self.models.items():
            fixed = sorted(set(fields) & set(NOT_PER_BOX))
            if fixed:
                raise ValueError(f"models.{model} sets {fixed}: a model keeps its name on every box, and a box's "
                                 "hardware is set once, as the box's `hardware`")
            if redact(fields) != fields:
                raise ValueError(f"models.{model} holds a secret; a campaign file travels to every box, so name "
                                 "the variable that holds it (api_key_env) and export it on each box instead")
        return self


def on_box(model: ModelParams, box: BoxParams | None) -> ModelParams:
    """The model as measured on this box: its own params with the box's hardware and overrides."""
    if box is None or (box.hardware is None and model.name not in box.models):
        return model
    changed = dict(box.models.get(model.name, {})) | ({"hardware": box.hardware} if box.hardware else {})
    try:
        return ModelParams.model_validate(model.model_dump() | changed)
    except ValidationError as e:
        raise ParamsError(f"{model.name} with this box's overrides is invalid:\n" + explain(e)) from None


class CampaignParams(Strict):
    """Models, the studies to run on each with their parameters, and how often: one comparison, one command."""

    name: str
    question: str = Field("", description="what the campaign is to answer, shown at the top of its comparison")
    models: list[str] = Field(min_length=1, description="model params names or YAML paths")
    repetitions: int = Field(1, ge=1, description="how many times every cell runs")
    studies: dict[str, dict[str, Any]] = Field(min_length=1, description="notebook name -> its parameters")
    boxes: dict[Annotated[str, Field(pattern=BOX_NAME)], BoxParams] = Field(
        default_factory=dict, description="box name -> its params: every cell runs on every box, through Ray "
        "(`sparknb campaign run FILE --cluster ADDRESS`); none: on this machine")

    @model_validator(mode="after")
    def _models_exist(self) -> CampaignParams:
        problems = []
        loaded = {}
        for m in self.models:
            try:
                loaded[m] = load_model(m)
            except ParamsError as e:
                problems.append(f"models: {str(e).splitlines()[0]}")
        if len(set(self.models)) != len(self.models):
            problems.append(f"models names one twice: {self.models}")
        names = {model.name: model for model in loaded.values()}
        for name, box in self.boxes.items():
            for model in box.models:
                if model not in names:
                    problems.append(f"boxes.{name}.models.{model}: not one of the campaign's models "
                                    f"({', '.join(names) or 'none loaded'})")
                    continue
                try:
                    on_box(names[model], box)
                except ParamsError as e:
                    problems.append(f"boxes.{name}.models.{model}: " + " ".join(str(e).split()))
        if problems:
            raise ValueError("; ".join(problems))
        return self


def project_root() -> Path:
    """The folder holding params/ and outputs/: $SPARKNB_HOME, else the checkout this package lives in."""
    return Path(os.environ.get("SPARKNB_HOME") or Path(__file__).resolve().parents[2])


def explain(e: ValidationError, kind: type[BaseModel] | None = None) -> str:
    """Every problem of a validation, one line each, with the field's own description as the hint."""
    lines = []
    whole = "parameters" if kind is not None and not issubclass(kind, Strict) else "(file)"
    for err in e.errors():
        loc = ".".join(map(str, err["loc"])) or whole
        msg = err["msg"].removeprefix("Value error, ")
        got = "" if err["type"] in ("missing", "value_error") else f"; got {err.get('input')!r}"
        field = (kind.model_fields.get(str(err["loc"][0])) if kind and err["loc"] else None)
        hint = f" ({field.description})" if field is not None and field.description else ""
        lines.append(f"  {loc}: {msg}{got}{hint}")
    return "\n".join(lines)


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
        raise ParamsError(f"{path} is invalid:\n" + explain(e)) from None


def _locate(name_or_path: str, folder: str) -> tuple[Path, list[str]]:
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml"):
        return candidate, []
    base = project_root() / "params" / folder
    return base / f"{name_or_path}.yaml", sorted(p.stem for p in base.glob("*.yaml"))


def _load(name_or_path: str, folder: str, kind: type[Strict], what: str):
    path, known = _locate(name_or_path, folder)
    return _read(path, kind, what, known)


def load_model(name_or_path: str) -> ModelParams:
    """A model by name (params/models/NAME.yaml) or by path to a YAML file."""
    return _load(name_or_path, "models", ModelParams, "model")


def load_hardware(name_or_path: str) -> HardwareParams:
    return _load(name_or_path, "hardware", HardwareParams, "hardware")


def load_prompts(name_or_path: str) -> PromptSet:
    """A prompt set by name (params/prompts/NAME.yaml) or by path to a YAML file."""
    return _load(name_or_path, "prompts", PromptSet, "prompt set")


def load_campaign(name_or_path: str) -> CampaignParams:
    """A campaign by name (params/campaigns/NAME.yaml) or by path to a YAML file."""
    return _load(name_or_path, "campaigns", CampaignParams, "campaign")
