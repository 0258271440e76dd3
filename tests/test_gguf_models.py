"""The GGUF form of the tiny models must be the same model: the checkpoint's weights bit for bit, its tokenizer
field for field, under the names llama.cpp reads. Read back with gguf's own reader, not with our writer."""

from __future__ import annotations

import json

import numpy as np
import pytest

from sparknb.errors import ParamsError
from sparknb.serving import gguf_models, tiny_models

pytestmark = [pytest.mark.demo, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _reader(name: str, quantization: str | None = None):
    import gguf

    return gguf.GGUFReader(str(gguf_models.gguf_file(name, quantization)))


def _field(reader, key: str):
    return reader.get_field(key).contents()


def _bf16(tensor) -> np.ndarray:
    """A GGUF tensor's data as the uint16 bit patterns of bf16, in the checkpoint's [out, in] order."""
    return np.asarray(tensor.data).view(np.uint16).reshape(tuple(reversed([int(n) for n in tensor.shape])))


def _checkpoint_bits(name: str, key: str) -> np.ndarray:
    import torch
    from safetensors import safe_open

    with safe_open(str(tiny_models.checkpoint(name) / "model.safetensors"), "pt") as fh:
        return fh.get_tensor(key).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


@pytest.mark.parametrize("name", tiny_models.NAMES)
def test_hyperparameters_are_the_checkpoints(name):
    config = json.loads((tiny_models.checkpoint(name) / "config.json").read_text())
    reader = _reader(name)
    arch = _field(reader, "general.architecture")
    assert arch == {"Qwen3ForCausalLM": "qwen3", "Qwen3MoeForCausalLM": "qwen3moe"}[config["architectures"][0]]
    assert _field(reader, f"{arch}.block_count") == config["num_hidden_layers"]
    assert _field(reader, f"{arch}.embedding_length") == config["hidden_size"]
    assert _field(reader, f"{arch}.attention.head_count") == config["num_attention_heads"]
    assert _field(reader, f"{arch}.attention.head_count_kv") == config["num_key_value_heads"]
    assert _field(reader, f"{arch}.attention.key_length") == config["head_dim"]
    assert _field(reader, f"{arch}.context_length") == tiny_models.MAX_MODEL_LEN
    assert _field(reader, f"{arch}.rope.freq_base") == config["rope_parameters"]["rope_theta"]
    if arch == "qwen3moe":
        assert _field(reader, "qwen3moe.expert_count") == 16
        assert _field(reader, "qwen3moe.expert_used_count") == 2
        assert _field(reader, "qwen3moe.expert_feed_forward_length") == config["moe_intermediate_size"]


@pytest.mark.parametrize("name", tiny_models.NAMES)
def test_every_weight_is_the_checkpoints_bit_for_bit(name):
    reader = _reader(name)
    tensors = {t.name: t for t in reader.tensors}
    layers = json.loads((tiny_models.checkpoint(name) / "config.json").read_text())["num_hidden_layers"]
    pairs = {"token_embd.weight": "model.embed_tokens.weight", "output.weight": "lm_head.weight"}
    for layer in range(layers):
        pairs[f"blk.{layer}.attn_q.weight"] = f"model.layers.{layer}.self_attn.q_proj.weight"
        pairs[f"blk.{layer}.attn_output.weight"] = f"model.layers.{layer}.self_attn.o_proj.weight"
    for ours, theirs in pairs.items():
        assert np.array_equal(_bf16(tensors[ours]), _checkpoint_bits(name, theirs)), ours
    norm = np.asarray(tensors["blk.0.attn_q_norm.weight"].data)
    assert norm.dtype == np.float32
    bits = _checkpoint_bits(name, "model.layers.0.self_attn.q_norm.weight")
    assert np.array_equal(norm, (bits.astype(np.uint32) << 16).view(np.float32))  # bf16 widened exactly
    if name == "tiny-moe":  # experts stacked in order: expert 5 of layer 3 is slice 5
        gate = _bf16(tensors["blk.3.ffn_gate_exps.weight"])
        down = _bf16(tensors["blk.3.ffn_down_exps.weight"])
        assert gate.shape == (16, 128, 256) and down.shape == (16, 256, 128)
        assert np.array_equal(gate[5], _checkpoint_bits(name, "model.layers.3.mlp.experts.5.gate_proj.weight"))
        assert np.array_equal(down[15], _checkpoint_bits(name, "model.layers.3.mlp.experts.15.down_proj.weight"))
        assert "blk.3.ffn_gate_inp.weight" in tensors  # the router
    assert not [t for t in tensors if "exps" in t and name != "tiny-moe"]


def test_the_tokenizer_is_the_checkpoints_with_llamacpps_fields():
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(tiny_models.checkpoint("tiny-dense"))
    reader = _reader("tiny-dense")
    tokens = _field(reader, "tokenizer.ggml.tokens")
    assert tokens == hf.convert_ids_to_tokens(list(range(len(hf))))
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.pre") == "gpt-2"  # the GPT-2 split the ByteLevel tokenizer uses
    assert _field(reader, "tokenizer.ggml.eos_token_id") == hf.convert_tokens_to_ids("<|im_end|>")
    assert _field(reader, "tokenizer.ggml.padding_token_id") == hf.pad_token_id
    assert _field(reader, "tokenizer.ggml.add_bos_token") is False
    types = _field(reader, "tokenizer.ggml.token_type")
    control = {tokens[i] for i, kind in enumerate(types) if kind == 3}  # gguf.TokenType.CONTROL
    assert control == set(tiny_models.SPECIAL_TOKENS)
    merges = _field(reader, "tokenizer.ggml.merges")
    assert len(merges) == len(json.loads((tiny_models.checkpoint("tiny-dense") / "tokenizer.json").read_text())
                              ["model"]["merges"]) > 3000
    assert _field(reader, "tokenizer.chat_template") == tiny_models.CHAT_TEMPLATE


def test_the_draft_is_tiny_moe_in_q4_0_with_the_same_tokenizer_and_router():
    import gguf

    draft = _reader("tiny-moe", "Q4_0")
    assert gguf_models.draft_file("tiny-moe") == gguf_models.gguf_file("tiny-moe", "Q4_0")
    assert _field(draft, "tokenizer.ggml.tokens") == _field(_reader("tiny-moe"), "tokenizer.ggml.tokens")
    assert _field(draft, "general.file_type") == gguf.LlamaFileType.MOSTLY_Q4_0
    tensors = {t.name: t for t in draft.tensors}
    kinds = {name: t.tensor_type for name, t in tensors.items()}
    assert kinds["blk.0.ffn_gate_exps.weight"] == kinds["token_embd.weight"] == gguf.GGMLQuantizationType.Q4_0
    assert kinds["blk.0.ffn_gate_inp.weight"] == gguf.GGMLQuantizationType.BF16  # the router is left as it is
    assert kinds["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    # close to tiny-moe's weights, not equal: what makes it guess the target's tokens often but not always
    q = tensors["blk.2.attn_q.weight"]
    restored = gguf.quants.dequantize(np.asarray(q.data), q.tensor_type).reshape(256, 256)
    exact = (_checkpoint_bits("tiny-moe", "model.layers.2.self_attn.q_proj.weight").astype(np.uint32) << 16).view(
        np.float32)
    error = np.abs(restored - exact)
    assert 0 < error.mean() < 0.1 * np.abs(exact).mean()
    assert gguf_models.draft_file("tiny-moe").stat().st_size < 0.35 * gguf_models.gguf_file("tiny-moe").stat().st_size


def test_a_gguf_is_written_once_per_recipe(monkeypatch):
    path = gguf_models.gguf_file("tiny-dense")
    stamp = path.stat().st_mtime_ns
    assert gguf_models.gguf_file("tiny-dense") == path and path.stat().st_mtime_ns == stamp
    assert path.name.startswith(f"tiny-dense-{tiny_models.recipe_key('tiny-dense')}-w{gguf_models.WRITER_REVISION}")
    assert gguf_models.gguf_file("tiny-moe", "Q4_0").name.endswith("-q4_0.gguf")
    before = gguf_models.cache_key("tiny-moe")
    monkeypatch.setitem(tiny_models.RECIPES, "tiny-moe", {**tiny_models.RECIPES["tiny-moe"], "seed": 999})
    assert gguf_models.cache_key("tiny-moe") != before


def test_a_failed_write_leaves_no_half_file(monkeypatch, tmp_path):
    def broken(*args):
        raise RuntimeError("disk full")

    monkeypatch.setattr(gguf_models, "_tensors", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        gguf_models.write("tiny-dense", tmp_path / "x.gguf")
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_name_or_quantization_is_refused_with_the_known_ones():
    with pytest.raises(ParamsError, match="choose one of tiny-dense, tiny-moe"):
        gguf_models.gguf_file("tiny-huge")
    with pytest.raises(ParamsError, match="unknown quantization 'Q3_X'.*Q4_0"):
        gguf_models.gguf_file("tiny-moe", "Q3_X")
