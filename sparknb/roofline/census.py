"""The byte census: what one decode step reads from memory, counted from the checkpoint's own tensor table.

Each tensor is classed by what a plain decode step does with it:

- read every token: attention, dense MLP, norms, the router, shared experts;
- read in part: routed experts (top-k of n per layer, from the config), the token embedding (one row per
  token, not the table), the output head (all of it; a head tied to the embedding is that same table, read
  once as the head and never counted twice);
- not read: a draft or multi-token-prediction head, a vision or audio tower (named, with their bytes).

Beside the weights, each step reads the KV cache of every token before it: per layer, K and V of each KV
head at the cache's width (a latent-attention layer one latent vector), a sliding-window layer at most its
window, a linear-attention layer none. On an H200 (a GGUF server, random F16 in Qwen3-4B's shape) decode fell
from 289 to 239 tok/s between 111 and 10,714 prompt tokens, 43.9% to 36.3% of a weights-only limit; with the
KV read counted the share was 43.9-44.2% at every length: the limit is a curve over context length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import ParamsError
from ..serving import hub_cache
from .checkpoint import Checkpoint, Shape, Tensor, read

# The width of one cached value, by the names servers give cache types; a quantized GGUF cache type counts its block's scales (q8_0: 34 bytes per 32 values).
CACHE_BYTES = {"f32": 4.0, "float32": 4.0, "f16": 2.0, "fp16": 2.0, "float16": 2.0, "bf16": 2.0, "bfloat16": 2.0,
               "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "fp8_inc": 1.0, "q8_0": 34 / 32, "q5_1": 24 / 32,
               "q5_0": 22 / 32, "q4_1": 20 / 32, "q4_0": 18 / 32, "iq4_nl": 18 / 32}
VISION = re.compile(r"(^|\.)(visual|vision_tower|vision_model|vision_encoder|multi_modal_projector|mm_projector|"
                    r"audio_tower|audio_model)\.|^(v|mm|a)\.")
MTP = re.compile(r"(^|\.)(mtp|nextn)[._]")
EXPERTS = re.compile(r"\.experts\.(\d+\.|gate_up_proj|gate_proj|up_proj|down_proj)|_exps\.")
EMBEDDING = re.compile(r"(^|\.)(embed_tokens|token_embd|wte|word_embeddings)\.weight$")
HEAD = re.compile(r"(^|\.)(lm_head|output)\.weight$")
LAYER = re.compile(r"(?:^|\.)(?:layers|blk|h)\.(\d+)\.")


@dataclass(frozen=True)
class KV:
    """KV-cache bytes read per decode step for each token of context."""

    bytes_per_token_layer: float | None  # one layer, one token: K and V (or the latent) at the cache's width
    full_layers: int
    window_layers: int
    window: int | None
    cache_dtype: str
    source: str  # where the cache dtype comes from

    def bytes(self, context: float) -> float | None:
        """The KV read of one step at `context` tokens; None where the shape or the cache width is unknown."""
        if self.bytes_per_token_layer is None:
            return None
        capped = min(context, self.window) if self.window else context
        return self.bytes_per_token_layer * (self.full_layers * context + self.window_layers * capped)

    @property
    def bytes_per_token(self) -> float | None:
        """Per token of context, every full-attention layer (a windowed one stops growing at its window)."""
        return self.bytes(1.0)


@dataclass(frozen=True)
class Census:
    """Bytes on disk and bytes read per decode step, by class, with the KV cache's own per token."""

    checkpoint: str
    layout: str
    file_bytes: int
    tensor_bytes: int
    every_token: int
    experts: dict  # {"bytes": on disk, "per_token": read, "used": k, "of": n}
    embedding: dict  # {"bytes": ..., "per_token": ..., "tied": bool}
    head: dict  # {"bytes": ..., "per_token": ...}
    not_read_parts: dict  # what is not read, by kind -> bytes
    kv: KV
    notes: tuple[str, ...] = ()

    @property
    def in_part(self) -> float:
        """Read in part per token: top-k of n routed experts, one embedding row, the head."""
        return self.experts["per_token"] + self.embedding["per_token"] + self.head["per_token"]

    @property
    def not_read(self) -> int:
        """On disk, never read by a plain decode step."""
        return sum(self.not_read_parts.values())

    @property
    def bytes_per_token(self) -> float:
        return self.every_token + self.in_part

    def as_dict(self) -> dict:
        return asdict(self) | {"in_part": self.in_part, "not_read": self.not_read,
                               "bytes_per_token": self.bytes_per_token, "kv_bytes_per_token": self.kv.bytes_per_token}

    @classmethod
    def from_dict(cls, d: dict) -> Census:
        fields = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**fields | {"kv": KV(**d["kv"]), "notes": tuple(d.get("notes") or ())})

    def lines(self) -> list[str]:
        """The census as a reader wants it: what is read per token, and of what."""
        gb = _size
        ex = self.experts
        out = [f"{gb(self.bytes_per_token)} read per token of {gb(self.tensor_bytes)} of tensors "
               f"({gb(self.file_bytes)} on disk, {self.layout}): {gb(self.every_token)} every token, "
               f"{gb(self.in_part)} in part"]
        if ex["of"]:
            out.append(f"routed experts: {ex['used']} of {ex['of']}, {gb(ex['per_token'])} of {gb(ex['bytes'])}")
        out.append(f"embedding {gb(self.embedding['bytes'])}, tied to the head: read whole once, as the head"
                   if self.embedding["tied"] else
                   f"embedding: one row of {gb(self.embedding['bytes'])}; the head {gb(self.head['bytes'])}, read whole")
        out += [f"not read: {kind}, {gb(b)}" for kind, b in self.not_read_parts.items()]
        kv = self.kv.bytes_per_token
        out.append(f"KV cache: {kv:,.0f} B per token of context ({self.kv.cache_dtype}, {self.kv.source})" if kv else
                   f"KV cache: unknown ({self.kv.source})")
        return out + list(self.notes)


def count(ck: Checkpoint, cache_dtype: str | None = None, cache_source: str = "") -> Census:
    """The census of one checkpoint; `cache_dtype` as the server reports its KV cache (None or auto: the weights')."""
    shape = ck.shape
    if ck.layout == "gguf" and not cache_dtype:  # a GGUF server caches f16 unless told, whatever the weights' type
        cache_dtype, cache_source = "f16", cache_source or "a GGUF server's default cache type"
    classes = [(t, _kind(t, shape)) for t in ck.tensors]
    by = lambda kind: [t for t, k in classes if k == kind]  # noqa: E731
    experts = _experts(by("experts"), shape)
    embedding, head = _embedding(by("embedding"), by("head"), shape)
    not_read = _not_read(classes)
    every = sum(t.nbytes for t in by("every"))
    notes = (("no sliding window is read from a GGUF: every layer is counted at the full context",)
             if ck.layout == "gguf" else ())
    return Census(ck.path, ck.layout, ck.file_bytes, sum(t.nbytes for t in ck.tensors), every, experts, embedding,
                  head, not_read, kv(shape, cache_dtype, cache_source), notes)


def _kind(t: Tensor, shape: Shape) -> str:
    layer = LAYER.search(t.name)
    if VISION.search(t.name):
        return "vision"
    if MTP.search(t.name) or (layer and int(layer.group(1)) >= shape.layers):  # DeepSeek's MTP is layer N
        return "mtp"
    if EXPERTS.search(t.name) and "shared" not in t.name and "shexp" not in t.name:
        return "experts"
    if EMBEDDING.search(t.name):
        return "embedding"
    return "head" if HEAD.search(t.name) else "every"


def _experts(tensors: list[Tensor], shape: Shape) -> dict:
    total = sum(t.nbytes for t in tensors)
    share = shape.experts_used / shape.experts if shape.experts else 1.0
    return {"bytes": total, "per_token": total * share, "used": shape.experts_used, "of": shape.experts}


def _embedding(embeddings: list[Tensor], heads: list[Tensor], shape: Shape) -> tuple[dict, dict]:
    """One row of the embedding per token; the head read whole. A tied head is the embedding table itself,
    read whole once (as the head), its row not added again."""
    table = sum(t.nbytes for t in embeddings)
    rows = max(max(t.shape) for t in embeddings) if embeddings else 0  # the vocabulary: far more rows than columns
    tied = shape.tied or not heads
    head = table if tied else sum(t.nbytes for t in heads)
    return ({"bytes": table, "per_token": 0.0 if tied or not rows else table / rows, "tied": tied},
            {"bytes": 0 if tied else head, "per_token": head})


def _not_read(classes: list[tuple[Tensor, str]]) -> dict:
    names = {"mtp": "draft / multi-token-prediction head", "vision": "vision or audio tower"}
    out: dict[str, int] = {}
    for t, kind in classes:
        if kind in names:
            out[names[kind]] = out.get(names[kind], 0) + t.nbytes
    return out


def kv(shape: Shape, cache_dtype: str | None = None, source: str = "") -> KV:
    """The KV cache's bytes per token per layer, and how many layers read the whole context or a window."""
    dtype = (cache_dtype or "auto").lower()
    width = CACHE_BYTES.get(shape.dtype.lower() if dtype == "auto" else dtype)
    source = source or ("the server's default: the weights' dtype" if dtype == "auto" else "as given")
    per = shape.kv_latent if shape.kv_latent else (2 * shape.kv_heads * shape.head_dim
                                                    if shape.kv_heads and shape.head_dim else None)
    windowed = len(shape.window_layers) if shape.window_layers else (shape.layers if shape.sliding_window else 0)
    full = shape.layers - windowed - len(shape.no_kv_layers)
    shown = shape.dtype if dtype == "auto" else dtype
    return KV(per * width if per and width else None, full, windowed, shape.sliding_window, shown, source)


def _size(n: float) -> str:
    """Bytes as a reader takes them in: three significant figures in the fitting unit."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.3g} {unit}"
    return f"{n:,.0f} B"


def for_model(model, root: str | None = None, server_cache: tuple[str, str] | None = None) -> tuple[Census | None, str]:
    """The census of what `model` serves: its params' checkpoint, else the file the server names (`root`) where
    this box can read it, else the census `model add` wrote into its params; with why, or why there is none."""
    from ..runs.params import project_root

    dtype, source = ((model.kv_cache_dtype, "the model's params (kv_cache_dtype)") if model.kv_cache_dtype
                     else server_cache or (None, ""))
    found = readable((model.checkpoint, root, from_hub(root)), project_root())
    unread = ""
    if found is not None:
        try:
            return count(read(found), dtype, source), f"read from {found}"
        except ParamsError as e:  # one this user may not read: said, and the params' own census used, if any
            unread = f"{e}; "
    if model.census:
        return Census.from_dict(model.census), f"{unread}as `sparknb model add` wrote it into the model's params"
    if unread:
        return None, f"no census: {unread.removesuffix('; ')}"
    return None, (f"no census: neither the params' checkpoint nor the server's path ({root or 'not given'}) can be "
                  "read here, and the params hold none (`sparknb model add` writes one)")


def seal(run, model, root: str | None, server_cache: tuple[str, str] | None) -> Census | None:
    """The census of what the server serves, written into the run (census.json, sealed with it) and printed."""
    counted, why = for_model(model, root, server_cache)
    run.write_json("census.json", {"census": counted.as_dict() if counted else None, "how": why})
    print(f"Byte census ({why}): " + ("; ".join(counted.lines()) if counted else "none"), flush=True)
    return counted


def from_hub(repo_id: str | None) -> str | None:
    """A hub id's snapshot in the local cache (no download), where it is there."""
    if not repo_id or repo_id.count("/") != 1 or Path(repo_id).exists():
        return None
    found = hub_cache.snapshot(repo_id)
    return str(found) if found is not None else None


def readable(paths: Iterable[str | None], base: Path | None = None) -> Path | None:
    """The first of `paths` this box can read (a relative one also under `base`), or None."""
    for path in filter(None, paths):
        for p in (Path(path).expanduser(), *([base / path] if base else [])):
            try:
                if p.exists():
                    return p
            except PermissionError:  # a folder on the way this user may not enter: checkpoint.read says so
                return p
    return None
