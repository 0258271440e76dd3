"""Write a random-weight F16 GGUF in Qwen3-4B's shape (Qwen3-1.7B's, or a cut Qwen3-30B-A3B's) for llama-server.

Nothing can be downloaded on the GPU machine, so the model is made from its shape alone: Qwen3-4B's
(36 layers, hidden size 2560, 32 query and 8 key-value heads of 128, MLP 9728, tied embeddings) or
Qwen3-1.7B's (28 layers, hidden 2048, 16/8 heads of 128, MLP 6144, tied), with the test bed's own
4096-token tokenizer (the tiny-dense checkpoint's, written to GGUF the way sparknb.serving.gguf_models
writes it, so llama-server's /tokenize counts as the test bed does), seeded random weights (normal,
std 0.02) in F16, norms in F32 (ones). Its answers are noise; the bytes it reads per token, and so its
speed, are those of a dense model of that many parameters.

    python docs/examples/h200-llamacpp/make_model.py OUT.gguf                       # Qwen3-4B's shape
    python docs/examples/h200-llamacpp/make_model.py OUT.gguf --shape qwen3-1.7b    # the swap's second model
    python docs/examples/h200-llamacpp/make_model.py OUT.gguf --small               # 2 layers, a CPU rehearsal
    python docs/examples/h200-llamacpp/make_model.py OUT.gguf --shape qwen3-30b-a3b-24l --vocab 151936  # the MoE

`qwen3-30b-a3b-24l` is Qwen3-30B-A3B's shape cut to 24 of its 48 layers (hidden 2048, 32/4 heads of 128, 128
routed experts of 768, 8 a token, the router in F32 as converters keep it, an untied head): llama.cpp's qwen3moe,
15.6 B parameters with Qwen's vocabulary. `--vocab N` pads the tokenizer with unused tokens to N rows (Qwen's
151,936), so the embedding and the head read what the real model's do.

It prints the parameter count, which the params files' weights.dense_params must equal
(--check NAME compares it with params/models/NAME.yaml and fails on a difference).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

SHAPES = {
    "qwen3-4b": {"hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
                 "num_key_value_heads": 8, "head_dim": 128},
    "qwen3-1.7b": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28, "num_attention_heads": 16,
                   "num_key_value_heads": 8, "head_dim": 128},
    "qwen3-30b-a3b-24l": {"hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 24,
                          "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                          "num_experts_per_tok": 8, "moe_intermediate_size": 768, "tie_word_embeddings": False},
}
COMMON = {"max_position_embeddings": 40960, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6}
SMALL = {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "head_dim": 64}
SMALL_MOE = {"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 128}
SEEDS = {"qwen3-4b": 0, "qwen3-1.7b": 1, "qwen3-30b-a3b-24l": 2}


def tensors(config: dict, vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """llama.cpp's qwen3 (or qwen3moe) tensors, each as (name, PyTorch-order shape); output.weight only where the
    embeddings are not tied."""
    h, f, q, kv = (config["hidden_size"], config["intermediate_size"],
                   config["num_attention_heads"] * config["head_dim"], config["num_key_value_heads"] * config["head_dim"])
    out = [("token_embd.weight", (vocab, h)), ("output_norm.weight", (h,))]
    out += [] if config.get("tie_word_embeddings", True) else [("output.weight", (vocab, h))]
    for i in range(config["num_hidden_layers"]):
        b = f"blk.{i}."
        out += [(b + "attn_norm.weight", (h,)), (b + "attn_q.weight", (q, h)), (b + "attn_k.weight", (kv, h)),
                (b + "attn_v.weight", (kv, h)), (b + "attn_output.weight", (h, q)),
                (b + "attn_q_norm.weight", (config["head_dim"],)), (b + "attn_k_norm.weight", (config["head_dim"],)),
                (b + "ffn_norm.weight", (h,))]
        if "num_experts" in config:
            e, m = config["num_experts"], config["moe_intermediate_size"]
            out += [(b + "ffn_gate_inp.weight", (e, h)), (b + "ffn_gate_exps.weight", (e, m, h)),
                    (b + "ffn_up_exps.weight", (e, m, h)), (b + "ffn_down_exps.weight", (e, h, m))]
        else:
            out += [(b + "ffn_gate.weight", (f, h)), (b + "ffn_up.weight", (f, h)), (b + "ffn_down.weight", (h, f))]
    return out


def write(out: Path, shape: str, small: bool, pad_to: int | None = None) -> tuple[int, int, float]:
    import gguf
    import torch

    from sparknb.serving import gguf_models, testbed

    source = testbed.checkpoint("tiny-dense")  # the test bed's tokenizer (built from its recipe, seconds)
    moe = "num_experts" in SHAPES[shape]
    config = COMMON | SHAPES[shape] | (SMALL | (SMALL_MOE if moe else {}) if small else {})
    name = f"{shape}-random{'-small' if small else ''}"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    writer = gguf.GGUFWriter(str(tmp), "qwen3moe" if moe else "qwen3")
    writer.add_name(name)
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_key_length(config["head_dim"])
    writer.add_value_length(config["head_dim"])
    writer.add_rope_freq_base(config["rope_theta"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if moe:
        writer.add_expert_count(config["num_experts"])
        writer.add_expert_used_count(config["num_experts_per_tok"])
        writer.add_expert_feed_forward_length(config["moe_intermediate_size"])
    gguf_models._tokenizer(writer, source, pad_to)  # tokens, merges, types, eos/pad/bos and the chat template
    vocab = max(_vocab_size(source), pad_to or 0)
    generator = torch.Generator(device=device).manual_seed(SEEDS[shape])
    count = 0
    for tensor_name, dims in tensors(config, vocab):
        if len(dims) == 1:
            writer.add_tensor(tensor_name, torch.ones(dims, dtype=torch.float32).numpy())
        elif tensor_name.endswith("ffn_gate_inp.weight"):  # the router, kept in F32 as converters keep it
            weight = torch.empty(dims, dtype=torch.float32, device=device).normal_(0.0, 0.02, generator=generator)
            writer.add_tensor(tensor_name, weight.cpu().numpy())
        else:
            weight = torch.empty(dims, dtype=torch.float16, device=device).normal_(0.0, 0.02, generator=generator)
            writer.add_tensor(tensor_name, weight.cpu().numpy())
        count += int(torch.tensor(dims).prod())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(out)
    return count, out.stat().st_size, time.monotonic() - t0


def _vocab_size(source: Path) -> int:
    """Every token id, the added (special) tokens included."""
    import json

    spec = json.loads((source / "tokenizer.json").read_text())
    ids = list(spec["model"]["vocab"].values()) + [t["id"] for t in spec["added_tokens"]]
    return max(ids) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-4b")
    parser.add_argument("--small", action="store_true", help="a 2-layer model, to rehearse the steps on a CPU")
    parser.add_argument("--vocab", type=int, default=None, help="pad the vocabulary to this many rows (Qwen's: 151936)")
    parser.add_argument("--check", metavar="MODEL", help="fail unless params/models/MODEL.yaml counts as many parameters")
    args = parser.parse_args()
    count, size, seconds = write(args.out, args.shape, args.small, args.vocab)
    print(f"{args.out.name}: {args.shape}{' (small)' if args.small else ''}, {count:,} parameters, {size:,} bytes, "
          f"written in {seconds:.1f} s", flush=True)
    if args.check and not args.small:
        from sparknb.runs.params import load_model

        counted = load_model(args.check).weights.dense_params
        if counted != count:
            raise SystemExit(f"params/models/{args.check}.yaml says dense_params {counted:,.0f}, the file has {count:,}")
        print(f"  matches params/models/{args.check}.yaml (dense_params {counted:,.0f})", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
