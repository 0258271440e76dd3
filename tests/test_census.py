"""The byte census on real files: the test bed's checkpoints as safetensors and as GGUF (bf16 and the Q4_0 draft),
each tensor's bytes against the file's own header and size, and what a token reads against a count by hand
from the test bed's shape (hidden 256, MLP 768, 4 layers, 4 query and 2 KV heads of 64, vocabulary 4096)."""

from __future__ import annotations

import json
import math
import os
import shutil

import pytest

from sparknb.errors import ParamsError
from sparknb.roofline import bandwidth, census, checkpoint
from sparknb.runs.params import load_hardware, load_model
from sparknb.serving import gguf_models, tiny_models

pytestmark = [pytest.mark.demo, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# By hand: per layer q 256x256, k and v 256x128, o 256x256, q/k norms 64 each, two layer norms of 256.
ATTENTION = 2 * 256 * 256 + 2 * 256 * 128
NORMS = 2 * 64 + 2 * 256
MLP = 3 * 256 * 768
TABLE = 4096 * 256  # the embedding, and an untied head of the same size
DENSE_PARAMS = 4 * (ATTENTION + NORMS + MLP) + 2 * TABLE + 256
EXPERT = 3 * 256 * 128  # one routed expert of tiny-moe: gate, up and down of 128
ROUTER = 16 * 256


def _safetensors(name):
    return checkpoint.read(tiny_models.checkpoint(name))


def test_safetensors_tensor_bytes_are_the_files_data_exactly():
    ck = _safetensors("tiny-dense")
    path = tiny_models.checkpoint("tiny-dense") / "model.safetensors"
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    assert sum(t.nbytes for t in ck.tensors) == path.stat().st_size - 8 - header_len  # every data byte, once
    assert all(t.nbytes == math.prod(t.shape) * 2 for t in ck.tensors)  # bf16 throughout
    assert sum(t.nbytes for t in ck.tensors) == 2 * DENSE_PARAMS == 2 * load_model("tiny-dense").weights.dense_params


def test_a_dense_token_reads_everything_but_the_embedding_table_whose_one_row_it_reads():
    c = census.count(_safetensors("tiny-dense"))
    assert c.embedding == {"bytes": 2 * TABLE, "per_token": 2 * 256, "tied": False}
    assert c.head["per_token"] == 2 * TABLE
    assert c.every_token == 2 * (4 * (ATTENTION + NORMS + MLP) + 256)
    assert c.bytes_per_token == 2 * DENSE_PARAMS - 2 * TABLE + 2 * 256
    assert c.not_read == 0 and c.experts["of"] == 0


def test_a_moe_token_reads_top_k_of_n_experts():
    c = census.count(_safetensors("tiny-moe"))
    assert (c.experts["used"], c.experts["of"]) == (2, 16)
    assert c.experts["bytes"] == 2 * 4 * 16 * EXPERT
    assert c.experts["per_token"] == 2 * 4 * 2 * EXPERT  # two of sixteen in each of four layers
    assert c.every_token == 2 * (4 * (ATTENTION + NORMS + ROUTER) + 256)  # the router is read every token
    assert c.bytes_per_token == c.every_token + c.experts["per_token"] + 2 * 256 + 2 * TABLE


def test_gguf_bf16_counts_its_tensors_at_their_stored_types_to_the_files_last_byte():
    import gguf

    path = gguf_models.gguf_file("tiny-dense")
    reader = gguf.GGUFReader(path)
    ck = checkpoint.read(path)
    by_name = {t.name: t for t in ck.tensors}
    for t in reader.tensors:
        width = {"BF16": 2, "F32": 4}[gguf.GGMLQuantizationType(t.tensor_type).name]
        assert by_name[t.name].nbytes == int(t.n_elements) * width
    last = max(reader.tensors, key=lambda t: t.data_offset)
    assert last.data_offset + int(last.n_bytes) == path.stat().st_size  # the table reaches the file's end
    norms = 4 * NORMS + 256  # llama.cpp keeps norms f32: 2 bytes more each
    assert sum(t.nbytes for t in ck.tensors) == 2 * DENSE_PARAMS + 2 * norms
    assert census.count(ck).bytes_per_token == census.count(_safetensors("tiny-dense")).bytes_per_token + 2 * norms


def test_the_q4_0_draft_counts_its_blocks_and_scales():
    import gguf

    path = gguf_models.draft_file("tiny-moe")
    ck = checkpoint.read(path)
    quantized = [t for t in ck.tensors if t.dtype == "Q4_0"]
    assert quantized and all(t.nbytes == math.prod(t.shape) // 32 * 18 for t in quantized)  # 18 bytes a block
    reader = gguf.GGUFReader(path)
    assert {t.name: int(t.n_bytes) for t in reader.tensors} == {t.name: t.nbytes for t in ck.tensors}
    c = census.count(ck)
    assert c.experts["per_token"] == pytest.approx(c.experts["bytes"] * 2 / 16)
    assert c.experts["bytes"] == 4 * 16 * EXPERT // 32 * 18
    assert c.tensor_bytes < census.count(checkpoint.read(gguf_models.gguf_file("tiny-moe"))).tensor_bytes / 3


def test_a_tied_head_is_the_embedding_table_read_once(tmp_path):
    from safetensors.torch import load_file, save_file

    source = tiny_models.checkpoint("tiny-dense")
    tensors = load_file(source / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, tmp_path / "model.safetensors")
    config = json.loads((source / "config.json").read_text()) | {"tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    tied, untied = census.count(checkpoint.read(tmp_path)), census.count(_safetensors("tiny-dense"))
    assert tied.embedding["tied"] and tied.embedding["per_token"] == 0 and tied.head["per_token"] == 2 * TABLE
    assert tied.bytes_per_token == untied.bytes_per_token - 2 * 256  # the table once, as the head; no row beside
    assert tied.tensor_bytes == untied.tensor_bytes - 2 * TABLE


def test_the_kv_curve_matches_a_count_by_hand():
    kv = census.count(_safetensors("tiny-dense")).kv
    assert kv.bytes_per_token == 4 * 2 * 64 * 2 * 2  # layers x KV heads x head dim x K and V x bf16: 2,048 B
    assert kv.bytes(10_714) == 2048 * 10_714
    qwen3_4b = checkpoint.hf_shape({"num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
                                    "head_dim": 128, "hidden_size": 2560, "torch_dtype": "bfloat16"})
    assert census.kv(qwen3_4b).bytes_per_token == 147_456  # the H200's model: 1.58 GB at 10,714 tokens
    assert census.kv(qwen3_4b, "fp8").bytes(10_714) == 147_456 / 2 * 10_714


def test_sliding_window_layers_stop_at_their_window_and_latent_attention_reads_its_latent():
    types = ["sliding_attention"] * 5 + ["full_attention"]
    gemma = checkpoint.hf_shape({"num_hidden_layers": 6, "num_attention_heads": 8, "num_key_value_heads": 4,
                                 "head_dim": 256, "hidden_size": 2048, "sliding_window": 512, "layer_types": types,
                                 "torch_dtype": "bfloat16"})
    per_layer = 2 * 4 * 256 * 2
    assert census.kv(gemma).bytes(4096) == per_layer * (1 * 4096 + 5 * 512)
    assert census.kv(gemma).bytes(100) == per_layer * 6 * 100
    mla = checkpoint.hf_shape({"num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
                               "hidden_size": 7168, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                               "torch_dtype": "bfloat16", "n_routed_experts": 256, "num_experts_per_tok": 8})
    assert census.kv(mla).bytes_per_token == 61 * (512 + 64) * 2


def test_the_limit_is_a_curve_and_measured_bandwidth_wins_on_the_same_device():
    model = load_model("tiny-dense").model_copy(update={"weights": None, "checkpoint": str(
        tiny_models.checkpoint("tiny-dense"))})
    counted, how = census.for_model(model)
    assert counted is not None and "read from" in how
    h200 = load_hardware("h200")
    probe = {"method": "torch copy on NVIDIA H200", "gbs": 4274.0}
    limit = bandwidth.limit(model, h200, counted, probe)
    assert limit.divides_by == "measured" and limit.bandwidth_bytes_s == 4274e9
    assert limit.tokens_per_s(context=1000) == pytest.approx(4274e9 / (counted.bytes_per_token + 2048 * 1000))
    elsewhere = bandwidth.limit(model, h200, counted, {"method": "numpy copy on the CPU", "gbs": 20.0})
    assert elsewhere.divides_by == "nameplate" and elsewhere.bandwidth_bytes_s == 4800e9
    hand = bandwidth.limit(load_model("tiny-dense"), h200, counted, probe)
    assert hand.bytes_per_step == 2 * DENSE_PARAMS and "hand-written" in hand.source  # hand-written weights win


def test_a_gguf_read_again_is_taken_from_memory_until_the_file_changes(tmp_path, monkeypatch):
    """The second read is the remembered table (a figure altered in the memory comes back altered, so it was not
    read from the file); a file whose time of change moved, or a memory that is not JSON, is read from the file."""
    path = tmp_path / "m.gguf"
    shutil.copy(gguf_models.gguf_file("tiny-dense"), path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first = checkpoint.read(path)
    (memory,) = (tmp_path / "cache").rglob("*.json")
    assert checkpoint.read(path) == first
    altered = json.loads(memory.read_text())
    altered["tensors"][0]["nbytes"] += 1
    memory.write_text(json.dumps(altered))
    assert checkpoint.read(path).tensors[0].nbytes == first.tensors[0].nbytes + 1
    memory.write_text("{")
    assert checkpoint.read(path) == first
    memory.write_text(json.dumps(altered))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert checkpoint.read(path) == first and len(list((tmp_path / "cache").rglob("*.json"))) == 2


def test_a_checkpoint_that_cannot_be_read_is_an_error_naming_what_to_pass(tmp_path):
    with pytest.raises(ParamsError, match="--checkpoint"):
        checkpoint.read(tmp_path / "nowhere")
    with pytest.raises(ParamsError, match="neither a GGUF file nor"):
        checkpoint.read(tmp_path)
    shutil.copy(tiny_models.checkpoint("tiny-dense") / "model.safetensors", tmp_path)
    with pytest.raises(ParamsError, match="config.json"):
        checkpoint.read(tmp_path)


def test_a_sealed_census_reads_back_equal_to_the_census_that_made_it(tmp_path, capsys):
    """Every figure survives the secret filter: `every_token` was sealed as "***" while a name ending in "token"
    was taken for a secret."""
    from sparknb.runs.run import Run
    from sparknb.runs.strict_json import read_object

    made = census.count(_safetensors("tiny-moe"))
    run = Run.create("decode", {}, outputs=tmp_path, label="census")
    census.seal(run, load_model("tiny-moe"), str(tiny_models.checkpoint("tiny-moe")), None)
    run.seal()
    sealed = read_object(run.path / "census.json")["census"]
    assert sealed["every_token"] == made.every_token > 0
    assert census.Census.from_dict(sealed) == made


def test_every_shipped_example_census_reads_back_equal_to_the_census_that_made_it():
    """docs/examples' sealed censuses carried every_token as "***" (restored by docs/examples/restore_masked.py):
    each must rebuild into a Census whose own sums (what a token reads, every_token plus what it reads in part) are
    the figures the run printed, with no figure masked anywhere in the examples."""
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "docs" / "examples"
    found = sorted(examples.glob("*/2026*/census.json"))
    assert len(found) >= 6
    for path in found:
        sealed = json.loads(path.read_text())["census"]
        assert json.loads(json.dumps(census.Census.from_dict(sealed).as_dict())) == sealed, path
    masked = [p for p in examples.glob("*/2026*/*.json") if '"***"' in p.read_text()]
    assert masked == []
