"""The tiny test-bed models as GGUF files, for llama.cpp: the very weights and tokenizer of the vLLM checkpoints.

Each file is written with the `gguf` package from the checkpoint that tiny_models builds, so a prompt
counts the same number of tokens on either server and the two serve the same numbers. The fields
llama.cpp's tokenizer reads are set from the checkpoint's own tokenizer.json:

- `tokenizer.ggml.model` "gpt2" (byte-level BPE) and `tokenizer.ggml.pre` "gpt-2": the test bed's
  tokenizer splits with the GPT-2 pattern (ByteLevel with its default regex), not Qwen2's, so a
  Qwen pre-tokenizer here would count digits and contractions differently;
- the tokens in id order, the merges, and the token types: the special tokens are CONTROL, so
  llama.cpp treats `<|im_end|>` as the end of an answer and never prints it;
- eos `<|im_end|>`, padding and bos `<|endoftext|>` (as in Qwen's own GGUFs) with add_bos false:
  the checkpoint adds no token of its own to a prompt, nor does llama-server.

Weights stay bf16 (norms f32, as llama.cpp's own converter writes them); experts are stacked into
the `ffn_*_exps` tensors llama.cpp's qwen3moe reads. Files are cached per recipe like the checkpoints.

The draft model of tiny-moe's speculative decoding (`--model-draft`) is tiny-moe itself quantized to
Q4_0, a common draft on llama.cpp: it shares the vocabulary by construction and guesses the target's
next token often but not always. A small model of its own would not do: with random weights every
layer moves the answer, so a one-layer draft (even one with tiny-moe's own embeddings and head, or
tiny-moe cut to one, two or three layers) agreed with tiny-moe's greedy token at 1 to 8% of
positions; the Q4_0 copy agreed at 59% (Q5_0 79%, Q8_0 94%; 320 positions of 5 prompts).
"""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import ParamsError
from ..runs.strict_json import dumps
from . import cpu_repack, tiny_models
from .processes import HOST

# Bump when what is written changes: it is part of the cache key.
WRITER_REVISION = 3
ARCHITECTURES = {"Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3moe"}
PRE_TOKENIZER = "gpt-2"  # llama.cpp's name for the GPT-2 split
DRAFTS = {"tiny-moe": "Q4_0"}  # model -> the quantization of its copy that drafts for it
NOT_QUANTIZED = ("ffn_gate_inp",)  # the router stays as it is, as llama-quantize leaves it


@dataclass(frozen=True)
class Written:
    """What one write made, for the record and the bench script."""

    name: str
    quantization: str | None
    path: str
    bytes: int
    seconds: float  # writing only: the checkpoint was built (or found) before
    tensors: int
    architecture: str


def cache_key(name: str) -> str:
    """The checkpoint's recipe plus this writer's revision and the gguf package's version."""
    return f"{tiny_models.recipe_key(name)}-w{WRITER_REVISION}-g{_package_version()}"


def gguf_file(name: str, quantization: str | None = None) -> Path:
    """The GGUF of one test-bed model (bf16, or quantized: Q4_0, Q8_0, ...), written once per recipe, in seconds."""
    if name not in tiny_models.NAMES:
        raise ParamsError(f"no GGUF form of {name!r}; choose one of {', '.join(tiny_models.NAMES)}")
    _quantization_type(quantization)
    suffix = f"-{quantization.lower()}" if quantization else ""
    final = tiny_models.cache_root() / "gguf" / f"{name}-{cache_key(name)}{suffix}.gguf"
    if not final.is_file():
        write(name, final, quantization)
    return final


def draft_file(name: str) -> Path:
    """The draft model's GGUF for `name` (see the module's docstring)."""
    return gguf_file(name, DRAFTS[name])


def write(name: str, final: Path, quantization: str | None = None) -> Written:
    """Write to a temporary file beside `final` and rename it into place only when it is complete."""
    import gguf  # noqa: F401  (imported, with torch, before the clock starts: the figure is the write alone)
    import torch  # noqa: F401

    final.parent.mkdir(parents=True, exist_ok=True)
    source = tiny_models.checkpoint(name)
    t0 = time.monotonic()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}-", suffix=".gguf", dir=final.parent)
    tmp = Path(tmp_name)
    try:
        with open(fd, "wb"):
            pass  # gguf's writer opens the file by its name
        count, arch = _write(name, source, tmp, quantization)
        tmp.chmod(0o644)
        tmp.replace(final)  # a concurrent writer of the same recipe writes the same bytes
    finally:
        tmp.unlink(missing_ok=True)
    written = Written(name, quantization, str(final), final.stat().st_size, round(time.monotonic() - t0, 3), count,
                      arch)
    final.with_suffix(".json").write_text(dumps(asdict(written), indent=1) + "\n")
    return written


def _quantization_type(quantization: str | None) -> Any:
    import gguf

    if quantization is None:
        return None
    try:
        return gguf.GGMLQuantizationType[quantization.upper()]
    except KeyError:
        raise ParamsError(f"unknown quantization {quantization!r}; use a GGML type such as Q4_0 or Q8_0") from None


def _package_version() -> str:
    from importlib.metadata import version

    return version("gguf")  # the gguf package has no __version__


def _write(name: str, source: Path, out: Path, quantization: str | None) -> tuple[int, str]:
    import gguf

    config = json.loads((source / "config.json").read_text())
    arch = ARCHITECTURES[config["architectures"][0]]
    writer = gguf.GGUFWriter(str(out), arch)
    try:
        _hyperparameters(writer, name if not quantization else f"{name}-{quantization.lower()}", config,
                         getattr(gguf.LlamaFileType, f"MOSTLY_{quantization.upper()}") if quantization
                         else gguf.LlamaFileType.MOSTLY_BF16)
        _tokenizer(writer, source)
        count = _tensors(writer, source, config, arch, _quantization_type(quantization))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return count, arch


def _hyperparameters(writer: Any, name: str, config: dict, file_type: Any) -> None:
    writer.add_name(name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_rope_freq_base(_rope_theta(config))
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(file_type)
    if "num_experts" in config or "num_local_experts" in config:
        writer.add_expert_count(config.get("num_experts") or config["num_local_experts"])
        writer.add_expert_used_count(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
        if not config.get("norm_topk_prob", False):  # llama.cpp's qwen3moe always normalises the top-k weights
            raise ParamsError("llama.cpp's qwen3moe normalises the chosen experts' weights; the recipe must say "
                              "norm_topk_prob: true or the two servers would compute different models")


def _rope_theta(config: dict) -> float:
    """transformers 5 keeps it under rope_parameters, older versions at the top."""
    params = config.get("rope_parameters") or {}
    if params.get("rope_type", "default") != "default":
        raise ParamsError(f"rope type {params['rope_type']!r} is not written to GGUF here")
    return float(params.get("rope_theta", config.get("rope_theta", 10000.0)))


def _tokenizer(writer: Any, source: Path, pad_to: int | None = None) -> None:
    """Tokens, types and merges from the checkpoint's tokenizer.json; see the module's docstring. `pad_to`: a
    vocabulary padded with unused tokens to that many rows, as Qwen's checkpoints are (151,936 rows for 151,669
    tokens), so that a random model's embedding and head read what the real model's do."""
    import gguf

    spec = json.loads((source / "tokenizer.json").read_text())
    settings = json.loads((source / "tokenizer_config.json").read_text())
    vocab: dict[str, int] = dict(spec["model"]["vocab"])
    special = {t["content"] for t in spec["added_tokens"] if t.get("special")}
    for t in spec["added_tokens"]:
        vocab.setdefault(t["content"], t["id"])
    by_id = sorted(vocab.items(), key=lambda kv: kv[1])
    if [i for _, i in by_id] != list(range(len(by_id))):
        raise ParamsError(f"{source}/tokenizer.json: token ids are not 0..{len(by_id) - 1} without gaps")
    tokens = [t for t, _ in by_id]
    types = [gguf.TokenType.CONTROL if t in special else gguf.TokenType.NORMAL for t in tokens]
    pad = range(len(tokens), pad_to or 0)
    tokens += [f"[PAD{i}]" for i in pad]
    types += [gguf.TokenType.UNUSED for _ in pad]
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZER)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(vocab[settings["eos_token"]])
    writer.add_pad_token_id(vocab[settings["pad_token"]])
    writer.add_bos_token_id(vocab[settings["pad_token"]])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_chat_template((source / "chat_template.jinja").read_text())


def _tensors(writer: Any, source: Path, config: dict, arch: str, quantization: Any = None) -> int:
    """Every weight under llama.cpp's name; 1-D tensors as f32, the rest as the checkpoint's bf16 or quantized."""
    import gguf
    import torch
    from safetensors import safe_open

    block = gguf.GGML_QUANT_SIZES[quantization][0] if quantization is not None else 0

    layers = config["num_hidden_layers"]
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN3MOE if arch == "qwen3moe" else gguf.MODEL_ARCH.QWEN3,
                                     layers)
    count = 0

    def add(name: str, tensor: torch.Tensor) -> None:
        nonlocal count
        if tensor.dim() == 1:
            writer.add_tensor(name, tensor.float().numpy())
        elif block and tensor.shape[-1] % block == 0 and not any(part in name for part in NOT_QUANTIZED):
            writer.add_tensor(name, gguf.quants.quantize(tensor.float().numpy(), quantization), raw_dtype=quantization)
        else:
            raw = tensor.to(torch.bfloat16).contiguous().view(torch.int16).numpy()
            writer.add_tensor(name, raw, raw_dtype=gguf.GGMLQuantizationType.BF16)
        count += 1

    with safe_open(str(source / "model.safetensors"), "pt") as weights:
        keys = set(weights.keys())
        experts: dict[tuple[int, str], dict[int, torch.Tensor]] = {}
        for key in sorted(keys):
            if ".mlp.experts." in key:  # model.layers.L.mlp.experts.E.PART.weight
                parts = key.split(".")
                experts.setdefault((int(parts[2]), parts[6]), {})[int(parts[5])] = weights.get_tensor(key)
                continue
            target = names.get_name(key, try_suffixes=(".weight", ".bias"))
            if target is None:
                raise ParamsError(f"{source}: no GGUF name for {key} in llama.cpp's {arch}")
            add(target, weights.get_tensor(key))
    for (layer, part), by_expert in sorted(experts.items()):
        if sorted(by_expert) != list(range(len(by_expert))):
            raise ParamsError(f"{source}: layer {layer} {part}: experts {sorted(by_expert)} are not 0..n-1")
        stacked = torch.stack([by_expert[e] for e in range(len(by_expert))])
        add(f"blk.{layer}.ffn_{part.removesuffix('_proj')}_exps.weight", stacked)
    return count


# --- serving -------------------------------------------------------------------------------------------

# Slots answer requests side by side (the load tests go up to 8 in flight); the context is split
# evenly between them, so each request may use the vLLM test bed's max-model-len. The KV cache is
# f16, 2 KiB per token for these models: 256 MiB in all, as much again for tiny-moe's draft model
# (measured: 290 MiB for the tiny-dense server, 569 MiB for tiny-moe's).
PARALLEL = 8
CONTEXT = PARALLEL * tiny_models.MAX_MODEL_LEN
DRAFT_TOKENS = 3  # as many as the vLLM test bed's n-gram speculation proposes
SPECULATIVE: dict[str, list[str]] = {"tiny-moe": ["--spec-type", "draft-simple", "--spec-draft-n-max",
                                                  str(DRAFT_TOKENS)]}


def server_command(name: str, port: int, binary: Path, *, prompt_cache: bool = False,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """llama-server for one test-bed model (llama_command); tiny-moe speculates with its Q4_0 copy as the draft
    model (`--model-draft`, DRAFT_TOKENS per step)."""
    draft = ["--model-draft", str(draft_file(name)), *SPECULATIVE[name]] if name in SPECULATIVE else []
    repack = cpu_repack.flags(binary, gguf_file(name), *([draft_file(name)] if draft else []))
    return llama_command(binary, gguf_file(name), name, port, CONTEXT, PARALLEL, prompt_cache,
                         [*repack, *draft, *extra_args])


def llama_command(binary: Path, model: Path, alias: str, port: int, context: int, parallel: int,
                  prompt_cache: bool, more: Sequence[str]) -> list[str]:
    """llama-server as the test bed serves every model, then `more` (its repacking, speculation, the caller's own);
    a later option wins, so `more` can change any of these (except --spec-type, whose values add up).

    - one compute thread (`-t 1`): llama.cpp's threads spin while they wait, and on a small machine
      two of them starve the HTTP thread and the measuring client; the vLLM test bed computes on one
      thread for the same reason;
    - `--cache-ram 0` unless `prompt_cache`: with llama-server's default host-memory prompt cache, a
      request that takes a slot still holding another prompt waits while that prompt is saved (log
      lines `selected slot by LRU` ... `processing task`; at -lv 4 also `prompt cache update took N ms`):
      61 to 507 ms per request for a 4B model on an H200, about 2 ms for a 1,500-token prompt of these
      tiny models, once all 8 slots have been used. `prompt_cache=True` keeps the default, to show it;
    - `--metrics` for the `llamacpp:` counters, and log lines stamped with the time since the start
      (`--log-prefix --log-timestamps`), which the start-up log's stages are read from;
    - `--no-repack` in `more` where repacked quantized weights crash this CPU (see cpu_repack: the Q4_0 draft did).
    """
    return [
        str(binary), "--model", str(model), "--alias", alias,
        "--host", HOST, "--port", str(port),
        "--ctx-size", str(context), "--parallel", str(parallel),
        "--threads", "1", "--metrics",
        "--log-prefix", "--log-timestamps", "--log-colors", "off",
        *([] if prompt_cache else ["--cache-ram", "0"]),
        *more,
    ]
