"""The tiny models must be real: built checkpoints with the promised shapes, cached per recipe, never half-built."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from sparknb.errors import ParamsError
from sparknb.serving import tiny_models

pytestmark = [pytest.mark.demo, pytest.mark.filterwarnings("ignore::DeprecationWarning")]


def _tensors(path: Path) -> dict[str, tuple[int, str]]:
    """name -> (numel, dtype) straight from the safetensors file, independent of transformers."""
    from safetensors import safe_open

    out = {}
    with safe_open(str(path / "model.safetensors"), "pt") as fh:
        for key in fh.keys():
            tensor = fh.get_tensor(key)
            out[key] = (tensor.numel(), str(tensor.dtype))
    return out


@pytest.mark.parametrize("name", tiny_models.NAMES)
def test_checkpoint_is_cached_not_rebuilt(name, monkeypatch):
    first = tiny_models.checkpoint(name)
    monkeypatch.setattr(tiny_models, "_build", lambda *a: pytest.fail("rebuilt a cached checkpoint"))
    t0 = time.monotonic()
    assert tiny_models.checkpoint(name) == first
    assert time.monotonic() - t0 < 2.0
    assert first.parent == tiny_models.cache_root()
    assert first.name == f"{name}-{tiny_models.recipe_key(name)}"


def test_changed_recipe_gets_a_new_key(monkeypatch):
    before = tiny_models.recipe_key("tiny-dense")
    assert before != tiny_models.recipe_key("tiny-moe")
    changed = {**tiny_models.RECIPES["tiny-dense"], "seed": 12345}
    monkeypatch.setitem(tiny_models.RECIPES, "tiny-dense", changed)
    assert tiny_models.recipe_key("tiny-dense") != before


def test_failed_build_leaves_no_half_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))

    def crash(model, out):
        (out / "model.safetensors").write_bytes(b"half")
        raise RuntimeError("simulated crash while saving")

    monkeypatch.setattr(tiny_models, "_save_model", crash)
    with pytest.raises(RuntimeError, match="simulated crash"):
        tiny_models.checkpoint("tiny-dense")
    assert list(tiny_models.cache_root().iterdir()) == []


def test_unknown_name_is_refused_with_the_known_ones():
    with pytest.raises(ParamsError, match="tiny-dense"):
        tiny_models.checkpoint("tiny-huge")


@pytest.mark.parametrize("name", tiny_models.NAMES)
def test_checkpoint_matches_recipe(name):
    path = tiny_models.checkpoint(name)
    config = json.loads((path / "config.json").read_text())
    assert config["architectures"] == [tiny_models.RECIPES[name]["architecture"]]
    assert config["hidden_size"] == 256
    assert config["num_hidden_layers"] == 4
    assert config["vocab_size"] == 4096
    assert config["max_position_embeddings"] >= 16384
    assert config["dtype"] == "bfloat16"
    if name == "tiny-moe":
        assert config.get("num_experts", config.get("num_local_experts")) == 16
        assert config["num_experts_per_tok"] == 2
    assert {dtype for _, dtype in _tensors(path).values()} == {"torch.bfloat16"}
    size = sum(f.stat().st_size for f in path.iterdir())
    assert size < 32 * 2**20


@pytest.mark.parametrize("name", tiny_models.NAMES)
def test_parameter_counts_add_up(name):
    counts = tiny_models.parameter_counts(name)
    tensors = _tensors(tiny_models.checkpoint(name))
    experts = sum(n for key, (n, _) in tensors.items() if ".mlp.experts." in key)
    assert counts["total"] == sum(n for n, _ in tensors.values())
    assert counts["dense"] + experts == counts["total"]
    assert counts["dense"] > 0
    if name == "tiny-moe":
        assert experts > counts["dense"]
        assert counts["active_experts"] * 16 == experts * 2
    else:
        assert experts == 0 and counts["active_experts"] == 0


def test_tokenizer_has_no_bos_and_encodes():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_models.checkpoint("tiny-dense"))
    assert len(tok) == 4096
    assert tok.bos_token is None
    assert tok.eos_token == "<|im_end|>"
    sample = 'The model reads {"prompt": 42} and writes def run(x): return x'
    ids = tok(sample).input_ids
    assert tok.decode(ids) == sample
    assert not set(ids) & set(tok.all_special_ids)
    assert len(ids) < len(sample) / 2  # the BPE learned real merges
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                   add_generation_prompt=True)
    assert chat == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"

