"""A checkpoint's tensor table and shape, read from its headers without loading a single weight.

Two layouts: a GGUF file (the `gguf` package's reader maps the file and reads only its header: each
tensor's stored type, so a quantized tensor counts its real bytes, blocks and scales included) and
safetensors (each file's JSON header gives every tensor's byte range; a sharded checkpoint's
`model.safetensors.index.json` names its files), with `config.json` beside them. What the census needs
of the model's shape (layers, KV heads, head dimension, experts and how many a token uses, a tied head,
sliding windows, a latent KV) is read into one `Shape`, whatever the layout called it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import struct
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ParamsError
from ..serving.tiny_models import cache_root, file_key, keep

INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # rows last, as the file stores it (GGUF: innermost first)
    dtype: str
    nbytes: int


@dataclass(frozen=True)
class Shape:
    """What the census needs of the model's config; None where the checkpoint does not say."""

    layers: int
    kv_heads: int | None
    head_dim: int | None
    dtype: str  # the weights' own dtype: the KV cache's where the server keeps it "auto"
    experts: int = 0
    experts_used: int = 0
    tied: bool = False
    sliding_window: int | None = None
    window_layers: tuple[int, ...] = ()  # the layers capped at the window
    no_kv_layers: tuple[int, ...] = ()  # linear-attention or recurrent layers: a state of fixed size, no KV
    kv_latent: int | None = None  # latent attention (MLA): one latent vector plus its rope part per layer


@dataclass(frozen=True)
class Checkpoint:
    path: str
    layout: str  # gguf or safetensors
    tensors: tuple[Tensor, ...]
    shape: Shape
    file_bytes: int  # every file of it on disk, headers included


def read(path: str | Path) -> Checkpoint:
    """The checkpoint at `path`: a .gguf file, a .safetensors file, or a folder holding either with config.json.
    One this user may not read is a ParamsError naming the file and the fix, not a PermissionError's traceback."""
    try:
        return _read(Path(path).expanduser())
    except PermissionError as e:
        raise ParamsError(f"cannot read the checkpoint at {path}: {e.strerror} ({e.filename}). Let this user read "
                          "it, or pass a copy it can read (--checkpoint PATH, or checkpoint: in the model's params), "
                          "or write what one token reads by hand (weights: in the model's params)") from None


def _read(p: Path) -> Checkpoint:
    if not p.exists():
        raise ParamsError(f"no checkpoint at {p}: pass the GGUF file, or the folder holding config.json and its "
                          "*.safetensors (--checkpoint PATH)")
    if p.is_file() and p.suffix == ".gguf":
        return _gguf(p)
    folder = p if p.is_dir() else p.parent
    ggufs = sorted(folder.glob("*.gguf")) if p.is_dir() else []
    if p.is_dir() and not list(folder.glob("*.safetensors")) and len(ggufs) == 1:
        return _gguf(ggufs[0])
    return _safetensors(folder, [p] if p.is_file() else _shards(folder))


# --- GGUF -------------------------------------------------------------------------------------------------


def _gguf(path: Path) -> Checkpoint:
    """A GGUF's table, remembered per file (its path, size and time of change, and this module) in the user's cache:
    on 2 cores a read of SmolLM2's 98 MB took 8.6 s before each run's first request: 3.5 s importing gguf (which
    imports mistral_common's JSON schemas where vLLM installed it) and 5.1 s building the fields of its tokenizer's
    49,152 tokens and 48,900 merges, which the census never reads. A second read takes 2 ms."""
    memory = _memory(path)
    try:
        return _checkpoint(json.loads(memory.read_text()), path)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = _read_gguf(path)
    with contextlib.suppress(OSError):  # a cache this user cannot write: read again next time
        keep(memory, json.dumps(asdict(found)))
    return found


def _memory(path: Path) -> Path:
    key = hashlib.sha256(f"{file_key(path)}:".encode() + Path(__file__).read_bytes()).hexdigest()[:24]
    return cache_root() / "checkpoints" / f"{key}.json"


def _checkpoint(d: dict, path: Path) -> Checkpoint:
    shape = {k: tuple(v) if isinstance(v, list) else v for k, v in d["shape"].items()}
    tensors = tuple(Tensor(t["name"], tuple(t["shape"]), t["dtype"], t["nbytes"]) for t in d["tensors"])
    return Checkpoint(str(path), d["layout"], tensors, Shape(**shape), d["file_bytes"])


def _read_gguf(path: Path) -> Checkpoint:
    from gguf import GGUFReader, GGMLQuantizationType

    reader = GGUFReader(path, "r")
    tensors = tuple(Tensor(t.name, tuple(int(d) for d in t.shape), GGMLQuantizationType(t.tensor_type).name,
                           int(t.n_bytes)) for t in reader.tensors)
    meta = {f.name: _value(f) for f in reader.fields.values() if not f.name.startswith("tokenizer.ggml.")}
    return Checkpoint(str(path), "gguf", tensors, _gguf_shape(meta, tensors), path.stat().st_size)


def _value(f):
    try:
        return f.contents()
    except Exception:  # an array type the reader cannot turn into Python: not a field the census reads
        return None


def _gguf_shape(meta: dict, tensors: tuple[Tensor, ...]) -> Shape:
    arch = meta.get("general.architecture")
    key = lambda name, default=None: meta.get(f"{arch}.{name}", default)  # noqa: E731
    names = {t.name for t in tensors}
    heads, kv = key("attention.head_count"), key("attention.head_count_kv")
    kv = max(kv) if isinstance(kv, list) else kv  # per-layer counts: the widest layer
    head_dim = key("attention.key_length") or (key("embedding_length") // heads if heads else None)
    mtp = key("nextn_predict_layers", 0) or 0
    latent = key("attention.kv_lora_rank")
    # No sliding window is read from a GGUF: llama.cpp keeps each architecture's pattern of windowed layers in
    # its own code, not in the file, so every layer is counted at the full context (a bound, said in the census).
    return Shape(layers=int(key("block_count")) - mtp, kv_heads=kv, head_dim=head_dim,
                 dtype=_widest(tensors), experts=key("expert_count", 0) or 0,
                 experts_used=key("expert_used_count", 0) or 0, tied="output.weight" not in names,
                 kv_latent=latent + (key("rope.dimension_count") or 0) if latent else None)


# --- safetensors ------------------------------------------------------------------------------------------


def _shards(folder: Path) -> list[Path]:
    index = folder / INDEX
    if index.is_file():
        return [folder / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise ParamsError(f"{folder} holds neither a GGUF file nor *.safetensors: pass the checkpoint's own "
                          "folder or file (--checkpoint PATH)")
    return files


def _header(path: Path) -> dict:
    """The file's JSON header (the first 8 bytes give its length)."""
    with path.open("rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size))


def _safetensors(folder: Path, files: list[Path]) -> Checkpoint:
    tensors = []
    for path in files:
        header = _header(path)
        for name, entry in header.items():
            if name != "__metadata__":
                begin, end = entry["data_offsets"]
                tensors.append(Tensor(name, tuple(entry["shape"]), entry["dtype"], end - begin))
    config_path = folder / "config.json"
    if not config_path.is_file():
        raise ParamsError(f"{folder} has no config.json beside its safetensors: the census needs the model's "
                          "layers, heads and experts from it")
    shape = hf_shape(json.loads(config_path.read_text()), tuple(tensors))
    return Checkpoint(str(folder), "safetensors", tuple(tensors), shape, sum(f.stat().st_size for f in files))


def hf_shape(config: dict, tensors: tuple[Tensor, ...] = ()) -> Shape:
    """A transformers config.json as a Shape (a multimodal config's text part where it has one)."""
    tied = bool(config.get("tie_word_embeddings", False))
    text = config.get("text_config") or config
    heads = text.get("num_attention_heads")
    head_dim = text.get("head_dim") or (text["hidden_size"] // heads if heads else None)
    types = text.get("layer_types") or []
    latent = text.get("kv_lora_rank")
    return Shape(layers=text["num_hidden_layers"], kv_heads=text.get("num_key_value_heads") or heads,
                 head_dim=head_dim, dtype=str(text.get("torch_dtype") or text.get("dtype") or config.get(
                     "torch_dtype") or config.get("dtype") or _widest(tensors)),
                 experts=_first(text, "num_experts", "num_local_experts", "n_routed_experts"),
                 experts_used=_first(text, "num_experts_per_tok", "moe_topk"), tied=tied,
                 sliding_window=text.get("sliding_window") if _windowed(text) else None,
                 window_layers=tuple(i for i, t in enumerate(types) if t == "sliding_attention"),
                 no_kv_layers=tuple(i for i, t in enumerate(types) if t not in ("sliding_attention", "full_attention")),
                 kv_latent=latent + (text.get("qk_rope_head_dim") or 0) if latent else None)


def _first(config: dict, *names: str) -> int:
    return next((int(config[n]) for n in names if config.get(n)), 0)


def _windowed(text: dict) -> bool:
    """A sliding window counts where the config turns it on: per layer (layer_types) or for every layer."""
    if text.get("layer_types"):
        return "sliding_attention" in text["layer_types"]
    return bool(text.get("sliding_window")) and text.get("use_sliding_window", True) is not False


def _widest(tensors: tuple[Tensor, ...]) -> str:
    """The dtype that holds most of the bytes: the weights' own."""
    counts: dict[str, int] = {}
    for t in tensors:
        counts[t.dtype] = counts.get(t.dtype, 0) + t.nbytes
    return max(counts, key=counts.get) if counts else "unknown"
