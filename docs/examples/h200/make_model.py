"""Build the random-weight model of params/models/qwen3-4b-random.yaml and place it in the Hugging Face cache.

Nothing can be downloaded on the GPU machine, so the model is made from a config: Qwen3-4B's shape
(36 layers, hidden size 2560, 32 query and 8 key-value heads of 128, MLP 9728, tied embeddings) with
the test bed's own 4096-token tokenizer, seeded random weights, bf16. Its answers are noise; the
bytes it reads per token, and so its speed, are those of a 3.64-billion-parameter dense model.

    python docs/examples/h200/make_model.py            # on the GPU machine: about a minute
    python docs/examples/h200/make_model.py --small    # a 2-layer rehearsal of the same steps, on a CPU
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

from sparknb.runs.params import load_model
from sparknb.serving import hub_cache
from sparknb.serving import testbed

SHAPE = {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960, "rope_theta": 1000000.0,
         "rms_norm_eps": 1e-6, "tie_word_embeddings": True}
SMALL = SHAPE | {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2, "num_attention_heads": 4,
                 "num_key_value_heads": 2, "head_dim": 64}


def build(out: Path, small: bool) -> int:
    tokenizer = AutoTokenizer.from_pretrained(testbed.checkpoint("tiny-dense"))
    config = Qwen3Config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **(SMALL if small else SHAPE))
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen3ForCausalLM(config).to(torch.bfloat16)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 2-layer model, to rehearse the steps on a CPU")
    args = parser.parse_args()
    repo_id = load_model("qwen3-4b-random").served_model_name
    out = testbed.cache_root().parent / "models" / repo_id.replace("/", "--")
    counted = build(out, args.small)
    print(f"{counted:,} parameters in {out}; served as {repo_id} from {hub_cache.place(out, repo_id)}", flush=True)


if __name__ == "__main__":
    main()
